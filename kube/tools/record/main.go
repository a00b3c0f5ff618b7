// Command record records gpumem serve's answers for the components'
// tests: for every pod of a scenario with a job and every GPU kind of its
// nodes, the estimate request the components send (gpujob.Job.ForGPU) to
// POST /v1/estimate and POST /v1/plan, and the reply.
//
//	go build -o /tmp/gpumem ../cmd/gpumem && /tmp/gpumem serve --addr 127.0.0.1:8080 &
//	go run ./tools/record -url http://127.0.0.1:8080 -scenario testdata/scenario.json -out testdata/service.json
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/gpumem/gpumem/kube/gpujob"
	"github.com/gpumem/gpumem/kube/internal/replay"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8080", "gpumem serve's address")
	scenario := flag.String("scenario", "testdata/scenario.json", "the scenario: nodes and pods")
	out := flag.String("out", "testdata/service.json", "where to write the exchanges")
	flag.Parse()
	if err := run(*url, *scenario, *out); err != nil {
		fmt.Fprintln(os.Stderr, "record:", err)
		os.Exit(1)
	}
}

func run(url, scenario, out string) error {
	b, err := os.ReadFile(scenario)
	if err != nil {
		return err
	}
	var s replay.Scenario
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%s: %v", scenario, err)
	}
	var gpus []gpujob.GPU
	seen := map[string]bool{}
	for i := range s.Nodes {
		g, ok, err := gpujob.NodeGPU(&s.Nodes[i])
		if err != nil || !ok || seen[g.Key()] {
			continue
		}
		seen[g.Key()] = true
		gpus = append(gpus, g)
	}
	var xs []replay.Exchange
	done := map[string]bool{}
	for i := range s.Pods {
		j, ok, err := gpujob.FromPod(&s.Pods[i])
		if err != nil || !ok {
			continue
		}
		for _, g := range gpus {
			body := j.ForGPU(g)
			for _, path := range []string{"/v1/estimate", "/v1/plan"} {
				key := path + string(body)
				if done[key] {
					continue
				}
				done[key] = true
				resp, err := http.Post(url+path, "application/json", bytes.NewReader(body))
				if err != nil {
					return err
				}
				reply, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					return err
				}
				xs = append(xs, replay.Exchange{Path: path, Request: body, Status: resp.StatusCode, Reply: bytes.TrimSpace(reply)})
			}
		}
	}
	enc, err := json.MarshalIndent(xs, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(enc, '\n'), 0o644)
}
