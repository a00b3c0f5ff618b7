package request

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem/model"
)

// Flags are the flags that describe a job, shared by estimate and
// (later) plan.
type Flags struct {
	ModelFlags
	Train, Infer      bool
	Generate          int
	Batch, Seq, Accum int
	Precision         string
	Opt, Attn, Ckpt   string
	SSMKernel         string
	OptImpl           string  // --optimizer-impl
	Momentum          float64 // --momentum
	Nesterov          bool    // --nesterov
	InBwd             bool    // --optimizer-in-backward
	Frozen            bool    // --frozen
	OffloadActs       bool    // --offload-activations
	LoRARank          int64
	LoRATargets       string
	QLoRA             bool
	LoRACode          string  // --lora-code: peft, torchtune or litgpt
	LoRADropout       float64 // --lora-dropout
	LoadOnly          bool    // --load: a Load job, the model loaded, nothing run
	Quant             string  // --quant: int8, nf4, fp4, gptq, awq or fp8
	GroupSize         int64   // --group-size, with gptq and awq
	KVDType           string  // --kv-dtype
	KVBlock           int     // --kv-block
	GPU, Memory       string
	Images            int
	Dropout           bool
	Head              string // --head: the task head, overriding the config's architectures
	Labels            int    // --labels: num_labels of a classification head
	ImageSize         int    // --image-size: a vision backbone's image side in pixels
	Loss              string // --loss: full, chunked[:N], liger or cce
	LogitsToKeep      int    // --logits-to-keep
	KeepLogits        bool   // --keep-logits
	EvalLoss          bool   // --eval
	Backend           string // --backend: cuda (default) or cpu
	Compile           string // --compile: none, layers, loss, layers+loss, model
	GPUs, ZeRO        int
	Layout            LayoutFlags
	CUDA              string
	Lazy              OptBool
	Llama             LlamaFlags // --runtime and llama.cpp's flags
	VLLM              VLLMFlags  // vLLM's flags (--runtime vllm)
	SGLang            SGLangFlags

	// profile is --profile: an overhead profile file written by gpumem
	// calibrate, applied as the job's Overhead.
	Profile string
	// ProfileData is a profile given inline (serve's "profile" field),
	// applied like --profile's file.
	ProfileData *Profile
}

// OptBool is a boolean flag that remembers whether it was given:
// --lazy-loading, --lazy-loading=false, or neither (the default).
type OptBool struct{ Given, Value bool }

func (b *OptBool) String() string {
	if b == nil || !b.Given {
		return ""
	}
	return strconv.FormatBool(b.Value)
}

func (b *OptBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	b.Given, b.Value = true, v
	return nil
}

func (b *OptBool) IsBoolFlag() bool { return true }

