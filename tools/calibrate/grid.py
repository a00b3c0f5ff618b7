"""The calibration grid: which jobs to measure, in which order.

Pure Python (no torch, no transformers), so that the grid can be listed and
checked anywhere. Each case is a plain dict whose "job" uses the vocabulary
of `gpumem estimate` (model, mode train/prefill/generate, batch, seq,
generate, grad_accum, precision, optimizer, attention, checkpointing,
lora_rank); see tools/calibrate/README.md for the row schema.

Model configs come from the embedded catalog, model/configs/<name>.json, read
directly. A model may apply overrides to a catalog config (the small
Mixtral-style MoE shrinks mixtral-8x7b); the resulting config is stored in
every row, so that gpumem can rebuild the exact model with FromHFConfig.
"""

import json
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CATALOG = os.path.join(ROOT, "model", "configs")

# Kinds of model, by Hugging Face model_type: how the harness builds inputs.
KIND_BY_TYPE = {
    "llama": "causal", "qwen2": "causal", "mistral": "causal", "mixtral": "causal",
    "qwen2_moe": "causal", "gpt2": "causal", "opt": "causal", "gemma": "causal",
    "gemma2": "causal", "phi": "causal", "phi3": "causal",
    "bert": "masked", "roberta": "masked",
    "t5": "seq2seq", "mt5": "seq2seq",
    "whisper": "speech",
    "vit": "vision",
    "llava": "llava",
}

# The models of the grid. "catalog" names model/configs/<catalog>.json;
# "overrides" change keys of that config (a derived model); "seq" is the
# sequence length of its batch ladder; "max_seq" caps its sequence ladder;
# "big" models start at tier 4 (they take minutes to build and most of an
# H100); "train" lists the precisions it can train in on an 80 GB GPU (the
# others are tried once, at batch 1, to record the OOM edge).
MODELS = [
    {"name": "gpt2", "catalog": "gpt2", "seq": 1024, "max_seq": 1024},
    {"name": "opt-350m", "catalog": "opt-350m", "seq": 2048, "max_seq": 2048},
    {"name": "qwen2.5-0.5b", "catalog": "qwen2.5-0.5b", "seq": 2048, "max_seq": 32768},
    {"name": "llama-3.2-1b", "catalog": "llama-3.2-1b", "seq": 2048, "max_seq": 65536},
    {"name": "bert-large", "catalog": "bert-large", "seq": 512, "max_seq": 512},
    {"name": "t5-base", "catalog": "t5-base", "seq": 512, "max_seq": 2048},
    {"name": "whisper-small", "catalog": "whisper-small", "seq": 256, "max_seq": 448},
    {"name": "vit-large-patch16-224", "catalog": "vit-large-patch16-224", "seq": None, "max_seq": None},
    # A small Mixtral-style MoE: mixtral-8x7b's layout (8 experts, top-2,
    # GQA 4:1) at 1/4 of its width and 1/4 of its depth, about 0.8B
    # parameters, so that every training policy fits.
    {"name": "mixtral-small", "catalog": "mixtral-8x7b", "seq": 2048, "max_seq": 32768,
     "overrides": {"hidden_size": 1024, "intermediate_size": 3584, "num_hidden_layers": 8,
                   "num_attention_heads": 16, "num_key_value_heads": 4}},
    {"name": "llama-3.2-3b", "catalog": "llama-3.2-3b", "seq": 2048, "max_seq": 65536, "big": True},
    {"name": "qwen2.5-3b", "catalog": "qwen2.5-3b", "seq": 2048, "max_seq": 32768, "big": True},
    {"name": "llama-3.1-8b", "catalog": "llama-3.1-8b", "seq": 2048, "max_seq": 65536, "big": True,
     "train": ["bf16"]},
    {"name": "llava-1.5-7b", "catalog": "llava-1.5-7b", "seq": 512, "max_seq": 2048, "big": True,
     "train": ["bf16"], "lora_targets": ["q_proj", "v_proj"]},
    {"name": "qwen1.5-moe-a2.7b", "catalog": "qwen1.5-moe-a2.7b", "seq": 2048, "max_seq": 8192, "big": True,
     "train": []},
]

BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
GEN_PROMPT, GEN_NEW = 512, 128

# Training policies: (precision, optimizer), as gpumem spells them.
TRAIN_POLICIES = [
    ("bf16-mixed", "adamw"),   # the anchor: torch AMP bf16, torch.optim.AdamW (foreach)
    ("fp32", "adamw"),
    ("bf16", "adamw"),         # pure bf16: weights, grads and states in bf16
    ("bf16-mixed", "adafactor"),  # transformers.optimization.Adafactor, beta1=None
    ("bf16-mixed", "sgd"),     # torch.optim.SGD, momentum 0
    ("bf16-mixed", "adamw_torch_fused"),
]


def read_catalog(name):
    """Returns the catalog config model/configs/<name>.json without its
    _gpumem_* keys."""
    with open(os.path.join(CATALOG, name + ".json")) as f:
        d = json.load(f)
    return {k: v for k, v in d.items() if not k.startswith("_gpumem")}


def model_config(m):
    """Returns the config dict of a grid model: the catalog's, with the
    model's overrides applied."""
    c = read_catalog(m["catalog"])
    c.update(m.get("overrides", {}))
    return c


def kind_of(config):
    return KIND_BY_TYPE.get(config.get("model_type"), "causal")


REQUIRED = {
    "causal": [("hidden_size", "n_embd"), ("num_hidden_layers", "n_layer"), ("vocab_size",)],
    "masked": [("hidden_size",), ("num_hidden_layers",), ("vocab_size",)],
    "seq2seq": [("d_model",), ("num_layers",), ("vocab_size",)],
    "speech": [("d_model",), ("encoder_layers",), ("decoder_layers",), ("vocab_size",)],
    "vision": [("hidden_size",), ("num_hidden_layers",), ("image_size",), ("patch_size",)],
    "llava": [("text_config",), ("vision_config",)],
}


def check_config(name, config):
    """Returns a list of problems with a grid model's config (empty: fine):
    model_type known, architectures given, the keys the harness reads."""
    problems = []
    mt = config.get("model_type")
    if mt not in KIND_BY_TYPE:
        problems.append("%s: model_type %r is not one the harness builds inputs for" % (name, mt))
    if not config.get("architectures"):
        problems.append("%s: no architectures" % name)
    for alts in REQUIRED.get(kind_of(config), []):
        if not any(k in config for k in alts):
            problems.append("%s: missing %s" % (name, " or ".join(alts)))
    return problems


def slug(s):
    return re.sub(r"[^a-z0-9.]+", "-", s.lower()).strip("-")


def case_id(job):
    """A stable, readable id for a job: the fields in a fixed order."""
    parts = [job["model"], job["mode"], job["precision"]]
    if job["mode"] == "train":
        parts.append(job["optimizer"])
    parts.append(job["attention"])
    if job["mode"] == "train":
        parts.append("ckpt-" + job["checkpointing"])
        if job.get("lora_rank"):
            parts.append("lora%d" % job["lora_rank"])
        if job.get("grad_accum", 1) > 1:
            parts.append("ga%d" % job["grad_accum"])
    parts.append("b%d" % job["batch"])
    if job.get("seq") is not None:
        parts.append("s%d" % job["seq"])
    if job["mode"] == "generate":
        parts.append("g%d" % job["generate"])
    return "/".join(parts)


def series_key(job, vary):
    """The id of a job's ladder: every field but the one the ladder varies
    ("batch" or "seq"), so that an OOM at one rung prunes the larger ones."""
    j = dict(job)
    j[vary] = 0
    return vary + ":" + case_id(j)


def gpumem_flags(job, m):
    """The `gpumem estimate` command line for a job, or None when the CLI
    cannot express it (a derived config): then the row's job.config says
    everything."""
    if m.get("overrides"):
        return None
    f = ["--model", m["catalog"]]
    if job["mode"] == "train":
        f += ["--train", "--optimizer", job["optimizer"], "--checkpointing", job["checkpointing"]]
        if job.get("lora_rank"):
            f += ["--lora-rank", str(job["lora_rank"])]
            if job.get("lora_targets"):
                f += ["--lora-targets", ",".join(job["lora_targets"])]
        if job.get("grad_accum", 1) > 1:
            f += ["--grad-accum", str(job["grad_accum"])]
        if job.get("dropout"):
            f += ["--dropout"]
    else:
        f += ["--infer"]
        if job["mode"] == "generate":
            f += ["--generate", str(job["generate"])]
    f += ["--batch", str(job["batch"])]
    if job.get("seq") is not None:
        f += ["--seq", str(job["seq"])]
    if job.get("images"):
        f += ["--images", str(job["images"])]
    f += ["--precision", job["precision"], "--attention", job["attention"]]
    return " ".join(f)


