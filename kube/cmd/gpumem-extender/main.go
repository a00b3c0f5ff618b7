// Command gpumem-extender serves gpumem's kube-scheduler extender
// (deploy/extender.yaml):
//
//	gpumem-extender --addr :8888
//
// It estimates in process (gpujob.Local): no gpumem serve to call.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gpumem/gpumem/kube/extender"
	"github.com/gpumem/gpumem/kube/gpujob"
	"github.com/gpumem/gpumem/kube/internal/cluster"
)

func main() {
	addr := flag.String("addr", ":8888", "address to serve the extender's verbs on")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig for listing the pods on each node (shared-GPU mode); empty: in-cluster")
	timeout := flag.Duration("timeout", 10*time.Second, "bound on one request's estimates")
	flag.Parse()
	if *timeout <= 0 {
		fmt.Fprintf(os.Stderr, "gpumem-extender: --timeout %v: must be positive\n", *timeout)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	l, err := cluster.Start(ctx, *kubeconfig)
	if err != nil {
		log.Fatalf("gpumem-extender: %v", err)
	}
	e := &extender.Extender{Est: gpujob.NewLocal(), Pods: l.Pods, Timeout: *timeout}
	if err := cluster.Serve(ctx, "gpumem-extender", *addr, "", "", e.Handler()); err != nil {
		log.Fatal(err)
	}
}