func (f *Flags) Register(fs *flag.FlagSet) {
	f.ModelFlags.Register(fs)
	fs.BoolVar(&f.Train, "train", false, "a training job (forward, backward, optimizer step)")
	fs.BoolVar(&f.Infer, "infer", false, "an inference job (one forward pass without gradients)")
	fs.IntVar(&f.Generate, "generate", 0, "with --infer: generate N tokens per sequence with a KV cache")
	fs.IntVar(&f.Batch, "batch", 1, "micro-batch size in sequences")
	fs.IntVar(&f.Seq, "seq", 2048, "sequence length in tokens (the prompt with --generate)")
	fs.IntVar(&f.Accum, "grad-accum", 1, "gradient accumulation steps")
	fs.StringVar(&f.Precision, "precision", "", "fp32, fp16-mixed, bf16-mixed, fp16-master, bf16-master, bf16, fp16 or fp8 (default bf16-mixed to train, bf16 to infer)")
	fs.StringVar(&f.Opt, "optimizer", "adamw", "adamw, adam, adamw8bit, paged_adamw_8bit, adafactor, sgd, lion, ... (Hugging Face names); none: forward and backward only, the gradients kept, no state and no step")
	fs.StringVar(&f.OptImpl, "optimizer-impl", "", "with a torch.optim optimizer (adam, adamw, sgd, adagrad, rmsprop): foreach (PyTorch 2's default on CUDA), for-loop (foreach=False) or fused (fused=True); sets the step's temporaries")
	fs.Float64Var(&f.Momentum, "momentum", 0, "with --optimizer sgd or rmsprop: the momentum factor; above 0 keeps a momentum_buffer per parameter")
	fs.BoolVar(&f.Nesterov, "nesterov", false, "with --optimizer sgd and --momentum: Nesterov momentum (nesterov=True)")
	fs.BoolVar(&f.InBwd, "optimizer-in-backward", false, "step each parameter inside backward as soon as its gradient is ready, then free the gradient (torchtune's optimizer_in_bwd); not with --grad-accum")
	fs.BoolVar(&f.Frozen, "frozen", false, "with --train: every parameter frozen, backward to the input only (an adversarial attack on the input): activations saved, no gradients, no optimizer")
	fs.StringVar(&f.Attn, "attention", "sdpa", "eager, sdpa or flash")
	fs.StringVar(&f.SSMKernel, "ssm-kernel", "fused", "a Mamba, Mamba-2 or Jamba model's state-space mixer: fused (mamba_ssm's CUDA kernels) or sequential (transformers' code without them)")
	fs.StringVar(&f.Ckpt, "checkpointing", "none", "none, selective, full or offload")
	fs.BoolVar(&f.OffloadActs, "offload-activations", false, "with --train: torchtune's enable_activation_offloading: with --checkpointing full the block inputs move to pinned host memory (5 in flight stay on the GPU); with none every saved tensor of the blocks, as --checkpointing offload")
	fs.Int64Var(&f.LoRARank, "lora-rank", 0, "train LoRA adapters of this rank (base frozen)")
	fs.StringVar(&f.LoRATargets, "lora-targets", "", "with --lora-rank or --qlora: PEFT's target_modules, comma-separated (q_proj,v_proj; all-linear); default: PEFT's for the family")
	fs.BoolVar(&f.QLoRA, "qlora", false, "store the base linear weights in NF4 with double quantization (QLoRA); the other frozen weights in the compute dtype")
	fs.StringVar(&f.LoRACode, "lora-code", "peft", "with --lora-rank or --qlora: the model code the adapters train in: peft (PEFT's LoRA on transformers' code) or torchtune (its LoRALinear), whose frozen base saves nothing for its weights; litgpt (litgpt's own GPT and LoRAQKVLinear, not modelled op by op: a trained base's activations, which litgpt's published runs come within 3% under to 9% over) (budget.Job.LoRACode)")
	fs.Float64Var(&f.LoRADropout, "lora-dropout", 0, "with --lora-rank or --qlora: the adapters' lora_dropout (PEFT, torchtune); above 0 each adapter on the frozen base saves a dropout mask and a dropped copy of its input (budget.Job.LoRADropout)")
	fs.BoolVar(&f.LoadOnly, "load", false, "a load-only job: the weights, buffers and CUDA context, nothing run (instead of --train or --infer)")
	fs.StringVar(&f.Quant, "quant", "", "store the base linear weights quantized: int8 (bitsandbytes LLM.int8), nf4, fp4 (bitsandbytes 4-bit), gptq, awq (4-bit) or fp8 (128×128 block scales); training needs --lora-rank")
	fs.Int64Var(&f.GroupSize, "group-size", 0, "with --quant gptq or awq: input features per scale (default 128; -1: one group per row)")
	fs.StringVar(&f.KVDType, "kv-dtype", "", "with --generate: the KV cache's dtype (fp8, fp8_e5m2, int8, Q8_0, Q4_0, ...; default the compute dtype)")
	fs.IntVar(&f.KVBlock, "kv-block", 0, "with --generate: a paged KV cache of blocks of N tokens (vLLM --block-size; default contiguous)")
	fs.IntVar(&f.Images, "images", 0, "images per sequence (multimodal models)")
	fs.BoolVar(&f.Dropout, "dropout", false, "with --train: the model trains with dropout > 0 (BERT, T5, OPT, GPT-2 by their configs); CUDA keeps a 1-byte mask per dropped element")
	fs.StringVar(&f.Head, "head", "", "the task head, overriding the class the config's architectures name: "+strings.Join(model.HeadNames(), ", "))
	fs.IntVar(&f.Labels, "labels", 0, "with a seq-cls, token-cls or image-cls head: the classifier's num_labels (default: the config's, else 2)")
	fs.IntVar(&f.ImageSize, "image-size", 0, "a vision backbone's (resnet, convnext, swin, efficientnet) square image side in pixels, with --batch images per step (default: the config's image_size, 224)")
	fs.StringVar(&f.Loss, "loss", "full", "with --train: the LM head's loss: full (Hugging Face: every logit, upcast to fp32), chunked or chunked:N (torchtune's chunked output, 8 chunks by default), liger (Liger-Kernel's fused linear cross entropy) or cce (Apple's cut cross-entropy)")
	fs.BoolVar(&f.KeepLogits, "keep-logits", false, "with --train: the loop holds the model's output (its batch×seq×vocab logits) through backward and the optimizer step, as `logits, loss = model(x, y)` does (litgpt); the default is Hugging Face's Trainer, whose compute_loss returns the loss alone, so the logits are freed before backward")
	fs.BoolVar(&f.EvalLoss, "eval", false, "with --infer and no --generate: an evaluation pass, labels given, the loss computed under torch.no_grad (Trainer.evaluate): the loss's fp32 upcast and log-softmax beside the logits")
	fs.StringVar(&f.Compile, "compile", "none", "with --train: what torch.compile compiles: layers (each decoder layer, as torchtune's compile_model), loss (torchtune's compile_loss), layers+loss (torchtune's compile=True) or model (the whole model with its loss); compiled layers save the min-cut partitioner's set (Llama-style decoders, sdpa or flash)")
	fs.StringVar(&f.Backend, "backend", "cuda", "the device whose kernels run the job: cuda, or cpu (PyTorch's CPU kernels: dropout saves its noise in the input's dtype, SDPA falls back to its math kernel under dropout and grouped-query heads; go doc ./model CPU)")
	fs.IntVar(&f.LogitsToKeep, "logits-to-keep", 0, "with --infer and no --generate: project only the last N positions of each sequence to logits (transformers' logits_to_keep); 0: every position")
	fs.IntVar(&f.GPUs, "gpus", 1, "GPUs per node (data-parallel ranks, with --zero the ranks state is sharded over); the estimate is per GPU")
	fs.IntVar(&f.ZeRO, "zero", 0, "DeepSpeed ZeRO stage 0-3 (see --fsdp for PyTorch FSDP)")
	f.Layout.Register(fs)
	fs.StringVar(&f.GPU, "gpu", "", "check the fit on this GPU (e.g. h100, a100-80gb, \"NVIDIA GeForce RTX 4090\"; see gpumem devices)")
	fs.StringVar(&f.Memory, "memory", "", "check the fit in this much free memory (e.g. 80GiB, 24GB)")
	f.Llama.Register(fs)
	f.VLLM.Register(fs)
	f.SGLang.Register(fs)
	fs.StringVar(&f.CUDA, "cuda", "", "the CUDA version of the PyTorch build (torch.version.cuda: 12.1, or the wheel's cu121), which sizes the CUDA context (default: a current CUDA 12)")
	fs.Var(&f.Lazy, "lazy-loading", "CUDA lazy module loading (CUDA_MODULE_LOADING=LAZY); --lazy-loading=false for EAGER, whose context holds every kernel (default: lazy from CUDA 11.7, eager before)")
	fs.StringVar(&f.Profile, "profile", "", "apply the overhead `FILE` gpumem calibrate wrote from your GPUs' measurements (CUDA context, fragmentation, cuBLAS workspace) instead of the defaults")
}

