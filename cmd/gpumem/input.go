package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpumem/gpumem/model"
)

// modelFlags are the ways to name a model on the command line.
type modelFlags struct {
	name        string
	config      string
	safetensors string
	gguf        string
}

func (m *modelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.name, "model", "", "a model of the embedded catalog (e.g. llama-3-8b; --model list lists them)")
	fs.StringVar(&m.config, "config", "", "a Hugging Face config.json")
	fs.StringVar(&m.safetensors, "safetensors", "", "a .safetensors file, or a sharded model.safetensors.index.json (headers only are read)")
	fs.StringVar(&m.gguf, "gguf", "", "a .gguf file (header only is read)")
}

// load returns the Spec the flags name.
func (m *modelFlags) load() (model.Spec, error) {
	given := 0
	for _, v := range []string{m.name, m.config, m.safetensors, m.gguf} {
		if v != "" {
			given++
		}
	}
	switch {
	case given > 1:
		return model.Spec{}, fmt.Errorf("%w: give one of --model, --config, --safetensors and --gguf", errUsage)
	case m.name == "list":
		names := make(catalogList, 0, 64)
		for _, s := range model.Catalog() {
			names = append(names, s.Name)
		}
		return model.Spec{}, names
	case m.name != "":
		s, ok := model.Lookup(m.name)
		if !ok {
			return model.Spec{}, fmt.Errorf("%w: --model %q: not in the catalog (try --model list, or --config)", errUsage, m.name)
		}
		return s, nil
	case m.config != "":
		f, err := os.Open(m.config)
		if err != nil {
			return model.Spec{}, fmt.Errorf("--config: %w", err)
		}
		defer f.Close()
		s, err := model.FromHFConfig(f)
		if err != nil {
			return model.Spec{}, fmt.Errorf("--config %s: %w", m.config, err)
		}
		return s, nil
	case strings.HasSuffix(m.safetensors, ".index.json"):
		s, err := model.FromSafetensorsIndex(os.DirFS(filepath.Dir(m.safetensors)), filepath.Base(m.safetensors))
		if err != nil {
			return model.Spec{}, fmt.Errorf("--safetensors %s: %w", m.safetensors, err)
		}
		return s, nil
	case m.safetensors != "":
		return readAt("--safetensors", m.safetensors, model.FromSafetensors)
	case m.gguf != "":
		return readAt("--gguf", m.gguf, model.FromGGUF)
	}
	return model.Spec{}, fmt.Errorf("%w: name a model with --model, --config, --safetensors or --gguf", errUsage)
}

// catalogList is what --model list asks for: the catalog's names, which
// the command prints on standard output, exiting 0. It is an error only
// to stop the command that was asked for it.
type catalogList []string

func (c catalogList) Error() string { return "the catalog has: " + strings.Join(c, ", ") }

// readAt opens the file a flag names and reads its header with read.
func readAt(flagName, path string, read func(io.ReaderAt, int64) (model.Spec, error)) (model.Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return model.Spec{}, fmt.Errorf("%s: %w", flagName, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return model.Spec{}, err
	}
	s, err := read(f, st.Size())
	if err != nil {
		return model.Spec{}, fmt.Errorf("%s %s: %w", flagName, path, err)
	}
	return s, nil
}

// parseAttention reads --attention.
func parseAttention(s string) (model.AttentionKernel, error) {
	switch s {
	case "eager":
		return model.Eager, nil
	case "sdpa", "":
		return model.SDPA, nil
	case "flash", "flash_attention_2":
		return model.Flash, nil
	}
	return 0, fmt.Errorf("%w: --attention %q: want eager, sdpa or flash", errUsage, s)
}

// parseCheckpointing reads --checkpointing.
func parseCheckpointing(s string) (model.Checkpointing, error) {
	switch s {
	case "none", "":
		return model.NoCheckpointing, nil
	case "selective":
		return model.SelectiveCheckpointing, nil
	case "full":
		return model.FullCheckpointing, nil
	case "offload":
		return model.OffloadActivations, nil
	}
	return 0, fmt.Errorf("%w: --checkpointing %q: want none, selective, full or offload", errUsage, s)
}
