package budget

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpumem/gpumem"
)

// LlamaCppVersion is the date of the llama.cpp build that runs the job
// (its release's day), as YYYYMMDD; zero means a current build. It
// selects how --n-gpu-layers places the layers, which changed twice:
//
//   - Until PR #4309 ("llama : per-layer KV cache", merged 2023-12-07;
//     ggml-org/llama.cpp) the V and K caches counted as two more
//     offloadable slots after the output layer: -ngl n_layer + 2
//     offloaded the V cache and n_layer + 3 the K cache, so a build
//     printed "offloaded N/n_layer+3 layers" (LlamaCppKVSlotsUntil). The
//     repeating layers went first: i_gpu_start = max(n_layer − ngl, 0),
//     the output layer at ngl > n_layer.
//   - From then until PR #18148 ("llama: offload output layer to GPU
//     first", opened 2025-12-17) there were n_layer + 1 slots and still
//     i_gpu_start = max(n_layer − ngl, 0): -ngl 22 on a 32-layer model put
//     22 repeating layers on the GPU and kept the output layer on the CPU
//     (LlamaCppOutputFirstFrom).
//   - Since PR #18148, i_gpu_start = max(n_layer + 1 − ngl, 0): the output
//     layer is the first slot offloaded ("offloading output layer to GPU",
//     then ngl − 1 repeating layers).
//
// A full offload places everything on the GPU under all three rules.
//
// It also selects how a DeepSeek-V2/V3 (MLA) model's cache is stored:
// builds before PR #12801 ("DeepSeek V2/V3 MLA implementation", merged
// 2025-04-15, LlamaCppMLAFrom) treated the model as multi-head attention
// and kept every head's full K (n_head × (qk_nope + qk_rope)) and V
// (n_head × v_head_dim) per token and layer; since then a GGUF converted
// with the attention.key_length_mla keys caches the compressed latent
// (kv_lora_rank + qk_rope as K, kv_lora_rank as V). The PR is absent
// from ollama/ollama's vendored llama.cpp at upstream 71e90e88
// (ollama 943464ccb, 2025-04-16) and present at 2016f07b (e9e5f61c4,
// 2025-04-25: llama-hparams.h's n_embd_head_k_mla, llama-model.cpp's
// is_mla). A GGUF converted before it keeps the full cache in any build;
// give a build date before 2025-04-15 for one. PR #19067 ("kv-cache :
// support V-less cache", opened and approved 2026-01-24) then dropped the
// V cache of MLA models (llama_kv_cache's has_v = !is_mla): the latent is
// read from K alone. It is in upstream a5bb8ba4, vendored by Ollama on
// 2026-02-02 (ollama ef00199fb), and not in ec98e2002 (49a9c9ba6,
// 2025-12-17); builds from 2026-02-02 (LlamaCppMLAKOnlyFrom) are taken to
// have it, and a build of 2026-01-24 to 2026-02-01 is refused as
// ambiguous.
type LlamaCppVersion int32

const (
	// LlamaCppKVSlotsUntil is the first build day without the K and V
	// cache slots: PR #4309's merge (2023-12-07).
	LlamaCppKVSlotsUntil LlamaCppVersion = 20231207
	// LlamaCppOutputFirstFrom is the first build day taken to offload the
	// output layer first: PR #18148 was opened on 2025-12-17; its merge
	// day is not recorded here, so the week from its opening is refused as
	// ambiguous (ParseLlamaCppVersion) and later builds are taken to have
	// it (a build of March 2026 prints "offloading output layer" first,
	// one of May 2025 does not: testdata/enginelogs).
	LlamaCppOutputFirstFrom LlamaCppVersion = 20251224
	// LlamaCppMLAFrom is the first build day with the compressed MLA
	// cache: PR #12801's merge (2025-04-15).
	LlamaCppMLAFrom LlamaCppVersion = 20250415
)

// LlamaCppMLAKOnlyFrom is the first build day taken to store an MLA
// model's latent in K alone (PR #19067; see LlamaCppVersion).
const LlamaCppMLAKOnlyFrom LlamaCppVersion = 20260202

// llamaCppKOnlyAmbiguous is the first day of the window in which PR
// #19067 was merged.
const llamaCppKOnlyAmbiguous LlamaCppVersion = 20260124

// llamaMLA is how a build caches a DeepSeek-V2/V3 (MLA) model.
type llamaMLA uint8

const (
	mlaKOnly    llamaMLA = iota // current: the latent and rope key in K, no V
	mlaLatent                   // 2025-04-15 .. PR #19067: the latent in V too
	mlaFullHead                 // before 2025-04-15: every head's K and V
)

