#!/usr/bin/python3
"""CPU oracle for gpumem's MMDiT activation model (model/mmdit_act.go):
diffusers' own FluxTransformer2DModel and SD3Transformer2DModel.

What it measures
----------------
diffusers' FluxTransformer2DModel (src/diffusers/models/transformers/
transformer_flux.py) and SD3Transformer2DModel (transformer_sd3.py) at
commit 58eb52c0803ea9af3abec60841c2a093bdf1f951 (0.40.0.dev0), imported
from their source (nothing of diffusers is copied here), built from small
configs with random weights and run in training mode on the CPU, every
parameter trainable, the loss an MSE against a random target as the
training scripts compute it (F.mse_loss(model_pred.float(), target.float())).
Attention is the default processor (FluxAttnProcessor, JointAttnProcessor2_0),
which calls torch's scaled_dot_product_attention (dispatch_attention_fn's
native backend).

The bytes autograd saves for backward during one training forward pass are
counted by storage with tools/oracle/activations.py's Meter (its pack hook,
parameters excluded); forward pre-hooks set the part a new storage counts in:

  embed       the timestep/guidance/pooled-text embeddings, context_embedder,
              x_embedder (Flux) or pos_embed (SD3), the rotary tables (Flux)
  double[i]   FluxTransformerBlock i / JointTransformerBlock i
  single[i]   FluxSingleTransformerBlock i
  norm_out    norm_out (AdaLayerNormContinuous)
  head        proj_out, the unpatchify (SD3), the fp32 casts and the loss

`double0_saved` and `single0_saved` list every storage the first blocks saved,
with shape, dtype, bytes and the autograd nodes that hold it, for review.
`profiler_forward_peak_bytes` and `profiler_infer_peak_bytes` are the CPU
profiler's peak of live bytes during one forward pass with and without
autograd, relative to the bytes live before it (the weights and inputs).
The CPU's scaled_dot_product_attention without a mask runs
_scaled_dot_product_flash_attention_for_cpu, which saves q, k, v, the output
and the fp32 logsumexp (B, heads, S), as CUDA's flash kernel does (which adds
two 8-byte RNG scalars that the Go model ignores).

How to regenerate testdata/oracle/mmdit.json
--------------------------------------------
diffusers needs torch >= 2 and Pillow at import time; it runs in the chroot
of tools/measure (torch 2.6, CPU) with python3-pil added (setup.sh installs
it) and the import stubs of tools/measure/stubs:

  git -C <diffusers git dir> archive 58eb52c0803ea9af3abec60841c2a093bdf1f951 src/diffusers \\
      | tar -x -C $CH/opt/diffusers-src
  CH=/var/tmp/gpumem-trixie; mkdir -p $CH/opt/gpumem-oracle
  cp tools/oracle/activations.py tools/oracle/mmdit.py $CH/opt/gpumem-oracle/
  cp -r tools/measure/stubs $CH/opt/gpumem-oracle/
  chroot $CH env -i PATH=/usr/bin:/bin HOME=/tmp OMP_NUM_THREADS=1 \\
      PYTHONPATH=/opt/gpumem-oracle/stubs:/opt/diffusers-src/src \\
      python3 /opt/gpumem-oracle/mmdit.py > testdata/oracle/mmdit.json

A few seconds on one core; deterministic. The Go test is
`go test ./model/ -run TestMMDiTOracle -v`.
"""

import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import activations as base  # noqa: E402  (Meter, saved_by_op)

from diffusers.models.transformers.transformer_flux import FluxTransformer2DModel  # noqa: E402
from diffusers.models.transformers.transformer_sd3 import SD3Transformer2DModel  # noqa: E402

torch.set_num_threads(1)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
COMMIT = "58eb52c0803ea9af3abec60841c2a093bdf1f951"


class LoraLinear(torch.nn.Module):
    """A LoRA adapter in the op order of PEFT's lora.Linear.forward
    (peft src/peft/tuners/lora/layer.py, commit 5d602fdbf, written from it,
    not copied): the frozen base layer, the input cast to the adapter's
    dtype when they differ (_cast_input_dtype), lora_B(lora_A(x)) times the
    scaling added, the sum cast back to the base's result dtype; dropout 0
    (nn.Identity, the scripts' default lora_dropout)."""

    def __init__(self, base_layer, r, dtype):
        super().__init__()
        self.base_layer = base_layer
        self.lora_A = torch.nn.Linear(base_layer.in_features, r, bias=False, dtype=dtype)
        self.lora_B = torch.nn.Linear(r, base_layer.out_features, bias=False, dtype=dtype)
        torch.nn.init.normal_(self.lora_B.weight)  # nonzero, as after a step
        self.scaling = 1.0

    def forward(self, x):
        result = self.base_layer(x)
        dt = result.dtype
        if x.dtype != self.lora_A.weight.dtype:
            x = x.to(self.lora_A.weight.dtype)
        result = result + self.lora_B(self.lora_A(x)) * self.scaling
        return result.to(dt)


