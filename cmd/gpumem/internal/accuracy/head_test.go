package accuracy

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestJobHead: "head" sets the task class of the run (the hf-anatomy
// BERT-large runs load AutoModelForSequenceClassification), and a name
// the vocabulary lacks, or a head the family lacks, names job.head.
func TestJobHead(t *testing.T) {
	job := func(head string) (Job, error) {
		var j Job
		err := json.Unmarshal([]byte(`{"model": "bert-large", "catalog": "bert-large", "kind": "masked", "mode": "train",
			"batch": 4, "seq": 512, "precision": "fp32", "optimizer": "adamw", "attention": "eager", "head": "`+head+`"}`), &j)
		return j, err
	}
	j, err := job("seq-cls")
	require.NoError(t, err)
	b, err := j.Budget()
	require.NoError(t, err)
	require.Equal(t, model.HeadSeqCls, b.Model.Spec().Head)
	// BertModel 335,141,888 with its pooler + classifier 1024·2+2.
	require.EqualValues(t, 335_143_938, b.Model.Spec().Params())

	for _, h := range []string{"classifier", "image-cls"} {
		j, err := job(h)
		require.NoError(t, err)
		_, err = j.Budget()
		var fe *gpumem.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "job.head", fe.Field)
	}
}