func (v LlamaCppVersion) mla() llamaMLA {
	switch {
	case v == 0 || v >= LlamaCppMLAKOnlyFrom:
		return mlaKOnly
	case v >= LlamaCppMLAFrom:
		return mlaLatent
	}
	return mlaFullHead
}

// llamaCppAmbiguous is the first day of the window in which PR #18148 was
// merged (see LlamaCppOutputFirstFrom).
const llamaCppAmbiguous LlamaCppVersion = 20251217

// llamaPlacement is the -ngl rule of a build.
type llamaPlacement uint8

const (
	placeOutputFirst llamaPlacement = iota // current
	placeLayersFirst                       // 2023-12-07 .. PR #18148
	placeKVSlots                           // before 2023-12-07
)

func (v LlamaCppVersion) placement() llamaPlacement {
	switch {
	case v == 0 || v >= LlamaCppOutputFirstFrom:
		return placeOutputFirst
	case v >= LlamaCppKVSlotsUntil:
		return placeLayersFirst
	}
	return placeKVSlots
}

// String is the build day, YYYY-MM-DD, or "current".
func (v LlamaCppVersion) String() string {
	if v == 0 {
		return "current"
	}
	return fmt.Sprintf("%04d-%02d-%02d", v/10000, v/100%100, v%100)
}

// ParseLlamaCppVersion reads a llama.cpp build's date: "current" (or ""),
// YYYY-MM-DD, or YYYY-MM when the whole month falls under one placement
// rule and one MLA cache layout (2023-12, 2025-04, 2025-12, 2026-01 and
// 2026-02 do not: give the day). The error names
// field, the flag or request field the value came from.
func ParseLlamaCppVersion(field, s string) (LlamaCppVersion, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "current" {
		return 0, nil
	}
	bad := func(why string) error {
		return gpumem.Errorf(field, s, gpumem.ErrInvalid, "%s", why)
	}
	if t, err := time.Parse("2006-01", s); err == nil {
		if t.Year() < 2023 {
			return 0, bad("want a build date from 2023 on (llama.cpp's GGUF releases)")
		}
		first := LlamaCppVersion(t.Year()*10000 + int(t.Month())*100 + 1)
		if first.placement() != (first + 30).placement() {
			return 0, bad("the -ngl placement rule changed within that month: give the day, YYYY-MM-DD")
		}
		if first.mla() != (first+30).mla() || (first <= llamaCppKOnlyAmbiguous+30 && first+30 >= llamaCppKOnlyAmbiguous) {
			return 0, bad("llama.cpp's MLA cache changed within that month (PR #12801, PR #19067): give the day, YYYY-MM-DD")
		}
		return first, nil
	}
	t, err := time.Parse("2006-01-02", s)
	if err != nil {
		return 0, bad("want a build date, YYYY-MM-DD (or YYYY-MM), or current")
	}
	if t.Year() < 2023 || t.Year() > 9999 {
		return 0, bad("want a build date from 2023 on (llama.cpp's GGUF releases)")
	}
	v := LlamaCppVersion(t.Year()*10000 + int(t.Month())*100 + t.Day())
	if v >= llamaCppKOnlyAmbiguous && v < LlamaCppMLAKOnlyFrom {
		return 0, bad("llama.cpp's K-only MLA cache (PR #19067) was merged in the days from 2026-01-24: a build of 2026-01-24 to 2026-02-01 is ambiguous; give a date before or after it")
	}
	if v >= llamaCppAmbiguous && v < LlamaCppOutputFirstFrom {
		return 0, bad("llama.cpp's output-layer-first placement (PR #18148) was merged in the week from 2025-12-17: a build of those days is ambiguous; give a date before or after it")
	}
	return v, nil
}

// llamaSlots is the placement of a build at -ngl ngl (zero: all) on a
// model of nLayer repeating layers: the slots it counts, i_gpu_start
// (layers il ≥ start are on the GPU, the output layer being il =
// nLayer), how many slots it offloads, and the KV cache slots offloaded
// (0, 1: V, 2: V and K) under placeKVSlots.
type llamaSlots struct {
	slots, start, offloaded, kvSlots int
}

func llamaPlace(v LlamaCppVersion, nLayer, ngl int) llamaSlots {
	p := v.placement()
	var s llamaSlots
	s.slots = nLayer + 1
	if p == placeKVSlots {
		s.slots = nLayer + 3
	}
	if ngl == 0 || ngl > s.slots {
		ngl = s.slots
	}
	s.offloaded = ngl
	switch p {
	case placeOutputFirst:
		s.start = nLayer + 1 - min(ngl, nLayer+1)
	default:
		s.start = max(nLayer-ngl, 0)
		if p == placeKVSlots {
			s.kvSlots = max(ngl-(nLayer+1), 0)
		}
	}
	return s
}
