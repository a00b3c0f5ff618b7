package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// publishedParams are parameter counts published for the standard
// transformers class of each catalog model: sum(p.numel() for p in
// model.parameters()), or the Hub's safetensors.total where that is the
// same thing. Each source was found with the project's code search
// (find_string on the exact number) and is named beside it.
var publishedParams = []struct {
	name   string
	want   int64
	source string
}{
	{"llama-2-7b", 6_738_415_616, "issue 3; LoRAM paper table and many model_size dicts (\"meta-llama/Llama-2-7b-chat-hf\": 6_738_415_616)"},
	{"llama-2-13b", 13_015_864_320, "deepspeed zero_to_fp32 log \"363 params 13015864320 elements\"; Llama-2-13b-chat-hf size dicts"},
	{"llama-2-70b", 68_976_648_192, "togethercomputer/llama-2-70b size table; AuroraGPT-70B TOTAL_PARAMS=68976648192"},
	{"llama-3-8b", 8_030_261_248, "brief; Llama 3.1 8B tables (\"8B\": 8030261248)"},
	{"llama-3-70b", 70_553_706_496, "Hub safetensors.total 70553706496 (SAMPLE_RESPONSE of a Hub scraper test)"},
	{"llama-3.1-8b", 8_030_261_248, "Llama 3.1 model tables (\"Llama 3.1 8B\", 8030261248)"},
	{"llama-3.1-70b", 70_553_706_496, "Llama 3.1 model tables (\"Llama 3.1 70B (70.55B)\")"},
	{"llama-3.1-405b", 405_853_388_800, "\"meta-llama/Llama-3.1-405B\": (405853388800, revision b906e4dc)"},
	{"llama-3.2-1b", 1_235_814_400, "LLAMA_3_2_1B_PARAMETER_COUNT = 1235814400 (a parameter-count unit test)"},
	{"llama-3.2-3b", 3_212_749_824, "Hub safetensors.parameters.BF16 = 3212749824"},
	// BLOOM model cards ("Parameters: 559,214,592", "7,069,016,064").
	// By hand, V=250880, per layer 12H²+13H, plus three LayerNorms
	// outside the blocks: 560m H=1024: 256,901,120 + 24·12,596,224 +
	// 4,096 = 559,214,592; 7b1 H=4096: 1,027,604,480 +
	// 30·201,379,840 + 16,384 = 7,069,016,064.
	{"bloom-560m", 559_214_592, "bigscience/bloom-560m model card: 559,214,592 parameters"},
	{"bloom-7b1", 7_069_016_064, "bigscience/bloom-7b1 model card: 7,069,016,064 parameters"},
	// Qwen2-VL / Qwen2.5-VL: the language model is Qwen2-7B's
	// (7,615,616,512) or Qwen2-1.5B's shape, plus the tower. Qwen2-VL-7B
	// tower: patch 1280·3·2·14·14 = 1,505,280; per block 2·2·1280 +
	// (3840·1280+3840) + (1280·1280+1280) + (5120·1280+5120) +
	// (1280·5120+1280) = 19,677,440, ×32; merger ln_q 2,560 + 5120·5120+5120
	// + 3584·5120+3584 = 44,575,744; total 8,291,375,616. Qwen2.5-VL-7B:
	// RMSNorms and a gated MLP of 3420: per block 19,702,200, merger
	// 44,574,464, tower 676,550,144 ("视觉模块 (visual) 总参数: 676550144").
	{"qwen2-vl-7b", 8_291_375_616, "\"qwen/qwen2-vl-7b-instruct\": 8291375616 (a model-size table)"},
	{"qwen2-vl-2b", 2_208_985_600, "\"qwen/qwen2-vl-2b-instruct\": 2208985600; mteb n_parameters=2208985600"},
	{"qwen2.5-vl-7b", 8_292_166_656, "transformers 4.57.1 load log \"Parameter count | 8292166656\"; Hub numParameters 8292166656"},
	{"mistral-7b", 7_241_732_096, "brief; GGUF general.parameter_count 7241732096"},
	{"mixtral-8x7b", 46_702_792_704, "brief; keras-hub mixtral_8_7b_en preset \"params\": 46702792704; FSDP log \"total parameters: 46702792704\""},
	{"qwen2-7b", 7_615_616_512, "GGUF qwen2 general.parameter_count 7615616512"},
	{"qwen2.5-0.5b", 494_032_768, "\"model class: Qwen2ForCausalLM - total parameters: 494032768\""},
	{"qwen2.5-1.5b", 1_543_714_304, "\"QWEN_PARAMS_B = 1543714304 / 1e9  # safetensors.total from the model_info API\""},
	{"qwen2.5-3b", 3_085_938_688, "\"qwen/qwen2.5-3b-instruct\": 3085938688"},
	{"qwen2.5-7b", 7_615_616_512, "\"qwen/qwen2.5-7b-instruct\": 7615616512"},
	{"qwen2.5-14b", 14_770_033_664, "GGUF qwen2 general.parameter_count 14770033664 (Qwen2.5-14B shape)"},
	{"qwen2.5-32b", 32_763_876_352, "\"qwen/qwen2.5-32b-instruct\": 32763876352"},
	{"qwen2.5-72b", 72_706_203_648, "keras-hub Qwen preset \"params\": 72706203648; \"Qwen/Qwen2.5-72B: 72706203648 parameters\""},
	{"qwen3-8b", 8_190_735_360, "Hub \"Qwen/Qwen3-8B\" safetensors total 8190735360; \"MODEL_CLASS Qwen3ForCausalLM PARAMS 8190735360\""},
	{"qwen3-4b", 4_022_468_096, "Ollama model_info \"general.parameter_count\":4022468096 (qwen3, block_count 36, embedding_length 2560); \"'Qwen/Qwen3-4B': ('Apache-2.0', 4022468096)\""},
	{"qwen3-14b", 14_768_307_200, "keras-hub qwen3_14b_en preset \"params\": 14768307200; \"model_id=Qwen/Qwen3-14B ... parameter_count=14768307200\""},
	{"qwen3-32b", 32_762_123_264, "keras-hub qwen3_32b_en preset \"params\": 32762123264; \"Qwen/Qwen3-32B\" {\"BF16\": 32762123264}"},
	{"qwen3-30b-a3b", 30_532_122_624, "GGUF qwen3moe general.parameter_count 30532122624; \"count_params(QWEN3_30B_A3B) == (30532122624, 3353032704)\""},
	{"qwen1.5-moe-a2.7b", 14_315_784_192, "keras-hub qwen-1.5-moe preset \"params\": 14315784192"},
	{"gemma-2b", 2_506_172_416, "keras-hub gemma_2b_en \"params\": 2506172416; PEFT \"all params: 2506172416\""},
	{"gemma-7b", 8_537_680_896, "brief; keras-hub gemma_7b_en \"params\": 8537680896"},
	{"gemma-2-2b", 2_614_341_888, "\"sum(p.numel() for p in model.parameters()) != 2614341888\" (gemma-2-2b check)"},
	{"gemma-2-9b", 9_241_705_984, "keras-hub gemma2_9b_en \"params\": 9241705984; Hub safetensors total 9241705984"},
	{"gemma-3-1b", 999_885_952, "Hub \"google/gemma-3-1b-it\" safetensors total 999885952; keras-hub gemma3 preset"},
	{"gemma-3-4b", 4_300_079_472, "\"'google/gemma-3-4b-it': ('gemma', 4300079472)\" (Gemma3ForConditionalGeneration)"},
	{"phi-2", 2_779_683_840, "Hub safetensors.parameters {F16: 2779683840}"},
	{"phi-3-mini", 3_821_079_552, "keras-hub phi3 preset \"params\": 3821079552; \"microsoft/Phi-3-mini-4k-instruct\": 3821079552"},
	{"gpt2", 124_439_808, "brief; \"assert sizes[\\\"small\\\"] == 124439808\""},
	{"gpt2-medium", 354_823_168, "keras-hub gpt2_medium_en \"params\": 354823168; \"gpt2-medium total_params= 354823168\""},
	{"gpt2-large", 774_030_080, "keras-hub gpt2_large_en \"params\": 774030080; TFGPT2MainLayer summary 774030080"},
	{"gpt2-xl", 1_557_611_200, "keras-hub gpt2 preset \"params\": 1557611200; GPT2LMHeadModel num_params comment"},
	// StarCoder (gpt_bigcode, multi-query): c_attn is 6144 + 2·128 rows.
	{"starcoder", 15_517_456_384, "parameter table \"'multipl-t-starcoder-15b-ocaml': (40, 6144, 15517456384.0)\" (StarCoder-15B fine-tunes)"},
	{"pythia-160m", 162_322_944, "pythia size table {'160m': 162322944, ...}"},
	{"pythia-1b", 1_011_781_632, "pythia size table \"pythia-1b\": 1011781632"},
	{"opt-125m", 125_239_296, "\"The original model has 125239296 parameters\" (OPT-125m pruning write-up)"},
	{"opt-350m", 331_196_416, "benchmark usage \"--n_elements 331196416  # OPT-350M\""},
	// The BERT and RoBERTa catalog configs name BertForMaskedLM and
	// RobertaForMaskedLM: the base model without its pooler, plus the MLM
	// transform, LayerNorm and decoder bias (decoder tied).
	{"bert-base", 109_514_298, "\"AutoModelForMaskedLM.from_pretrained('bert-base-uncased') | Architectures: BertForMaskedLM | trainable_params: 109514298\""},
	{"bert-large", 335_174_458, "model table \"| `BERT-Large` | 335174458 | 1.34G |\""},
	{"roberta-base", 124_697_433, "roberta-base model.safetensors header: \"{ 'F32' => 124697433, 'I64' => 514 }\" (huggingface.js safetensors parameter count; the I64 is the position_ids buffer)"},
	{"mt5-small", 300_176_768, "param_size_full \"mt5-small\": {\"embedding\": 256114688, \"full\": 300176768}"},
	{"cogvideox-5b-text-encoder", 4_762_310_656, "T5EncoderModel (t5-v1_1-xxl) text_encoder {'params': 4762310656}; PixArt conditioning parameter_count 4762310656"},
	{"cogvideox-5b-transformer", 5_570_283_072, "CogVideoX-5b full finetuning log \"trainable parameters\": 5570283072"},
	// Stable Diffusion components, read from their diffusers and
	// transformers configs (model/diffusers.go).
	{"sd-1.5-unet", 859_520_964, "diffusers ModelMixin.num_parameters docstring: UNet2DConditionModel.from_pretrained(\"stable-diffusion-v1-5/stable-diffusion-v1-5\", subfolder=\"unet\").num_parameters(only_trainable=True) → 859520964"},
	{"sd-1.5-vae", 83_653_863, "DeepSpeed-MII README \"SD param count: text_encoder: 123060480 unet: 859520964 vae: 83653863\""},
	{"sd-1.5-text-encoder", 123_060_480, "DeepSpeed-MII README \"SD param count: text_encoder: 123060480\""},
	{"sd-2.1-unet", 865_910_724, "buddy-mlir Stable Diffusion 2.1 example: the UNet's flat weight buffer MemRef<float, 1> arg0_unet({865910724}) at 96×96 latents"},
	{"sd-2.1-vae", 83_653_863, "same AutoencoderKL as SD 1.5 (DeepSpeed-MII README vae: 83653863)"},
	{"sdxl-unet", 2_567_463_684, "SDXL DreamBooth LoRA training log \"unet params = 2567463684\"; model summary \"StableDiffusionXL Base : 레이어 수: 1680, 파라미터 수: 2567463684\""},
	{"sdxl-vae", 83_653_863, "model summary \"VAE : 레이어 수: 248, 파라미터 수: 83653863\" (SDXL base)"},
	{"sdxl-text-encoder", 123_060_480, "SDXL component table params_total=123060480 (clip_l)"},
	// MambaForCausalLM (model/mamba.go).
	{"mamba-130m", 129_135_360, "parameter table \"mamba-130m-hf\"=\"129135360\"; \"assert sum(p.numel() for p in self.parameters()) == ... == 129135360\" (state-spaces/mamba-130m-hf, 242 tensors)"},
	{"mamba-2.8b", 2_768_345_600, "\"Loading model state-spaces/mamba-2.8b / Number of parameters: 2768345600\"; parameter table \"mamba-2_8b-hf\"=\"2768345600\""},
	// FluxTransformer2DModel (model/flux.go).
	{"flux.1-dev-transformer", 11_901_408_320, "Hub black-forest-labs/FLUX.1-dev transformer safetensors total 11901408320 (model registry \"totalParams: 11901408320\"; unsloth/FLUX.1-dev-GGUF gguf total 11901408320)"},
	{"flux.1-schnell-transformer", 11_891_178_560, "model registry bf16Mirror(\"black-forest-labs/FLUX.1-schnell\", ... totalParams: 11891178560): no guidance embedder"},
	{"sdxl-text-encoder-2", 694_659_840, "pipeline component table \"text_encoder_2 ... 694659840\" (CLIPTextModelWithProjection, ViT-bigG); SDXL conditioning parameter_count 817720320 = 123060480 + 694659840"},
	{"flan-t5-base", 247_577_856, "keras-hub flan_t5_base preset \"params\": 247577856; \"247577856 - Number of FLAN T5 base parameters\""},
	{"t5-small", 60_506_624, "keras-hub T5-Small preset \"params\": 60506624"},
	{"t5-base", 222_903_552, "keras-hub T5-Base preset \"params\": 222903552"},
	{"t5-large", 737_668_096, "\"T5ForConditionalGeneration<all params:737668096>\""},
	{"whisper-small", 241_734_912, "\"sum(p.numel() for p in model.parameters()) # 241734912\" (WhisperForConditionalGeneration); encoder 88154112 + decoder 153580800"},
	{"whisper-large-v3", 1_543_490_560, "\"sum(p.numel() for p in m.parameters()) == 1543490560\""},
	{"resnet-50", 25_557_032, "torchvision resnet.py ResNet50_Weights meta \"num_params\": 25557032 (same modules as ResNetForImageClassification)"},
	{"resnet-18", 11_689_512, "torchvision resnet.py ResNet18_Weights meta \"num_params\": 11689512"},
	{"convnext-tiny-224", 28_589_128, "torchvision convnext.py ConvNeXt_Tiny_Weights meta \"num_params\": 28589128"},
	{"efficientnet-b0", 5_288_548, "torchvision efficientnet.py EfficientNet_B0_Weights meta \"num_params\": 5288548"},
	{"swin-tiny-patch4-window7-224", 28_288_354, "torchvision swin_transformer.py Swin_T_Weights meta \"num_params\": 28288354"},
	{"vit-base-patch16-224", 86_389_248, "\"vit-base-patch16-224-in21k-finetuned-cifar10: 86389248 parameters\" (AutoModel = ViTModel with pooler)"},
	{"vit-large-patch16-224", 304_351_232, "\"cifar100-vit-large: 304351232 parameters\" (AutoModel = ViTModel with pooler)"},
	{"clip-vit-large-patch14-336", 427_944_193, "keras-hub CLIP ViT-L/14 336 preset \"params\": 427944193"},
	{"siglip-so400m-vision", 428_225_600, "\"428225600 for the SigLIP vision encoder\" (SiglipVisionModel with its attention-pooling head)"},
	{"llava-1.5-7b", 7_063_427_072, "\"n = sum(p.numel() for p in model.parameters()) # 7063427072\" (LlavaForConditionalGeneration)"},
	{"deepseek-v2-lite", 15_706_484_224, "\"deepseek-ai/DeepSeek-V2-Lite | base | 15706484224\""},
	// DeepSeek-V3: the checkpoint's main-model tensors (MTP layer 61 and
	// FP8 scale_inv tensors excluded), "671026419200 ... 45395 tensors";
	// it includes the 58×256 fp32 e_score_correction_bias values, which
	// transformers' DeepseekV3TopkRouter registers as a buffer.
	{"deepseek-v3", 671_026_419_200, "checkpoint-header audit \"DSv3 exact main-model parameter count ... 671026419200\""},
	// The 16-channel AutoencoderKL of FLUX.1 (no quant_conv, no
	// post_quant_conv): a tensor comparison of a derived VAE with
	// FLUX.1-dev's, "244 tensors, 83819683 values", and a pipeline
	// component table, "vae","params":83819683.
	{"flux.1-dev-vae", 83_819_683, "\"boogu vs flux1: 244 tensors, 83819683 values\"; component table \"vae\",\"params\":83819683"},
	// The T5-XXL encoder (T5EncoderModel of google/t5-v1_1-xxl), FLUX.1's
	// text_encoder_2 and SD3's text_encoder_3, and SD3's CLIP-L with
	// projection: a module summary of stable-diffusion-3-medium-diffusers
	// ("text_encoder 123650304", "text_encoder_3 4762310656").
	{"flux.1-dev-text-encoder-2", 4_762_310_656, "SD3-medium module summary \"text_encoder_3 ... 4762310656\"; PixArt conditioning parameter_count == 4762310656"},
	{"sd3-medium-text-encoder", 123_650_304, "SD3-medium module summary \"text_encoder ... 123650304\""},
	// SD3-medium's MMDiT: 2,028,328,000 in a module summary of
	// stable-diffusion-3-medium-diffusers (sum of parameters(), TestSD3) plus the persistent pos_embed buffer the
	// checkpoint stores, 192²·1536 = 56,623,104 values.
	{"sd3-medium-transformer", 2_084_951_104, "SD3-medium module summary \"transformer ... 2028328000\" + pos_embed buffer 56,623,104"},
	// SD 2.1's text encoder (CLIPTextModel of OpenCLIP ViT-H, 23 of its
	// 24 layers), H=1024, I=4096: embeddings 49408·1024 + 77·1024 =
	// 50,672,640; per layer q/k/v/out 4·(1024²+1024) = 4,198,400, fc1
	// 1024·4096+4096, fc2 4096·1024+1024, two LayerNorms 4·1024: 12,596,224;
	// × 23 = 289,713,152; final LayerNorm 2,048. Total 340,387,840, the size of
	// the flat parameter buffer a compiled SD 2.1 pipeline loads.
	{"sd-2.1-text-encoder", 340_387_840, "a compiled SD 2.1 pipeline's flat text-encoder parameter buffer MemRef<float, 1> arg0_text_encoder({340387840})"},
	// gpt-oss (transformers v4.55.0 modeling_gpt_oss.py), H=2880, 64
	// query heads and 8 KV heads of 64, V=201088, experts of I=2880, all
	// projections biased. Per layer: q 2880·4096+4096 = 11,800,576;
	// k, v 2880·512+512 = 1,475,072 each; o 4096·2880+2880 = 11,799,360;
	// sinks 64 (attention 26,550,144); 2 norms 5,760; router E·2880+E;
	// one expert gate_up 2880·5760+5760 = 16,594,560 + down
	// 2880·2880+2880 = 8,297,280 = 24,891,840. Embed and lm_head
	// 201088·2880 = 579,133,440 each, final norm 2,880.
	// 20b: 24·(26,550,144 + 5,760 + 92,192 + 32·24,891,840) + 2·579,133,440
	// + 2,880 = 20,914,757,184; OpenAI's model card: 20.91B total; the
	// GGUF's general.parameter_count (Ollama's show) is 20914757184.
	{"gpt-oss-20b", 20_914_757_184, "GGUF general.parameter_count 20914757184 (Ollama show); model card 20.91B"},
	// 120b: 36·(26,550,144 + 5,760 + 368,768 + 128·24,891,840) +
	// 1,158,266,880 + 2,880 = 116,829,156,672; model card: 116.83B.
	{"gpt-oss-120b", 116_829_156_672, "GGUF general.parameter_count 116829156672 (Ollama show, llama.cpp n-params); model card 116.83B"},
}

