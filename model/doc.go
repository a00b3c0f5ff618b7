// Package model describes deep-learning model architectures in the terms
// that decide their GPU memory, and reads them from the files users have:
// a Hugging Face config.json, a .safetensors checkpoint (or a sharded
// model.safetensors.index.json with its shards), or a .gguf file. Only
// headers are read; weights are never loaded.
//
// # What is modelled
//
// A [Spec] holds the architecture: width, depth, attention heads and
// key/value heads (GQA, MQA), head size (which may differ from
// hidden/heads, as in Gemma and T5), vocabulary, tied embeddings, norm
// kind and biases, learned position tables, mixture-of-experts layout
// (routed, active and shared experts, dense first layers, routers), DeepSeek
// multi-head latent attention ranks, sliding windows and per-layer
// attention types, the encoder of encoder–decoder models, the image
// geometry of ViT-style encoders, and the vision tower, projector and
// language model of multimodal models. [Spec.Tensors] derives the exact
// parameter inventory of the standard transformers class with checkpoint
// tensor names and row-major shapes; [Spec.Params], [Spec.ActiveParams],
// [Spec.Bytes],
// [Spec.BytesByDType] and [Spec.Groups] (per embedding, layer, head, part
// and routed experts) build on it.
//
// [FromHFConfig] reads these model_types with their attribute_map
// aliases and the class defaults of their configuration classes: llama,
// mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma, gemma2,
// gemma3 (text and multimodal), phi, phi3, falcon, gpt2, gpt_bigcode,
// gpt_neox, opt, bert, roberta, t5, mt5, whisper, vit, clip,
// clip_vision_model, clip_text_model, siglip(_vision_model), llava,
// deepseek_v2 and deepseek_v3, gpt_oss, llama4_text, bloom, qwen2_vl,
// qwen2_5_vl, T5 encoder-only checkpoints
// (T5EncoderModel), CLIPTextModelWithProjection,
// CLIPForImageClassification and SiglipForImageClassification (a
// clip_vision_model or siglip_vision_model config naming them: the tower
// and a classifier over the mean of its tokens), and diffusers'
// CogVideoXTransformer3DModel, UNet2DConditionModel, AutoencoderKL,
// FluxTransformer2DModel and SD3Transformer2DModel configs (by their
// "_class_name"; Flux's and SD3's parameters, model/flux.go and
// model/sd3.go, SD3's persistent pos_embed buffer listed but not
// trained, and their activations in a pipeline, [Spec.MMDiTActivations],
// model/mmdit_act.go, held to a CPU oracle of diffusers' own modules),
// zamba and zamba2 (ZambaForCausalLM, Zamba2ForCausalLM, model/zamba.go:
// parameters with the shared blocks counted once, exact against
// transformers' own classes, the KV cache of each hybrid layer's
// invocation of a shared block and every layer's Mamba state; their
// activations, model/zamba_act.go, those of the fused kernels derived
// from the source and those of transformers' kernel-free mixers held to
// a CPU oracle of transformers' own classes), and mamba (MambaForCausalLM,
// model/mamba.go: parameters, the generation state [Spec.MambaState]
// that budget counts instead of a KV cache, and the activations of the
// mamba_ssm fused kernels' MambaInnerFn, derived by hand, or of
// transformers' slow_forward ([SequentialSSM]), held to a CPU oracle of
// transformers' own class), mamba2 (Mamba2ForCausalLM, model/mamba2.go:
// parameters, Mamba2Cache, activations of the fused kernels by hand and
// of torch_forward held to a CPU oracle) and jamba (JambaForCausalLM,
// model/jamba.go: attention and Mamba layers, MoE feed-forwards; its
// parameters, generation cache and activations, the sequential kernel's
// held to a CPU oracle), and the hierarchical vision backbones resnet,
// convnext, swin and efficientnet.
//
// UNet2DConditionModel ([FamilyUNet]) and AutoencoderKL ([FamilyVAE])
// (diffusers 0.40.0.dev0, commit 58eb52c0; model/diffusers.go) are
// described by [Spec.UNet]: per-level channels, resnets, cross-attention
// Transformer2DModels with their heads, transformer_layers_per_block and
// text width, SDXL's text_time addition embedding, the VAE's encoder,
// decoder and quant convolutions. The Stable Diffusion 1.5, 2.1 and XL
// UNets, VAEs and text encoders are in the catalog, and FLUX.1-dev's and
// SD3-medium's transformers, VAEs and text encoders (pipelines
// "flux.1-dev" and "sd3-medium"). LoRA on a UNet
// targets to_k, to_q, to_v and to_out.0 by default, as diffusers' LoRA
// training scripts do. Their activations are budget's diffusion
// pipeline's (budget.EstimatePipeline), not [Spec.Activations].
//
// resnet, convnext, swin and efficientnet (vision_cnn.go, [Backbone] in
// [Spec.Backbone]) are the *ForImageClassification classes of
// transformers, whose parameters are torchvision's resnet50, resnet18,
// convnext_tiny, swin_t and efficientnet_b0; the catalog has them under
// those names too.
// Their activations (vision_cnn_act.go) are derived op by op as for the
// transformer blocks: convolution inputs, BatchNorm inputs and fp32
// statistics, ReLU results (torchvision's in-place ReLU saves the same
// bytes as transformers' out-of-place one), max-pool int64 indices,
// ConvNeXt's Python-op channels-first LayerNorm, Swin's window copies and
// probabilities, EfficientNet's SiLU inputs, squeeze-excite, padding
// copies and dropout masks; [Image.Size] is the training image side. FLOPs count
// the convolutions' and linear layers' multiply-adds, equal to
// torchvision's published GFLOPS. Tensor, sequence and context
// parallelism, dropout and fused attention for Swin are refused.
//
// gpt_oss (transformers v4.55.0 modeling_gpt_oss.py) is read as its bf16
// model: per-head attention sinks, biased q/k/v/o, a biased router and
// the experts as four stacked tensors (mlp.experts.gate_up_proj ...).
// The published checkpoint's MXFP4 expert blocks and scales are not in
// the inventory; quantization_config's "mxfp4" is recorded in
// [Spec.Quantization] (Method "mxfp4", DType MXFP4). Its activations
// are a Mixtral-style MoE's with gpt-oss's eager attention (the softmax
// over [scores, sink] in the compute dtype, the max's indices, the copy
// of the strided probabilities); the clamped SwiGLU's extra
// intermediates and the inference path of GptOssExperts, which runs
// every token through every expert in one bmm, are not modelled, and
// the 128-token window saves nothing under eager attention, which masks
// a full score matrix.
//
// llama4_text (transformers v4.51.0 modeling_llama4.py) is Llama 4's text
// model: MoE layers every interleave_moe_layer_step (moe_layers must be
// that default) with stacked experts (feed_forward.experts.gate_up_proj)
// and one shared expert, dense layers of intermediate_size_mlp, a
// weightless L2 qk norm. A "llama4" config (with its vision encoder) is
// an error naming vision_config. Its activations follow Llama4TextMoe,
// which runs every token through every expert; chunked attention
// (attention_chunk_size) is not modelled, and the shared expert is
// counted with Qwen2-MoE's sigmoid gate, which Llama 4 lacks (2·T·h
// bytes too many per layer).
//
// bloom (transformers v4.55.0 modeling_bloom.py) shares Falcon's tensor
// names, with word_embeddings_layernorm and sequential blocks; ALiBi has
// no parameters, and its activations count the (batch·heads, 1, seq)
// ALiBi bias instead of rotary tables and the fp32 softmax. The embedding LayerNorm's saved
// input is not counted (batch·seq·hidden elements, once).
//
// qwen2_vl and qwen2_5_vl (transformers v4.57.1) are the qwen2 language
// model with the vision tower in [Spec.Vision], emitted as "visual.*"
// (patch embedding, blocks, merger). Their activation model covers the
// language model only (image tokens counted in SeqLen); Workload.Images
// is refused, as the dynamic-resolution tower's activations are not
// modelled.
// An unknown model_type with the standard
// decoder keys is read as a llama-style decoder with [Spec.Generic] set.
//
// [FromSafetensors], [FromSafetensorsIndex] and [FromGGUF] return the
// checkpoint's own inventory ([Spec.Inventory]) with each tensor's stored
// dtype, quantized GGUF block formats included, and the shape facts the
// tensor names and GGUF metadata reveal ([InferSpec], [GuessFamily]). To combine a config with a
// checkpoint, set the config Spec's Inventory from the checkpoint's.
//
// The task head follows the class the config's "architectures" names
// ([Spec.Head], [Head]): causal LM, masked LM (BertForMaskedLM,
// RobertaForMaskedLM), sequence, token and image classification
// (num_labels or id2label in [Spec.Labels]) and question answering, with
// each class's pooler rule (only BertForSequenceClassification keeps
// BERT's; ViTForImageClassification drops ViT's), output layer, logits
// and loss.
//
// [LoRA] sizes adapters per targeted linear layer, with PEFT's default
// targets per family; [Finetune] adds quantized storage of the base
// linear weights (bitsandbytes NF4/FP4 as QLoRA uses it, constants sized
// by gpumem.Blockwise, and LLM.int8 with its per-row SCB; GPTQ and AWQ
// int4 with their group scales and zeros ([Finetune.Method],
// [Finetune.GroupSize]); block-scaled FP8 as DeepSeek-V3 ships, the
// config's quantization_config being read into [Spec.Quantization]), the
// dtype the loader keeps the rest in ([Finetune.Unquantized]) and a
// trainable predicate ([TrainParts], [FreezeParts]); [Finetune.Trainable] is the
// tensor list an optimizer sizes its state from.
//
// [Lookup] and [Catalog] give 98 well-known models, each stored as its
// published config.json (embedded, with its source address).
//
// # What is not modelled
//
// Pretraining heads (BertForPreTraining's next-sentence classifier) and
// task heads other than those of [Head], or on families other than BERT,
// RoBERTa, ViT and the llama-style, GPT-2 and OPT decoders; non-persistent
// buffers (rotary tables,
// causal masks, position ids); DeepSeek's multi-token-prediction layer,
// which transformers does not load; GPTQ/AWQ packed layouts (their
// quantization_config is recorded, the exact tensors come from the
// safetensors header); model types not listed above (other diffusion transformers,
// other VAEs and UNet classes, ControlNets); the vision tower of multimodal configs other than llava, clip
// and gemma3. Heads and head size cannot
// be separated from a checkpoint's shapes alone, so inventories read
// without a config leave them zero (GGUF metadata provides them).
//
// # Accuracy
//
// Parameter counts are exact against 92 published counts of
// sum(p.numel() for p in model.parameters()) or the Hub's
// safetensors.total, for every family above with a published figure
// (Llama-2/3/3.1/3.2, Mistral, Mixtral, Qwen2/2.5/3, Qwen-MoE, Gemma 1/2/3,
// Phi-2/3, GPT-2, StarCoder, Pythia, OPT, BERT, RoBERTa, T5, FLAN-T5, mT5,
// Whisper, ViT, CLIP, SigLIP, LLaVA, DeepSeek-V2-Lite and V3, CogVideoX-5b's
// transformer and T5 encoder, the Stable Diffusion 1.5, 2.1 and XL UNets,
// VAEs and CLIP text encoders, FLUX.1-dev's and -schnell's transformers,
// FLUX.1's VAE, the T5-XXL encoder of FLUX.1 and SD3, SD3's CLIP-L with
// projection, gpt-oss-20b and -120b, Mamba-130m and -2.8b, SD3-medium's
// MMDiT without its buffer, ResNet-50
// and -18, ConvNeXt-T, Swin-T, EfficientNet-B0 from torchvision's weights
// metadata),
// against three published PEFT LoRA
// trainable counts, the SDXL UNet's rank-4 LoRA count of the diffusers
// DreamBooth script (5,806,080), FLUX.1-dev's rank-4 attention LoRA of the
// flux-qlora post (4,669,440) and one published MoE active count (Qwen3-30B-A3B);
// two more catalog counts (Falcon-7B, LLaVA-1.5-13B) are derived by hand
// in the tests from the module definitions. DeepSeek-V3's published
// 671,026,419,200 includes the 14,848 values of e_score_correction_bias,
// which transformers registers as a buffer: [Finetune.Trainable] excludes
// them.
package model
