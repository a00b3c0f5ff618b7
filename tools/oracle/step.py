#!/usr/bin/python3
"""CPU measurements of whole-step composition mechanisms (gpumem budget.Estimate).

Each experiment runs a few plain-torch ops in the op order of the framework
code it stands for (written from that order, not copied) and reads the
peak of live bytes from the CPU profiler's allocator events
(docs/reference.md#peak-of-live-bytes): the running sum of the "[memory]"
events' byte counts, relative to what was live before the window.

  logits_holder  A tiny LM (embedding, one linear, head) trained one step:
                 the loss computed as Hugging Face's Trainer does
                 (compute_loss returns the loss; the output, with its
                 logits, is dropped before backward) against a loop that
                 keeps `logits, loss = model(x, y)` through backward.
                 Expected: the peaks differ by the fp32 logits, 4*T*V.
  tied           The same model with the head tied to the embedding,
                 against untied, with a small T*V and a large V*h: the
                 backward peak minus the bytes of every gradient.
                 Expected (budget Model.tiedGrad): 2*V*h*4 when tied
                 (head gradient, embedding gradient and their sum), about
                 nothing untied.
  eager_nograd   One Llama eager attention core under torch.no_grad
                 (q/k/v projections, matmul * scaling, + mask,
                 softmax(dtype=float32).to(q.dtype), matmul with v): the
                 peak against 3*b*s*h*e (q, k, v) + score_bytes*P, P =
                 b*H*s^2. The mask and the input exist before the window.
                 On CPU, softmax(dtype=float32) of a bf16 input takes the
                 same branch as on CUDA (toType, then _softmax).
                 Expected (model.actCalc.attention, no graph): 8 bytes per
                 score in fp32, 10 in bf16.

  block_backward One Llama decoder block of tools/oracle/activations.py
                 (LlamaBlock: its eager op order) trained in fp32, batch
                 1, hidden 64, 4 heads of 16: the peak of the backward
                 pass over what was live when it began (a sentinel
                 allocation marks the start, since the profiler does not
                 see frees of tensors allocated before its window), for
                 sequences 256 and 512 and MLP widths 172 and 2048, with
                 the parameters' gradient bytes. Expected
                 (model.actCalc.block): the larger of the MLP's backward
                 (two T*I tensors over what it saved) and the attention
                 core's transient less the MLP's saved tensors, released
                 before it runs.

How to regenerate testdata/oracle/step.json
-------------------------------------------
  apt-get install -y python3-torch      # Debian bookworm: torch 1.13 (1.13.0a0), CPU only
  cd <repo root> && /usr/bin/python3 tools/oracle/step.py > testdata/oracle/step.json
Deterministic; a few seconds on one core. The Go tests that read it:
go test ./budget -run TestStepOracle and go test ./model -run 'TestEagerNoGradOracle|TestBlockBackwardOracle'.
"""

import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import profile, ProfilerActivity

torch.manual_seed(0)
torch.set_num_threads(1)


def peak(fn):
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
        fn()
    ev = sorted((e.start_us(), e.nbytes()) for e in p.profiler.kineto_results.events() if e.name() == "[memory]")
    cur = pk = 0
    for _, n in ev:
        cur += n
        pk = max(pk, cur)
    return pk


class TinyLM(nn.Module):
    def __init__(self, V, h, tied):
        super().__init__()
        self.emb = nn.Embedding(V, h)
        self.l = nn.Linear(h, h, bias=False)
        self.head = nn.Linear(h, V, bias=False)
        if tied:
            self.head.weight = self.emb.weight

    def forward(self, ids, labels):
        logits = self.head(self.l(self.emb(ids)))
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))
        return logits, loss


def step_peak(V, h, B, T, tied, keep):
    torch.manual_seed(0)
    m = TinyLM(V, h, tied)
    ids = torch.randint(0, V, (B, T))
    labels = torch.randint(0, V, (B, T))

    def trainer_loss():
        return m(ids, labels)[1]  # compute_loss: the output is dropped

    def run():
        if keep:
            logits, loss = m(ids, labels)
            loss.backward()
            del logits
        else:
            loss = trainer_loss()
            loss.backward()

    pk = peak(run)
    grads = sum(p.numel() * 4 for p in m.parameters())
    return pk, grads