// computedParams could not be confirmed against a published figure; they
// are computed from the Hugging Face module definitions, derived by hand:
var computedParams = []struct {
	name string
	want int64
	how  string
}{
	// SD3-medium's VAE: FLUX.1's architecture (latent_channels 16, no
	// quant convolutions), the same count.
	{"sd3-medium-vae", 83_819_683, "the FLUX.1 VAE's count: same block_out_channels, latent_channels 16, no quant convs"},
	// Jamba-v0.1 (JambaForCausalLM): the model card gives "52B total
	// parameters, 12B active" and the Hub 51.6B; the exact count is
	// transformers' own class at JambaConfig's defaults, which are
	// Jamba-v0.1's, on the meta device (testdata/oracle/ssm_params.json).
	{"jamba-v0.1", 51_570_323_328, "model card 52B (Hub 51.6B); JambaForCausalLM(JambaConfig()) sums 51570323328"},
	// Llama 4 Scout's text model (transformers v4.51.0
	// modeling_llama4.py), H=5120, 40 query and 8 KV heads of 128,
	// V=202048, 48 layers all MoE (interleave_moe_layer_step 1), 16
	// experts of I=8192 plus one shared MLP of 8192, no biases, weightless
	// L2 qk norm. Per layer: q, o 5120·5120 = 26,214,400 each; k, v
	// 5120·1024 = 5,242,880 each; router 16·5120 = 81,920; experts
	// 16·(5120·16384 + 8192·5120) = 2,013,265,920; shared 3·5120·8192 =
	// 125,829,120; norms 10,240: 2,202,101,760. 48 layers
	// 105,700,884,480 + embed and lm_head 2·202048·5120 = 2,068,971,520 +
	// norm 5,120 = 107,769,861,120. Meta's "109B total" adds the vision
	// encoder and projector (about 0.9B), which are not modelled.
	{"llama-4-scout-17b-16e-text", 107_769_861_120, "recount; a design note states the checkpoint's 108,641,793,536 as 107,769,861,120 text + 871,932,416 vision"},
	// Maverick's text model: 128 experts in every second layer
	// (interleave_moe_layer_step 2: layers 1, 3, ..., 47), dense layers
	// of intermediate_size_mlp 16384. 48·(62,914,560 + 10,240) +
	// 24·(655,360 + 128·125,829,120 + 125,829,120) + 24·3·5120·16384 +
	// 2,068,971,520 + 5,120 = 400,711,848,960: Meta's "400B total".
	{"llama-4-maverick-17b-128e-text", 400_711_848_960, "recount; Meta: 400B total"},
	// falcon-7b: V=65024, H=4544, 32 layers, 71 heads of 64, multi-query:
	// embed 65024·4544 = 295,469,056; per layer qkv (4544+2·64)·4544 =
	// 21,229,568, dense 4544² = 20,647,936, mlp 2·4·4544² = 165,183,488,
	// input_layernorm 2·4544 = 9,088 → 207,070,080 × 32 = 6,626,242,560;
	// ln_f 9,088; lm_head tied. Total 6,921,720,704.
	{"falcon-7b", 6_921_720_704, "hand derivation above"},
	// llava-1.5-13b: CLIP ViT-L/14-336 303,507,456 + projector
	// (1024·5120+5120 + 5120²+5120 = 31,467,520) + Llama-2-13B with 32064
	// rows (13,015,864,320 + 2·64·5120 = 13,016,519,680) = 13,351,494,656.
	{"llava-1.5-13b", 13_351_494_656, "hand derivation above"},
}

