#!/usr/bin/python3
"""CPU oracle for gpumem's Mamba activation model (model/mamba.go, kernel
"sequential").

What it measures
----------------
transformers' own MambaForCausalLM (src/transformers/models/mamba/
modeling_mamba.py, v4.57.1, commit 8cb5963cc22174954e7dca2c0a3320b7dc2f4edc),
built from a config dict with random weights and run in training mode on the
CPU. Without the mamba_ssm and causal_conv1d kernels, MambaMixer.forward takes
MambaMixer.slow_forward, and with use_mambapy False (MambaConfig's default) its
recurrence is the sequential loop over the sequence. Nothing of transformers is
copied here: the model is imported from its source tree.

The bytes autograd saves for backward during one training forward pass are
counted by storage with tools/oracle/activations.py's Meter (its pack hook,
parameters excluded); forward pre-hooks on the embedding, each MambaBlock,
norm_f and lm_head set the part a new storage counts in:

  layers[i]   block i (its input, saved first by block i's norm, counts here)
  embedding   the embedding lookup
  final_norm  norm_f
  head        lm_head, the fp32 upcast and the loss
  ids         the int64 token ids and labels

`layer0_saved` lists every storage block 0 saved, with shape, dtype, bytes and
the autograd nodes that hold it, for review.

How to regenerate testdata/oracle/mamba.json
--------------------------------------------
It needs torch >= 2.1 (transformers v4.57.1 refuses older torch), so it runs in
the chroot of tools/measure (tools/measure/setup.sh makes it; torch 2.6, CPU):

  CH=/var/tmp/gpumem-trixie; mkdir -p $CH/opt/gpumem-oracle
  cp tools/oracle/activations.py tools/oracle/mamba.py $CH/opt/gpumem-oracle/
  chroot $CH env -i PATH=/usr/bin:/bin HOME=/tmp OMP_NUM_THREADS=1 \\
      PYTHONPATH=/opt/gpumem/stubs:/opt/gpumem/transformers-src/src \\
      python3 /opt/gpumem-oracle/mamba.py > testdata/oracle/mamba.json

A few seconds on one core; deterministic. The Go test is
`go test ./model/ -run TestMambaOracle -v`.

With --mamba2 it measures transformers' own Mamba2ForCausalLM instead
(modeling_mamba2.py, same commit), whose Mamba2Mixer takes torch_forward (the
chunked SSD in plain torch) without the mamba_ssm kernels, over six cases
(sequences that are and are not a multiple of chunk_size, one to three
groups, fp32 and bf16):

  chroot ... python3 /opt/gpumem-oracle/mamba.py --mamba2 > testdata/oracle/mamba2.json
  go test ./model/ -run TestMamba2Oracle -v

With --jamba it measures transformers' own JambaForCausalLM (modeling_jamba.py,
same commit) with use_mamba_kernels false (JambaMambaMixer.slow_forward): four
layers, attention at the odd ones, MoE at the odd or at the even ones, eager
and SDPA attention, fp32 and bf16 (layer1_saved lists an attention layer's
storages too):

  chroot ... python3 /opt/gpumem-oracle/mamba.py --jamba > testdata/oracle/jamba.json
  go test ./model/ -run TestJambaOracle -v

With --zamba it measures transformers' own ZambaForCausalLM and
Zamba2ForCausalLM (modeling_zamba.py, modeling_zamba2.py, same commit) without
the kernels (ZambaMambaMixer.slow_forward with use_mamba_kernels false,
Zamba2MambaMixer.torch_forward): four layers, the hybrid at layer 2 (Zamba's
layer types; Zamba2 given the same list), eager and SDPA attention (Zamba
eager only: it has no SDPA path), fp32 and bf16, Zamba2 with and without the
shared attention adapters. layers[i] counts the whole decoder layer: for the
hybrid, the shared block's invocation, the per-layer linear and the Mamba
decoder (layer2_saved lists its storages). Without /proc in the chroot UCX
prints one error line on stdout; drop it:

  chroot ... python3 /opt/gpumem-oracle/mamba.py --zamba | grep -v 'UCX  ERROR' > testdata/oracle/zamba.json
  go test ./model/ -run TestZambaOracle -v
"""

import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import activations as base  # noqa: E402  (Meter, saved_by_op)

