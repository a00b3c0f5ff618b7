#!/usr/bin/python3
"""CPU oracle for attention.Eager, HeadChunked{Eager} and QueryChunked{Eager}.

Runs transformers' eager_attention_forward op for op in plain torch on
q, k, v that require grad (or under torch.no_grad), whole or in chunks of
heads or query rows, and records, per configuration:

  saved    bytes of the storages autograd saves (saved_tensors_hooks, by
           storage, as docs/reference.md#saved-tensors-by-storage says);
  forward  peak of live CPU-allocator bytes during the forward above the
           bytes live at entry (torch.profiler memory events);
  backward peak during out.backward(dO) above the bytes live at entry,
           from the same profiler session so that every free is seen.

Run with Debian's torch and commit the output:

  /usr/bin/python3 attention/testdata/eager_oracle.py > attention/testdata/eager_oracle.json

torch 1.13 on CPU: dropout uses the non-fused path (noise in the input
dtype), and softmax(dtype=float32) of a bf16 input copies to fp32 first, so
the Go side compares with Eager{CPUDropout: true, CastBeforeSoftmax: true}.
"""
import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile, record_function

torch.manual_seed(0)


def repeat_kv(x, n_rep):
    b, hk, s, d = x.shape
    if n_rep == 1:
        return x
    x = x[:, :, None, :, :].expand(b, hk, n_rep, s, d)
    return x.reshape(b, hk * n_rep, s, d)


def eager(q, k, v, mask, n_rep, softmax_fp32, dropout, expand):
    if expand:
        k = repeat_kv(k, n_rep)
        v = repeat_kv(v, n_rep)
    w = torch.matmul(q, k.transpose(2, 3)) * (q.shape[-1] ** -0.5)
    if mask is not None:
        w = w + mask
    if softmax_fp32:
        w = torch.nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    else:
        w = torch.nn.functional.softmax(w, dim=-1)
    w = torch.nn.functional.dropout(w, p=dropout, training=True)
    o = torch.matmul(w, v)
    return o.transpose(1, 2).contiguous()