func TestPublishedParams(t *testing.T) {
	t.Parallel()
	for _, tc := range publishedParams {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, ok := Lookup(tc.name)
			require.True(t, ok, "Lookup(%q)", tc.name)
			if got := s.Params(); got != tc.want {
				t.Errorf("Lookup(%q).Params() = %d, want %d (%s)", tc.name, got, tc.want, tc.source)
			}
		})
	}
	for _, tc := range computedParams {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, ok := Lookup(tc.name)
			require.True(t, ok)
			if got := s.Params(); got != tc.want {
				t.Errorf("Lookup(%q).Params() = %d, want %d (%s)", tc.name, got, tc.want, tc.how)
			}
		})
	}
}

// TestCatalogCovered checks that every catalog entry has a reference
// count in one of the two tables.
func TestCatalogCovered(t *testing.T) {
	t.Parallel()
	known := map[string]bool{}
	for _, tc := range publishedParams {
		known[tc.name] = true
	}
	for _, tc := range computedParams {
		known[tc.name] = true
	}
	cat := Catalog()
	require.GreaterOrEqual(t, len(cat), 30)
	for _, s := range cat {
		assert.True(t, known[s.Name], "catalog entry %q has no reference parameter count", s.Name)
		_, ok := CatalogSource(s.Name)
		assert.True(t, ok, "catalog entry %q has no source", s.Name)
	}
}

