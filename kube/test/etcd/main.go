// Command etcd is a one-member etcd (go.etcd.io/etcd/server/v3's embed)
// for test/e2e.sh: clients on --listen, peers on the next port, data in
// --data-dir.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dir := flag.String("data-dir", "", "data directory")
	client := flag.String("listen", "http://127.0.0.1:2379", "client URL")
	peer := flag.String("peer", "http://127.0.0.1:2380", "peer URL")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "etcd: give --data-dir")
		os.Exit(2)
	}
	c, err := url.Parse(*client)
	if err != nil {
		log.Fatalf("etcd: --listen %q: %v", *client, err)
	}
	p, err := url.Parse(*peer)
	if err != nil {
		log.Fatalf("etcd: --peer %q: %v", *peer, err)
	}
	cfg := embed.NewConfig()
	cfg.Dir = *dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*c}, []url.URL{*c}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*p}, []url.URL{*p}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "warn"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("etcd: %v", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		log.Printf("etcd: ready on %s", *client)
	case <-time.After(60 * time.Second):
		log.Fatal("etcd: not ready after 60s")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case <-sig:
	case err := <-e.Err():
		log.Fatalf("etcd: %v", err)
	}
}