from transformers import (JambaConfig, JambaForCausalLM, Mamba2Config, Mamba2ForCausalLM, MambaConfig,  # noqa: E402
                          MambaForCausalLM, Zamba2Config, Zamba2ForCausalLM, ZambaConfig, ZambaForCausalLM)
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()
torch.set_num_threads(1)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def build(c):
    torch.manual_seed(0)
    if c.get("arch") == "jamba":
        cfg = JambaConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["intermediate"],
                          num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                          num_key_value_heads=c["kv_heads"], num_experts=c["experts"], num_experts_per_tok=c["active"],
                          expert_layer_period=2, expert_layer_offset=c["expert_offset"], attn_layer_period=2,
                          attn_layer_offset=1, mamba_d_state=c["state"], mamba_d_conv=c["conv"],
                          mamba_expand=c["expand"], mamba_dt_rank=c["dt_rank"], use_mamba_kernels=False,
                          use_cache=False, attn_implementation=c["attention"])
        m = JambaForCausalLM(cfg).to(DTYPES[c["dtype"]])
        m.train()
        return m
    if c.get("arch") == "zamba":
        cfg = ZambaConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["intermediate"],
                          num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                          num_key_value_heads=c["kv_heads"], n_mamba_heads=c["mamba_heads"], mamba_d_state=c["state"],
                          mamba_d_conv=c["conv"], mamba_expand=c["expand"], mamba_dt_rank=c["dt_rank"],
                          attn_layer_period=6, attn_layer_offset=4, use_mamba_kernels=False, use_cache=False,
                          attn_implementation=c["attention"])
        m = ZambaForCausalLM(cfg).to(DTYPES[c["dtype"]])
        m.train()
        return m
    if c.get("arch") == "zamba2":
        cfg = Zamba2Config(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["intermediate"],
                           num_hidden_layers=c["layers"], layers_block_type=c["types"],
                           num_attention_heads=c["heads"], num_key_value_heads=c["kv_heads"],
                           n_mamba_heads=c["mamba_heads"], mamba_d_state=c["state"], mamba_d_conv=c["conv"],
                           mamba_expand=c["expand"], mamba_ngroups=c["groups"], chunk_size=c["chunk"],
                           num_mem_blocks=1, adapter_rank=c["adapter_rank"],
                           use_shared_attention_adapter=c["attn_adapter"], use_cache=False,
                           attn_implementation=c["attention"])
        m = Zamba2ForCausalLM(cfg).to(DTYPES[c["dtype"]])
        m.train()
        return m
    if c.get("arch") == "mamba2":
        cfg = Mamba2Config(vocab_size=c["vocab"], hidden_size=c["hidden"], state_size=c["state"],
                           num_hidden_layers=c["layers"], expand=c["expand"], conv_kernel=c["conv"],
                           num_heads=c["heads"], head_dim=c["head_dim"], n_groups=c["groups"],
                           chunk_size=c["chunk"], use_cache=False)
        m = Mamba2ForCausalLM(cfg).to(DTYPES[c["dtype"]])
        m.train()
        return m
    cfg = MambaConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], state_size=c["state"],
                      num_hidden_layers=c["layers"], expand=c["expand"], conv_kernel=c["conv"],
                      time_step_rank=c["dt_rank"], use_mambapy=False, use_cache=False)
    m = MambaForCausalLM(cfg).to(DTYPES[c["dtype"]])
    m.train()
    return m


def measure(c):
    m = build(c)
    torch.manual_seed(1)
    ids = torch.randint(0, c["vocab"], (c["batch"], c["seq"]))
    meter = base.Meter(m)

    def phase(p):
        def hook(mod, args):
            meter.phase = p
        return hook

    hf = c.get("arch") in ("jamba", "zamba", "zamba2")
    body = m.model if hf else m.backbone
    emb = body.embed_tokens if hf else body.embeddings
    fin = body.final_layernorm if hf else body.norm_f
    hooks = [emb.register_forward_pre_hook(phase("embedding")),
             fin.register_forward_pre_hook(phase("final_norm")),
             m.lm_head.register_forward_pre_hook(phase("head"))]
    for i, blk in enumerate(body.layers):
        hooks.append(blk.register_forward_pre_hook(phase("layer%d" % i)))
    base.METER = meter
    with torch.autograd.graph.saved_tensors_hooks(meter.pack, lambda t: t):
        out = m(input_ids=ids, labels=ids, use_cache=False)
    base.METER = None
    for h in hooks:
        h.remove()
    ops = base.saved_by_op(out.loss.grad_fn)
    raw = meter.totals()
    log = {}
    for k, (b, nb, d, sh) in meter.saved.items():
        log.setdefault(b, []).append([sh, d, nb, sorted(set(ops.get(k, [])))])
    out.loss.backward()  # the graph must be consistent
    rec = {"layers": [raw.get("layer%d" % i, 0) for i in range(c["layers"])]}
    for k in ("embedding", "final_norm", "head", "ids"):
        rec[k] = raw.get(k, 0)
    rec["layer0_saved"] = sorted(log.get("layer0", []), key=lambda r: (-r[2], r[0]))
    if c.get("arch") == "jamba":
        rec["layer1_saved"] = sorted(log.get("layer1", []), key=lambda r: (-r[2], r[0]))
    if c.get("arch") in ("zamba", "zamba2"):
        rec["layer2_saved"] = sorted(log.get("layer2", []), key=lambda r: (-r[2], r[0]))
    return rec