func TestTensorsSumToParams(t *testing.T) {
	t.Parallel()
	for _, s := range Catalog() {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			var sum int64
			seen := map[string]bool{}
			for _, tn := range s.Tensors() {
				n, err := tn.Elems()
				require.NoError(t, err)
				sum += n
				if seen[tn.Name] {
					t.Errorf("duplicate tensor %s", tn.Name)
				}
				seen[tn.Name] = true
			}
			assert.Equal(t, s.Params(), sum)
			groups, err := s.Groups()
			require.NoError(t, err)
			var gsum int64
			for _, g := range groups {
				gsum += g.Params
			}
			assert.Equal(t, sum, gsum, "groups partition the inventory")
			wb, err := s.WeightsBytes()
			require.NoError(t, err)
			assert.Positive(t, int64(wb))
		})
	}
}

func find(t *testing.T, s Spec, name string) gpumem.Tensor {
	t.Helper()
	for _, tn := range s.Tensors() {
		if tn.Name == name {
			return tn
		}
	}
	t.Fatalf("%s has no tensor %s", s.Name, name)
	return gpumem.Tensor{}
}

func has(s Spec, name string) bool {
	for _, tn := range s.Tensors() {
		if tn.Name == name {
			return true
		}
	}
	return false
}

// TestStructure checks the facts the counts rest on, one per family.
func TestStructure(t *testing.T) {
	t.Parallel()
	get := func(name string) Spec {
		s, ok := Lookup(name)
		require.True(t, ok, name)
		return s
	}
	tests := []struct {
		model, tensor string
		shape         []int64
	}{
		// GQA: k/v sized with KV heads (Llama-3-8B: 8×128 = 1024 rows).
		{"llama-3-8b", "model.layers.0.self_attn.k_proj.weight", []int64{1024, 4096}},
		// Gemma-7B: 16 heads × 256 = 4096 ≠ hidden 3072.
		{"gemma-7b", "model.layers.0.self_attn.q_proj.weight", []int64{4096, 3072}},
		{"gemma-7b", "model.layers.27.self_attn.o_proj.weight", []int64{3072, 4096}},
		// Qwen2: q/k/v biases.
		{"qwen2-7b", "model.layers.0.self_attn.k_proj.bias", []int64{512}},
		// GPT-2 Conv1D stores [in, out].
		{"gpt2", "transformer.h.0.attn.c_attn.weight", []int64{768, 2304}},
		{"gpt2", "transformer.wpe.weight", []int64{1024, 768}},
		// OPT: positions table with 2 extra rows.
		{"opt-125m", "model.decoder.embed_positions.weight", []int64{2050, 768}},
		{"opt-350m", "model.decoder.project_in.weight", []int64{1024, 512}},
		// BERT: token types.
		{"bert-base", "bert.embeddings.token_type_embeddings.weight", []int64{2, 768}},
		// T5: relative bias in block 0.
		{"t5-base", "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", []int64{32, 12}},
		// Whisper conv stem.
		{"whisper-small", "model.encoder.conv1.weight", []int64{768, 80, 3}},
		{"whisper-small", "model.encoder.embed_positions.weight", []int64{1500, 768}},
		// ViT patches + class token: (224/16)²+1 = 197.
		{"vit-base-patch16-224", "vit.embeddings.position_embeddings", []int64{1, 197, 768}},
		{"clip-vit-large-patch14-336", "vision_model.embeddings.position_embedding.weight", []int64{577, 1024}},
		// LLaVA projector.
		{"llava-1.5-7b", "multi_modal_projector.linear_1.weight", []int64{4096, 1024}},
		{"llava-1.5-7b", "language_model.lm_head.weight", []int64{32064, 4096}},
		// DeepSeek-V3 MLA.
		{"deepseek-v3", "model.layers.0.self_attn.q_a_proj.weight", []int64{1536, 7168}},
		{"deepseek-v3", "model.layers.0.self_attn.q_b_proj.weight", []int64{128 * 192, 1536}},
		{"deepseek-v3", "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", []int64{576, 7168}},
		{"deepseek-v3", "model.layers.0.self_attn.kv_b_proj.weight", []int64{128 * 256, 512}},
		{"deepseek-v3", "model.layers.2.mlp.down_proj.weight", []int64{7168, 18432}},
		{"deepseek-v3", "model.layers.3.mlp.experts.255.down_proj.weight", []int64{7168, 2048}},
		{"deepseek-v3", "model.layers.3.mlp.shared_experts.up_proj.weight", []int64{2048, 7168}},
		{"deepseek-v2-lite", "model.layers.0.self_attn.q_proj.weight", []int64{16 * 192, 2048}},
		{"mixtral-8x7b", "model.layers.31.block_sparse_moe.experts.7.w2.weight", []int64{4096, 14336}},
		{"gpt-oss-20b", "model.layers.23.mlp.experts.gate_up_proj", []int64{32, 2880, 5760}},
		{"bloom-560m", "transformer.word_embeddings_layernorm.bias", []int64{1024}},
		{"qwen2-vl-7b", "visual.patch_embed.proj.weight", []int64{1280, 3, 2, 14, 14}},
		{"qwen2-vl-7b", "visual.blocks.31.mlp.fc1.bias", []int64{5120}},
		{"qwen2.5-vl-7b", "visual.blocks.0.mlp.gate_proj.weight", []int64{3420, 1280}},
		{"qwen2.5-vl-7b", "visual.merger.mlp.2.weight", []int64{3584, 5120}},
		{"qwen2.5-vl-7b", "model.layers.27.self_attn.k_proj.bias", []int64{512}},
		{"bloom-560m", "transformer.h.23.self_attention.query_key_value.bias", []int64{3072}},
		{"bloom-7b1", "transformer.h.0.mlp.dense_4h_to_h.weight", []int64{4096, 16384}},
		{"llama-4-scout-17b-16e-text", "model.layers.47.feed_forward.experts.gate_up_proj", []int64{16, 5120, 16384}},
		{"llama-4-scout-17b-16e-text", "model.layers.0.feed_forward.shared_expert.down_proj.weight", []int64{5120, 8192}},
		{"llama-4-maverick-17b-128e-text", "model.layers.0.feed_forward.down_proj.weight", []int64{5120, 16384}},
		{"llama-4-maverick-17b-128e-text", "model.layers.47.feed_forward.experts.down_proj", []int64{128, 8192, 5120}},
		{"gpt-oss-20b", "model.layers.23.mlp.experts.down_proj_bias", []int64{32, 2880}},
		{"gpt-oss-120b", "model.layers.0.self_attn.sinks", []int64{64}},
		{"gpt-oss-120b", "model.layers.0.mlp.router.bias", []int64{128}},
		{"qwen1.5-moe-a2.7b", "model.layers.0.mlp.shared_expert_gate.weight", []int64{1, 2048}},
		{"phi-3-mini", "model.layers.0.self_attn.qkv_proj.weight", []int64{9216, 3072}},
		{"falcon-7b", "transformer.h.0.self_attention.query_key_value.weight", []int64{4672, 4544}},
		// CogVideoX-5b: 48×64 = 3072 wide, LayerNormZero from the 512 time embedding.
		{"cogvideox-5b-transformer", "patch_embed.proj.weight", []int64{3072, 16, 2, 2}},
		{"cogvideox-5b-transformer", "transformer_blocks.41.norm1.linear.weight", []int64{18432, 512}},
		{"cogvideox-5b-transformer", "transformer_blocks.0.attn1.norm_q.weight", []int64{64}},
		{"cogvideox-5b-transformer", "proj_out.weight", []int64{64, 3072}},
		{"cogvideox-5b-text-encoder", "encoder.block.23.layer.1.DenseReluDense.wi_1.weight", []int64{10240, 4096}},
	}
	for _, tc := range tests {
		t.Run(tc.model+"/"+tc.tensor, func(t *testing.T) {
			t.Parallel()
			got := find(t, get(tc.model), tc.tensor)
			assert.Equal(t, tc.shape, got.Shape)
		})
	}
	t.Run("tied embeddings counted once", func(t *testing.T) {
		t.Parallel()
		assert.False(t, has(get("gemma-7b"), "lm_head.weight"))
		assert.False(t, has(get("llama-3.2-1b"), "lm_head.weight"))
		assert.True(t, has(get("llama-3-8b"), "lm_head.weight"))
		assert.False(t, has(get("t5-base"), "lm_head.weight"))
	})
	t.Run("t5 encoder-only has no decoder", func(t *testing.T) {
		t.Parallel()
		s := get("cogvideox-5b-text-encoder")
		assert.True(t, s.EncoderOnly)
		for _, tn := range s.Tensors() {
			assert.False(t, strings.HasPrefix(tn.Name, "decoder.") || tn.Name == "lm_head.weight", tn.Name)
		}
	})
	t.Run("t5 relative bias only in block 0", func(t *testing.T) {
		t.Parallel()
		assert.False(t, has(get("t5-base"), "encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"))
		assert.True(t, has(get("t5-base"), "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"))
	})
	t.Run("deepseek dense first k and fp32 router bias", func(t *testing.T) {
		t.Parallel()
		s := get("deepseek-v3")
		assert.False(t, has(s, "model.layers.2.mlp.gate.weight"))
		b := find(t, s, "model.layers.60.mlp.gate.e_score_correction_bias")
		assert.Equal(t, gpumem.FP32, b.DType)
		assert.Equal(t, int64(61), s.Layers)
	})
	t.Run("IsMoELayer", func(t *testing.T) {
		t.Parallel()
		ds := get("deepseek-v3")
		assert.False(t, ds.IsMoELayer(2))
		assert.True(t, ds.IsMoELayer(3))
		assert.False(t, ds.IsMoELayer(61))
		assert.True(t, get("mixtral-8x7b").IsMoELayer(0))
		assert.False(t, get("llama-2-7b").IsMoELayer(0))
	})
	t.Run("llama rmsnorm has no bias, gpt2 layernorm has", func(t *testing.T) {
		t.Parallel()
		assert.False(t, has(get("llama-2-7b"), "model.norm.bias"))
		assert.True(t, has(get("gpt2"), "transformer.ln_f.bias"))
	})
}

