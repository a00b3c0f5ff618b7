package model_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// lossSpec is a small llama: hidden 64, vocabulary 1000, one block.
func lossSpec() model.Spec {
	return model.Spec{Family: "llama", Layers: 1, Hidden: 64, Heads: 4, KVHeads: 4, HeadDim: 16, Intermediate: 128, Vocab: 1000}
}

// TestLossBytes: the head, logits and loss figures of each loss, by hand,
// for batch 2 × 12 tokens in bf16 (T = 24, V = 1000, h = 64, e = 2).
func TestLossBytes(t *testing.T) {
	t.Parallel()
	s := lossSpec()
	w := model.Workload{Batch: 2, SeqLen: 12, DType: gpumem.BF16, Attention: model.Flash, Train: true}
	at := func(l model.Loss, grad gpumem.DType) model.Activations {
		t.Helper()
		w := w
		w.Loss, w.HeadGrad = l, grad
		a, err := s.Activations(w)
		require.NoError(t, err, "%v", l)
		return a
	}
	type figs struct {
		Logits, Head, LogitsFP32, LossGrad, HeadWeightGrad, TokenIDs gpumem.Bytes
		Released                                                     bool
	}
	get := func(a model.Activations) figs {
		return figs{a.Logits, a.Head, a.LogitsFP32, a.LossGrad, a.HeadWeightGrad, a.TokenIDs, a.LogitsReleased}
	}
	// Full (unchanged): logits 2·24·1000; head input 2·24·64 = 3072, fp32
	// log-softmax 4·24,000 and a 4-byte total weight; the fp32 upcast
	// 96,000; the gradient 8·24,000; ids and labels 16·24.
	full := at(model.Loss{}, gpumem.Invalid)
	require.Equal(t, figs{48000, 99076, 96000, 192000, 0, 384, false}, get(full))
	// The head grad dtype changes nothing under the full loss.
	require.Equal(t, get(full), get(at(model.Loss{}, gpumem.BF16)))

	// Chunked, 5 chunks: tensor_split of 12 positions gives chunks of at
	// most 3, so Tc = 2·3 = 6 rows. Logits 48,000 (all chunks, released
	// before backward); head 3072 + 96,000 + 5 total weights (20); one
	// chunk's upcast 4·6·1000 = 24,000 and gradient 8·6000 = 48,000.
	ch := at(model.Loss{Kind: model.ChunkedLoss, Chunks: 5}, gpumem.BF16)
	require.Equal(t, figs{48000, 99092, 24000, 48000, 0, 384, true}, get(ch))
	// Released logits are not part of the loss backward's phase.
	kept := model.Activations{Logits: 100, LossGrad: 50, Head: 10}
	released := kept
	released.LogitsReleased = true
	require.Equal(t, gpumem.Bytes(160), kept.Peak())     // Total 110 + LossGrad 50
	require.Equal(t, gpumem.Bytes(110), released.Peak()) // the forward's Total 110; the loss backward's 60

	// Liger: chunk_size = next_pow2(ceil(24 / ceil(1000/64))) =
	// next_pow2(ceil(24/16)) = 2. grad_input 3072 saved, grad_weight
	// 2·1000·64 = 128,000. Forward transient: head input 3072, padded and
	// shifted labels 8·2·13 + 8·24 = 400, loss_1d 96 and mask 24, the
	// chunk's logits 2·2·1000 = 4000 and the weight-gradient product in
	// bf16 then fp32, (2+4)·64,000 = 384,000 (more than the chunk's
	// grad_input product, 2·2·64 = 256): 3072+400+120+4000+384,000 =
	// 391,592.
	li := at(model.Loss{Kind: model.FusedLinearLoss}, gpumem.BF16)
	require.Equal(t, figs{0, 3072, 391592, 0, 128000, 384, false}, get(li))
	// A frozen head (LoRA): no grad_weight, no product; the chunk's
	// grad_input product (256) is the larger: 3072+400+120+4000+256.
	require.Equal(t, figs{0, 3072, 7848, 0, 0, 384, false}, get(at(model.Loss{Kind: model.FusedLinearLoss}, gpumem.Invalid)))
	// AMP (fp32 weights, bf16 logits): grad_weight 4·64,000, accumulated
	// by addmm(out_dtype=fp32) with no product tensor.
	require.Equal(t, figs{0, 3072, 7848, 0, 256000, 384, false}, get(at(model.Loss{Kind: model.FusedLinearLoss}, gpumem.FP32)))

	// Liger PR #1239 (linkedin/Liger-Kernel c9fc646) measured the
	// grad_weight accumulation's mm(...).float() at 3072 MiB of extra
	// peak for V = 131,072, H = 4096, chunk_size 2048, bf16 inputs: the
	// model's bf16 product and its fp32 copy, 6·V·H. Against a frozen
	// head, whose chunk holds the grad_input product (2·2048·4096 = 16
	// MiB) instead, the transient grows by 3072 − 16 MiB.
	big := model.Spec{Family: "llama", Layers: 1, Hidden: 4096, Heads: 32, KVHeads: 8, HeadDim: 128, Intermediate: 14336, Vocab: 131072}
	wb := model.Workload{Batch: 1, SeqLen: 65536, DType: gpumem.BF16, Attention: model.Flash, Train: true, Loss: model.Loss{Kind: model.FusedLinearLoss}}
	frozen, err := big.Activations(wb)
	require.NoError(t, err)
	wb.HeadGrad = gpumem.BF16
	trained, err := big.Activations(wb)
	require.NoError(t, err)
	require.Equal(t, gpumem.Bytes((3072-16)<<20), trained.LogitsFP32-frozen.LogitsFP32)

	// Cut cross-entropy: n = 2·11 = 22 labelled positions. Saved: the
	// hidden states 3072, lse 4·22 and int64 valids 8·22 (264), logit_avg
	// 4·1000: 7336. Forward transient: mask 22, nonzero 16·22, int32 copy
	// 8·22: 550. Backward: de 3072, dc 2·64,000, argsort 12·1000, locks
	// 4·ceil(22/128)·ceil(64/64) + 4·ceil(1000/128)·1 = 4 + 32:
	// 3072+128,000+12,000+36 = 143,108.
	cc := at(model.Loss{Kind: model.CutCrossEntropyLoss}, gpumem.BF16)
	require.Equal(t, figs{0, 7336, 550, 143108, 0, 384, false}, get(cc))
	// Frozen head: no dc, no dc locks: 3072+12,000+4.
	require.Equal(t, gpumem.Bytes(15076), at(model.Loss{Kind: model.CutCrossEntropyLoss}, gpumem.Invalid).LossGrad)
	// AMP: dc in bf16 (the cast weight the kernel reads), then .to(fp32):
	// (2+4)·64,000 + 3072 + 12,000 + 36.
	require.Equal(t, gpumem.Bytes(399108), at(model.Loss{Kind: model.CutCrossEntropyLoss}, gpumem.FP32).LossGrad)

	// The blocks are the same under every loss.
	for _, a := range []model.Activations{ch, li, cc} {
		require.Equal(t, full.LayersTotal(), a.LayersTotal())
		require.Equal(t, full.FinalNorm, a.FinalNorm)
	}
	require.Less(t, ch.Peak(), full.Peak())
	require.Less(t, cc.Peak(), full.Peak())
	// At 24 tokens Liger's bf16-then-fp32 weight-gradient product
	// (6·V·h) outweighs the full loss's 10·T·V: the fused loss pays off
	// from T > 0.6·h tokens on.
	require.Greater(t, li.Peak(), full.Peak())
}

