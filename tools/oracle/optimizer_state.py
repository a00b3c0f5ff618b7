#!/usr/bin/python3
"""CPU oracle for gpumem's optimizer package: exact optimizer-state bytes.

Builds small models in plain torch, runs one optimizer step, and records for
every trainable parameter the tensors in opt.state[p] (key, numel, dtype,
element size, device) and their byte total. The Go test
optimizer/oracle_test.go compares optimizer.State with these numbers byte for
byte.

Rerun (Debian's torch is CPU-only and installs for /usr/bin/python3 only):

    apt-get update && apt-get install -y python3-torch
    /usr/bin/python3 tools/oracle/optimizer_state.py > optimizer/testdata/oracle/optimizer_state.json

Adafactor is not in torch 1.13. RefAdafactor below is a minimal reference
written from the state layout of Hugging Face transformers'
optimization.Adafactor (exp_avg when beta1 is set; exp_avg_sq_row over
shape[:-1] and exp_avg_sq_col over shape[:-2]+shape[-1:] for >= 2-D tensors,
else exp_avg_sq; state["RMS"] = norm/sqrt(numel), a 0-dim tensor; step an
int; 16-bit gradients upcast to float32). It checks the bookkeeping of the
Go formula on real shapes, not transformers itself.

Real inventories (BERT-large, T5-base) are built from their published
configurations as bare parameters on the "meta" device: full shapes, no
storage, so one step of each optimizer runs in milliseconds. There the step
counters that torch keeps on the CPU show up as device "cpu" while the rest
is on "meta", which checks where gpumem says each state tensor lives.

One frozen parameter per model (requires_grad=False, as LoRA freezes the base)
checks that torch creates no state for it: it is recorded with "frozen": true.
"""
import json
import math
import sys

import torch
import torch.nn as nn

torch.manual_seed(0)