func TestActiveParams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		want int64
		src  string
	}{
		// "count_params(QWEN3_30B_A3B) == (30532122624, 3353032704)".
		{"qwen3-30b-a3b", 3_353_032_704, "published (total, active) pair"},
		// ds_active = 37,552,282,624 (a recount of config.json) excludes
		// the 14,848-value router bias buffer that Params includes.
		{"deepseek-v3", 37_552_282_624 + 58*256, "published active + e_score_correction_bias"},
		{"llama-2-7b", 6_738_415_616, "dense: equals Params"},
		// 4 attention and 28 Mamba layers, 16 MoE layers of 16 experts
		// with 2 active: the model card's "12B active parameters".
		{"jamba-v0.1", 12_110_311_296, "model card 12B active; transformers' class on the meta device"},
		// gpt-oss: 4 of the experts active. 20b: 24·(26,550,144 + 5,760
		// + 92,192 + 4·24,891,840) + 2·579,133,440 + 2,880 =
		// 4,187,440,704. OpenAI's model card counts 3.61B active, which
		// leaves out the input embedding (a lookup, no FLOPs):
		// 4,187,440,704 - 579,133,440 = 3,608,307,264 = 3.61B.
		{"gpt-oss-20b", 3_608_307_264 + 579_133_440, "model card 3.61B active + embed_tokens"},
		// 120b: 36·(26,550,144 + 5,760 + 368,768 + 4·24,891,840) +
		// 1,158,266,880 + 2,880 = 5,711,982,912; less the embedding
		// 5,132,849,472 = the model card's 5.13B.
		{"gpt-oss-120b", 5_132_849_472 + 579_133_440, "model card 5.13B active + embed_tokens"},
		// Scout: 48·(62,914,560 + 81,920 + 1·125,829,120 + 125,829,120 +
		// 10,240) + 2,068,971,520 + 5,120 = 17,172,894,720: Meta's "17B
		// active parameters".
		{"llama-4-scout-17b-16e-text", 17_172_894_720, "Meta: 17B active"},
		// Maverick: 3,020,390,400 + 24·(655,360 + 2·125,829,120) +
		// 24·251,658,240 + 2,068,976,640 = 17,184,691,200 (Meta: 17B).
		{"llama-4-maverick-17b-128e-text", 17_184_691_200, "Meta: 17B active"},
	}
	for _, tc := range tests {
		s, _ := Lookup(tc.name)
		if got := s.ActiveParams(); got != tc.want {
			t.Errorf("Lookup(%q).ActiveParams() = %d, want %d (%s)", tc.name, got, tc.want, tc.src)
		}
	}
	assert.Zero(t, Spec{}.ActiveParams())
}

