package model

// layout is the tensor naming and structure of a family of Hugging Face
// classes.
type layout uint8

const (
	layoutLlama layout = iota // llama, mistral, mixtral, qwen2(_moe), qwen3, gemma*, deepseek_v2/v3, generic
	layoutPhi3
	layoutPhi
	layoutFalcon
	layoutGPT2
	layoutBigCode
	layoutNeoX
	layoutOPT
	layoutBERT
	layoutT5
	layoutWhisper
	layoutVision       // vit
	layoutCLIPVision   // clip_vision_model
	layoutSiglipVision // siglip_vision_model
	layoutCLIPText     // clip_text_model
	layoutMultimodal   // llava, clip, gemma3
	layoutCogVideoX    // diffusers CogVideoXTransformer3DModel
	layoutUNet         // diffusers UNet2DConditionModel
	layoutVAE          // diffusers AutoencoderKL
	layoutFlux         // diffusers FluxTransformer2DModel
	layoutMamba        // transformers MambaForCausalLM
	layoutMamba2       // transformers Mamba2ForCausalLM
	layoutJamba        // transformers JambaForCausalLM
	layoutSD3          // diffusers SD3Transformer2DModel
	layoutBackbone     // resnet, convnext, swin (vision_cnn.go)
	layoutZamba        // transformers ZambaForCausalLM, Zamba2ForCausalLM
)

func layoutOf(s *Spec) layout {
	switch s.Family {
	case "phi3":
		return layoutPhi3
	case "phi":
		return layoutPhi
	case "falcon", "bloom":
		return layoutFalcon
	case "gpt2":
		return layoutGPT2
	case "gpt_bigcode":
		return layoutBigCode
	case "gpt_neox":
		return layoutNeoX
	case "opt":
		return layoutOPT
	case "bert", "roberta":
		return layoutBERT
	case "t5", "mt5":
		return layoutT5
	case "whisper":
		return layoutWhisper
	case "vit":
		return layoutVision
	case "clip_vision_model":
		return layoutCLIPVision
	case "siglip_vision_model":
		return layoutSiglipVision
	case "clip_text_model":
		return layoutCLIPText
	case "llava", "clip", "gemma3":
		return layoutMultimodal
	case "cogvideox":
		return layoutCogVideoX
	case FamilyUNet:
		return layoutUNet
	case FamilyVAE:
		return layoutVAE
	case FamilyFlux:
		return layoutFlux
	case "mamba":
		return layoutMamba
	case FamilyMamba2:
		return layoutMamba2
	case FamilyJamba:
		return layoutJamba
	case FamilySD3:
		return layoutSD3
	case FamilyZamba, FamilyZamba2:
		return layoutZamba
	case "resnet", "convnext", "swin", "efficientnet":
		return layoutBackbone
	}
	return layoutLlama
}

func (l layout) hasVocab() bool {
	switch l {
	case layoutVision, layoutCLIPVision, layoutSiglipVision, layoutMultimodal, layoutCogVideoX, layoutBackbone, layoutUNet, layoutVAE, layoutFlux, layoutSD3:
		return false
	}
	return true
}

func (s Spec) norm() Norm {
	if s.Norm == 0 {
		return RMSNorm
	}
	return s.Norm
}

// build emits the tensors of s in the order of the Hugging Face class's
// named_parameters, as far as practical.
func (s Spec) build(b *builder) {
	b.dt = s.DType
	switch layoutOf(&s) {
	case layoutLlama:
		s.buildLlama(b)
	case layoutPhi3:
		s.buildPhi3(b)
	case layoutPhi:
		s.buildPhi(b)
	case layoutFalcon:
		s.buildFalcon(b)
	case layoutGPT2, layoutBigCode:
		s.buildGPT2(b)
	case layoutNeoX:
		s.buildNeoX(b)
	case layoutOPT:
		s.buildOPT(b)
	case layoutBERT:
		s.buildBERT(b)
	case layoutT5:
		s.buildT5(b)
	case layoutWhisper:
		s.buildWhisper(b)
	case layoutVision:
		s.buildViT(b)
	case layoutCLIPVision, layoutSiglipVision, layoutCLIPText:
		s.buildCLIPFamily(b)
	case layoutMultimodal:
		s.buildMultimodal(b)
	case layoutCogVideoX:
		s.buildCogVideoX(b)
	case layoutUNet:
		s.buildUNet(b)
	case layoutVAE:
		s.buildVAE(b)
	case layoutFlux:
		s.buildFlux(b)
	case layoutMamba:
		s.buildMamba(b)
	case layoutMamba2:
		s.buildMamba2(b)
	case layoutJamba:
		s.buildJamba(b)
	case layoutSD3:
		s.buildSD3(b)
	case layoutZamba:
		s.buildZamba(b)
	case layoutBackbone:
		s.buildBackbone(b)
	}
}

// IsMoELayer reports whether layer i (from 0) of s has routed experts
// rather than a dense feed-forward, following each family's rule (see
// isMoELayer). It is false for dense models and out-of-range i.
func (s Spec) IsMoELayer(i int64) bool {
	return i >= 0 && i < s.Layers && s.isMoELayer(i)
}

// isMoELayer reports whether layer i has routed experts. deepseek:
// i >= first_k_dense_replace and i % moe_layer_freq == 0
// (modeling_deepseek_v2/v3); qwen2_moe: (i+1) % decoder_sparse_step == 0
// (modeling_qwen2_moe); mixtral: every layer.
func (s Spec) isMoELayer(i int64) bool {
	k := s.layerKinds()
	return k != nil && k(i) == 1
}

// layerKinds returns the kind of each layer for [builder.stack]: 1 with
// routed experts, 0 dense (isMoELayer's rule); nil for a dense model,
// whose layers are all alike. The closure holds only the rule's numbers,
// so that a stack of many layers costs a few instructions a layer.
func (s Spec) layerKinds() func(i int64) int {
	if s.MoE.Experts == 0 {
		return nil
	}
	step, first := max(s.MoE.Step, 1), s.MoE.DenseFirst
	switch s.Family {
	case "qwen2_moe", "qwen3_moe", "llama4_text":
		return func(i int64) int {
			if (i+1)%step == 0 {
				return 1
			}
			return 0
		}
	}
	return func(i int64) int {
		if i >= first && i%step == 0 {
			return 1
		}
		return 0
	}
}

// firstLayer is the kind of layer i for [builder.stack] where the first
// layer of a stack differs (T5's relative attention bias).
func firstLayer(i int64) int {
	if i == 0 {
		return 0
	}
	return 1
}