def logits_holder():
    V, h, B, T = 8000, 64, 2, 32
    trainer, _ = step_peak(V, h, B, T, False, False)
    kept, _ = step_peak(V, h, B, T, False, True)
    return {"vocab": V, "hidden": h, "batch": B, "seq": T, "trainer_peak": trainer, "kept_peak": kept}


def tied():
    V, h, B, T = 8000, 256, 1, 4
    out = {"vocab": V, "hidden": h, "batch": B, "seq": T}
    for name, t in (("untied", False), ("tied", True)):
        pk, grads = step_peak(V, h, B, T, t, False)
        out[name + "_peak"], out[name + "_grad_bytes"] = pk, grads
    return out


def eager_nograd(dtype, B=1, H=4, S=512, d=16):
    h = H * d
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    with torch.no_grad():
        x = torch.randn(B, S, h).to(dt)
        W = [torch.randn(h, h).to(dt) for _ in range(3)]
        mask = torch.full((S, S), float("-inf")).triu(1)[None, None].expand(B, 1, S, S).to(dt).contiguous()

        def attn():
            q = (x @ W[0]).view(B, S, H, d).transpose(1, 2)
            k = (x @ W[1]).view(B, S, H, d).transpose(1, 2)
            v = (x @ W[2]).view(B, S, H, d).transpose(1, 2)
            w = torch.matmul(q, k.transpose(2, 3)) * (d ** -0.5)
            w = w + mask[:, :, :, :S]
            w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
            o = torch.matmul(w, v)
            return o.transpose(1, 2).contiguous()

        pk = peak(attn)
    return {"dtype": dtype, "batch": B, "heads": H, "seq": S, "head_dim": d, "peak": pk}


SENTINEL = 1234567  # bytes: marks the start of backward in the event stream


def backward_over_start(fwd, bwd):
    """Peak of live bytes during bwd over the bytes live when it began,
    forward included in the window so that frees of saved tensors count."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
        out = fwd()
        s = torch.empty(SENTINEL, dtype=torch.uint8)
        bwd(out)
        del s
    ev = sorted((e.start_us(), e.nbytes()) for e in p.profiler.kineto_results.events() if e.name() == "[memory]")
    cur, start, pk = 0, None, 0
    for _, n in ev:
        cur += n
        if n == SENTINEL and start is None:
            start, pk = cur, cur
        elif n == -SENTINEL and start is not None:
            return pk - start
        elif start is not None:
            pk = max(pk, cur)
    raise RuntimeError("sentinel not found")


def block_backward():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import activations as oracle  # the oracle's blocks, in the transformers op order
    out = []
    b, h, H, d = 1, 64, 4, 16
    for S in (256, 512):
        for I in (172, 2048):
            c = dict(arch="llama", hidden=h, heads=H, kv_heads=H, head_dim=d, intermediate=I, batch=b, seq=S,
                     dtype="fp32", ckpt="none", dropout=0.0)
            torch.manual_seed(0)
            blk = oracle.LlamaBlock(c)
            x = torch.randn(b, S, h, requires_grad=True)
            cos, sin = torch.randn(b, S, d), torch.randn(b, S, d)
            mask = torch.full((S, S), float("-inf")).triu(1)[None, None]

            def fwd():
                y = blk(x, cos, sin, mask)
                return y, torch.ones_like(y)

            def bwd(o):
                o[0].backward(o[1])

            rel = backward_over_start(fwd, bwd)
            out.append({"batch": b, "seq": S, "hidden": h, "heads": H, "head_dim": d, "intermediate": I,
                        "backward_peak": rel, "param_grad_bytes": sum(p.numel() * 4 for p in blk.parameters())})
    return out


def main():
    out = {
        "generator": "tools/oracle/step.py",
        "torch_version": torch.__version__,
        "units": "bytes",
        "method": "CPU profiler [memory] events, running sum, peak relative to the start of the window",
        "logits_holder": logits_holder(),
        "tied": tied(),
        "eager_nograd": [eager_nograd("fp32"), eager_nograd("bf16")],
        "block_backward": block_backward(),
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