// TestLossLlama3: for Llama-3-8B (vocabulary 128,256) at 2 × 4096 tokens,
// each loss lowers the step's activation peak by about the logits' share
// of the full loss (its logits, fp32 copy and gradient), and the chunked
// loss's saving grows with the chunk count.
func TestLossLlama3(t *testing.T) {
	t.Parallel()
	s := mustLookup(t, "llama-3-8b")
	w := model.Workload{Batch: 2, SeqLen: 4096, Attention: model.Flash, Train: true, HeadGrad: gpumem.BF16}
	peak := func(l model.Loss) model.Activations {
		w := w
		w.Loss = l
		a, err := s.Activations(w)
		require.NoError(t, err)
		return a
	}
	full := peak(model.Loss{})
	// T·V = 8192 · 128,256 logits; the full loss's peak is at the start of
	// backward: logits (2 bytes each) and the fp32 gradients (8).
	const TV = 8192 * 128256
	require.Equal(t, full.Total()+full.LossGrad, full.Peak())
	require.Equal(t, gpumem.Bytes(2*TV), full.Logits)
	require.Equal(t, gpumem.Bytes(8*TV), full.LossGrad)
	share := full.Logits + full.LossGrad // 10 bytes per logit
	prev := full.Peak()
	for _, n := range []int64{1, 2, 8, 32} {
		a := peak(model.Loss{Kind: model.ChunkedLoss, Chunks: n})
		require.Less(t, a.Peak(), prev, "chunks %d", n)
		prev = a.Peak()
	}
	// Chunked, 8 chunks: the peak moves to the loss forward, Total plus one
	// chunk's fp32 upcast (4·TV/8); Total is the full loss's plus 7 more
	// 4-byte total weights. Saved: 8·TV − TV/2 − 28 bytes.
	ch := peak(model.Loss{Kind: model.ChunkedLoss, Chunks: 8})
	require.Equal(t, full.Peak()-gpumem.Bytes(8*TV-TV/2-28), ch.Peak())
	for _, l := range []model.Loss{{Kind: model.FusedLinearLoss}, {Kind: model.CutCrossEntropyLoss}} {
		a := peak(l)
		saved := full.Peak() - a.Peak()
		// Between 3/4 of the share and the share plus the fp32
		// log-softmax the full loss saves (4 bytes per logit).
		require.Greater(t, saved, share*3/4, "%v saves %v of %v", l, saved, share)
		require.Less(t, saved, share+4*TV, "%v saves %v", l, saved)
	}
}