func TestBytes(t *testing.T) {
	t.Parallel()
	s, _ := Lookup("llama-2-7b")
	b, err := s.Bytes(gpumem.BF16)
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(2*6_738_415_616), b)
	w, err := s.WeightsBytes() // config torch_dtype float16
	require.NoError(t, err)
	assert.Equal(t, b, w)
	m, err := s.BytesByDType()
	require.NoError(t, err)
	assert.Equal(t, map[gpumem.DType]gpumem.Bytes{gpumem.FP16: b}, m)
	_, err = s.Bytes(gpumem.Invalid)
	require.ErrorIs(t, err, gpumem.ErrInvalid)
}

func TestValidate(t *testing.T) {
	t.Parallel()
	base, _ := Lookup("llama-2-7b")
	tests := []struct {
		name  string
		edit  func(*Spec)
		field string
		kind  error
	}{
		{"zero value", func(s *Spec) { *s = Spec{} }, "Spec.Family", gpumem.ErrInvalid},
		{"no dtype", func(s *Spec) { s.DType = gpumem.Invalid }, "Spec.DType", gpumem.ErrInvalid},
		{"negative hidden", func(s *Spec) { s.Hidden = -1 }, "Spec.Hidden", gpumem.ErrInvalid},
		{"huge hidden", func(s *Spec) { s.Hidden = 1 << 50 }, "Spec.Hidden", gpumem.ErrRange},
		{"kv > heads", func(s *Spec) { s.KVHeads = 64 }, "Spec.KVHeads", gpumem.ErrInvalid},
		{"kv not dividing", func(s *Spec) { s.KVHeads = 5 }, "Spec.KVHeads", gpumem.ErrInvalid},
		{"no vocab", func(s *Spec) { s.Vocab = 0 }, "Spec.Vocab", gpumem.ErrInvalid},
		{"too many layers", func(s *Spec) { s.Layers = 1 << 20 }, "Spec.Layers", gpumem.ErrRange},
		{"experts without active", func(s *Spec) { s.MoE = MoE{Experts: 8, Intermediate: 10} }, "Spec.MoE.Active", gpumem.ErrInvalid},
		{"too many tensors", func(s *Spec) {
			s.Family = "mixtral"
			s.MoE = MoE{Experts: 1 << 20, Active: 2, Intermediate: 8}
		}, "Spec", gpumem.ErrRange},
		{"overflowing product", func(s *Spec) { s.Hidden, s.Vocab = 1<<40, 1<<40 }, "Spec", gpumem.ErrRange},
		{"head product overflow", func(s *Spec) { s.Heads, s.KVHeads, s.HeadDim = 1<<30, 1<<30, 1<<30 }, "Spec.HeadDim", gpumem.ErrRange},
		{"layer types length", func(s *Spec) { s.LayerTypes = []string{"full_attention"} }, "Spec.LayerTypes", gpumem.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := base
			tc.edit(&s)
			err := s.Validate()
			require.ErrorIs(t, err, tc.kind)
			var fe *gpumem.FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			assert.Equal(t, tc.field, fe.Field)
			assert.Zero(t, s.Params())
			assert.Nil(t, s.Tensors())
		})
	}
}