# The target modules of train_dreambooth_lora_flux.py and _sd3.py (diffusers
# 58eb52c0): the attention projections; Flux's script adds the feed-forwards.
LORA_TARGETS = {"flux": ("attn.to_k", "attn.to_q", "attn.to_v", "attn.to_out.0", "attn.add_k_proj",
                         "attn.add_q_proj", "attn.add_v_proj", "attn.to_add_out", "ff.net.0.proj", "ff.net.2",
                         "ff_context.net.0.proj", "ff_context.net.2"),
                "sd3": ("attn.add_k_proj", "attn.add_q_proj", "attn.add_v_proj", "attn.to_add_out", "attn.to_k",
                        "attn.to_out.0", "attn.to_q", "attn.to_v")}


def add_lora(m, arch, r):
    m.requires_grad_(False)
    targets = LORA_TARGETS[arch]
    for name, mod in list(m.named_modules()):
        if isinstance(mod, torch.nn.Linear) and any(name == t or name.endswith("." + t) for t in targets):
            parent = m.get_submodule(name.rsplit(".", 1)[0])
            setattr(parent, name.rsplit(".", 1)[1], LoraLinear(mod, r, torch.float32))


def build(c):
    m = build_base(c)
    if c.get("lora"):
        add_lora(m, c["arch"], c["lora"])
    return m


def build_base(c):
    torch.manual_seed(0)
    if c["arch"] == "flux":
        m = FluxTransformer2DModel(patch_size=1, in_channels=c["in_channels"], num_layers=c["layers"],
                                   num_single_layers=c["single_layers"], attention_head_dim=c["head_dim"],
                                   num_attention_heads=c["heads"], joint_attention_dim=c["joint_dim"],
                                   pooled_projection_dim=c["pooled_dim"], guidance_embeds=c["guidance"],
                                   axes_dims_rope=tuple(c["rope_axes"]))
    else:
        D = c["heads"] * c["head_dim"]
        m = SD3Transformer2DModel(sample_size=c["latent"], patch_size=2, in_channels=c["in_channels"],
                                  num_layers=c["layers"], attention_head_dim=c["head_dim"],
                                  num_attention_heads=c["heads"], joint_attention_dim=c["joint_dim"],
                                  caption_projection_dim=D, pooled_projection_dim=c["pooled_dim"],
                                  out_channels=c["in_channels"], pos_embed_max_size=c["pos_max"],
                                  qk_norm=c["qk_norm"], dual_attention_layers=tuple(c["dual"]))
    m = m.to(DTYPES[c["dtype"]])
    m.train()
    return m


def inputs(c):
    torch.manual_seed(1)
    dt = DTYPES[c["dtype"]]
    B, T = c["batch"], c["text"]
    enc = torch.randn(B, T, c["joint_dim"], dtype=dt)
    pooled = torch.randn(B, c["pooled_dim"], dtype=dt)
    t = torch.rand(B, dtype=dt)
    if c["arch"] == "flux":
        h, w = c["latent"] // 2, c["latent"] // 2  # packed 2x2 latent patches
        x = torch.randn(B, h * w, c["in_channels"], dtype=dt)
        img_ids = torch.zeros(h, w, 3)
        img_ids[..., 1] = torch.arange(h)[:, None]
        img_ids[..., 2] = torch.arange(w)[None, :]
        kw = dict(hidden_states=x, encoder_hidden_states=enc, pooled_projections=pooled, timestep=t,
                  img_ids=img_ids.reshape(h * w, 3), txt_ids=torch.zeros(T, 3), return_dict=False)
        if c["guidance"]:
            kw["guidance"] = torch.full((B,), 3.5, dtype=dt)
        return kw, x
    x = torch.randn(B, c["in_channels"], c["latent"], c["latent"], dtype=dt)
    return dict(hidden_states=x, encoder_hidden_states=enc, pooled_projections=pooled, timestep=t,
                return_dict=False), x