def grid():
    # (batch, seq, hidden, state, expand, conv, dt_rank)
    for (b, s, h, n, x, k, r) in ((1, 8, 64, 16, 2, 4, 4), (2, 16, 64, 16, 2, 4, 4), (2, 12, 48, 8, 2, 4, 3),
                                  (1, 24, 32, 16, 3, 3, 2)):
        for dt in ("fp32", "bf16"):
            yield dict(batch=b, seq=s, hidden=h, state=n, expand=x, conv=k, dt_rank=r, vocab=128, layers=2, dtype=dt)


def grid2():
    # (batch, seq, hidden, state, heads, head_dim, groups, chunk): seq a
    # multiple of the chunk and not (padding), one and two groups.
    for (b, s, h, n, nh, hd, g, ck) in ((1, 16, 32, 8, 4, 16, 1, 8), (2, 12, 32, 8, 4, 16, 2, 8),
                                        (1, 20, 48, 16, 6, 16, 3, 16)):
        for dt in ("fp32", "bf16"):
            yield dict(arch="mamba2", batch=b, seq=s, hidden=h, state=n, expand=2, conv=4, heads=nh, head_dim=hd,
                       groups=g, chunk=ck, vocab=128, layers=2, dtype=dt)


def grid3():
    # Layers: 0 Mamba, 1 attention, 2 Mamba, 3 attention; MoE at the odd
    # (expert_offset 1) or even (0) layers.
    for (b, s, h, I, H, KV, E, k, off) in ((1, 8, 32, 48, 4, 2, 4, 2, 1), (2, 8, 32, 48, 4, 4, 3, 1, 0)):
        for dt in ("fp32", "bf16"):
            for att in ("eager", "sdpa"):
                yield dict(arch="jamba", batch=b, seq=s, hidden=h, intermediate=I, heads=H, kv_heads=KV, experts=E,
                           active=k, expert_offset=off, state=8, conv=4, expand=2, dt_rank=4, vocab=128, layers=4,
                           dtype=dt, attention=att)


def grid4():
    # Four layers: mamba, mamba, hybrid, mamba (ZambaConfig's layer types
    # with attn_layer_period 6, offset 4; Zamba2 given the same list).
    types = ["mamba", "mamba", "hybrid", "mamba"]
    for (b, s, h, I, H, KV, mh, r) in ((1, 8, 32, 48, 4, 2, 2, 4), (2, 12, 32, 64, 4, 4, 4, 3)):
        for dt in ("fp32", "bf16"):
            for att in ("eager",):  # ZambaForCausalLM has no SDPA path
                yield dict(arch="zamba", batch=b, seq=s, hidden=h, intermediate=I, heads=H, kv_heads=KV,
                           mamba_heads=mh, state=8, conv=4, expand=2, dt_rank=r, vocab=128, layers=4, dtype=dt,
                           attention=att)
    for (b, s, h, I, H, KV, mh, g, ck, ar, aa) in ((1, 16, 32, 48, 4, 2, 4, 1, 8, 8, False),
                                                  (2, 12, 32, 64, 4, 4, 4, 2, 8, 4, True)):
        for dt in ("fp32", "bf16"):
            for att in ("eager", "sdpa"):
                yield dict(arch="zamba2", batch=b, seq=s, hidden=h, intermediate=I, heads=H, kv_heads=KV,
                           mamba_heads=mh, state=8, conv=4, expand=2, groups=g, chunk=ck, adapter_rank=ar,
                           attn_adapter=aa, types=types, vocab=128, layers=4, dtype=dt, attention=att)


def main():
    if sys.argv[1:] == ["--zamba"]:
        cases = [{"config": c, "saved": measure(c)} for c in grid4()]
        json.dump({"torch": torch.__version__.split("+")[0],
                   "transformers_commit": "8cb5963cc22174954e7dca2c0a3320b7dc2f4edc",
                   "kernel": "ZambaMambaMixer.slow_forward (use_mamba_kernels false), Zamba2MambaMixer.torch_forward",
                   "cases": cases}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    if sys.argv[1:] == ["--jamba"]:
        cases = [{"config": c, "saved": measure(c)} for c in grid3()]
        json.dump({"torch": torch.__version__.split("+")[0],
                   "transformers_commit": "8cb5963cc22174954e7dca2c0a3320b7dc2f4edc",
                   "kernel": "JambaMambaMixer.slow_forward (use_mamba_kernels false)",
                   "cases": cases}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    if sys.argv[1:] == ["--mamba2"]:
        cases = [{"config": c, "saved": measure(c)} for c in grid2()]
        json.dump({"torch": torch.__version__.split("+")[0],
                   "transformers_commit": "8cb5963cc22174954e7dca2c0a3320b7dc2f4edc",
                   "kernel": "Mamba2Mixer.torch_forward (the chunked SSD in plain torch)",
                   "cases": cases}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    cases = []
    for c in grid():
        cases.append({"config": c, "saved": measure(c)})
    json.dump({"torch": torch.__version__.split("+")[0],
               "transformers_commit": "8cb5963cc22174954e7dca2c0a3320b7dc2f4edc",
               "kernel": "sequential (MambaMixer.slow_forward, use_mambapy false)",
               "cases": cases}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