// TestSpecJSON: a Spec is a value a scheduler can store: it marshals to
// JSON and reads back equal.
func TestSpecJSON(t *testing.T) {
	t.Parallel()
	for _, s := range Catalog() {
		data, err := json.Marshal(s)
		require.NoError(t, err, s.Name)
		var back Spec
		require.NoError(t, json.Unmarshal(data, &back), s.Name)
		if diff := cmp.Diff(s, back); diff != "" {
			t.Errorf("%s: JSON round trip (-want +got):\n%s", s.Name, diff)
		}
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	s, ok := Lookup("meta-llama/Llama-2-7b-hf")
	require.True(t, ok)
	assert.Equal(t, "llama-2-7b", s.Name)
	s, ok = Lookup("  Mixtral-8x7B ")
	require.True(t, ok)
	assert.Equal(t, int64(8), s.MoE.Experts)
	for alias, key := range map[string]string{"vit-large": "vit-large-patch16-224", "clip-vit-large-336": "clip-vit-large-patch14-336",
		"llama-2-7b-hf": "llama-2-7b", "BERT-base-uncased": "bert-base", "cogvideox-5b": "cogvideox-5b-transformer"} {
		s, ok := Lookup(alias)
		require.True(t, ok, alias)
		assert.Equal(t, key, s.Name)
	}
	for _, bad := range []string{"", "nope", "../configs/gpt2", "configs/gpt2", `a\b`} {
		_, ok := Lookup(bad)
		assert.False(t, ok, "Lookup(%q)", bad)
	}
	llava, _ := Lookup("llava-1.5-7b")
	assert.Equal(t, int64(32), llava.LM().Layers)
	assert.Equal(t, int64(576), llava.Vision.Image.Patches())
}

func TestComponent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		part, group string
		layer       int
	}{
		{"model.layers.3.mlp.up_proj.weight", "", "layer", 3},
		{"model.embed_tokens.weight", "", "embeddings", -1},
		{"lm_head.weight", "", "head", -1},
		{"model.norm.weight", "", "head", -1},
		{"vision_tower.vision_model.encoder.layers.23.mlp.fc1.weight", "vision", "layer", 23},
		{"multi_modal_projector.linear_2.bias", "projector", "projector", -1},
		{"language_model.model.layers.0.self_attn.q_proj.weight", "language", "layer", 0},
		{"decoder.block.11.layer.2.DenseReluDense.wo.weight", "decoder", "layer", 11},
		{"transformer.h.7.ln_1.weight", "", "layer", 7},
		{"blk.12.ffn_up_exps.weight", "", "layer", 12},
		{"token_embd.weight", "", "embeddings", -1},
	}
	for _, tc := range tests {
		part, group, layer := Component(tc.name)
		if part != tc.part || group != tc.group || layer != tc.layer {
			t.Errorf("Component(%q) = %q, %q, %d, want %q, %q, %d", tc.name, part, group, layer, tc.part, tc.group, tc.layer)
		}
	}
	assert.True(t, IsExpert("model.layers.3.mlp.experts.5.up_proj.weight"))
	assert.True(t, IsExpert("blk.3.ffn_up_exps.weight"))
	assert.False(t, IsExpert("model.layers.3.mlp.shared_experts.up_proj.weight"))
}

