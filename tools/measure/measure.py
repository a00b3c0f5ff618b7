#!/usr/bin/env python3
"""Whole-step memory of transformers' own modeling code, measured on the CPU.

Each case builds a small model of a catalog family from a config dict (random
weights), runs a whole job -- training steps (forward with labels, loss,
backward, optimizer step, zero_grad), a prefill pass, or generation with a KV
cache through model.generate() -- and measures the live bytes of the CPU
allocator from the profiler's memory events:

  torch.profiler.profile(activities=[CPU], profile_memory=True)

is on from before the model is built to the end of the job. c10's
ProfiledCPUMemoryReporter (c10/core/CPUAllocator.cpp) reports every
allocation and every free of a block allocated while profiling is on, with
its size, so the running sum of the "[memory]" events' deltas is the bytes of
every tensor storage the job holds, at every allocation and free: the CPU
counterpart of torch.cuda.memory_allocated() (without the CUDA caching
allocator's 512-byte rounding). A phase is marked with record_function
("gpumem:<phase>"); it lasts from its mark to the next one.

Training is measured on its second step (the peak is reset before it: the
maximum is taken over the second step's window), inference on its second
pass, generation over the whole generate() call.

The reporter keeps a table of the blocks allocated while profiling is on and
reports the free of a block only if the table has it. A case frees everything
it made before its profile ends, so cases can run one after another in a
process (run.sh runs one process per model); each row records the level left
when its objects are freed ("leftover", library caches) and checks that the
level after the build is exactly the parameters' and buffers' storages.
Run it in the chroot that setup.sh makes, with OMP_NUM_THREADS=1; run.sh runs
the grid. Python is never run by `go test`: the rows it records in
testdata/measured/cpu/ are what the Go gate reads.

  python3 measure.py --case '<json case>'     one case, one JSON row on stdout
  python3 measure.py --cases FILE             the cases of FILE (one a line), one row each
  python3 measure.py --list                   the grid's cases, one JSON a line
  python3 measure.py --validate               the method's validation rows
"""

import argparse
import contextlib
import gc
import json
import os
import re
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
CATALOG = os.environ.get("GPUMEM_CATALOG", os.path.join(HERE, "..", "..", "model", "configs"))
PHASE = "gpumem:"

# --- the grid ------------------------------------------------------------------------------------

