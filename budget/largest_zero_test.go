package budget

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// LargestBatch searches the batch and LongestSeqLen the sequence, so the
// job's own value of what is searched does not change the answer, and zero
// (a field left unset by a caller who asks for it) is no error; a negative
// value is still refused, naming the field.
func TestLargestSearchedFieldMayBeZero(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3.2-1b", nil)
	j := Job{Model: m, Mode: Training, Precision: BF16, Optimizer: optimizer.AdamW{}, Attention: model.Flash, Batch: 1, SeqLen: 2048}
	free := gpumem.Bytes(24 << 30)
	want, err := LargestBatch(j, free)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []int{0, 7} {
		x := j
		x.Batch = b
		if got, err := LargestBatch(x, free); err != nil || got != want {
			t.Errorf("LargestBatch with Batch %d = %d, %v; want %d as with Batch 1", b, got, err, want)
		}
	}
	wantSeq, err := LongestSeqLen(j, free)
	if err != nil {
		t.Fatal(err)
	}
	x := j
	x.SeqLen = 0
	if got, err := LongestSeqLen(x, free); err != nil || got != wantSeq {
		t.Errorf("LongestSeqLen with SeqLen 0 = %d, %v; want %d as with SeqLen 2048", got, err, wantSeq)
	}
	x = j
	x.Batch = -1
	var fe *gpumem.FieldError
	if _, err := LargestBatch(x, free); !errors.As(err, &fe) || fe.Field != "Job.Batch" {
		t.Errorf("LargestBatch with Batch -1: %v, want a FieldError of Job.Batch", err)
	}
}
