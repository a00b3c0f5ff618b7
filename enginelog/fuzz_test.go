package enginelog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse: Parse never panics; it either finds figures (every size
// non-negative, every line number within the input, a known engine) or
// returns an error.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../testdata/enginelogs/*.log")
	for i, file := range files {
		if i%10 != 0 {
			continue
		}
		b, err := os.ReadFile(file)
		if err == nil {
			f.Add(string(b))
		}
	}
	f.Add("llama_new_context_with_model: KV self size  = 99999999999999999999999.00 MiB")
	f.Add(`msg="offload to cuda" memory.required.kv="1.0 GiB" memory.available="[2.2 GiB 3.0"`)
	f.Add("GPU KV cache size: 1,2,3 tokens")
	f.Add("llama_model_loader: - kv   9:  glm4.block_count u32 = 61\nllama_model_loader: - kv  13:  glm4.attention.head_count u32 = 0\nprint_info: n_embd = 6144\nprint_info: n_vocab = 151552\nprint_info: n_ff = 23040\nprint_info: model size = 1e309 GiB\nllama_kv_cache_init: CUDA0 KV buffer size = 1.00 MiB")
	f.Fuzz(func(t *testing.T, in string) {
		l, err := Parse(strings.NewReader(in))
		if err != nil {
			if l != nil {
				t.Fatalf("error %v with a log", err)
			}
			return
		}
		if len(l.Figures) == 0 {
			t.Fatal("no error and no figure")
		}
		lines := strings.Count(in, "\n") + 1
		for _, fig := range l.Figures {
			if fig.Bytes < 0 || fig.Line < 1 || fig.Line > lines {
				t.Fatalf("bad figure %+v (%d lines)", fig, lines)
			}
		}
		switch l.Engine {
		case LlamaCpp, Ollama, VLLM, SGLang:
		default:
			t.Fatalf("engine %q", l.Engine)
		}
		// A shape is built, or refused with an error, never guessed: a
		// built one holds the printed counts.
		if s, err := l.Hparams.Spec(); err == nil {
			if s.Layers != int64(l.Hparams.NLayer) || s.KVHeads != int64(l.Hparams.NHeadKV) || s.HeadDim != int64(l.Hparams.NEmbdHeadK) {
				t.Fatalf("spec %+v from %+v", s, l.Hparams)
			}
		}
	})
}