# Small configs of catalog families: the catalog config with these keys
# replaced (job.config is the result, job.config_overrides these keys).
SMALL_DECODER = {"hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 4096}
MODELS = [
    {"name": "llama-small", "catalog": "llama-3.2-1b", "kind": "causal", "overrides": dict(SMALL_DECODER)},
    {"name": "llama-untied", "catalog": "llama-3.2-1b", "kind": "causal",
     "overrides": dict(SMALL_DECODER, tie_word_embeddings=False, num_hidden_layers=3)},
    {"name": "mistral-small", "catalog": "mistral-7b", "kind": "causal",
     "overrides": dict(SMALL_DECODER, sliding_window=4096)},
    {"name": "qwen2-small", "catalog": "qwen2.5-0.5b", "kind": "causal", "overrides": dict(SMALL_DECODER)},
    {"name": "gemma-small", "catalog": "gemma-2b", "kind": "causal",
     "overrides": dict(SMALL_DECODER, num_key_value_heads=1, intermediate_size=512)},
    {"name": "gpt2-small", "catalog": "gpt2", "kind": "causal",
     "overrides": {"n_embd": 128, "n_layer": 2, "n_head": 4, "vocab_size": 4096}},
    {"name": "opt-small", "catalog": "opt-125m", "kind": "causal",
     "overrides": {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "ffn_dim": 512,
                   "word_embed_proj_dim": 128, "vocab_size": 4096}},
    {"name": "bert-small", "catalog": "bert-base", "kind": "masked",
     "overrides": {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "intermediate_size": 512, "vocab_size": 4096}},
    {"name": "t5-small-2l", "catalog": "t5-small", "kind": "seq2seq",
     "overrides": {"d_model": 128, "d_ff": 512, "d_kv": 32, "num_layers": 2, "num_decoder_layers": 2,
                   "num_heads": 4, "vocab_size": 4096, "decoder_start_token_id": 0, "pad_token_id": 0,
                   "eos_token_id": 1}},
    {"name": "whisper-small-2l", "catalog": "whisper-small", "kind": "speech",
     "overrides": {"d_model": 128, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
                   "decoder_attention_heads": 4, "encoder_ffn_dim": 512, "decoder_ffn_dim": 512,
                   "vocab_size": 4096, "decoder_start_token_id": 1, "pad_token_id": 0, "bos_token_id": 1,
                   "eos_token_id": 2}},
    {"name": "vit-small", "catalog": "vit-base-patch16-224", "kind": "vision",
     "overrides": {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "intermediate_size": 512, "architectures": ["ViTForImageClassification"],
                   "num_labels": 1000}},
    {"name": "phi-small", "catalog": "phi-2", "kind": "causal",
     "overrides": {"hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 4096}},
]

# Vision-language models (build_vlm_grid): the vision towers of CLIP and
# SigLIP, each the catalog tower ("sub": the CLIPConfig's vision_config)
# with a classifier over the mean of the tower's output tokens
# (CLIPForImageClassification, SiglipForImageClassification: the tower is
# the class CLIPVisionModel and SiglipVisionModel wrap, built from the
# parent config whose vision_config is the job's config), and a
# LLaVA-1.5-style LlavaForConditionalGeneration: a tiny CLIP tower, the
# 2-layer GELU projector and the grid's small Llama, one 112-px image of
# (112/14)² = 64 tokens per sample before the sample's text.
SMALL_TOWER = {"hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4}
VLM_MODELS = [
    {"name": "clip-vision-small", "catalog": "clip-vit-large-patch14-336", "sub": "vision_config", "kind": "vision",
     "overrides": dict(SMALL_TOWER, image_size=224, patch_size=16, architectures=["CLIPForImageClassification"],
                       num_labels=1000)},
    {"name": "siglip-vision-small", "catalog": "siglip-so400m-vision", "kind": "vision",
     "overrides": dict(SMALL_TOWER, image_size=224, patch_size=16, architectures=["SiglipForImageClassification"],
                       num_labels=1000)},
    {"name": "llava-small", "catalog": "llava-1.5-7b", "kind": "llava", "images": 1,
     "overrides": {"vision_config": dict(SMALL_TOWER, image_size=112, patch_size=14),
                   "text_config": dict(SMALL_DECODER, num_key_value_heads=2, torch_dtype="float32"),
                   "image_token_index": 4095, "vocab_size": 4096, "torch_dtype": "float32"}},
]
# The parent config class each tower classifier takes (its vision_config is
# the job's config).
TOWER_PARENT = {"clip_vision_model": "CLIPConfig", "siglip_vision_model": "SiglipConfig"}


# The state-space and hybrid families, measured apart from MODELS (their
# own loop in build_grid, so the other families' cases stay as they were):
# transformers takes the mixers' torch path on the CPU (no mamba_ssm or
# causal_conv1d kernels: MambaMixer.slow_forward, Mamba2Mixer.torch_forward,
# JambaMambaMixer.slow_forward with use_mamba_kernels false,
# Zamba2MambaMixer.torch_forward), gpumem's sequential SSMKernel. Mamba and
# Jamba start from their catalog configs; the catalog has no Mamba-2 or
# Zamba2 config, so those two start from "base", the keys their config
# classes (configuration_mamba2.py, configuration_zamba2.py, v4.57.1) would
# fill in, written out for gpumem's config reader. Mamba and Mamba-2 have no
# attention (their attention field reads eager: neither class supports SDPA).
SSM_MODELS = [
    {"name": "mamba-small", "catalog": "mamba-130m", "kind": "causal", "attention": "eager",
     "overrides": {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "time_step_rank": 8,
                   "vocab_size": 4096}},
    {"name": "mamba2-small", "catalog": None, "kind": "causal", "attention": "eager",
     "base": {"architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "hidden_size": 128,
              "num_hidden_layers": 2, "state_size": 16, "expand": 2, "conv_kernel": 4, "num_heads": 8,
              "head_dim": 32, "n_groups": 1, "chunk_size": 128, "vocab_size": 4096, "use_bias": False,
              "use_conv_bias": True, "tie_word_embeddings": False, "pad_token_id": 1, "bos_token_id": 0,
              "eos_token_id": 2},
     "overrides": {}},
    {"name": "jamba-small", "catalog": "jamba-v0.1", "kind": "causal", "attention": "sdpa",
     "overrides": {"hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 4, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "num_experts": 4, "num_experts_per_tok": 2, "attn_layer_period": 2,
                   "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1, "mamba_dt_rank": 8,
                   "vocab_size": 4096, "use_mamba_kernels": False}},
    {"name": "zamba2-small", "catalog": None, "kind": "causal", "attention": "sdpa",
     "base": {"architectures": ["Zamba2ForCausalLM"], "model_type": "zamba2", "hidden_size": 128,
              "num_hidden_layers": 4, "layers_block_type": ["mamba", "mamba", "hybrid", "mamba"],
              "num_attention_heads": 4, "num_key_value_heads": 4, "attention_hidden_size": 256,
              "attention_head_dim": 64, "intermediate_size": 344, "n_mamba_heads": 8, "mamba_d_state": 16,
              "mamba_d_conv": 4, "mamba_expand": 2, "mamba_ngroups": 1, "chunk_size": 128, "num_mem_blocks": 1,
              "use_shared_attention_adapter": False, "adapter_rank": 8, "add_bias_linear": False,
              "max_position_embeddings": 4096, "vocab_size": 4096, "tie_word_embeddings": True,
              "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},
     "overrides": {}},
]


def read_catalog(name):
    with open(os.path.join(CATALOG, name + ".json")) as f:
        d = json.load(f)
    return {k: v for k, v in d.items() if not k.startswith("_gpumem")}


def dropout_on(config):
    """Whether the family trains with dropout > 0 under its config (with
    transformers' defaults for the keys the config leaves out)."""
    defaults = {"gpt2": {"resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1},
                "bert": {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1},
                "opt": {"dropout": 0.1, "attention_dropout": 0.0},
                "t5": {"dropout_rate": 0.1},
                "phi": {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0},
                }.get(config.get("model_type"), {})
    keys = dict(defaults)
    for k, v in config.items():
        if "dropout" in k or k.endswith("pdrop"):
            keys[k] = v
    return any(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in keys.values())


def without_dropout(config):
    """The config with every dropout probability set to 0."""
    c = dict(config)
    for k in list(c) + ["resid_pdrop", "embd_pdrop", "attn_pdrop", "hidden_dropout_prob",
                        "attention_probs_dropout_prob", "dropout", "attention_dropout", "dropout_rate",
                        "activation_dropout"]:
        if "dropout" in k or k.endswith("pdrop"):
            if isinstance(c.get(k, 0.0), (int, float)):
                c[k] = 0.0
    return c


def case_id(job, suffix=""):
    parts = [job["model"], job["mode"], job["precision"]]
    if job["mode"] == "train":
        opt = job["optimizer"] + ("-" + job["optimizer_impl"] if job.get("optimizer_impl") else "")
        if job.get("momentum"):
            opt += "-m%g" % job["momentum"]
        if job.get("nesterov"):
            opt += "-nesterov"
        parts.append(opt)
    parts.append(job["attention"])
    if job["mode"] == "train":
        parts.append("ckpt-" + job["checkpointing"])
        if job.get("lora_rank"):
            parts.append("lora%d" % job["lora_rank"])
        if job.get("frozen"):
            parts.append("frozen")
        parts.append("drop" if job["dropout"] else "nodrop")
        if job.get("compile"):
            parts.append("compile-" + job["compile"])
        if job.get("freeze_vision"):
            parts.append("freezevision")
    parts.append("b%d" % job["batch"])
    if job.get("images"):
        parts.append("i%d" % job["images"])
    if job.get("seq") is not None:
        parts.append("s%d" % job["seq"])
    if job["mode"] == "generate":
        parts.append("g%d" % job["generate"])
    if suffix:
        parts.append(suffix)
    return "/".join(parts)


def make_job(m, mode, batch, seq, precision="fp32", attention="sdpa", optimizer=None, impl="",
             momentum=0.0, checkpointing="none", lora_rank=0, generate=0, dropout=True, frozen=False,
             nesterov=False, suffix="", compile="", freeze_vision=False):
    """A case of the grid. optimizer is adamw, sgd, adafactor (transformers'
    Adafactor) or none (no step: the gradients are computed and dropped).
    frozen freezes every parameter and differentiates to the input (an
    adversarial attack or an attribution: the model in eval mode, so without
    dropout; optimizer none). suffix ends the id (the torch-1 grid's).
    compile is the torch.compile scope of a training case (layers or model)."""
    config = read_catalog(m["catalog"]) if m["catalog"] else dict(m["base"])
    if m.get("sub"):
        config = dict(config[m["sub"]])
    for k, v in m["overrides"].items():
        # A nested config (LLaVA's vision_config, text_config) takes the
        # override's keys over the catalog's.
        config[k] = dict(config[k], **v) if isinstance(v, dict) and isinstance(config.get(k), dict) else v
    overrides = dict(m["overrides"])
    if not dropout and dropout_on(config):
        config = without_dropout(config)
        overrides.update({k: v for k, v in config.items() if ("dropout" in k or k.endswith("pdrop"))})
    kind = m["kind"]
    job = {
        "model": m["name"], "catalog": m["catalog"], "kind": kind, "mode": mode,
        "batch": batch, "seq": None if kind == "vision" else seq,
        "generate": generate if mode == "generate" else 0, "grad_accum": 1,
        "precision": precision,
        "optimizer": optimizer if mode == "train" else None,
        "optimizer_impl": impl if mode == "train" else "",
        "momentum": momentum if mode == "train" else 0.0,
        "attention": attention,
        "checkpointing": checkpointing if mode == "train" else "none",
        "lora_rank": lora_rank if mode == "train" else 0,
        "lora_targets": ["q_proj", "v_proj"] if lora_rank and mode == "train" else None,
        "encoder_seq": {"seq2seq": seq, "speech": 1500}.get(kind),
        "decoder_seq": {"seq2seq": 1 if mode == "generate" else seq, "speech": seq}.get(kind),
        "dropout": dropout_on(config) if mode == "train" and not frozen else False,
        "config_overrides": overrides,
        "config": config,
    }
    # Set only when true, so that the other rows' jobs stay as they were.
    if frozen and mode == "train":
        job["frozen"] = True
    if nesterov and mode == "train":
        job["nesterov"] = True
    if compile and mode == "train":
        job["compile"] = compile
    if m.get("images"):
        job["images"] = m["images"]
    if freeze_vision and mode == "train":
        job["freeze_vision"] = True
    if kind == "llava" and job["lora_targets"]:
        # PEFT's target_modules match the vision tower's q_proj/v_proj
        # too; LLaVA's LoRA recipes adapt the language model only.
        job["lora_targets"] = ["language_model.*.q_proj", "language_model.*.v_proj"]
    return {"id": case_id(job, suffix), "job": job}


def build_grid():
    cases = []
    for m in MODELS:
        kind = m["kind"]
        seqs = [64, 256] if kind not in ("speech", "vision") else [32]
        gen_ok = kind in ("causal", "seq2seq")
        attns = ["sdpa", "eager"]
        if m["catalog"].startswith("gpt2") or kind in ("seq2seq",):
            attns = ["eager"] if m["catalog"].startswith("t5") else attns
        for seq in seqs:
            for b in (1, 4):
                for attn in attns:
                    for opt, impl, mom in (("adamw", "forloop", 0.0), ("adamw", "foreach", 0.0), ("sgd", "forloop", 0.9)):
                        cases.append(make_job(m, "train", b, seq, attention=attn, optimizer=opt, impl=impl, momentum=mom))
                    cases.append(make_job(m, "train", b, seq, precision="bf16-mixed", attention=attn,
                                          optimizer="adamw", impl="forloop"))
                    cases.append(make_job(m, "train", b, seq, attention=attn, optimizer="adamw", impl="forloop",
                                          checkpointing="full"))
                    if dropout_on(dict(read_catalog(m["catalog"]), **m["overrides"])):
                        cases.append(make_job(m, "train", b, seq, attention=attn, optimizer="adamw",
                                              impl="forloop", dropout=False))
                    cases.append(make_job(m, "prefill", b, seq, attention=attn))
                    if gen_ok:
                        cases.append(make_job(m, "generate", b, seq, attention=attn, generate=16))
            if m["catalog"].startswith(("llama", "mistral", "qwen", "gemma")):
                cases.append(make_job(m, "train", 4, seq, optimizer="adamw", impl="forloop", lora_rank=8))
    # The state-space and hybrid models (SSM_MODELS): AdamW for-loop in fp32
    # and under bf16 autocast, prefill and generate().
    for m in SSM_MODELS:
        for seq in (64, 256):
            for b in (1, 4):
                attn = m["attention"]
                cases.append(make_job(m, "train", b, seq, attention=attn, optimizer="adamw", impl="forloop"))
                cases.append(make_job(m, "train", b, seq, precision="bf16-mixed", attention=attn,
                                      optimizer="adamw", impl="forloop"))
                cases.append(make_job(m, "prefill", b, seq, attention=attn))
                cases.append(make_job(m, "generate", b, seq, attention=attn, generate=16))
    # Jobs without an AdamW or SGD step: a frozen model differentiated to its
    # input, gradients without a step, transformers' Adafactor, and SGD with
    # Nesterov momentum.
    for m in MODELS:
        kind = m["kind"]
        seqs = [64, 256] if kind not in ("speech", "vision") else [32]
        attns = ["eager"] if m["catalog"].startswith("t5") else ["sdpa", "eager"]
        for seq in seqs:
            for b in (1, 4):
                for attn in attns:
                    cases.append(make_job(m, "train", b, seq, attention=attn, optimizer="none", frozen=True))
                    cases.append(make_job(m, "train", b, seq, attention=attn, optimizer="none"))
                    cases.append(make_job(m, "train", b, seq, attention=attn, optimizer="adafactor"))
                    cases.append(make_job(m, "train", b, seq, attention=attn, optimizer="sgd", impl="forloop",
                                          momentum=0.9, nesterov=True))
    return unique(cases + build_vlm_grid())


def build_vlm_grid():
    """The vision-language cases (VLM_MODELS): for the CLIP and SigLIP
    towers, training with the for-loop AdamW in fp32 and under bf16
    autocast, and prefill, at batch 1 and 4, SDPA and eager; for LLaVA,
    the same at 64 text tokens after one image, training with the vision
    tower frozen (LLaVA-1.5's fine-tuning: projector and language model
    trained) and with everything trained, LoRA rank 8 on the language
    model's q_proj/v_proj, prefill and generate() of 16 tokens."""
    cases = []
    for m in VLM_MODELS:
        llava = m["kind"] == "llava"
        for b in (1, 4):
            for attn in ("sdpa", "eager"):
                for precision in ("fp32", "bf16-mixed"):
                    cases.append(make_job(m, "train", b, 64, precision=precision, attention=attn, optimizer="adamw",
                                          impl="forloop", freeze_vision=llava))
                cases.append(make_job(m, "prefill", b, 64, attention=attn))
                if llava:
                    cases.append(make_job(m, "train", b, 64, attention=attn, optimizer="adamw", impl="forloop"))
                    cases.append(make_job(m, "generate", b, 64, attention=attn, generate=16))
                    if attn == "sdpa":
                        cases.append(make_job(m, "train", b, 64, attention=attn, optimizer="adamw", impl="forloop",
                                              lora_rank=8))
    return cases


# The models of the torch-1 grid (TORCH1_MODELS): transformers releases
# that still run on torch 1.13 have no SDPA path there (it needs torch 2.1),
# so the grid is eager only.
TORCH1_MODELS = ("llama-small", "gpt2-small", "bert-small", "t5-small-2l", "whisper-small-2l")


def build_torch1_grid(torch_version, transformers_version):
    """A subset of the grid for torch 1.x (Debian bookworm's 1.13.1) and an
    older transformers: eager attention, fp32, training with the for-loop
    AdamW (torch 1.13's only implementation on the CPU) and SGD, the new
    jobs (frozen, no step, Adafactor), prefill and generate(). The ids end
    with torch's major and minor version ("/torch1.13"), as the rows of one
    directory need distinct ids; run on torch 2 (the control that separates
    torch's changes from transformers'), with transformers' too
    ("/tf4.47-torch2.6")."""
    minor = lambda v: ".".join(v.split(".")[:2])
    suffix = "torch" + minor(torch_version)
    if not torch_version.startswith("1."):
        suffix = "tf" + minor(transformers_version) + "-" + suffix
    cases = []
    for m in MODELS:
        if m["name"] not in TORCH1_MODELS:
            continue
        kind = m["kind"]
        seqs = [64, 256] if kind not in ("speech", "vision") else [32]
        for seq in seqs:
            for b in (1, 4):
                kw = dict(attention="eager", suffix=suffix)
                cases.append(make_job(m, "train", b, seq, optimizer="adamw", impl="forloop", **kw))
                cases.append(make_job(m, "train", b, seq, optimizer="sgd", impl="forloop", momentum=0.9, **kw))
                cases.append(make_job(m, "train", b, seq, optimizer="adamw", impl="forloop", checkpointing="full", **kw))
                cases.append(make_job(m, "train", b, seq, optimizer="none", frozen=True, **kw))
                cases.append(make_job(m, "train", b, seq, optimizer="none", **kw))
                cases.append(make_job(m, "train", b, seq, optimizer="adafactor", **kw))
                cases.append(make_job(m, "prefill", b, seq, **kw))
                if kind in ("causal", "seq2seq"):
                    cases.append(make_job(m, "generate", b, seq, generate=16, **kw))
    return unique(cases)


def unique(cases):
    seen, out = set(), []
    for c in cases:
        if c["id"] not in seen:
            seen.add(c["id"])
            out.append(c)
    return out


# What a compiled case compiles (job.compile), as the recipes do it:
#   layers  each decoder layer compiled on its own, nn.Module.compile() on every
#           model.model.layers[i], as torchtune's training.compile_model compiles
#           each TransformerSelfAttentionLayer (torchtune/training/_compile.py);
#           the embedding, final norm, head and the model's loss run eagerly.
#   model   the whole model, model.compile(): the layers, the final norm, the head
#           and transformers' loss (ForCausalLMLoss, called inside the model's
#           forward when it is given labels) in one compiled graph.
# Both with torch.compile's defaults (Inductor, the min-cut partitioner of
# torch/_functorch/partitioners.py, activation_memory_budget 1.0).
COMPILE_SCOPES = ("layers", "model")


def build_compile_grid():
    """The compiled training cases: the Llama config of the grid, AdamW, SDPA,
    fp32 and bf16 autocast, each scope; LoRA rank 8 on q_proj/v_proj. The
    eager cases of the same jobs are in the grid (build_grid)."""
    m = next(m for m in MODELS if m["name"] == "llama-small")
    cases = []
    for b, seq in ((1, 64), (4, 256)):
        for precision in ("fp32", "bf16-mixed"):
            for scope in COMPILE_SCOPES:
                cases.append(make_job(m, "train", b, seq, precision=precision, attention="sdpa",
                                      optimizer="adamw", impl="forloop", compile=scope))
    for scope in COMPILE_SCOPES:
        cases.append(make_job(m, "train", 4, 256, optimizer="adamw", impl="forloop", lora_rank=8, compile=scope))
    return cases


def compile_model(torch, model, scope):
    """Compiles the model as job.compile says (COMPILE_SCOPES), after
    clearing what Dynamo compiled for an earlier case of the process."""
    torch._dynamo.reset()
    if scope == "layers":
        for layer in model.model.layers:
            layer.compile()
    elif scope == "model":
        model.compile()
    else:
        raise ValueError("compile %r: want one of %s" % (scope, ", ".join(COMPILE_SCOPES)))


# --- measuring -----------------------------------------------------------------------------------


def import_transformers():
    import transformers
    return transformers


def transformers_commit():
    return os.environ.get("GPUMEM_TRANSFORMERS_COMMIT", "")


class Lora:
    """A minimal LoRA adapter around an nn.Linear, computed as PEFT's
    LoraLayer does with lora_dropout=0 (peft/tuners/lora/layer.py, Linear.
    forward: result = base_layer(x) + lora_B(lora_A(dropout(x))) * scaling,
    dropout an nn.Identity): adapters in fp32, the base frozen."""

    @staticmethod
    def wrap(torch, model, rank, targets):
        nn = torch.nn

        class LoraLinear(nn.Module):
            def __init__(self, base):
                super().__init__()
                self.base_layer = base
                self.lora_A = nn.Linear(base.in_features, rank, bias=False)
                self.lora_B = nn.Linear(rank, base.out_features, bias=False)
                nn.init.zeros_(self.lora_B.weight)
                self.scaling = 2.0

            def forward(self, x):
                result = self.base_layer(x)
                return result + self.lora_B(self.lora_A(x)) * self.scaling

        for p in model.parameters():
            p.requires_grad_(False)
        # A target is a module name, or "<prefix>.*.<name>": the modules of
        # that name under a module whose path ends with <prefix>.
        scoped = [t.split(".*.") for t in targets if ".*." in t]
        names = [t for t in targets if ".*." not in t]
        for name, mod in list(model.named_modules()):
            for child_name, child in list(mod.named_children()):
                hit = child_name in names or any(
                    child_name == n and (name == p or name.startswith(p + ".") or ("." + p + ".") in ("." + name + "."))
                    for p, n in scoped)
                if hit and isinstance(child, nn.Linear):
                    setattr(mod, child_name, LoraLinear(child))
        return model


def build_model(torch, transformers, job):
    c = dict(job["config"])
    mt = c.pop("model_type")
    cls = getattr(transformers, job["config"]["architectures"][0])
    if mt in TOWER_PARENT and cls.__name__.endswith("ForImageClassification"):
        # CLIPForImageClassification and SiglipForImageClassification take
        # the parent config and build its vision_config's tower.
        config = getattr(transformers, TOWER_PARENT[mt])(
            vision_config=dict(c, model_type=mt), num_labels=c.get("num_labels", 2))
    else:
        config = transformers.AutoConfig.for_model(mt, **c)
    dtype = torch.bfloat16 if job["precision"] == "bf16" else torch.float32
    model = cls._from_config(config, torch_dtype=dtype, attn_implementation=job["attention"])
    if job.get("lora_rank"):
        model = Lora.wrap(torch, model, job["lora_rank"], job["lora_targets"])
    if job.get("freeze_vision"):
        # LLaVA-1.5's fine-tuning: the vision tower frozen, the projector
        # and the language model trained.
        model.model.vision_tower.requires_grad_(False)
    if job.get("frozen"):
        for p in model.parameters():
            p.requires_grad_(False)
    return model


def inputs(torch, job, config):
    b, s, kind = job["batch"], job["seq"], job["kind"]
    g = torch.Generator().manual_seed(0)
    vocab = config.vocab_size if hasattr(config, "vocab_size") else None

    def ids(n):
        return torch.randint(3, vocab, (b, n), generator=g)

    if kind in ("causal", "masked"):
        x = ids(s)
        return {"input_ids": x}, x
    if kind == "seq2seq":
        return {"input_ids": ids(job["encoder_seq"])}, ids(job["decoder_seq"])
    if kind == "speech":
        feats = torch.randn(b, config.num_mel_bins, 2 * config.max_source_positions, generator=g)
        return {"input_features": feats}, ids(job["decoder_seq"])
    if kind == "vision":
        vc = getattr(config, "vision_config", config)  # CLIP's and SigLIP's classifiers
        px = torch.randn(b, 3, vc.image_size, vc.image_size, generator=g)
        return {"pixel_values": px}, torch.randint(0, config.num_labels, (b,), generator=g)
    if kind == "llava":
        # Each sample: job.images images of (image_size/patch_size)² tokens
        # (the "default" strategy drops CLS), then job.seq text tokens; the
        # labels ignore the image positions (-100), as LLaVA's collators do.
        vc, n = config.vision_config, job["images"]
        per = (vc.image_size // vc.patch_size) ** 2
        text = torch.randint(3, config.text_config.vocab_size - 1, (b, s), generator=g)
        img = torch.full((b, n * per), config.image_token_id, dtype=torch.long)
        x = torch.cat([img, text], dim=1)
        px = torch.randn(b * n, 3, vc.image_size, vc.image_size, generator=g)
        labels = torch.cat([torch.full_like(img, -100), text], dim=1)
        del img, text
        return {"input_ids": x, "pixel_values": px}, labels
    raise ValueError("kind %r" % kind)


def make_optimizer(torch, transformers, job, params):
    """The job's optimizer; None for optimizer "none" (no step)."""
    impl = job.get("optimizer_impl") or "forloop"
    foreach = impl == "foreach"
    if job["optimizer"] == "none":
        return None
    if job["optimizer"] == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, foreach=foreach)
    if job["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=1e-4, momentum=job.get("momentum") or 0.0,
                               nesterov=bool(job.get("nesterov")), foreach=foreach)
    if job["optimizer"] == "adafactor":
        # transformers' own Adafactor (src/transformers/optimization.py) with
        # its defaults: beta1 None (no first moment), relative_step=True and
        # scale_parameter=True (the learning rate from the step count and the
        # parameter's RMS: Python floats, no tensor). Trainer's "adafactor"
        # turns both off and passes lr, which changes no tensor the step
        # allocates.
        from transformers.optimization import Adafactor
        return Adafactor(params)
    raise ValueError("optimizer %r" % job["optimizer"])


def storage_bytes(tensors):
    seen, n = set(), 0
    for t in tensors:
        if t is None:
            continue
        # torch 1.13 has no Tensor.untyped_storage(); its TypedStorage
        # gives the same data pointer and byte count.
        s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        key = s.data_ptr()
        if key in seen or s.nbytes() == 0:
            continue
        seen.add(key)
        n += s.nbytes()
    return n


class Marks:
    """record_function marks: mark(name) starts a phase that lasts until the
    next mark."""

    def __init__(self, torch):
        self.torch = torch
        self.handle = None

    def mark(self, name):
        ops = self.torch.ops.profiler
        if self.handle is not None:
            ops._record_function_exit._RecordFunction(self.handle)
        self.handle = ops._record_function_enter_new(PHASE + name, None) if name else None


# The aten ops that implement scaled_dot_product_attention, which a row
# records by name: which kernel the CPU ran (flash or math) decides what the
# attention holds.
SDPA_OPS = ("aten::_scaled_dot_product", "aten::_efficient_attention", "aten::_flash_attention")


def curve(prof, kernels=None):
    """The memory events and phase marks of a profile: [(t_ns, seq, delta)]
    and [(t_ns, name)], both in time order. With a set `kernels`, adds the
    names of the SDPA ops the profile ran."""
    mem, marks = [], []
    for i, e in enumerate(prof.profiler.kineto_results.events()):
        name = e.name()
        # torch 1.13's events have start_us only: a memory event in the same
        # microsecond as a mark counts in the mark's phase.
        t = e.start_ns() if hasattr(e, "start_ns") else 1000 * e.start_us()
        if name == "[memory]":
            if str(e.device_type()).endswith("CPU"):
                mem.append((t, i, e.nbytes()))
        elif name.startswith(PHASE):
            marks.append((t, name[len(PHASE):]))
        elif kernels is not None and name.startswith(SDPA_OPS):
            kernels.add(name)
    mem.sort()
    marks.sort()
    return mem, marks


def phase_peaks(mem, marks):
    """Integrates the deltas; for each mark, the phase's start level, peak
    and end level. Returns (phases, level at the end)."""
    out, level, k = [], 0, 0
    bounds = [t for t, _ in marks] + [float("inf")]
    cur = None
    for t, _, d in mem:
        while k < len(marks) and t >= bounds[k]:
            cur = {"phase": marks[k][1], "start": level, "peak": level}
            out.append(cur)
            k += 1
        level += d
        if cur is not None:
            cur["peak"] = max(cur["peak"], level)
            cur["end"] = level
    while k < len(marks):
        out.append({"phase": marks[k][1], "start": level, "peak": level, "end": level})
        k += 1
    for p in out:
        p.setdefault("end", p["start"])
    return out, level


def run_job(torch, transformers, job):
    """Runs the job under the profiler. Returns the row's measured fields."""
    from torch.profiler import ProfilerActivity, profile

    info = {}
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        marks = Marks(torch)
        marks.mark("build")
        model = build_model(torch, transformers, job)
        # Unique parameters (tied ones once); a comprehension, so that no loop
        # variable keeps one alive after the case deletes the model.
        params = list({id(p): p for p in model.parameters()}.values())
        info["param_bytes"] = storage_bytes(params)
        info["buffer_bytes"] = storage_bytes(list(model.buffers()))
        info["params"] = sum(p.numel() for p in params)
        info["trainable_params"] = sum(p.numel() for p in params if p.requires_grad)
        info["class"] = type(model).__name__
        marks.mark("inputs")
        x, labels = inputs(torch, job, model.config)
        leaf = None
        if job.get("frozen"):
            x, leaf, info["grad_input"] = input_leaf(torch, model, job, x)
        info["input_bytes"] = storage_bytes(list(x.values()) + [labels])
        marks.mark("ready")
        if job["mode"] == "train":
            train(torch, transformers, model, job, x, labels, leaf, marks, info)
        elif job["mode"] == "prefill":
            prefill(torch, model, job, x, labels, marks)
        else:
            generate(torch, model, job, x, labels, marks, info)
        # Everything the case made is freed inside the profile, so that no
        # block it tracked outlives it (see run_cases); what the level does
        # not return to zero from is kept by a library cache.
        marks.mark("done")
        del model, x, labels, params, leaf
        if job.get("compile"):
            # What Dynamo compiled holds a few bytes (32 in the LoRA rows)
            # until it is reset.
            torch._dynamo.reset()
        gc.collect()
        marks.mark("freed")
        marks.mark(None)
    kernels = set()
    mem, mk = curve(prof, kernels)
    info["sdpa_kernels"] = sorted(kernels)
    phases, end = phase_peaks(mem, mk)
    return phases, info


def input_leaf(torch, model, job, x):
    """The inputs of a frozen job, with the tensor the job differentiates
    to made a leaf that requires grad: the token embeddings (inputs_embeds,
    looked up under no_grad, the ids freed) for a language model and T5's
    encoder, the log-mel features for Whisper, the pixels for ViT. Returns
    (inputs, leaf, the input's name)."""
    if job["kind"] in ("causal", "masked", "seq2seq"):
        with torch.no_grad():
            e = model.get_input_embeddings()(x["input_ids"])
        name, x = "inputs_embeds", {"inputs_embeds": e}
    elif job["kind"] == "speech":
        name = "input_features"
    elif job["kind"] == "vision":
        name = "pixel_values"
    else:
        raise ValueError("frozen job of kind %r" % job["kind"])
    leaf = x[name]
    leaf.requires_grad_(True)
    return x, leaf, name


def train(torch, transformers, model, job, x, labels, leaf, marks, info):
    """Two training steps. A frozen job (job.frozen) runs the model in eval
    mode with every parameter frozen and steps its input as projected
    gradient descent does (x -= lr * x.grad.sign(), then x.grad = None); a
    job without an optimizer (optimizer none) drops the gradients in its
    step phase (zero_grad(set_to_none=True))."""
    if job.get("frozen"):
        model.eval()  # build_model froze the parameters
    else:
        model.train()
    if job["checkpointing"] == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if job.get("compile"):
        # The first (warm-up) step compiles; the measured second step runs
        # the compiled code.
        compile_model(torch, model, job["compile"])
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(torch, transformers, job, trainable)
    ac = (torch.autocast("cpu", dtype=torch.bfloat16) if job["precision"] == "bf16-mixed"
          else contextlib.nullcontext())
    for step in (1, 2):
        tag = "" if step == 2 else "warmup-"
        marks.mark(tag + "forward")
        with ac:
            out = model(**x, labels=labels)
        loss = out.loss
        del out
        marks.mark(tag + "backward")
        loss.backward()
        del loss
        if step == 2:
            info["grad_bytes"] = storage_bytes([p.grad for p in trainable])
            if leaf is not None:
                info["input_grad_bytes"] = storage_bytes([leaf.grad])
        marks.mark(tag + "step")
        if leaf is not None:
            with torch.no_grad():
                leaf.sub_(leaf.grad.sign(), alpha=1e-3)
            leaf.grad = None
        if opt is not None:
            opt.step()
            opt.zero_grad(set_to_none=True)
        else:
            model.zero_grad(set_to_none=True)
        if step == 2:
            info["optimizer_state_bytes"] = storage_bytes(
                [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]) if opt is not None else 0
            marks.mark("after")


def prefill(torch, model, job, x, labels, marks):
    model.eval()
    kw = {}
    if job["kind"] in ("causal", "llava"):
        kw["use_cache"] = False
    if job["kind"] in ("seq2seq", "speech"):
        kw["decoder_input_ids"] = labels
        kw["use_cache"] = False
    with torch.inference_mode():
        for r in (1, 2):
            marks.mark("forward" if r == 2 else "warmup-forward")
            out = model(**x, **kw)
            del out
        marks.mark("after")


def generate(torch, model, job, x, labels, marks, info):
    """model.generate(): greedy, exactly job.generate new tokens (eos
    masked by min_new_tokens); the first forward call is the prefill
    phase, the others decode."""
    model.eval()
    n = job["generate"]
    calls = [0, False]

    def pre(mod, args, kwargs):
        calls[0] += 1
        if calls[1] and calls[0] == 1:
            marks.mark("prefill")
        elif calls[1] and calls[0] == 2:
            marks.mark("decode")

    try:
        h = model.register_forward_pre_hook(pre, with_kwargs=True)
    except TypeError:  # torch < 2.0: no with_kwargs; the hook only counts calls
        h = model.register_forward_pre_hook(lambda mod, args: pre(mod, args, {}))
    with torch.inference_mode():
        # A warm-up call, then the measured one.
        marks.mark("warmup-generate")
        model.generate(**x, max_new_tokens=2, min_new_tokens=2, do_sample=False, pad_token_id=0)
        calls[:] = [0, True]
        marks.mark("prepare")
        out = model.generate(**x, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
        info["generated"] = int(out.shape[1])
        del out
    h.remove()
    marks.mark("after")


# The phases of the measured window. generate() prepares (for an encoder-decoder: runs
# the encoder) before its first forward call, the prefill.
MEASURED = {"train": ("forward", "backward", "step"), "prefill": ("forward",), "generate": ("prepare", "prefill", "decode")}


def run_case(case):
    import torch
    transformers = import_transformers()
    torch.manual_seed(0)
    job = case["job"]
    row = {
        "schema": 1, "id": case["id"], "status": "ok", "error": None, "job": job,
        "env": {"device": "cpu", "torch": torch.__version__, "transformers": transformers.__version__,
                "transformers_commit": transformers_commit(), "python": sys.version.split()[0],
                "torch_package": os.environ.get("GPUMEM_TORCH_PACKAGE", ""),
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")},
        "harness": {"tool": "tools/measure", "commit": os.environ.get("GPUMEM_COMMIT", ""),
                    "command": os.environ.get("GPUMEM_RUN") or "tools/measure/run.sh"
                    " (python3 measure.py --cases <the model's cases>)"},
    }
    if job.get("compile"):
        import torch._functorch.config as fc
        row["env"]["compile"] = {"backend": "inductor", "partitioner": "min_cut_rematerialization_partition",
                                 "activation_memory_budget": fc.activation_memory_budget}
    t0 = time.time()
    try:
        phases, info = run_job(torch, transformers, job)
    except Exception as e:  # recorded, not hidden
        row["status"] = "error"
        row["error"] = ("%s: %s" % (type(e).__name__, e))[:4000]
        row["traceback"] = traceback.format_exc()[-4000:]
        row["seconds"] = round(time.time() - t0, 2)
        return row
    names = MEASURED[job["mode"]]
    window = [p for p in phases if p["phase"] in names]
    # The window's start level: the peak is reset there.
    start = window[0]["start"]
    peak = max(window, key=lambda p: p["peak"])
    build = next(p for p in phases if p["phase"] == "build")
    ready = next(p for p in phases if p["phase"] == "ready")
    freed = next(p for p in phases if p["phase"] == "freed")
    row["model_info"] = info
    row["phases"] = [{"phase": p["phase"], "start": p["start"], "peak": p["peak"], "end": p["end"]}
                     for p in phases]
    row["peak"] = {"allocated": max(p["peak"] for p in window), "reserved": None, "device": None,
                   "phase": peak["phase"], "window_start": start}
    # Checks of the method on every row: after the build the live bytes are
    # the parameters' and buffers' storages, plus the inputs once built.
    row["checks"] = {"after_build": build["end"], "param_plus_buffer_bytes": info["param_bytes"] + info["buffer_bytes"],
                     "after_inputs": ready["start"],
                     "param_buffer_input_bytes": info["param_bytes"] + info["buffer_bytes"] + info["input_bytes"],
                     "leftover": freed["start"]}
    row["seconds"] = round(time.time() - t0, 2)
    return row


# --- validation ----------------------------------------------------------------------------------


def validate():
    """Cases whose live bytes are known to the byte; one row each, with the
    expected and measured figures."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    rows = []

    def measure(fn):
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            marks = Marks(torch)
            marks.mark("run")
            state = fn(marks)
            marks.mark(None)
        mem, mk = curve(prof)
        phases, end = phase_peaks(mem, mk)
        return {p["phase"]: p for p in phases}, end, state

    # 1. Raw storages: 1 MiB and 3 MiB live together, then 0.5 MiB after the first is freed.
    def raw(marks):
        a = torch.empty(1 << 20, dtype=torch.uint8)
        b = torch.empty(3 << 20, dtype=torch.uint8)
        del a
        c = torch.empty(1 << 19, dtype=torch.uint8)
        del b, c
    ph, end, _ = measure(raw)
    rows.append({"case": "raw-storages", "expected_peak": 4 << 20, "measured_peak": ph["run"]["peak"],
                 "expected_end": 0, "measured_end": end,
                 "how": "torch.empty 1 MiB, 3 MiB; free the first; 0.5 MiB; free all"})

    # 2. nn.Linear(1024, 512) forward under no_grad: the output (B x 512 fp32) is the only new storage.
    def linear_fwd(marks):
        lin = torch.nn.Linear(1024, 512)
        x = torch.randn(8, 1024)
        marks.mark("forward")
        with torch.no_grad():
            y = lin(x)
        marks.mark("after")
        return lin, x, y
    ph, end, _ = measure(linear_fwd)
    base = 4 * (1024 * 512 + 512) + 4 * 8 * 1024
    rows.append({"case": "linear-forward-nograd", "expected_peak": base + 4 * 8 * 512,
                 "measured_peak": ph["forward"]["peak"], "expected_end": base + 4 * 8 * 512,
                 "measured_end": ph["after"]["start"],
                 "how": "Linear(1024,512) fp32, x 8x1024: weights+bias+x, plus the 8x512 output"})

    # 3. Linear forward+backward with an explicit contiguous output gradient:
    #    grad_W (512x1024) and grad_b (512) are left in .grad.
    def linear_bwd(marks):
        lin = torch.nn.Linear(1024, 512)
        x = torch.randn(8, 1024)
        g = torch.randn(8, 512)
        marks.mark("forward")
        y = lin(x)
        marks.mark("backward")
        y.backward(g)
        del y
        marks.mark("after")
        return lin, x, g
    ph, end, _ = measure(linear_bwd)
    base = 4 * (1024 * 512 + 512) + 4 * 8 * 1024 + 4 * 8 * 512
    rows.append({"case": "linear-backward-grads", "expected_end": base + 4 * (1024 * 512 + 512),
                 "measured_end": ph["after"]["start"],
                 "how": "after y.backward(g) and del y: weights, x, g and the two .grad tensors"})

    # 4. AdamW state: two fp32 moments per parameter, and a 4-byte float32 step tensor per parameter
    #    (torch/optim/adamw.py in 2.6 creates step as torch.tensor(0.0, dtype=_get_scalar_dtype())).
    for foreach in (False, True):
        def adamw(marks, foreach=foreach):
            lin = torch.nn.Linear(256, 128)
            opt = torch.optim.AdamW(lin.parameters(), lr=1e-3, foreach=foreach)
            lin(torch.randn(4, 256)).sum().backward()
            marks.mark("step")
            opt.step()
            opt.zero_grad(set_to_none=True)
            marks.mark("after")
            return lin, opt
        ph, end, _ = measure(adamw)
        pb = 4 * (256 * 128 + 128)
        rows.append({"case": "adamw-state-" + ("foreach" if foreach else "forloop"),
                     "expected_end": pb + 2 * pb + 2 * 4, "measured_end": ph["after"]["start"],
                     "step_peak": ph["step"]["peak"],
                     "how": "Linear(256,128) after one AdamW step and zero_grad(set_to_none): params, exp_avg, exp_avg_sq, 2 step scalars"})
    # 5. Kernel choices that differ from CUDA's, read from the profiler's op names and output
    #    dtypes (facts for the README's CPU-to-CUDA notes, not figures to match).
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)  # torch >= 2.0
    q = torch.randn(2, 4, 64, 32, requires_grad=True)
    mask = torch.zeros(2, 1, 64, 64)
    kv = torch.randn(2, 1, 64, 32, requires_grad=True)
    for name, kw in (("plain", {}), ("causal", {"is_causal": True}), ("mask", {"attn_mask": mask}),
                     ("dropout", {"dropout_p": 0.1}), ("mask-dropout", {"attn_mask": mask, "dropout_p": 0.1}),
                     ("gqa-causal", {"is_causal": True, "enable_gqa": True})):
        if sdpa is None:
            break
        k = kv if kw.get("enable_gqa") else q
        with profile(activities=[ProfilerActivity.CPU]) as p:
            torch.nn.functional.scaled_dot_product_attention(q, k, k, **kw)
        ops = sorted({e.name for e in p.events() if e.name.startswith("aten::_scaled_dot_product")})
        rows.append({"case": "sdpa-kernel-" + name, "kernel": ops,
                     "how": "F.scaled_dot_product_attention on CPU fp32, q (2,4,64,32) (k, v (2,1,64,32) with enable_gqa), requires_grad: the aten op it dispatches to"})
    x = torch.randn(8, 64, dtype=torch.bfloat16)
    w = torch.randn(64, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = {"linear": torch.nn.functional.linear(x.float(), w).dtype,
               "layer_norm": torch.nn.functional.layer_norm(x, (64,)).dtype,
               "softmax": torch.softmax(x, -1).dtype,
               "log_softmax": torch.log_softmax(x, -1).dtype,
               "cross_entropy": torch.nn.functional.cross_entropy(x, torch.zeros(8, dtype=torch.long)).dtype}
    rows.append({"case": "autocast-cpu-dtypes", "dtypes": {k: str(v) for k, v in out.items()},
                 "how": "torch.autocast('cpu', bfloat16): the dtype each op returns for a bf16 input (fp32 for linear)"})
    for r in rows:
        r["ok"] = all(r["expected_" + k] == r["measured_" + k] for k in ("peak", "end") if "expected_" + k in r)
        r["torch"] = torch.__version__
    return rows


def validate_compile():
    """The compiled loss alone, against the same loss run eagerly: the bytes
    per logit the loss holds at the end of its forward and at its backward's
    peak, over what exists before it (the logits as the loss is given them),
    for the two ways recipes compile it: a cross-entropy given fp32 logits
    (torchtune's unchunked output, upcast in the model, and compile_loss on
    the whole loss) and one chunk's upcast and cross-entropy compiled
    (CEWithChunkedOutputLoss.compute_cross_entropy), 8 chunks of bf16 logits
    made by a linear head, as the chunked output makes them."""
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile
    T, H, V, N = 1024, 64, 4096, 8
    rows = []

    def plain(logits, labels):
        return F.cross_entropy(logits, labels, ignore_index=-100)

    def chunk(logits, labels):
        return F.cross_entropy(logits.float(), labels, ignore_index=-100, reduction="sum")

    def run(case, fn, compiled):
        f = torch.compile(fn) if compiled else fn
        torch._dynamo.reset()
        g = torch.Generator().manual_seed(0)
        y = torch.randint(0, V, (1, T), generator=g)
        w = torch.randn(V, H, generator=g, dtype=torch.bfloat16, requires_grad=True)
        for step in (1, 2):
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                marks = Marks(torch)
                marks.mark("before")
                h = torch.randn(1, T, H, generator=g, dtype=torch.bfloat16, requires_grad=True)
                if case == "plain":
                    logits = [F.linear(h, w).float().reshape(-1, V)]
                    labels = [y.reshape(-1)]
                else:
                    logits = [F.linear(c, w).reshape(-1, V) for c in h.tensor_split(N, dim=1)]
                    labels = [t.reshape(-1) for t in y.chunk(N, dim=1)]
                marks.mark("forward")
                total = 0.0
                for lc, yc in zip(logits, labels):
                    total = total + f(lc, yc)
                del logits, lc
                marks.mark("backward")
                total.backward()
                marks.mark("after")
                del total, h
                w.grad = None
                marks.mark(None)
        mem, mk = curve(prof)
        ph = {p["phase"]: p for p in phase_peaks(mem, mk)[0]}
        base = ph["forward"]["start"]
        return {"forward_end": (ph["forward"]["end"] - base) / (T * V),
                "forward_peak": (ph["forward"]["peak"] - base) / (T * V),
                "backward_peak": (ph["backward"]["peak"] - base) / (T * V)}

    # What the mechanism says, in bytes per logit (model/compile.go): eager
    # saves the fp32 log-probabilities (4) and its backward makes two fp32
    # gradients (8); compiled, the plain loss saves the fp32 logits it is
    # given and makes one fp32 gradient (4), the chunked one saves its bf16
    # chunk and makes one chunk's bf16 gradient (2/8); the eager chunked loss
    # frees the chunks the loop deletes (-2), saves the log-probabilities (+4)
    # and upcasts one chunk at a time (4/8 in forward, 8/8 in backward). The
    # two fp32 row statistics and the labels add 8·T and less: a tolerance of
    # 0.01 bytes per logit.
    expect = {"plain": {"eager": {"forward_end": 0, "forward_peak": 4, "backward_peak": 8},
                        "compiled": {"forward_end": 0, "forward_peak": 0, "backward_peak": 4}},
              "chunked": {"eager": {"forward_end": 2, "forward_peak": 4.5, "backward_peak": 3},
                          "compiled": {"forward_end": 0, "forward_peak": 0, "backward_peak": 0.25}}}
    for case, fn, how in (("plain", plain, "F.cross_entropy given fp32 logits (a bf16 linear's output upcast before the loss), mean"),
                          ("chunked", chunk, "8 chunks of bf16 logits from a linear head (tensor_split of the hidden states), each chunk's .float() and F.cross_entropy(reduction='sum') in the loss, the sum's backward")):
        row = {"case": "compile-loss-" + case, "T": T, "V": V, "how": how,
               "unit": "bytes per logit over the level before the loss (the logits as the loss is given them)"}
        row["eager"] = run(case, fn, False)
        row["compiled"] = run(case, fn, True)
        row["expected"] = expect[case]
        row["ok"] = all(abs(row[m][k] - v) <= 0.01 for m, e in expect[case].items() for k, v in e.items())
        row["torch"] = torch.__version__
        rows.append(row)
    return rows


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", help="one case as JSON ({id, job}); prints its row")
    ap.add_argument("--cases", help="a file of cases, one JSON object a line; prints one row a line as each ends")
    ap.add_argument("--list", action="store_true", help="print the grid's cases, one JSON object a line")
    ap.add_argument("--grid", choices=("main", "torch1"), default="main",
                    help="with --list: the main grid (torch 2, transformers v4.57.1) or the torch-1 grid "
                         "(torch 1.13 and the older transformers that runs there: eager attention, a subset)")
    ap.add_argument("--validate", action="store_true", help="print the validation rows")
    ap.add_argument("--compile", action="store_true",
                    help="with --list: the compiled training cases (build_compile_grid) instead of the grid; "
                         "with --validate: the compiled loss against the eager one (validate_compile)")
    a = ap.parse_args(argv)
    if a.list:
        if a.compile:
            grid = build_compile_grid()
        elif a.grid == "torch1":
            import torch
            grid = build_torch1_grid(torch.__version__.split("+")[0], import_transformers().__version__)
        else:
            grid = build_grid()
        for c in grid:
            print(json.dumps(c, sort_keys=True))
        return 0
    if a.validate:
        for r in (validate_compile() if a.compile else validate()):
            print(json.dumps(r, sort_keys=True))
        return 0
    if a.case:
        print(json.dumps(run_case(json.loads(a.case)), sort_keys=True))
        return 0
    if a.cases:
        with open(a.cases) as f:
            for line in f:
                if line.strip():
                    print(json.dumps(run_case(json.loads(line)), sort_keys=True), flush=True)
        return 0
    ap.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
