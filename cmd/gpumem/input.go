package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/gpumem/gpumem/model"
)

// modelFlags are the ways to name a model on the command line.
type modelFlags struct {
	name   string
	config string
}

func (m *modelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.name, "model", "", "a model of the embedded catalog (e.g. llama-3-8b; see -model list)")
	fs.StringVar(&m.config, "config", "", "a Hugging Face config.json")
}

// load returns the Spec the flags name.
func (m *modelFlags) load() (model.Spec, error) {
	switch {
	case m.name != "" && m.config != "":
		return model.Spec{}, fmt.Errorf("%w: give one of --model and --config", errUsage)
	case m.name == "list":
		names := make([]string, 0, 64)
		for _, s := range model.Catalog() {
			names = append(names, s.Name)
		}
		return model.Spec{}, fmt.Errorf("%w: the catalog has: %s", errUsage, strings.Join(names, ", "))
	case m.name != "":
		s, ok := model.Lookup(m.name)
		if !ok {
			return model.Spec{}, fmt.Errorf("%w: no model %q in the catalog (try --model list, or --config)", errUsage, m.name)
		}
		return s, nil
	case m.config != "":
		f, err := os.Open(m.config)
		if err != nil {
			return model.Spec{}, err
		}
		defer f.Close()
		s, err := model.FromHFConfig(f)
		if err != nil {
			return model.Spec{}, fmt.Errorf("%s: %w", m.config, err)
		}
		return s, nil
	}
	return model.Spec{}, fmt.Errorf("%w: name a model with --model NAME or --config config.json", errUsage)
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