func TestGroupsDeepSeek(t *testing.T) {
	t.Parallel()
	s, _ := Lookup("deepseek-v3")
	groups, err := s.Groups()
	require.NoError(t, err)
	var layers int
	var experts int64
	for _, g := range groups {
		if g.Name == "layer" {
			layers++
		}
		experts += g.Experts
	}
	assert.Equal(t, 61, layers)
	// 58 MoE layers × 256 experts × 3 × 7168 × 2048.
	assert.Equal(t, int64(58*256*3*7168*2048), experts)
	assert.True(t, strings.HasPrefix(groups[0].Tensors[0].Name, "model.embed_tokens"))
}

func BenchmarkParams(b *testing.B) {
	for _, name := range []string{"llama-3-8b", "deepseek-v3"} {
		s, _ := Lookup(name)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if s.Params() == 0 {
					b.Fatal("zero")
				}
			}
		})
	}
}

// TestDocsCountPublishedParams holds the documentation's claim to the
// table above: the package doc, the module doc and the README each say
// how many published parameter counts are matched exactly.
func TestDocsCountPublishedParams(t *testing.T) {
	want := fmt.Sprintf("%d published counts", len(publishedParams))
	for _, file := range []string{"doc.go", "../doc.go", "../README.md"} {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		text := strings.Join(strings.Fields(strings.ReplaceAll(string(b), "//", " ")), " ")
		require.Contains(t, text, want, "%s must say %q (len(publishedParams))", file, want)
	}
}