def make_job(m, mode, batch, seq, precision, attention, optimizer=None, checkpointing="none",
             lora_rank=0, grad_accum=1, generate=0):
    config = model_config(m)
    kind = kind_of(config)
    job = {
        "model": m["name"], "catalog": m["catalog"], "kind": kind, "mode": mode,
        "batch": batch, "seq": seq if kind != "vision" else None,
        "generate": generate if mode == "generate" else 0,
        "grad_accum": grad_accum, "precision": precision,
        "optimizer": optimizer if mode == "train" else None,
        "attention": attention,
        "checkpointing": checkpointing if mode == "train" else "none",
        "lora_rank": lora_rank,
        "lora_targets": m.get("lora_targets") if lora_rank else None,
        "images": 1 if kind == "llava" else 0,
        # Encoder-decoders: the encoder's input and the decoder's tokens.
        # T5 encodes seq tokens; it decodes seq tokens in training and
        # prefill, and starts generation from one decoder_start token.
        # Whisper always encodes 30 s (1500 frames after its convolutions);
        # its decoder sees seq tokens (the prompt when generating).
        "encoder_seq": {"seq2seq": seq, "speech": 1500}.get(kind),
        "decoder_seq": ({"seq2seq": 1 if mode == "generate" else seq, "speech": seq}.get(kind)),
        "dropout": _dropout(config),
        "config_overrides": m.get("overrides"),
        "config": config,
    }
    return job


