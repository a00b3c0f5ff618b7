// Package cluster lists nodes and pods from informers, and serves a
// handler until a signal, for the extender's and the webhook's commands.
package cluster

import (
	"context"
	"fmt"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

const byNode = "spec.nodeName"

// Lister lists the cluster's nodes and the pods bound to a node.
type Lister struct {
	nodes cache.SharedIndexInformer
	pods  cache.SharedIndexInformer
}

// Start connects with kubeconfig (empty: the in-cluster config) and
// waits for the informers' first lists.
func Start(ctx context.Context, kubeconfig string) (*Lister, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: %v", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	f := informers.NewSharedInformerFactory(cs, 0)
	l := &Lister{nodes: f.Core().V1().Nodes().Informer(), pods: f.Core().V1().Pods().Informer()}
	if err := l.pods.AddIndexers(cache.Indexers{byNode: func(obj any) ([]string, error) {
		p, ok := obj.(*v1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return nil, nil
		}
		return []string{p.Spec.NodeName}, nil
	}}); err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("informer of %v did not sync", typ)
		}
	}
	return l, nil
}

// Nodes lists every node.
func (l *Lister) Nodes() []*v1.Node {
	var out []*v1.Node
	for _, o := range l.nodes.GetStore().List() {
		if n, ok := o.(*v1.Node); ok {
			out = append(out, n)
		}
	}
	return out
}

// Pods lists the pods bound to node that have not finished.
func (l *Lister) Pods(node string) []*v1.Pod {
	objs, _ := l.pods.GetIndexer().ByIndex(byNode, node)
	var out []*v1.Pod
	for _, o := range objs {
		if p, ok := o.(*v1.Pod); ok && p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

// Serve serves h on addr (over TLS when cert and key are given) until ctx
// ends, then shuts the server down; name prefixes a failure to listen,
// which names --addr.
func Serve(ctx context.Context, name, addr, cert, key string, h http.Handler) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); srv.Shutdown(context.Background()) }()
	var err error
	if cert != "" {
		err = srv.ListenAndServeTLS(cert, key)
	} else {
		err = srv.ListenAndServe()
	}
	if err != nil && err != http.ErrServerClosed {
		return fmt.Errorf("%s: --addr %q: %v", name, addr, err)
	}
	return nil
}
