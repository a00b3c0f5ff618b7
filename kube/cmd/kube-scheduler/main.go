// Command kube-scheduler is the Kubernetes scheduler (release 1.37) with
// gpumem's GPUMem plugin registered. Enable it in a
// KubeSchedulerConfiguration (deploy/scheduler-config.yaml):
//
//	kube-scheduler --config deploy/scheduler-config.yaml
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/gpumem/gpumem/kube/plugin"
)

func main() {
	cmd := app.NewSchedulerCommand(app.WithPlugin(plugin.Name, plugin.New))
	os.Exit(cli.Run(cmd))
}
