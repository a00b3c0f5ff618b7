package main

import (
	"fmt"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

func main() {
	s, _ := model.Lookup("llama-3.2-3b")
	l, _ := model.ParseLoss("chunked")
	for _, ck := range []model.Checkpointing{model.NoCheckpointing, model.FullCheckpointing} {
		w := model.Workload{Batch: 2, SeqLen: 4096, DType: gpumem.BF16, Attention: model.Flash, Checkpointing: ck, Loss: l, Train: true}
		a, err := s.Activations(w)
		if err != nil {
			panic(err)
		}
		fmt.Printf("ck=%v layers=%+v\n emb=%v ids=%v shared=%v fnorm=%v head=%v logits=%v fp32=%v lossgrad=%v fwd=%v bwd=%v total=%v released=%v\n",
			ck, a.Layers, a.Embedding.Human(), a.TokenIDs.Human(), a.Shared.Human(), a.FinalNorm.Human(), a.Head.Human(), a.Logits.Human(), a.LogitsFP32.Human(), a.LossGrad.Human(), a.Forward.Human(), a.Backward.Human(), a.Total().Human(), a.LogitsReleased)
	}
}