// TestLogitsToKeep: a pass without gradients that keeps k positions
// holds e·B·k·V of logits; k at or above the sequence is every position.
func TestLogitsToKeep(t *testing.T) {
	t.Parallel()
	s := lossSpec()
	w := model.Workload{Batch: 2, SeqLen: 12, DType: gpumem.BF16}
	for _, tc := range []struct{ k, want int64 }{{0, 48000}, {1, 2 * 2 * 1 * 1000}, {5, 2 * 2 * 5 * 1000}, {12, 48000}, {100, 48000}} {
		w.LogitsToKeep = tc.k
		a, err := s.Activations(w)
		require.NoError(t, err)
		require.Equal(t, gpumem.Bytes(tc.want), a.Logits, "k %d", tc.k)
	}
}

// TestLossErrors: each bad loss or logits_to_keep names its field.
func TestLossErrors(t *testing.T) {
	t.Parallel()
	llama := lossSpec()
	for _, tc := range []struct {
		name, model string
		w           model.Workload
		field       string
		kind        error
	}{
		{"chunks 0", "", model.Workload{Train: true, Loss: model.Loss{Kind: model.ChunkedLoss}}, "Workload.Loss.Chunks", gpumem.ErrInvalid},
		{"chunks -1", "", model.Workload{Train: true, Loss: model.Loss{Kind: model.ChunkedLoss, Chunks: -1}}, "Workload.Loss.Chunks", gpumem.ErrInvalid},
		{"chunks on liger", "", model.Workload{Train: true, Loss: model.Loss{Kind: model.FusedLinearLoss, Chunks: 4}}, "Workload.Loss.Chunks", gpumem.ErrInvalid},
		{"unknown kind", "", model.Workload{Train: true, Loss: model.Loss{Kind: 9}}, "Workload.Loss", gpumem.ErrInvalid},
		{"inference", "", model.Workload{Loss: model.Loss{Kind: model.CutCrossEntropyLoss}}, "Workload.Loss", gpumem.ErrInvalid},
		{"bert", "bert-base-uncased", model.Workload{Train: true, Loss: model.Loss{Kind: model.FusedLinearLoss}}, "Workload.Loss", gpumem.ErrUnsupported},
		{"vit", "vit-base-patch16-224", model.Workload{Train: true, Loss: model.Loss{Kind: model.FusedLinearLoss}}, "Workload.Loss", gpumem.ErrUnsupported},
		{"t5", "t5-small", model.Workload{Train: true, Loss: model.Loss{Kind: model.ChunkedLoss, Chunks: 8}}, "Workload.Loss", gpumem.ErrUnsupported},
		{"tensor parallel", "", model.Workload{Train: true, TensorParallel: 2, Loss: model.Loss{Kind: model.FusedLinearLoss}}, "Workload.Loss", gpumem.ErrUnsupported},
		{"head grad", "", model.Workload{Train: true, HeadGrad: gpumem.NF4, Loss: model.Loss{Kind: model.FusedLinearLoss}}, "Workload.HeadGrad", gpumem.ErrInvalid},
		{"keep negative", "", model.Workload{LogitsToKeep: -1}, "Workload.LogitsToKeep", gpumem.ErrInvalid},
		{"keep training", "", model.Workload{Train: true, LogitsToKeep: 1}, "Workload.LogitsToKeep", gpumem.ErrInvalid},
		{"keep bert", "bert-base-uncased", model.Workload{LogitsToKeep: 1}, "Workload.LogitsToKeep", gpumem.ErrUnsupported},
	} {
		s := llama
		if tc.model != "" {
			s = mustLookup(t, tc.model)
		}
		tc.w.Batch, tc.w.SeqLen = 1, 16
		_, err := s.Activations(tc.w)
		var fe *gpumem.FieldError
		require.ErrorAs(t, err, &fe, tc.name)
		require.Equal(t, tc.field, fe.Field, "%s: %v", tc.name, err)
		require.True(t, errors.Is(err, tc.kind), "%s: %v", tc.name, err)
	}
	// Causal heads of multimodal models take the fused losses; CLIP's
	// dual encoder has no LM head.
	_, err := mustLookup(t, "llava-1.5-7b").Activations(model.Workload{Batch: 1, SeqLen: 64, Images: 1, Train: true, Loss: model.Loss{Kind: model.CutCrossEntropyLoss}})
	require.NoError(t, err)
}

