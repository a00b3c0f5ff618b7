#!/usr/bin/python3
"""Parameter counts of transformers' own state-space classes at their
configuration classes' defaults, built on the meta device (no memory, no
weights): Mamba2ForCausalLM with Mamba2Config() (configuration_mamba2.py at
v4.57.1, commit 8cb5963cc22174954e7dca2c0a3320b7dc2f4edc: the defaults are
Mamba-Codestral-7B-v0.1's) and a small Mamba-2 with grouped B/C and a tied
head, summed per model and per tensor name. Nothing of transformers is
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
from transformers import Mamba2Config, Mamba2ForCausalLM  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()

CASES = [
    ("mamba2", "Mamba2Config()", {}),
    ("mamba2", "small, 2 groups, tied", dict(hidden_size=96, num_hidden_layers=3, vocab_size=1000, state_size=16,
                                             num_heads=12, head_dim=16, n_groups=2, tie_word_embeddings=True)),
]


def count(cls, cfg):
    with torch.device("meta"):
        m = cls(cfg)
    names = {n: list(p.shape) for n, p in m.named_parameters()}
    return sum(p.numel() for p in m.parameters()), names


def main():
    out = []
    for family, name, kw in CASES:
        cfg = Mamba2Config(**kw)
        total, names = count(Mamba2ForCausalLM, cfg)
        layer0 = {n: s for n, s in names.items() if ".layers.0." in n or ".layers." not in n}
        out.append({"family": family, "name": name, "config": kw, "parameters": total, "tensors": len(names),
                    "shapes": layer0})
    json.dump({"torch": torch.__version__.split("+")[0],
               "transformers_commit": "8cb5963cc22174954e7dca2c0a3320b7dc2f4edc", "cases": out},
              sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