def chunked(q, k, v, mask, n_rep, softmax_fp32, dropout, expand, head_chunk, query_rows):
    """The 32k-token block attention's head loop, or a loop over blocks of query rows, each
    block through eager(); the outputs are concatenated."""
    outs = []
    if head_chunk:
        h = q.shape[1]
        for i in range(0, h, head_chunk):
            j = min(i + head_chunk, h)
            kv0, kv1 = i // n_rep, (j - 1) // n_rep + 1
            outs.append(eager(q[:, i:j], k[:, kv0:kv1], v[:, kv0:kv1], mask,
                              (j - i) // (kv1 - kv0), softmax_fp32, dropout, expand))
        return torch.cat(outs, dim=2)
    sq = q.shape[2]
    for i in range(0, sq, query_rows):
        j = min(i + query_rows, sq)
        m = mask[:, :, i:j] if mask is not None else None
        outs.append(eager(q[:, :, i:j], k, v, m, n_rep, softmax_fp32, dropout, expand))
    return torch.cat(outs, dim=1)


def run_no_grad(b, h, hk, sq, sk, d, dtype, softmax_fp32, mask4d, expand, head_chunk=0):
    """Forward only under torch.no_grad (the 32k-token block attention's analysis pass)."""
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    q = torch.randn(b, h, sq, d, dtype=dt)
    k = torch.randn(b, hk, sk, d, dtype=dt)
    v = torch.randn(b, hk, sk, d, dtype=dt)
    mask = torch.zeros(b, 1, sq, sk, dtype=dt) if mask4d else None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with torch.no_grad():
            if head_chunk:
                out = chunked(q, k, v, mask, h // hk, softmax_fp32, 0.0, expand, head_chunk, 0)
            else:
                out = eager(q, k, v, mask, h // hk, softmax_fp32, 0.0, expand)
    live = fwd = 0
    for e in sorted(prof.profiler.kineto_results.events(), key=lambda e: e.start_us()):
        if e.name() == "[memory]":
            live += e.nbytes()
            fwd = max(fwd, live)
    if mask is not None:
        fwd += mask.numel() * mask.element_size()
    return {
        "batch": b, "heads": h, "kv_heads": hk, "query_len": sq, "key_len": sk, "head_dim": d,
        "dtype": dtype, "softmax_fp32": softmax_fp32, "dropout": 0.0, "mask4d": mask4d, "expand_kv": expand,
        "head_chunk": head_chunk, "query_rows": 0, "no_grad": True,
        "saved_bytes": 0, "forward_peak_bytes": fwd, "backward_peak_bytes": 0,
        "output_bytes": out.numel() * out.element_size(),
    }


def run(b, h, hk, sq, sk, d, dtype, softmax_fp32, dropout, mask4d, expand, head_chunk=0, query_rows=0):
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    q = torch.randn(b, h, sq, d, dtype=dt, requires_grad=True)
    k = torch.randn(b, hk, sk, d, dtype=dt, requires_grad=True)
    v = torch.randn(b, hk, sk, d, dtype=dt, requires_grad=True)
    mask = torch.zeros(b, 1, sq, sk, dtype=dt) if mask4d else None
    inputs = {q.storage().data_ptr(), k.storage().data_ptr(), v.storage().data_ptr()}

    saved = {}

    def pack(t):
        s = t.storage()
        saved[s.data_ptr()] = s.nbytes()
        return t

    dout = torch.randn(b, sq, h, d, dtype=dt)
    # One profiler session for forward and backward, so that every free is
    # matched with its allocation (a session does not report frees of
    # blocks allocated before it started).
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with record_function("phase:forward"):
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                if head_chunk or query_rows:
                    out = chunked(q, k, v, mask, h // hk, softmax_fp32, dropout, expand, head_chunk, query_rows)
                else:
                    out = eager(q, k, v, mask, h // hk, softmax_fp32, dropout, expand)
        with record_function("phase:backward"):
            out.backward(dout)
    events = sorted(prof.profiler.kineto_results.events(), key=lambda e: e.start_us())
    marks = {e.name(): e.start_us() for e in events if e.name().startswith("phase:")}
    live = 0
    fwd_base = bwd_base = None
    fwd = bwd = 0
    for e in events:
        if e.name() != "[memory]":
            continue
        t = e.start_us()
        if t >= marks["phase:backward"]:
            if bwd_base is None:
                bwd_base = live
            live += e.nbytes()
            bwd = max(bwd, live - bwd_base)
        elif t >= marks["phase:forward"]:
            if fwd_base is None:
                fwd_base = live
            live += e.nbytes()
            fwd = max(fwd, live - fwd_base)
        else:
            live += e.nbytes()
    # The mask is the model's; the Go figure counts it in Forward when
    # Mask4D, as allocated before the layers. Here it was allocated before
    # the profiler started, so add it.
    if mask is not None:
        fwd += mask.numel() * mask.element_size()
    out_bytes = out.numel() * out.element_size()
    return {
        "batch": b, "heads": h, "kv_heads": hk, "query_len": sq, "key_len": sk, "head_dim": d,
        "dtype": dtype, "softmax_fp32": softmax_fp32, "dropout": dropout, "mask4d": mask4d, "expand_kv": expand,
        "head_chunk": head_chunk, "query_rows": query_rows,
        "saved_bytes": sum(saved.values()),
        "saved_input_bytes": sum(n for p, n in saved.items() if p in inputs),
        "forward_peak_bytes": fwd, "backward_peak_bytes": bwd, "output_bytes": out_bytes,
    }


def main():
    cases = []
    for dtype in ["fp32", "bf16"]:
        for softmax_fp32 in [False, True]:
            for dropout in [0.0, 0.1]:
                for mask4d in [False, True]:
                    for (h, hk, expand) in [(4, 4, False), (8, 2, True), (8, 2, False)]:
                        for (b, sq, sk, d) in [(2, 64, 64, 16), (1, 100, 36, 8)]:
                            if not expand and hk != h:
                                # broadcasting matmul: q grouped to (b, hk, g·sq, d)
                                continue
                            cases.append(run(b, h, hk, sq, sk, d, dtype, softmax_fp32, dropout, mask4d, expand))
    # Chunked: batch 1 so that the slices stay foldable views for matmul.
    for dtype in ["fp32", "bf16"]:
        for softmax_fp32 in [False, True]:
            for (h, hk, expand) in [(8, 8, False), (8, 2, True)]:
                for (hc, qr) in [(2, 0), (4, 0), (3, 0), (0, 32), (0, 48)]:
                    if hc and hc % (h // hk) and (h // hk) % hc:
                        continue
                    cases.append(run(1, h, hk, 96, 96, 16, dtype, softmax_fp32, 0.0, False, expand, hc, qr))
    # Inference (torch.no_grad), whole and head-chunked.
    for dtype in ["fp32", "bf16"]:
        for softmax_fp32 in [False, True]:
            for mask4d in [False, True]:
                for (h, hk, expand, hc) in [(8, 8, False, 0), (8, 2, True, 0), (8, 8, False, 2), (8, 2, True, 4)]:
                    cases.append(run_no_grad(2, h, hk, 96, 96, 16, dtype, softmax_fp32, mask4d, expand, hc))
    json.dump({"source": "attention/testdata/eager_oracle.py, torch " + torch.__version__ + " (CPU)",
               "cases": cases}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