// MaxCount is the largest --gpus, --nodes, --tp, --pp, --vpp, --cp and
// --ep LayoutFlags.layout accepts.
const MaxCount = 1 << 16

// CheckGiven refuses, before any work, flags given on the command line
// that cannot change the answer for the mode asked for (an optimizer for
// an inference job), and layout counts out of range. A flag set to the
// value that does nothing in every mode (--dropout=false, --grad-accum 1,
// --generate 0, --zero 0, --checkpointing none) passes. gpumem serve
// does not call it: a request's fields are not "given" flags.
func (f *Flags) CheckGiven(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	for _, c := range []struct {
		name string
		v    int
	}{{"gpus", f.GPUs}, {"nodes", f.Layout.Nodes}, {"tp", f.Layout.TP}, {"pp", f.Layout.PP}, {"vpp", f.Layout.VPP},
		{"cp", f.Layout.CP}, {"ep", f.Layout.EP}} {
		if given[c.name] && (c.v < 1 || c.v > MaxCount) {
			return fmt.Errorf("%w: --%s %d: want 1 to %d", ErrUsage, c.name, c.v, MaxCount)
		}
	}
	if f.LoadOnly {
		// A load-only job runs nothing: the flags of a run do not apply.
		for _, name := range []string{"generate", "batch", "seq", "grad-accum", "optimizer", "checkpointing", "dropout",
			"images", "image-size", "attention", "kv-dtype", "kv-block"} {
			if given[name] {
				return fmt.Errorf("%w: --%s: a load-only job runs nothing (leave --%s out, or give --train or --infer instead of --load)", ErrUsage, name, name)
			}
		}
		return nil
	}
	if f.Train == f.Infer {
		return nil // JobFor asks for one of them
	}
	if f.Train {
		if given["generate"] && f.Generate != 0 {
			return fmt.Errorf("%w: --generate %d: a training job generates no tokens (give --infer, or leave --generate out)", ErrUsage, f.Generate)
		}
		if f.Frozen && given["optimizer"] {
			return fmt.Errorf("%w: --frozen: every parameter is frozen, so --optimizer %s has nothing to step (leave one out)", ErrUsage, f.Opt)
		}
		if given["logits-to-keep"] && f.LogitsToKeep != 0 {
			return fmt.Errorf("%w: --logits-to-keep %d: a training step's loss needs the logits of every position (give --infer, or leave --logits-to-keep out)", ErrUsage, f.LogitsToKeep)
		}
		if f.EvalLoss {
			return fmt.Errorf("%w: --eval: an evaluation pass is an inference job's, its loss under no_grad (give --infer instead of --train)", ErrUsage)
		}
		return nil
	}
	const leave = "give --train, or leave %s out"
	for _, name := range []string{"optimizer-impl", "momentum", "nesterov", "optimizer-in-backward", "frozen", "offload-activations", "keep-logits", "compile"} {
		if fl := fs.Lookup(name); given[name] && fl.Value.String() != fl.DefValue {
			return fmt.Errorf("%w: --%s: an inference job runs no backward pass and no optimizer ("+leave+")", ErrUsage, name, "--"+name)
		}
	}
	switch {
	case given["loss"] && f.Loss != "full" && f.Loss != "":
		return fmt.Errorf("%w: --loss %s: an inference job computes no loss ("+leave+")", ErrUsage, f.Loss, "--loss")
	case given["logits-to-keep"] && f.LogitsToKeep != 0 && f.Generate > 0:
		return fmt.Errorf("%w: --logits-to-keep %d: generation's prompt pass keeps the last position's logits already (leave --generate or --logits-to-keep out)", ErrUsage, f.LogitsToKeep)
	case given["optimizer"]:
		return fmt.Errorf("%w: --optimizer %s: an inference job keeps no optimizer state ("+leave+")", ErrUsage, f.Opt, "--optimizer")
	case given["grad-accum"] && f.Accum != 1:
		return fmt.Errorf("%w: --grad-accum %d: an inference job accumulates no gradients ("+leave+")", ErrUsage, f.Accum, "--grad-accum")
	case given["dropout"] && f.Dropout:
		return fmt.Errorf("%w: --dropout: dropout masks are kept for the backward pass of a training job only ("+leave+")", ErrUsage, "--dropout")
	case given["checkpointing"] && f.Ckpt != "none":
		return fmt.Errorf("%w: --checkpointing %s: an inference job saves no activations for a backward pass ("+leave+")", ErrUsage, f.Ckpt, "--checkpointing")
	case given["offload"] && (strings.Contains(f.Layout.Offload, "optimizer") || f.Layout.Offload == "all"):
		return fmt.Errorf("%w: --offload %s: an inference job has no optimizer state to offload ("+leave+")", ErrUsage, f.Layout.Offload, "--offload")
	case given["zero"] && (f.ZeRO == 1 || f.ZeRO == 2):
		return fmt.Errorf("%w: --zero %d: stages 1 and 2 shard optimizer state and gradients, which an inference job does not have (--zero 3 or --tp shard the weights)", ErrUsage, f.ZeRO)
	case given["fsdp"] && strings.EqualFold(f.Layout.FSDP, "shard_grad_op"):
		return fmt.Errorf("%w: --fsdp %s: it shards optimizer state and gradients, which an inference job does not have (full_shard or --tp shard the weights)", ErrUsage, f.Layout.FSDP)
	}
	return nil
}

