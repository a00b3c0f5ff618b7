#!/usr/bin/python3
"""Parameter counts of transformers' own state-space classes at their
configuration classes' defaults, built on the meta device (no memory, no
weights): Mamba2ForCausalLM with Mamba2Config() (configuration_mamba2.py at
v4.57.1, commit 8cb5963cc22174954e7dca2c0a3320b7dc2f4edc: 64 layers of
hidden 4096, 128 heads of 64, 8 groups, state 128, vocabulary 32768, an
untied head) and a small Mamba-2 with grouped B/C and a tied head;
ZambaForCausalLM with ZambaConfig() (Zamba-7B-v1's sizes) and a small
untied Zamba; Zamba2ForCausalLM with Zamba2Config() (Zamba2-2.7B's sizes)
and a small Zamba2 with two shared blocks and attention adapters;
JambaForCausalLM with JambaConfig() (configuration_jamba.py, same commit: the
defaults are Jamba-v0.1's) and a small Jamba whose attention and MoE layers
fall at other periods and offsets. Each records its total, the active count
per token (routed experts counted num_experts_per_tok / num_experts, the
convention of model cards' "active parameters") and the shapes of its first
layers. Nothing of transformers is
copied: the classes are imported from its source tree.

Regenerate (the chroot of tools/measure, torch 2.6):

  CH=/var/tmp/gpumem-trixie; mkdir -p $CH/opt/gpumem-oracle
  cp tools/oracle/ssm_params.py $CH/opt/gpumem-oracle/
  chroot $CH env -i PATH=/usr/bin:/bin HOME=/tmp \\
      PYTHONPATH=/opt/gpumem/stubs:/opt/gpumem/transformers-src/src \\
      python3 /opt/gpumem-oracle/ssm_params.py > testdata/oracle/ssm_params.json

The Go test is `go test ./model/ -run TestMamba2Params -v`.
"""

import json
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from transformers import (JambaConfig, JambaForCausalLM, Mamba2Config, Mamba2ForCausalLM, Zamba2Config,  # noqa: E402
                          Zamba2ForCausalLM, ZambaConfig, ZambaForCausalLM)
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()

CASES = [
    ("mamba2", "Mamba2Config()", {}),
    ("mamba2", "small, 2 groups, tied", dict(hidden_size=96, num_hidden_layers=3, vocab_size=1000, state_size=16,
                                             num_heads=12, head_dim=16, n_groups=2, tie_word_embeddings=True)),
    ("jamba", "JambaConfig()", {}),
    ("jamba", "small, attention at 1 of 3, MoE at 0 of 2", dict(
        hidden_size=64, intermediate_size=96, num_hidden_layers=7, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=500, num_experts=4, num_experts_per_tok=1, expert_layer_period=2, expert_layer_offset=0,
        attn_layer_period=3, attn_layer_offset=1, mamba_d_state=8, mamba_dt_rank=6, mamba_expand=3,
        mamba_proj_bias=True, tie_word_embeddings=True)),
    ("zamba", "ZambaConfig()", {}),
    ("zamba", "small, untied, 3 mamba heads, conv and proj biases", dict(
        hidden_size=48, intermediate_size=80, num_hidden_layers=9, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=300, n_mamba_heads=3, attn_layer_period=3, attn_layer_offset=1, mamba_d_state=8, mamba_dt_rank=5,
        mamba_proj_bias=True, tie_word_embeddings=False)),
    ("zamba2", "Zamba2Config()", {}),
    ("zamba2", "small, 2 memory blocks, attention adapters, 2 groups, biases, untied", dict(
        hidden_size=64, intermediate_size=96, num_hidden_layers=7, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=300, n_mamba_heads=4, mamba_ngroups=2, mamba_d_state=16, num_mem_blocks=2,
        use_shared_attention_adapter=True, adapter_rank=8, add_bias_linear=True, tie_word_embeddings=False,
        layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "hybrid", "mamba", "hybrid"])),
]
CLASSES = {"mamba2": (Mamba2Config, Mamba2ForCausalLM), "jamba": (JambaConfig, JambaForCausalLM),
           "zamba": (ZambaConfig, ZambaForCausalLM), "zamba2": (Zamba2Config, Zamba2ForCausalLM)}


def count(cls, cfg):
    with torch.device("meta"):
        m = cls(cfg)
    names = {n: list(p.shape) for n, p in m.named_parameters()}
    routed = sum(p.numel() for n, p in m.named_parameters() if ".experts." in n)
    return sum(p.numel() for p in m.parameters()), routed, names


def main():
    out = []
    for family, name, kw in CASES:
        conf, cls = CLASSES[family]
        extra = {"use_mamba_kernels": False} if family in ("jamba", "zamba") else {}
        cfg = conf(**kw, **extra)
        total, routed, names = count(cls, cfg)
        # Shapes of the first two layers (a Jamba model's first attention
        # layer is layer attn_layer_offset: its names are listed too).
        first = {n: s for n, s in names.items() if ".layers." not in n or n.split(".layers.")[1].split(".")[0] in
                 ("0", "1", str(getattr(cfg, "attn_layer_offset", 0)))}
        rec = {"family": family, "name": name, "config": kw, "parameters": total, "tensors": len(names),
               "shapes": first}
        if routed:
            # Active per token: the routed experts' share num_experts_per_tok / num_experts.
            rec["active_parameters"] = total - routed + routed // cfg.num_experts * cfg.num_experts_per_tok
        out.append(rec)
    json.dump({"torch": torch.__version__.split("+")[0],
               "transformers_commit": "8cb5963cc22174954e7dca2c0a3320b7dc2f4edc", "cases": out},
              sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
