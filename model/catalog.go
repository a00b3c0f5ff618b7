package model

import (
	"bytes"
	"embed"
	"encoding/json"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// catalogFS holds the catalog's config.json files, one per model, each
// with a "_gpumem_source" key naming the Hugging Face file its values were
// taken from. It is read-only.
//
//go:embed configs/*.json
var catalogFS embed.FS

// Lookup returns the catalog Spec for a well-known model. name is a
// catalog key ("llama-2-7b", "mixtral-8x7b", "t5-base"), matched
// case-insensitively, or the Hugging Face repository of its source
// ("meta-llama/Llama-2-7b-hf"). See [Catalog] for the list. A by-size
// name ("gpt:100b", "gpt:96x12288") is built by [ParseGPT]. The
// catalog holds one entry per architecture, mostly the base model's
// ("qwen2.5-7b" is Qwen/Qwen2.5-7B): an instruction-tuned variant is not
// an alias, because its config.json can differ (Qwen2.5-7B-Instruct's
// max_position_embeddings is 32,768, the base's 131,072); read that
// config.json with [FromHFConfig].
func Lookup(name string) (Spec, bool) {
	if s, ok, err := ParseGPT(name); ok {
		return s, err == nil
	}
	key := strings.ToLower(strings.TrimSpace(name))
	if key == "" || strings.ContainsAny(key, `\`) {
		return Spec{}, false
	}
	if !strings.Contains(key, "/") {
		if s, err := catalogSpec(catalogAlias(key)); err == nil {
			return s, true
		}
		return Spec{}, false
	}
	for _, k := range catalogKeys() {
		data, err := catalogFS.ReadFile("configs/" + k + ".json")
		if err != nil {
			continue
		}
		if strings.EqualFold(sourceRepo(data), key) {
			s, err := catalogSpec(k)
			return s, err == nil
		}
	}
	return Spec{}, false
}

// Catalog returns every catalog Spec, sorted by name.
func Catalog() []Spec {
	keys := catalogKeys()
	out := make([]Spec, 0, len(keys))
	for _, k := range keys {
		if s, err := catalogSpec(k); err == nil {
			out = append(out, s)
		}
	}
	return out
}

// CatalogSource returns the address of the config.json a catalog entry
// was written from.
func CatalogSource(name string) (string, bool) {
	data, err := catalogFS.ReadFile("configs/" + strings.ToLower(name) + ".json")
	if err != nil {
		return "", false
	}
	var v struct {
		Source string `json:"_gpumem_source"`
	}
	if json.Unmarshal(data, &v) != nil || v.Source == "" {
		return "", false
	}
	return v.Source, true
}

// catalogAlias maps short names to catalog keys.
func catalogAlias(key string) string {
	switch key {
	case "vit-base", "vit-b/16", "vit-b-16":
		return "vit-base-patch16-224"
	case "vit-large", "vit-l/16", "vit-l-16":
		return "vit-large-patch16-224"
	case "clip-vit-large-336", "clip-vit-l-14-336", "clip-vit-l/14-336":
		return "clip-vit-large-patch14-336"
	case "bert-base-uncased":
		return "bert-base"
	case "bert-large-uncased":
		return "bert-large"
	case "phi-3", "phi-3-mini-4k":
		return "phi-3-mini"
	case "cogvideox-5b":
		return "cogvideox-5b-transformer"
	case "whisper-large":
		return "whisper-large-v3"
	case "resnet50", "resnet-50":
		return "resnet-50"
	case "resnet18":
		return "resnet-18"
	case "convnext_tiny", "convnext-tiny", "convnext-t":
		return "convnext-tiny-224"
	case "swin_t", "swin-t", "swin-tiny":
		return "swin-tiny-patch4-window7-224"
	case "efficientnet_b0", "efficientnet-b0":
		return "efficientnet-b0"
	}
	if k, ok := strings.CutSuffix(key, "-hf"); ok {
		return k
	}
	return key
}

func catalogKeys() []string {
	entries, err := fs.ReadDir(catalogFS, "configs")
	if err != nil {
		return nil
	}
	keys := make([]string, 0, len(entries))
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".json") {
			keys = append(keys, strings.TrimSuffix(n, ".json"))
		}
	}
	sort.Strings(keys)
	return keys
}

func catalogSpec(key string) (Spec, error) {
	data, err := catalogFS.ReadFile(path.Join("configs", key+".json"))
	if err != nil {
		return Spec{}, err
	}
	s, err := FromHFConfig(bytes.NewReader(data))
	if err != nil {
		return Spec{}, err
	}
	s.Name = key
	return s, nil
}

// sourceRepo extracts "owner/name" from a source address
// "https://huggingface.co/owner/name/blob/main/config.json".
func sourceRepo(data []byte) string {
	var v struct {
		Source string `json:"_gpumem_source"`
	}
	if json.Unmarshal(data, &v) != nil {
		return ""
	}
	rest, ok := strings.CutPrefix(v.Source, "https://huggingface.co/")
	if !ok {
		return ""
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 2 {
		return ""
	}
	return strings.ToLower(parts[0] + "/" + parts[1])
}