// ModelFlags are the ways to name a model on the command line.
type ModelFlags struct {
	Name        string
	Config      string
	Safetensors string
	GGUF        string
}

func (m *ModelFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&m.Name, "model", "", "a model of the embedded catalog (e.g. llama-3-8b; --model list lists them), or a GPT by size: gpt:100b, gpt:96x12288 (layers x d_model)")
	fs.StringVar(&m.Config, "config", "", "a Hugging Face config.json")
	fs.StringVar(&m.Safetensors, "safetensors", "", "a .safetensors file, or a sharded model.safetensors.index.json (headers only are read)")
	fs.StringVar(&m.GGUF, "gguf", "", "a .gguf file (header only is read)")
}

// load returns the Spec the flags name.
func (m *ModelFlags) Load() (model.Spec, error) {
	given := 0
	for _, v := range []string{m.Name, m.Config, m.Safetensors, m.GGUF} {
		if v != "" {
			given++
		}
	}
	switch {
	case given > 1:
		return model.Spec{}, fmt.Errorf("%w: give one of --model, --config, --safetensors and --gguf", ErrUsage)
	case m.Name == "list":
		names := make(CatalogList, 0, 64)
		for _, s := range model.Catalog() {
			names = append(names, s.Name)
		}
		return model.Spec{}, names
	case m.Name != "":
		if IsLargest(m.Name) {
			return model.Spec{}, fmt.Errorf("%w: --model %s: only gpumem plan searches for the largest model", ErrUsage, LargestName)
		}
		if _, isGPT, err := model.ParseGPT(m.Name); isGPT && err != nil {
			return model.Spec{}, fmt.Errorf("%w: --model %q: %v", ErrUsage, m.Name, err)
		}
		s, ok := model.Lookup(m.Name)
		if !ok {
			return model.Spec{}, fmt.Errorf("%w: --model %q: not in the catalog%s (try --model list, or --config)", ErrUsage, m.Name, SuggestModel(m.Name))
		}
		return s, nil
	case m.Config != "":
		f, err := os.Open(m.Config)
		if err != nil {
			return model.Spec{}, fmt.Errorf("--config: %w", FileError(m.Config, err))
		}
		defer f.Close()
		s, err := model.FromHFConfig(f)
		if err != nil {
			return model.Spec{}, fmt.Errorf("--config %s: %w", Clean(m.Config), err)
		}
		return s, nil
	case strings.HasSuffix(m.Safetensors, ".index.json"):
		s, err := model.FromSafetensorsIndex(os.DirFS(filepath.Dir(m.Safetensors)), filepath.Base(m.Safetensors))
		if err != nil {
			return model.Spec{}, fmt.Errorf("--safetensors %s: %w", Clean(m.Safetensors), err)
		}
		return s, nil
	case m.Safetensors != "":
		return readAt("--safetensors", m.Safetensors, model.FromSafetensors)
	case m.GGUF != "":
		return readAt("--gguf", m.GGUF, model.FromGGUF)
	}
	return model.Spec{}, fmt.Errorf("%w: name a model with --model, --config, --safetensors or --gguf", ErrUsage)
}

// CatalogList is what --model list asks for: the catalog's names, which
// the command prints on standard output, exiting 0. It is an error only
// to stop the command that was asked for it.
type CatalogList []string

func (c CatalogList) Error() string { return "the catalog has: " + strings.Join(c, ", ") }

// readAt opens the file a flag names and reads its header with read.
func readAt(flagName, path string, read func(io.ReaderAt, int64) (model.Spec, error)) (model.Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return model.Spec{}, fmt.Errorf("%s: %w", flagName, FileError(path, err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return model.Spec{}, fmt.Errorf("%s: %w", flagName, FileError(path, err))
	}
	s, err := read(f, st.Size())
	if err != nil {
		return model.Spec{}, fmt.Errorf("%s %s: %w", flagName, Clean(path), err)
	}
	return s, nil
}

// FileError is err (from opening or reading path) with the path
// printable: a *fs.PathError keeps its operation and cause, its path
// escaped by clean.
func FileError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: Clean(pe.Path), Err: pe.Err}
	}
	return fmt.Errorf("%s: %w", Clean(path), err)
}