def _dropout(config):
    """Whether the model trains with dropout > 0 by its config's defaults
    (the value for gpumem's Job.Dropout); the keys each family reads, with
    transformers' defaults when the catalog config leaves them out."""
    mt = config.get("model_type")
    defaults = {"gpt2": {"resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1},
                "bert": {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1},
                "opt": {"dropout": 0.1, "attention_dropout": 0.0},
                "t5": {"dropout_rate": 0.1},
                "whisper": {"dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0},
                "vit": {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}}.get(mt, {})
    keys = dict(defaults)
    for k in list(config):
        if "dropout" in k or k.endswith("pdrop"):
            keys[k] = config[k]
    return any(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in keys.values())


def _case(m, tier, job, vary=None):
    return {
        "id": case_id(job), "tier": tier, "job": job,
        "series": series_key(job, vary) if vary else None, "vary": vary,
        "gpumem_flags": gpumem_flags(job, m),
    }


def build_grid(max_tier=4):
    """Returns the cases in the order the driver runs them: by tier, and
    within a ladder by increasing batch or sequence length.

    tier 1: one anchor case per model and mode (train bf16-mixed AdamW sdpa,
            prefill and generate in bf16);
    tier 2: the anchor's variants: every training policy, eager attention,
            full checkpointing, LoRA, fp32 inference;
    tier 3: batch ladders and sequence ladders to the first OOM;
    tier 4: the big models (3B, 8B, LLaVA-7B, Qwen-MoE-14B), the same
            structure, ladders included.
    """
    cases = []
    for m in MODELS:
        base = 4 if m.get("big") else 1
        seq = m["seq"]
        kind = kind_of(model_config(m))
        train_ok = m.get("train")
        t1, t2, t3 = (4, 4, 4) if m.get("big") else (1, 2, 3)
        anchor_b = 1 if m.get("big") else 4
        decoder = kind in ("causal", "llava")

        def tr(prec, opt, **kw):
            return make_job(m, "train", kw.pop("batch", anchor_b), kw.pop("seq", seq), prec,
                            kw.pop("attention", "sdpa"), optimizer=opt, **kw)

        # Tier 1: anchors.
        anchor_prec = "bf16-mixed" if train_ok is None or "bf16-mixed" in train_ok else "bf16"
        if train_ok != []:
            cases.append(_case(m, t1, tr(anchor_prec, "adamw")))
        cases.append(_case(m, t1, make_job(m, "prefill", 1, seq, "bf16", "sdpa")))
        if decoder or kind in ("seq2seq", "speech"):
            gseq = min(GEN_PROMPT, seq) if kind != "speech" else 4
            gnew = GEN_NEW if kind != "speech" else 128
            cases.append(_case(m, t1, make_job(m, "generate", 1, gseq, "bf16", "sdpa", generate=gnew)))

        # Tier 2: variants at the anchor batch.
        if train_ok != []:
            for prec, opt in TRAIN_POLICIES:
                if (prec, opt) == (anchor_prec, "adamw"):
                    continue
                if train_ok is not None and prec not in train_ok:
                    if opt == "adamw":  # the OOM edge, once
                        cases.append(_case(m, t2, tr(prec, opt, batch=1)))
                    continue
                cases.append(_case(m, t2, tr(prec, opt)))
            cases.append(_case(m, t2, tr(anchor_prec, "adamw", attention="eager")))
            cases.append(_case(m, t2, tr(anchor_prec, "adamw", checkpointing="full")))
            cases.append(_case(m, t2, tr(anchor_prec, "adamw", grad_accum=4)))
            if decoder:
                cases.append(_case(m, t2, tr("bf16", "adamw", lora_rank=16)))
                cases.append(_case(m, t2, tr("bf16", "adamw", lora_rank=16, checkpointing="full")))
        cases.append(_case(m, t2, make_job(m, "prefill", 1, seq, "bf16", "eager")))
        if not m.get("big"):
            cases.append(_case(m, t2, make_job(m, "prefill", 1, seq, "fp32", "sdpa")))
        if decoder:
            cases.append(_case(m, t2, make_job(m, "generate", 1, min(GEN_PROMPT, seq), "bf16", "eager",
                                               generate=GEN_NEW)))

        # Tier 3: ladders to the first OOM.
        ladders = []
        if train_ok != []:
            ladders.append(lambda b: tr(anchor_prec, "adamw", batch=b))
            ladders.append(lambda b: tr(anchor_prec, "adamw", batch=b, checkpointing="full"))
            ladders.append(lambda b: tr(anchor_prec, "adamw", batch=b, attention="eager"))
            if decoder:
                ladders.append(lambda b: tr("bf16", "adamw", batch=b, lora_rank=16))
        ladders.append(lambda b: make_job(m, "prefill", b, seq, "bf16", "sdpa"))
        if decoder or kind in ("seq2seq", "speech"):
            gseq = min(GEN_PROMPT, seq) if kind != "speech" else 4
            ladders.append(lambda b: make_job(m, "generate", b, gseq, "bf16", "sdpa", generate=GEN_NEW))
        for make in ladders:
            for b in BATCHES:
                cases.append(_case(m, t3, make(b), vary="batch"))
        if m["max_seq"] and m["max_seq"] > (seq or 0) and train_ok != []:
            for attn in ("sdpa", "eager"):
                s = seq * 2
                while s <= m["max_seq"]:
                    cases.append(_case(m, t3, tr(anchor_prec, "adamw", batch=1, seq=s, attention=attn), vary="seq"))
                    s *= 2
    kept, out = {}, []
    for c in sorted(cases, key=lambda c: c["tier"]):  # stable: grid order within a tier
        if c["tier"] > max_tier:
            continue
        if c["id"] in kept:
            # An anchor that is also a ladder's rung runs once, early, and
            # belongs to the ladder (its OOM prunes the larger rungs).
            k = kept[c["id"]]
            if not k["series"]:
                k["series"], k["vary"] = c["series"], c["vary"]
            continue
        kept[c["id"]] = c
        out.append(c)
    return out


def check_grid():
    """Returns the problems found in the grid's model configs."""
    problems = []
    for m in MODELS:
        try:
            problems += check_config(m["name"], model_config(m))
        except (OSError, ValueError) as e:
            problems.append("%s: %s" % (m["name"], e))
    return problems
