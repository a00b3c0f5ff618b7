package request

import (
	"os"
	"reflect"
	"testing"
)

// TestInlineConfigKept: an inline config.json is read and checked once
// per distinct bytes (spaces around them trimmed), the same model.Spec
// given again; a config that fails its checks is not kept.
func TestInlineConfigKept(t *testing.T) {
	config, err := os.ReadFile("../model/configs/llama-3-8b.json")
	if err != nil {
		t.Fatal(err)
	}
	c := NewCache(4)
	req := Default()
	req.Mode = "train"
	req.Config = config
	_, first, _, err := c.Check(req)
	if err != nil {
		t.Fatal(err)
	}
	req.Config = append([]byte("  "), config...)
	_, again, _, err := c.Check(req)
	if err != nil {
		t.Fatal(err)
	}
	if n := c.configs.len(); n != 1 {
		t.Errorf("%d configs kept after the same bytes twice, want 1", n)
	}
	if !reflect.DeepEqual(first, again) {
		t.Error("the kept config's model differs from the one read")
	}
	req.Config = []byte(`{"model_type": "llama", "hidden_size": -1}`)
	if _, _, _, err := c.Check(req); err == nil {
		t.Error("a config with a negative hidden_size passed")
	}
	if n := c.configs.len(); n != 1 {
		t.Errorf("%d configs kept after a bad one, want 1", n)
	}
}
