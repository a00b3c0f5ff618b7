// Package replay reads the components' test scenario
// (testdata/scenario.json): the nodes and pods of a cluster as official
// API objects.
package replay

import (
	"encoding/json"
	"os"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// Scenario is a cluster: official API objects.
type Scenario struct {
	Nodes []v1.Node `json:"nodes"`
	Pods  []v1.Pod  `json:"pods"`
}

// Load reads a scenario file.
func Load(t testing.TB, path string) Scenario {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s Scenario
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return s
}