// TestParseLoss: every spelling reads back as its String.
func TestParseLoss(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"": "full", "full": "full", "chunked": "chunked:8", "chunked:16": "chunked:16",
		"liger": "liger", "flce": "liger", "fused-linear": "liger", "cce": "cce", "cut-cross-entropy": "cce"} {
		l, err := model.ParseLoss(in)
		require.NoError(t, err, in)
		require.Equal(t, want, l.String(), in)
		back, err := model.ParseLoss(l.String())
		require.NoError(t, err)
		require.Equal(t, l, back)
	}
	for _, in := range []string{"chunked:0", "chunked:-2", "chunked:", "chunked:x", "chunked:2000000", "nope", "Liger"} {
		_, err := model.ParseLoss(in)
		var fe *gpumem.FieldError
		require.ErrorAs(t, err, &fe, in)
		require.Equal(t, "loss", fe.Field)
	}
}

// FuzzParseLoss: a name that parses is a valid loss whose String reads
// back as itself; anything else is a FieldError naming "loss".
func FuzzParseLoss(f *testing.F) {
	for _, s := range []string{"", "full", "chunked", "chunked:16", "chunked:0", "liger", "cce", "chunked:+3", "chunked:1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := model.ParseLoss(s)
		if err != nil {
			var fe *gpumem.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, "loss", fe.Field)
			return
		}
		require.True(t, l.Valid(), "%q → %+v", s, l)
		back, err := model.ParseLoss(l.String())
		require.NoError(t, err)
		require.Equal(t, l, back)
	})
}

// TestLossNeedsCausalHead: the fused and chunked losses and
// logits_to_keep replace a causal LM head; a decoder configured with a
// task head (sequence classification) has none.
func TestLossNeedsCausalHead(t *testing.T) {
	s, ok := model.Lookup("llama-3.2-1b")
	if !ok {
		t.Fatal("no llama-3.2-1b")
	}
	s.Head, s.Labels = model.HeadSeqCls, 2
	for _, l := range []model.Loss{{Kind: model.FusedLinearLoss}, {Kind: model.CutCrossEntropyLoss}, {Kind: model.ChunkedLoss, Chunks: 8}} {
		if err := l.Check("Job.Loss", s, true); !errors.Is(err, gpumem.ErrUnsupported) {
			t.Errorf("%v loss on a seq-cls head: %v", l, err)
		}
	}
	if err := s.CheckLogitsToKeep("Job.LogitsToKeep", 1, false); !errors.Is(err, gpumem.ErrUnsupported) {
		t.Errorf("logits_to_keep on a seq-cls head: %v", err)
	}
}
