// Package replay serves gpumem serve's recorded answers (testdata/service.json,
// written by tools/record) so that the components' tests run the real
// HTTP client against the service's real replies without the service.
package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// Exchange is one recorded request and the service's reply.
type Exchange struct {
	Path    string          `json:"path"`
	Request json.RawMessage `json:"request"`
	Status  int             `json:"status"`
	Reply   json.RawMessage `json:"reply"`
}

// Scenario is the cluster the recorded answers are for: official API
// objects.
type Scenario struct {
	Nodes []v1.Node `json:"nodes"`
	Pods  []v1.Pod  `json:"pods"`
}

// Canonical re-encodes a JSON document with sorted keys.
func Canonical(b []byte) (string, error) {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "", err
	}
	out, err := json.Marshal(v)
	return string(out), err
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

// Server serves the exchanges of path; a request not recorded fails the
// test with its body (rerun tools/record). Calls counts the requests.
type Server struct {
	*httptest.Server
	mu    sync.Mutex
	Calls map[string]int
}

// Serve starts a Server on the recording at path.
func Serve(t testing.TB, path string) *Server {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var xs []Exchange
	if err := json.Unmarshal(b, &xs); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	byKey := map[string]Exchange{}
	for _, x := range xs {
		c, err := Canonical(x.Request)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		byKey[x.Path+" "+c] = x
	}
	s := &Server{Calls: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c, err := Canonical(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		x, ok := byKey[r.URL.Path+" "+c]
		if !ok {
			t.Errorf("replay: no recorded answer for %s %s (run tools/record)", r.URL.Path, c)
			http.Error(w, "not recorded", http.StatusNotImplemented)
			return
		}
		s.mu.Lock()
		s.Calls[r.URL.Path]++
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(x.Status)
		w.Write(bytes.TrimSpace(x.Reply))
	}))
	t.Cleanup(s.Close)
	return s
}

// Count is the requests served on path.
func (s *Server) Count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Calls[path]
}

// String names the server.
func (s *Server) String() string { return fmt.Sprintf("replay %s", s.URL) }
