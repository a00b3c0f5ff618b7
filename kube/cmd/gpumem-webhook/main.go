// Command gpumem-webhook serves gpumem's mutating admission webhook over
// TLS (deploy/webhook.yaml):
//
//	gpumem-webhook --addr :8443 --tls-cert /tls/tls.crt --tls-key /tls/tls.key
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

	"github.com/gpumem/gpumem/kube/gpujob"
	"github.com/gpumem/gpumem/kube/internal/cluster"
	"github.com/gpumem/gpumem/kube/webhook"
)

func main() {
	addr := flag.String("addr", ":8443", "address to serve /mutate on")
	cert := flag.String("tls-cert", "", "TLS certificate (the API server calls webhooks over HTTPS)")
	key := flag.String("tls-key", "", "TLS key")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig for listing the nodes; empty: in-cluster")
	timeout := flag.Duration("timeout", 8*time.Second, "bound on one review's estimates (below the webhook's timeoutSeconds)")
	flag.Parse()
	if *timeout <= 0 {
		fmt.Fprintf(os.Stderr, "gpumem-webhook: --timeout %v: must be positive\n", *timeout)
		os.Exit(2)
	}
	if (*cert == "") != (*key == "") {
		fmt.Fprintln(os.Stderr, "gpumem-webhook: give both --tls-cert and --tls-key (or neither, behind a TLS proxy)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	l, err := cluster.Start(ctx, *kubeconfig)
	if err != nil {
		log.Fatalf("gpumem-webhook: %v", err)
	}
	wh := &webhook.Webhook{Est: gpujob.NewLocal(), Nodes: l.Nodes, Timeout: *timeout}
	if err := cluster.Serve(ctx, "gpumem-webhook", *addr, *cert, *key, wh.Handler()); err != nil {
		log.Fatal(err)
	}
}