def measure(c):
    m = build(c)
    kw, x = inputs(c)
    meter = base.Meter(m)

    def phase(p):
        def hook(mod, args, kwargs=None):
            meter.phase = p
        return hook

    hooks = []
    for i, blk in enumerate(m.transformer_blocks):
        hooks.append(blk.register_forward_pre_hook(phase("double%d" % i)))
    for i, blk in enumerate(getattr(m, "single_transformer_blocks", [])):
        hooks.append(blk.register_forward_pre_hook(phase("single%d" % i)))
    hooks.append(m.norm_out.register_forward_pre_hook(phase("norm_out")))
    hooks.append(m.proj_out.register_forward_pre_hook(phase("head")))
    meter.phase = "embed"
    base.METER = meter
    with torch.autograd.graph.saved_tensors_hooks(meter.pack, lambda t: t):
        out = m(**kw)[0]
        if not out.requires_grad:
            raise RuntimeError("output needs grad")
        target = torch.randn_like(out)
        loss = F.mse_loss(out.float(), target.float())
    base.METER = None
    for h in hooks:
        h.remove()
    ops = base.saved_by_op(loss.grad_fn)
    # LayerNorm's mean and rstd (NativeLayerNormBackward0.result1/2) of a
    # 16-bit input: 16-bit on the CPU, fp32 on CUDA (activations.py's
    # correction, which needs the statistics marked).
    for k in meter.saved:
        if any(o.startswith("NativeLayerNormBackward0.result") for o in ops.get(k, [])):
            meter.ln_stats.add(k)
    raw = meter.totals()
    cuda = meter.totals(cuda=True, ops=ops)
    log = {}
    for k, (b, nb, d, sh) in meter.saved.items():
        log.setdefault(b, []).append([sh, d, nb, sorted(set(ops.get(k, [])))])
    loss.backward()
    nd = len(m.transformer_blocks)
    ns = len(getattr(m, "single_transformer_blocks", []))

    def parts(r):
        return {"double": [r.get("double%d" % i, 0) for i in range(nd)],
                "single": [r.get("single%d" % i, 0) for i in range(ns)],
                "embed": r.get("embed", 0), "norm_out": r.get("norm_out", 0), "head": r.get("head", 0)}

    rec = {"raw": parts(raw), "cuda": parts(cuda),
           "double0_saved": sorted(log.get("double0", []), key=lambda r: (-r[2], r[0]))}
    if ns:
        rec["single0_saved"] = sorted(log.get("single0", []), key=lambda r: (-r[2], r[0]))
    return rec


def profile_peak(c, train):
    """The CPU profiler's peak of live bytes (docs/reference.md#peak-of-live-bytes)
    during one forward pass, with (train) or without autograd, relative to the
    bytes live before it (the weights and the inputs)."""
    from torch.profiler import profile, ProfilerActivity
    m = build(c)
    kw, _ = inputs(c)
    with (torch.enable_grad() if train else torch.no_grad()):
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
            out = m(**kw)[0]
            del out
    ev = sorted((e.start_ns(), e.nbytes()) for e in p.profiler.kineto_results.events() if e.name() == "[memory]")
    cur = peak = 0
    for _, n in ev:
        cur += n
        peak = max(peak, cur)
    return peak


def grid():
    # Flux: (batch, latent side, text tokens, heads, head_dim, rope axes, guidance)
    for (b, lat, T, H, hd, axes, g) in ((1, 8, 8, 2, 16, (4, 6, 6), False), (2, 12, 6, 3, 16, (4, 6, 6), True)):
        for dt in ("fp32", "bf16"):
            yield dict(arch="flux", batch=b, latent=lat, text=T, heads=H, head_dim=hd, rope_axes=list(axes),
                       guidance=g, in_channels=16, joint_dim=24, pooled_dim=20, layers=2, single_layers=2, dtype=dt)
    # SD3: (batch, latent side, text tokens, heads, head_dim, qk_norm, dual-attention layers)
    for (b, lat, T, H, hd, qk, dual) in ((1, 8, 7, 2, 16, None, []), (2, 12, 5, 2, 16, "rms_norm", [0])):
        for dt in ("fp32", "bf16"):
            yield dict(arch="sd3", batch=b, latent=lat, text=T, heads=H, head_dim=hd, qk_norm=qk, dual=dual,
                       in_channels=4, joint_dim=24, pooled_dim=20, pos_max=16, layers=3, dtype=dt)
    # LoRA rank 4 on the scripts' targets, fp32 adapters (cast_training_params)
    # on an fp32 or bf16 base.
    for dt in ("fp32", "bf16"):
        yield dict(arch="flux", batch=2, latent=12, text=6, heads=3, head_dim=16, rope_axes=[4, 6, 6], guidance=True,
                   in_channels=16, joint_dim=24, pooled_dim=20, layers=2, single_layers=2, dtype=dt, lora=4)
        yield dict(arch="sd3", batch=2, latent=12, text=5, heads=2, head_dim=16, qk_norm="rms_norm", dual=[0],
                   in_channels=4, joint_dim=24, pooled_dim=20, pos_max=16, layers=3, dtype=dt, lora=4)
    # Wider: 256 image tokens and 32 text tokens of 128 channels, where the
    # blocks' tensors outweigh the embeddings (for the profiler peaks).
    for (b, dt) in ((1, "fp32"), (2, "bf16")):
        yield dict(arch="flux", batch=b, latent=32, text=32, heads=4, head_dim=32, rope_axes=[8, 12, 12],
                   guidance=True, in_channels=16, joint_dim=64, pooled_dim=32, layers=2, single_layers=2, dtype=dt)
        yield dict(arch="sd3", batch=b, latent=32, text=32, heads=4, head_dim=32, qk_norm="rms_norm" if b == 2 else None,
                   dual=[], in_channels=16, joint_dim=64, pooled_dim=32, pos_max=32, layers=3, dtype=dt)


def main():
    cases = [{"config": c, "saved": measure(c), "profiler_forward_peak_bytes": profile_peak(c, True),
              "profiler_infer_peak_bytes": profile_peak(c, False)} for c in grid()]
    json.dump({"torch": torch.__version__.split("+")[0], "diffusers_commit": COMMIT,
               "attention": "scaled_dot_product_attention (CPU flash kernel)", "cases": cases},
              sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