class Block(nn.Module):
    """A pre-LN transformer block with a fused qkv projection."""

    def __init__(self, d, ff):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.up = nn.Linear(d, ff)
        self.down = nn.Linear(ff, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1) @ v
        x = x + self.proj(a)
        return x + self.down(torch.relu(self.up(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab=97, d=32, ff=80, layers=2, seq=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList([Block(d, ff) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.wpe.weight.requires_grad_(False)  # frozen: must get no state

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))

    def loss(self, dtype):
        ids = torch.randint(0, 97, (2, 16))
        return self.forward(ids).float().logsumexp(-1).mean()


class TinyCNN(nn.Module):
    """Conv filters (4-D), batch norm, a linear head and a 3-D parameter."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, bias=False)
        self.fc = nn.Linear(16, 10)
        self.experts = nn.Parameter(torch.randn(4, 6, 5) * 0.1)
        self.scale = nn.Parameter(torch.tensor(1.0))  # 0-dim parameter
        self.frozen = nn.Parameter(torch.randn(7, 3), requires_grad=False)

    def loss(self, dtype):
        x = torch.randn(2, 3, 10, 10, dtype=dtype)
        h = torch.relu(self.bn(self.conv1(x)))
        h = self.conv2(h).mean(dim=(2, 3))
        e = torch.einsum("bi,eij->bej", h[:, :6], self.experts).sum()
        return (self.fc(h).float().square().mean() + e.float()) * self.scale.float()


class RefAdafactor(torch.optim.Optimizer):
    """State layout of transformers' Adafactor (see module docstring)."""

    def __init__(self, params, beta1=None):
        super().__init__(params, dict(beta1=beta1))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if grad.dtype in {torch.float16, torch.bfloat16}:
                    grad = grad.float()
                state = self.state[p]
                factored = len(grad.shape) >= 2
                if len(state) == 0:
                    state["step"] = 0
                    if group["beta1"] is not None:
                        state["exp_avg"] = torch.zeros_like(grad)
                    if factored:
                        state["exp_avg_sq_row"] = torch.zeros(grad.shape[:-1]).to(grad)
                        state["exp_avg_sq_col"] = torch.zeros(grad.shape[:-2] + grad.shape[-1:]).to(grad)
                    else:
                        state["exp_avg_sq"] = torch.zeros_like(grad)
                    state["RMS"] = 0
                p32 = p.float() if p.dtype in {torch.float16, torch.bfloat16} else p
                state["step"] += 1
                state["RMS"] = p32.norm(2) / (p32.numel() ** 0.5)
                g2 = grad ** 2 + 1e-30
                if factored:
                    state["exp_avg_sq_row"].mul_(0.9).add_(g2.mean(dim=-1), alpha=0.1)
                    state["exp_avg_sq_col"].mul_(0.9).add_(g2.mean(dim=-2), alpha=0.1)
                else:
                    state["exp_avg_sq"].mul_(0.9).add_(g2, alpha=0.1)


OPTIMIZERS = {
    "SGD": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "SGD(momentum=0.9)": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "Adam": lambda ps: torch.optim.Adam(ps),
    "AdamW": lambda ps: torch.optim.AdamW(ps),
    "AdamW(amsgrad=True)": lambda ps: torch.optim.AdamW(ps, amsgrad=True),
    "Adagrad": lambda ps: torch.optim.Adagrad(ps),
    "RMSprop": lambda ps: torch.optim.RMSprop(ps),
    "RMSprop(momentum=0.9,centered=True)": lambda ps: torch.optim.RMSprop(ps, momentum=0.9, centered=True),
    "RefAdafactor": lambda ps: RefAdafactor(ps),
    "RefAdafactor(beta1=0.9)": lambda ps: RefAdafactor(ps, beta1=0.9),
}

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def run(model_name, make_model, opt_name, dtype_name):
    torch.manual_seed(0)
    model = make_model().to(DTYPES[dtype_name])
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = OPTIMIZERS[opt_name](trainable)
    model.loss(DTYPES[dtype_name]).backward()
    opt.step()
    params = []
    for name, p in model.named_parameters():
        slots = []
        for key, t in opt.state[p].items() if p in opt.state else []:
            if torch.is_tensor(t):
                slots.append(dict(key=key, numel=t.numel(), dtype=str(t.dtype).replace("torch.", ""),
                                  element_size=t.element_size(), device=str(t.device)))
        params.append(dict(
            name=name,
            shape=list(p.shape),
            dtype=str(p.dtype).replace("torch.", ""),
            frozen=not p.requires_grad,
            state_bytes=sum(s["numel"] * s["element_size"] for s in slots),
            slots=slots,
        ))
    return dict(model=model_name, optimizer=opt_name, dtype=dtype_name, params=params)


def bert_large():
    """bert-large-uncased (BertModel with pooler): 335,141,888 parameters."""
    d, ff, L = 1024, 4096, 24
    ps = [("embeddings.word_embeddings.weight", [30522, d]),
          ("embeddings.position_embeddings.weight", [512, d]),
          ("embeddings.token_type_embeddings.weight", [2, d]),
          ("embeddings.LayerNorm.weight", [d]), ("embeddings.LayerNorm.bias", [d])]
    for i in range(L):
        pre = "encoder.layer.%d." % i
        for m in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            ps += [(pre + m + ".weight", [d, d]), (pre + m + ".bias", [d])]
        ps += [(pre + "attention.output.LayerNorm.weight", [d]), (pre + "attention.output.LayerNorm.bias", [d]),
               (pre + "intermediate.dense.weight", [ff, d]), (pre + "intermediate.dense.bias", [ff]),
               (pre + "output.dense.weight", [d, ff]), (pre + "output.dense.bias", [d]),
               (pre + "output.LayerNorm.weight", [d]), (pre + "output.LayerNorm.bias", [d])]
    ps += [("pooler.dense.weight", [d, d]), ("pooler.dense.bias", [d])]
    return ps


def t5_base():
    """t5-base (T5ForConditionalGeneration, lm_head tied to shared): 222,903,552 parameters."""
    d, ff, L, heads, buckets = 768, 3072, 12, 12, 32
    ps = [("shared.weight", [32128, d])]
    for stack, attns in (("encoder", ("SelfAttention",)), ("decoder", ("SelfAttention", "EncDecAttention"))):
        for i in range(L):
            pre = "%s.block.%d.layer." % (stack, i)
            for j, a in enumerate(attns):
                for m in "qkvo":
                    ps.append(("%s%d.%s.%s.weight" % (pre, j, a, m), [d, d]))
                if i == 0 and a == "SelfAttention":
                    ps.append(("%s%d.%s.relative_attention_bias.weight" % (pre, j, a), [buckets, heads]))
                ps.append(("%s%d.layer_norm.weight" % (pre, j), [d]))
            j = len(attns)
            ps += [("%s%d.DenseReluDense.wi.weight" % (pre, j), [ff, d]),
                   ("%s%d.DenseReluDense.wo.weight" % (pre, j), [d, ff]),
                   ("%s%d.layer_norm.weight" % (pre, j), [d])]
        ps.append(("%s.final_layer_norm.weight" % stack, [d]))
    return ps


def run_inventory(shapes, opt_name, dtype_name):
    """One step on meta-device parameters; state bytes per parameter and by device."""
    params = []
    for _, shape in shapes:
        p = nn.Parameter(torch.empty(shape, device="meta", dtype=DTYPES[dtype_name]))
        p.grad = torch.zeros_like(p)
        params.append(p)
    opt = OPTIMIZERS[opt_name](params)
    opt.step()
    per, by_device = [], {}
    for p in params:
        total = 0
        for t in opt.state[p].values():
            if torch.is_tensor(t):
                b = t.numel() * t.element_size()
                total += b
                by_device[t.device.type] = by_device.get(t.device.type, 0) + b
        per.append(total)
    return dict(optimizer=opt_name, dtype=dtype_name, by_device=by_device, state_bytes=per)


def main():
    cases = []
    for model_name, make_model in (("TinyGPT", TinyGPT), ("TinyCNN", TinyCNN)):
        for opt_name in OPTIMIZERS:
            for dtype_name in DTYPES:
                cases.append(run(model_name, make_model, opt_name, dtype_name))
    inventories = []
    for model_name, shapes in (("bert-large-uncased", bert_large()), ("t5-base", t5_base())):
        runs = [run_inventory(shapes, o, dt) for o in OPTIMIZERS for dt in DTYPES]
        inventories.append(dict(model=model_name, params=[[n, s] for n, s in shapes], runs=runs))
    out = dict(
        generator="tools/oracle/optimizer_state.py",
        torch_version=torch.__version__,
        python=sys.version.split()[0],
        method="sum of numel*element_size over torch.is_tensor values of opt.state[p] after one step",
        cases=cases,
    )
    # One parameter per line keeps the file small and its diffs readable.
    head = json.dumps({k: v for k, v in out.items() if k != "cases"})[:-1]
    sys.stdout.write(head + ', "inventories": [\n')
    for i, inv in enumerate(inventories):
        sys.stdout.write(json.dumps(dict(model=inv["model"], params=inv["params"]))[:-1] + ', "runs": [\n')
        sys.stdout.write(",\n".join(json.dumps(r) for r in inv["runs"]))
        sys.stdout.write("\n]}" + ("," if i + 1 < len(inventories) else "") + "\n")
    sys.stdout.write('], "cases": [\n')
    for i, c in enumerate(cases):
        sys.stdout.write(json.dumps({k: v for k, v in c.items() if k != "params"})[:-1] + ', "params": [\n')
        sys.stdout.write(",\n".join(json.dumps(p) for p in c["params"]))
        sys.stdout.write("\n]}" + ("," if i + 1 < len(cases) else "") + "\n")
    sys.stdout.write("]}\n")


if __name__ == "__main__":
    main()
