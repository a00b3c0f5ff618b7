#!/usr/bin/python3
"""CPU oracle for gpumem's activation model (issue 5, model.Activations).

What it measures
----------------
For small plain-torch re-implementations of three Hugging Face eager models it
records, per transformer block, the bytes of every tensor that autograd saves
for backward during the forward pass, counted by *storage* (a view and its base
count once; docs/reference.md#saved-tensors-by-storage). Parameters are excluded (matmul saves
the weight, which is not an activation). Each storage is attributed to the
first part of the model that packs it:

  layers[i]   block i (a tensor produced by block i-1 and first saved by
              block i, e.g. the block input saved by its first norm, counts
              in block i)
  embedding   the token/position embeddings (and BERT's embedding LayerNorm)
  final_norm  the final norm (llama norm, gpt2 ln_f, bert MLM transform)
  head        the LM head and the loss (fp32 upcast, log-softmax, ...)
  shared      model-level tensors computed once and saved by every block:
              rotary cos/sin, causal/padding masks, buffers (GPT-2's `bias`)
  ids         integer tensors saved by the embedding (token ids) and the
              loss (labels); integer tensors saved inside a block (MoE
              routing indices) count in the block

The blocks reproduce the op order of transformers' eager code paths
(transformers 4.5x: modeling_llama.py LlamaRMSNorm / LlamaAttention /
eager_attention_forward / LlamaMLP / LlamaDecoderLayer; modeling_gpt2.py
GPT2Block with Conv1D, NewGELUActivation ("gelu_new") and the eager attention
with the `bias` causal buffer; modeling_bert.py BertLayer, post-LN, GELU,
additive extended attention mask). The code below is written from that op
order, not copied. Dropout: most cases use p = 0 (the identity on both
devices); the cases with "dropout" > 0 call torch.native_dropout, the op
CUDA's F.dropout dispatches to, which saves a 1-byte bool mask on CPU too
(plain CPU F.dropout would save a noise tensor in the input dtype instead,
docs/reference.md#saved-tensors-by-storage).

Known CPU/CUDA difference that remains: LayerNorm on a 16-bit input saves its
mean and rstd (b·s elements each) in the input dtype on CPU but in fp32 on
CUDA. Each case therefore also records `layers_cuda` etc., in which those two
statistics count 4 bytes per element.

A torch 1.13 artifact: the backward of mean.dim saves its input (so
LlamaRMSNorm's x² in fp32, b·s·h elements, is saved); torch 2.x saves only its
sizes (tools/autograd/derivatives.yaml: `mean_backward(grad, self.sym_sizes(),
dim, self.sym_numel(), keepdim)`). The `*_cuda` figures drop a storage that
only MeanBackward1 saves, and the 0-dim float64 tensors that wrap a Python
float operand (`x * 0.5` saves it; on CUDA it stays a CPU scalar). So `*_cuda` = what torch 2.x on CUDA saves, the
figure gpumem predicts; the plain figures are what 1.13 on CPU saved.

Checkpointing: `ckpt` = "none", "reentrant" (torch.utils.checkpoint with
use_reentrant=True, which saves the block's tensor inputs through
ctx.save_for_backward, visible to the outer hook) or "nonreentrant"
(use_reentrant=False installs its own saved_tensors_hooks, so the outer hook
sees nothing inside a block: the recorded per-layer figure is 0, and what
stays resident is the block input kept alive by the recomputation closure,
which the script records as `resident_inputs`).

Also recorded: the CPU profiler's peak of live bytes during forward+backward
and during the forward alone (docs/reference.md#peak-of-live-bytes), relative to the bytes
live before the forward (profiler_peak_bytes, profiler_forward_peak_bytes).

How to regenerate testdata/oracle/activations.json
--------------------------------------------------
  apt-get update && apt-get install -y python3-torch   # Debian bookworm: torch 1.13 (reports 1.13.0a0), CPU only
  cd <repo root> && /usr/bin/python3 tools/oracle/activations.py > testdata/oracle/activations.json
Use /usr/bin/python3 (Debian's torch is invisible to a pyenv python). No
downloads; about 15 seconds on one core; deterministic (two runs give
identical files). testdata/oracle/README.md describes the fields; the Go test
is `go test ./model/ -run TestActivationsOracle -v`.
"""

import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as cp

torch.manual_seed(0)
torch.set_num_threads(1)


# ---------------------------------------------------------------------------
# Measurement: a pack hook that attributes storages to the current phase.
# ---------------------------------------------------------------------------

class Meter:
    def __init__(self, model):
        self.phase = "embedding"
        self.params = {p.storage().data_ptr() for p in model.parameters()}
        self.pre = {}  # storage ptr -> bucket, for model-level tensors
        self.saved = {}  # storage ptr -> (bucket, nbytes, dtype, shape)
        self.ln_stats = set()  # storage ptrs of LayerNorm mean/rstd
        self.in_ln = False

    def preassign(self, t, bucket="shared"):
        if t is not None:
            self.pre.setdefault(t.storage().data_ptr(), bucket)

    def pack(self, t):
        s = t.storage()
        k = s.data_ptr()
        if k in self.params:
            return t
        if self.in_ln and t.dim() >= 2 and t.shape[-1] == 1:
            self.ln_stats.add(k)
        if k in self.saved:
            b, n, d, sh = self.saved[k]
            self.saved[k] = (b, max(n, s.nbytes()), d, sh)
            return t
        if t.dtype in (torch.int64, torch.int32) and k not in self.pre and self.phase in ("embedding", "head"):
            bucket = "ids"
        else:
            bucket = self.pre.get(k, self.phase)
        self.saved[k] = (bucket, s.nbytes(), str(t.dtype).replace("torch.", ""), list(t.shape))
        return t

    def totals(self, cuda=False, ops=None):
        out = {}
        for k, (b, n, d, sh) in self.saved.items():
            if cuda and k in self.ln_stats and d in ("bfloat16", "float16"):
                n = n * 2  # CUDA keeps LayerNorm mean/rstd in fp32
            if cuda and ops is not None and set(ops.get(k, [])) == {"MeanBackward1.self"}:
                n = 0  # torch 2.x mean.dim saves only sizes and numel
            if cuda and sh == [] and d == "float64":
                n = 0  # a Python float operand (wrapped number): a CPU scalar, no GPU memory
            out[b] = out.get(b, 0) + n
        return out


METER = None
DROP = 0.0  # dropout probability of the case being measured


def drop(x):
    """Dropout as CUDA runs it: ATen native_dropout, which saves a bool mask
    (1 byte per element). On CPU, F.dropout with p > 0 would instead save a
    noise tensor in the input dtype, so the oracle calls native_dropout, whose
    CPU kernel exists and saves the same bool mask. p = 0 is the identity."""
    if DROP > 0:
        return torch.native_dropout(x, DROP, True)[0]
    return x


def set_phase(p):
    if METER is not None:
        METER.phase = p


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm that tells the meter which saved tensors are its mean/rstd."""

    def forward(self, x):
        if METER is None:
            return super().forward(x)
        METER.in_ln = True  # the pack hook marks the (..., 1)-shaped mean and rstd
        try:
            return super().forward(x)
        finally:
            METER.in_ln = False


def run_blocks(blocks, h, ckpt, extra, prefix="layer"):
    """Runs the blocks in order, checkpointing each one if asked."""
    resident = 0
    for i, blk in enumerate(blocks):
        set_phase("%s%d" % (prefix, i))
        if ckpt == "none":
            h = blk(h, *extra)
        elif ckpt == "reentrant":
            h = cp.checkpoint(blk, h, *extra, use_reentrant=True)
        else:
            resident += h.storage().nbytes()
            h = cp.checkpoint(blk, h, *extra, use_reentrant=False)
    return h, resident


def causal_lm_loss(logits, labels):
    """transformers' ForCausalLMLoss: fp32 upcast, labels shifted by padding."""
    logits = logits.float()
    labels = F.pad(labels, (0, 1), value=-100)
    shift = labels[..., 1:].contiguous()
    return F.cross_entropy(logits.view(-1, logits.size(-1)), shift.view(-1), ignore_index=-100)


# ---------------------------------------------------------------------------
# Llama (LlamaForCausalLM, eager attention)
# ---------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, h, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.to(torch.float32)  # upcast: pow saves this fp32 copy
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)  # saves x (fp32) and rsqrt (fp32, b·s)
        return self.weight * x.to(dt)  # saves the normalized input in dt


class GemmaRMSNorm(nn.Module):
    """Gemma/Gemma2RMSNorm: normalize an fp32 copy, multiply by 1 + weight in
    fp32, cast back."""

    def __init__(self, h, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(h))
        self.eps = eps

    def forward(self, x):
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        y = y * (1.0 + self.weight.float())
        return y.type_as(x)


def rotate_half(x):
    a = x[..., : x.shape[-1] // 2]
    b = x[..., x.shape[-1] // 2:]
    return torch.cat((-b, a), dim=-1)


def repeat_kv(x, n):
    if n == 1:
        return x
    b, kv, s, d = x.shape
    return x[:, :, None, :, :].expand(b, kv, n, s, d).reshape(b, kv * n, s, d)


class LlamaBlock(nn.Module):
    """LlamaDecoderLayer; variant "qwen3" adds Qwen3's per-head q/k RMSNorm,
    variant "gemma2" Gemma2's RMSNorm, sandwich norms, attention logit
    soft-capping and gelu_pytorch_tanh."""

    def __init__(self, c):
        super().__init__()
        h, H, KV, I = c["hidden"], c["heads"], c["kv_heads"], c["intermediate"]
        self.H, self.KV, self.d = H, KV, c["head_dim"]
        self.variant = c.get("variant", "")
        Norm = GemmaRMSNorm if self.variant == "gemma2" else RMSNorm
        if self.variant == "qwen3":
            self.q_norm, self.k_norm = RMSNorm(self.d), RMSNorm(self.d)
        if self.variant == "gemma2":
            self.post_attn_norm, self.pre_ff_norm, self.post_ff_norm = Norm(h), Norm(h), Norm(h)
        self.input_layernorm = Norm(h)
        self.q_proj = nn.Linear(h, H * self.d, bias=False)
        self.k_proj = nn.Linear(h, KV * self.d, bias=False)
        self.v_proj = nn.Linear(h, KV * self.d, bias=False)
        self.o_proj = nn.Linear(H * self.d, h, bias=False)
        self.post_attention_layernorm = Norm(h)
        self.gate_proj = nn.Linear(h, I, bias=False)
        self.up_proj = nn.Linear(h, I, bias=False)
        self.down_proj = nn.Linear(I, h, bias=False)

    def forward(self, x, cos, sin, mask):
        b, s, _ = x.shape
        res = x
        x = self.input_layernorm(x)
        q = self.q_proj(x).view(b, s, -1, self.d)
        k = self.k_proj(x).view(b, s, -1, self.d)
        if self.variant == "qwen3":
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(x).view(b, s, -1, self.d).transpose(1, 2)
        c, sn = cos.unsqueeze(1), sin.unsqueeze(1)
        q = (q * c) + (rotate_half(q) * sn)
        k = (k * c) + (rotate_half(k) * sn)
        # eager_attention_forward
        k = repeat_kv(k, self.H // self.KV)
        v = repeat_kv(v, self.H // self.KV)
        w = torch.matmul(q, k.transpose(2, 3)) * (self.d ** -0.5)
        if self.variant == "gemma2":  # attn_logit_softcapping
            w = torch.tanh(w / 50.0) * 50.0
        w = w + mask[:, :, :, : k.shape[-2]]
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        w = drop(w)
        o = torch.matmul(w, v).transpose(1, 2).contiguous()
        o = self.o_proj(o.reshape(b, s, -1).contiguous())
        if self.variant == "gemma2":
            x = res + self.post_attn_norm(o)
            res = x
            x = self.pre_ff_norm(x)
            x = self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))
            return res + self.post_ff_norm(x)
        x = res + o
        res = x
        x = self.post_attention_layernorm(x)
        moe = getattr(self, "mlp_override", None)
        if moe is not None:
            x = moe(x)
        else:
            x = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return res + x


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab"], c["hidden"])
        self.layers = nn.ModuleList([LlamaBlock(c) for _ in range(c["layers"])])
        self.gemma = c.get("variant") == "gemma2"
        self.norm = GemmaRMSNorm(c["hidden"]) if self.gemma else RMSNorm(c["hidden"])
        self.lm_head = nn.Linear(c["hidden"], c["vocab"], bias=False)
        d = c["head_dim"]
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d)), persistent=False)

    def forward(self, ids, labels, ckpt):
        b, s = ids.shape
        set_phase("embedding")
        h = self.embed_tokens(ids)
        if self.gemma:  # Gemma scales the embeddings by a 0-dim tensor in the compute dtype
            h = h * torch.tensor(self.c["hidden"] ** 0.5, dtype=h.dtype)
        set_phase("shared")
        with torch.no_grad():  # LlamaRotaryEmbedding.forward is no_grad
            pos = torch.arange(s)[None, :].expand(b, s).float()
            fr = (self.inv_freq.float()[None, :, None].expand(b, -1, 1) @ pos[:, None, :]).transpose(1, 2)
            emb = torch.cat((fr, fr), dim=-1)
            cos, sin = emb.cos().to(h.dtype), emb.sin().to(h.dtype)
            mask = torch.full((s, s), torch.finfo(h.dtype).min, dtype=h.dtype).triu(1)[None, None].expand(b, 1, s, s)
        for t in (cos, sin, mask):
            METER and METER.preassign(t)
        h, resident = run_blocks(self.layers, h, ckpt, (cos, sin, mask))
        set_phase("final_norm")
        h = self.norm(h)
        set_phase("head")
        logits = self.lm_head(h)
        if self.gemma:  # final_logit_softcapping
            logits = torch.tanh(logits / 30.0) * 30.0
        loss = causal_lm_loss(logits, labels)
        return logits, loss, resident


# ---------------------------------------------------------------------------
# GPT-2 (GPT2LMHeadModel, eager attention, gelu_new)
# ---------------------------------------------------------------------------

class Conv1D(nn.Module):
    """transformers' Conv1D: addmm(bias, x.view(-1, nx), weight[nx, nf])."""

    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))
        self.nf = nf

    def forward(self, x):
        out = x.size()[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(out)


def gelu_new(x):
    """NewGELUActivation, the tanh approximation written out in Python ops."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, I = c["hidden"], c["intermediate"]
        self.H, self.d, self.h = c["heads"], h // c["heads"], h
        self.ln_1 = LayerNorm(h, eps=1e-5)
        self.c_attn = Conv1D(3 * h, h)
        self.c_proj = Conv1D(h, h)
        self.ln_2 = LayerNorm(h, eps=1e-5)
        self.c_fc = Conv1D(I, h)
        self.mlp_proj = Conv1D(h, I)

    def forward(self, x, bias):
        res = x
        x = self.ln_1(x)
        q, k, v = self.c_attn(x).split(self.h, dim=2)
        shp = q.shape[:-1] + (-1, self.d)
        q, k, v = (t.view(shp).transpose(1, 2) for t in (q, k, v))
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype)
        ql, kl = q.size(-2), k.size(-2)
        causal = bias[:, :, kl - ql: kl, :kl]
        mv = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype)
        w = torch.where(causal, w.to(w.dtype), mv)
        w = F.softmax(w, dim=-1).type(v.dtype)
        w = drop(w)
        o = torch.matmul(w, v).transpose(1, 2)
        o = o.reshape(*o.shape[:-2], -1).contiguous()
        o = drop(self.c_proj(o))
        x = o + res
        res = x
        x = self.ln_2(x)
        x = drop(self.mlp_proj(gelu_new(self.c_fc(x))))
        return res + x


class GPT2(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.wte = nn.Embedding(c["vocab"], c["hidden"])
        self.wpe = nn.Embedding(c["positions"], c["hidden"])
        self.h = nn.ModuleList([GPT2Block(c) for _ in range(c["layers"])])
        self.ln_f = LayerNorm(c["hidden"], eps=1e-5)
        n = c["positions"]
        self.register_buffer("bias", torch.tril(torch.ones((n, n), dtype=torch.bool)).view(1, 1, n, n), persistent=False)

    def forward(self, ids, labels, ckpt):
        b, s = ids.shape
        set_phase("embedding")
        pos = torch.arange(s).unsqueeze(0)
        METER and METER.preassign(pos)
        METER and METER.preassign(self.bias)
        h = self.wte(ids) + self.wpe(pos)
        h = drop(h)
        h, resident = run_blocks(self.h, h, ckpt, (self.bias,))
        set_phase("final_norm")
        h = self.ln_f(h)
        set_phase("head")
        logits = F.linear(h, self.wte.weight)  # tied lm_head
        loss = causal_lm_loss(logits, labels)
        return logits, loss, resident


# ---------------------------------------------------------------------------
# BERT (BertForMaskedLM, eager attention, post-LN)
# ---------------------------------------------------------------------------

class BertBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, I = c["hidden"], c["intermediate"]
        self.H, self.d = c["heads"], h // c["heads"]
        self.query = nn.Linear(h, h)
        self.key = nn.Linear(h, h)
        self.value = nn.Linear(h, h)
        self.attn_out = nn.Linear(h, h)
        self.attn_ln = LayerNorm(h, eps=1e-12)
        self.inter = nn.Linear(h, I)
        self.out = nn.Linear(I, h)
        self.out_ln = LayerNorm(h, eps=1e-12)

    def split(self, x):
        return x.view(x.size()[:-1] + (self.H, self.d)).permute(0, 2, 1, 3)

    def forward(self, x, ext_mask):
        mq = self.query(x)
        k = self.split(self.key(x))
        v = self.split(self.value(x))
        q = self.split(mq)
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d)
        w = w + ext_mask
        w = F.softmax(w, dim=-1)
        w = drop(w)
        o = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous()
        o = o.view(o.size()[:-2] + (self.H * self.d,))
        o = drop(self.attn_out(o))
        a = self.attn_ln(o + x)
        i = F.gelu(self.inter(a))
        o = drop(self.out(i))
        return self.out_ln(o + a)


class Bert(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden"]
        self.word = nn.Embedding(c["vocab"], h)
        self.pos = nn.Embedding(c["positions"], h)
        self.typ = nn.Embedding(2, h)
        self.emb_ln = LayerNorm(h, eps=1e-12)
        self.layer = nn.ModuleList([BertBlock(c) for _ in range(c["layers"])])
        self.t_dense = nn.Linear(h, h)  # BertPredictionHeadTransform
        self.t_ln = LayerNorm(h, eps=1e-12)
        self.dec_bias = nn.Parameter(torch.zeros(c["vocab"]))

    def forward(self, ids, labels, ckpt):
        b, s = ids.shape
        set_phase("embedding")
        pos = torch.arange(s).unsqueeze(0)
        tt = torch.zeros_like(ids)
        att = torch.ones(b, s, dtype=self.word.weight.dtype)
        ext = ((1.0 - att[:, None, None, :]) * torch.finfo(att.dtype).min).to(att.dtype)
        for t in (pos, tt, ext):
            METER and METER.preassign(t)
        h = self.word(ids) + self.typ(tt) + self.pos(pos)
        h = drop(self.emb_ln(h))
        h, resident = run_blocks(self.layer, h, ckpt, (ext,))
        set_phase("final_norm")
        h = self.t_ln(F.gelu(self.t_dense(h)))
        set_phase("head")
        logits = F.linear(h, self.word.weight, self.dec_bias)  # tied decoder
        # BertForMaskedLM: CrossEntropyLoss on the logits as they are (no upcast, no shift).
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))
        return logits, loss, resident


# ---------------------------------------------------------------------------
# Mixtral (MixtralForCausalLM: a Llama block whose MLP is MixtralSparseMoeBlock)
# ---------------------------------------------------------------------------

class Expert(nn.Module):
    def __init__(self, h, I):
        super().__init__()
        self.w1 = nn.Linear(h, I, bias=False)
        self.w2 = nn.Linear(I, h, bias=False)
        self.w3 = nn.Linear(h, I, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoE(nn.Module):
    """The op order of MixtralSparseMoeBlock: fp32 router softmax, top-k,
    renormalization, then a loop over experts gathering their tokens."""

    def __init__(self, c):
        super().__init__()
        h = c["hidden"]
        self.E, self.k = c["experts"], c["active"]
        self.gate = nn.Linear(h, self.E, bias=False)
        self.experts = nn.ModuleList([Expert(h, c["intermediate"]) for _ in range(self.E)])

    def forward(self, x):
        b, s, h = x.shape
        x = x.view(-1, h)
        logits = self.gate(x)
        rw = F.softmax(logits, dim=1, dtype=torch.float)
        rw, sel = torch.topk(rw, self.k, dim=-1)
        rw /= rw.sum(dim=-1, keepdim=True)
        rw = rw.to(x.dtype)
        out = torch.zeros((b * s, h), dtype=x.dtype)
        mask = F.one_hot(sel, num_classes=self.E).permute(2, 1, 0)
        for e in range(self.E):
            idx, top_x = torch.where(mask[e])
            cur = x[None, top_x].reshape(-1, h)
            y = self.experts[e](cur) * rw[top_x, idx, None]
            out.index_add_(0, top_x, y.to(x.dtype))
        return out.reshape(b, s, h)


class MixtralBlock(LlamaBlock):
    def __init__(self, c):
        super().__init__(c)
        del self.gate_proj, self.up_proj, self.down_proj
        self.moe = SparseMoE(c)

    def forward(self, x, cos, sin, mask):
        self.mlp_override = self.moe
        return super().forward(x, cos, sin, mask)


class Mixtral(Llama):
    def __init__(self, c):
        super().__init__(c)
        self.layers = nn.ModuleList([MixtralBlock(c) for _ in range(c["layers"])])


# ---------------------------------------------------------------------------
# ViT (ViTForImageClassification) and CLIP's vision tower (quick_gelu, pre-LN)
# ---------------------------------------------------------------------------

class ViTBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, I = c["hidden"], c["intermediate"]
        self.H, self.d = c["heads"], h // c["heads"]
        self.clip = c["arch"] == "clip"
        self.ln1 = LayerNorm(h, eps=1e-12)
        self.q, self.k, self.v, self.o = (nn.Linear(h, h) for _ in range(4))
        self.ln2 = LayerNorm(h, eps=1e-12)
        self.fc1 = nn.Linear(h, I)
        self.fc2 = nn.Linear(I, h)

    def split(self, x):
        return x.view(x.size()[:-1] + (self.H, self.d)).permute(0, 2, 1, 3)

    def forward(self, x):
        y = self.ln1(x)
        k, v, q = self.split(self.k(y)), self.split(self.v(y)), self.split(self.q(y))
        # eager_attention_forward of modeling_vit.py / modeling_clip.py: fp32 softmax
        w = torch.matmul(q, k.transpose(-1, -2)) * (self.d ** -0.5)
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        w = drop(w)
        o = torch.matmul(w, v).transpose(1, 2).contiguous()
        o = drop(self.o(o.view(o.size()[:-2] + (self.H * self.d,))))
        x = o + x
        y = self.fc1(self.ln2(x))
        y = y * torch.sigmoid(1.702 * y) if self.clip else F.gelu(y)  # quick_gelu / gelu
        return drop(self.fc2(y)) + x


class ViT(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, P = c["hidden"], c["patch"]
        self.patch = nn.Conv2d(3, h, P, stride=P)
        self.cls = nn.Parameter(torch.randn(1, 1, h))
        self.pos = nn.Parameter(torch.randn(1, (c["image"] // P) ** 2 + 1, h))
        self.pre = LayerNorm(h, eps=1e-5) if c["arch"] == "clip" else None
        self.layers = nn.ModuleList([ViTBlock(c) for _ in range(c["layers"])])
        self.norm = LayerNorm(h, eps=1e-12)
        self.classifier = nn.Linear(h, c["vocab"])

    def forward(self, pixels, labels, ckpt):
        b = pixels.shape[0]
        set_phase("embedding")
        e = self.patch(pixels).flatten(2).transpose(1, 2)
        e = torch.cat((self.cls.expand(b, -1, -1), e), dim=1) + self.pos
        e = drop(e)
        if self.pre is not None:
            e = self.pre(e)
        h, resident = run_blocks(self.layers, e, ckpt, ())
        set_phase("final_norm")
        h = self.norm(h)
        set_phase("head")
        logits = self.classifier(h[:, 0, :])
        return logits, F.cross_entropy(logits.float(), labels), resident


# ---------------------------------------------------------------------------
# T5 (T5ForConditionalGeneration) and Whisper (WhisperForConditionalGeneration)
# ---------------------------------------------------------------------------

class T5Norm(nn.Module):
    """T5LayerNorm: variance from an fp32 copy, the input itself times rsqrt."""

    def __init__(self, h):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))

    def forward(self, x):
        var = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + 1e-6)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            x = x.to(self.weight.dtype)
        return self.weight * x


class T5Attn(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, self.H, self.d = c["hidden"], c["heads"], c["head_dim"]
        self.q, self.k, self.v = (nn.Linear(h, self.H * self.d, bias=False) for _ in range(3))
        self.o = nn.Linear(self.H * self.d, h, bias=False)

    def forward(self, x, kv, bias):
        b = x.shape[0]
        q = self.q(x).view(b, -1, self.H, self.d).transpose(1, 2)
        k = self.k(kv).view(b, -1, self.H, self.d).transpose(1, 2)
        v = self.v(kv).view(b, -1, self.H, self.d).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(3, 2))  # no scaling in T5
        scores += bias
        w = F.softmax(scores.float(), dim=-1).type_as(scores)
        w = drop(w)
        o = torch.matmul(w, v).transpose(1, 2).contiguous().view(b, -1, self.H * self.d)
        return self.o(o)


class T5Block(nn.Module):
    def __init__(self, c, decoder):
        super().__init__()
        h, I = c["hidden"], c["intermediate"]
        self.gated = c.get("gated", False)
        self.ln1, self.attn = T5Norm(h), T5Attn(c)
        self.cross = None
        if decoder:
            self.ln_c, self.cross = T5Norm(h), T5Attn(c)
        self.ln2 = T5Norm(h)
        if self.gated:
            self.wi_0, self.wi_1 = nn.Linear(h, I, bias=False), nn.Linear(h, I, bias=False)
        else:
            self.wi = nn.Linear(h, I, bias=False)
        self.wo = nn.Linear(I, h, bias=False)

    def forward(self, x, bias, enc=None, cross_bias=None):
        y = self.ln1(x)
        x = x + drop(self.attn(y, y, bias))
        if self.cross is not None:
            x = x + drop(self.cross(self.ln_c(x), enc, cross_bias))
        y = self.ln2(x)
        if self.gated:
            y = gelu_new(self.wi_0(y)) * self.wi_1(y)
        else:
            y = F.relu(self.wi(y))
        return x + drop(self.wo(drop(y)))


def t5_buckets(q, k, n=32, maxd=128, bidirectional=True):
    """T5Attention._relative_position_bucket (log-spaced buckets)."""
    rel = torch.arange(k)[None, :] - torch.arange(q)[:, None]
    out = torch.zeros_like(rel)
    if bidirectional:
        n //= 2
        out += (rel > 0).to(torch.long) * n
        rel = torch.abs(rel)
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    exact = n // 2
    small = rel < exact
    large = exact + (torch.log(rel.float() / exact + 1e-6) / math.log(maxd / exact) * (n - exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, n - 1))
    return out + torch.where(small, rel, large)


class T5(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        h = c["hidden"]
        self.shared = nn.Embedding(c["vocab"], h)
        self.enc = nn.ModuleList([T5Block(c, False) for _ in range(c["enc_layers"])])
        self.dec = nn.ModuleList([T5Block(c, True) for _ in range(c["layers"])])
        self.enc_bias = nn.Embedding(32, c["heads"])
        self.dec_bias = nn.Embedding(32, c["heads"])
        self.enc_ln, self.dec_ln = T5Norm(h), T5Norm(h)

    def forward(self, ids, labels, ckpt):
        c = self.c
        b, se = ids.shape
        sd = labels.shape[1]
        set_phase("embedding")
        dec_ids = torch.cat([torch.zeros(b, 1, dtype=labels.dtype), labels[:, :-1]], dim=1)  # _shift_right
        eb, db = t5_buckets(se, se), t5_buckets(sd, sd, bidirectional=False)
        METER and METER.preassign(eb)
        METER and METER.preassign(db)
        dt = self.shared.weight.dtype
        x = drop(self.shared(ids))
        set_phase("shared")
        ebias = self.enc_bias(eb).permute([2, 0, 1]).unsqueeze(0)
        causal = torch.full((sd, sd), torch.finfo(dt).min, dtype=dt).triu(1)
        dbias = self.dec_bias(db).permute([2, 0, 1]).unsqueeze(0) + causal
        xbias = torch.zeros(1, c["heads"], sd, se, dtype=dt)
        for t in (ebias, dbias, xbias):
            METER and METER.preassign(t)
        x, r1 = run_blocks(self.enc, x, ckpt, (ebias,), prefix="enc")
        set_phase("final_norm")
        enc = drop(self.enc_ln(x))
        METER and METER.preassign(enc)
        set_phase("embedding")
        y = drop(self.shared(dec_ids))
        y, r2 = run_blocks(self.dec, y, ckpt, (dbias, enc, xbias))
        set_phase("final_norm")
        y = drop(self.dec_ln(y))
        set_phase("head")
        y = y * (c["hidden"] ** -0.5)  # tied head
        logits = F.linear(y, self.shared.weight)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))  # no upcast, no shift
        return logits, loss, r1 + r2


class WAttn(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, self.H = c["hidden"], c["heads"]
        self.d = h // self.H
        self.q, self.v, self.o = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.k = nn.Linear(h, h, bias=False)

    def forward(self, x, kv, mask):
        b = x.shape[0]
        q = self.q(x).view(b, -1, self.H, self.d).transpose(1, 2)
        k = self.k(kv).view(b, -1, self.H, self.d).transpose(1, 2)
        v = self.v(kv).view(b, -1, self.H, self.d).transpose(1, 2)
        w = torch.matmul(q, k.transpose(2, 3)) * (self.d ** -0.5)
        if mask is not None:
            w = w + mask
        w = drop(F.softmax(w, dim=-1))
        o = torch.matmul(w, v).transpose(1, 2).contiguous()
        return self.o(o.reshape(b, -1, self.H * self.d))


class WBlock(nn.Module):
    def __init__(self, c, decoder):
        super().__init__()
        h, I = c["hidden"], c["intermediate"]
        self.ln1, self.attn = LayerNorm(h), WAttn(c)
        self.cross = None
        if decoder:
            self.ln_c, self.cross = LayerNorm(h), WAttn(c)
        self.ln2, self.fc1, self.fc2 = LayerNorm(h), nn.Linear(h, I), nn.Linear(I, h)

    def forward(self, x, mask, enc=None):
        y = self.ln1(x)
        x = x + drop(self.attn(y, y, mask))
        if self.cross is not None:
            x = x + drop(self.cross(self.ln_c(x), enc, None))
        y = drop(F.gelu(self.fc1(self.ln2(x))))  # activation_dropout
        return x + drop(self.fc2(y))


class Whisper(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        h, M, F_ = c["hidden"], c["mel"], c["frames"]
        self.conv1 = nn.Conv1d(M, h, 3, padding=1)
        self.conv2 = nn.Conv1d(h, h, 3, stride=2, padding=1)
        self.enc_pos = nn.Parameter(torch.randn(F_, h))
        self.enc = nn.ModuleList([WBlock(c, False) for _ in range(c["enc_layers"])])
        self.enc_ln = LayerNorm(h)
        self.tok = nn.Embedding(c["vocab"], h)
        self.dec_pos = nn.Embedding(c["positions"], h)
        self.dec = nn.ModuleList([WBlock(c, True) for _ in range(c["layers"])])
        self.dec_ln = LayerNorm(h)

    def forward(self, mel, labels, ckpt):
        b, sd = labels.shape
        set_phase("embedding")
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x)).permute(0, 2, 1)
        x = drop(x + self.enc_pos)
        x, r1 = run_blocks(self.enc, x, ckpt, (None,), prefix="enc")
        set_phase("final_norm")
        enc = self.enc_ln(x)
        METER and METER.preassign(enc)
        set_phase("embedding")
        dec_ids = torch.cat([torch.zeros(b, 1, dtype=labels.dtype), labels[:, :-1]], dim=1)
        pos = torch.arange(sd)
        METER and METER.preassign(pos)
        y = drop(self.tok(dec_ids) + self.dec_pos(pos))
        dt = self.tok.weight.dtype
        mask = torch.full((sd, sd), torch.finfo(dt).min, dtype=dt).triu(1)[None, None].expand(b, 1, sd, sd)
        METER and METER.preassign(mask)
        y, r2 = run_blocks(self.dec, y, ckpt, (mask, enc))
        set_phase("final_norm")
        y = self.dec_ln(y)
        set_phase("head")
        logits = F.linear(y, self.tok.weight)  # proj_out, tied
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.reshape(-1))
        return logits, loss, r1 + r2


MODELS = {"llama": Llama, "gpt2": GPT2, "bert": Bert, "mixtral": Mixtral, "vit": ViT, "clip": ViT, "t5": T5, "whisper": Whisper}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def build(c):
    torch.manual_seed(0)
    m = MODELS[c["arch"]](c).to(DTYPES[c["dtype"]])
    m.train()
    return m


def saved_by_op(root):
    """Maps storage ptr -> ["OpBackward.attr", ...] by walking the autograd graph."""
    seen, stack, out = set(), [root], {}
    while stack:
        n = stack.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        for a in dir(n):
            if a.startswith("_saved_"):
                try:
                    v = getattr(n, a)
                except Exception:
                    continue
                for t in (v if isinstance(v, (tuple, list)) else (v,)):
                    if torch.is_tensor(t):
                        out.setdefault(t.storage().data_ptr(), []).append(type(n).__name__ + "." + a[7:])
        stack.extend(f for f, _ in n.next_functions)
    return out


def inputs(c):
    torch.manual_seed(1)
    if c["arch"] == "t5":
        return (torch.randint(0, c["vocab"], (c["batch"], c["enc_seq"])),
                torch.randint(0, c["vocab"], (c["batch"], c["seq"])))
    if c["arch"] == "whisper":
        mel = torch.randn(c["batch"], c["mel"], 2 * c["frames"]).to(DTYPES[c["dtype"]])
        return mel, torch.randint(0, c["vocab"], (c["batch"], c["seq"]))
    if c["arch"] in ("vit", "clip"):
        pixels = torch.randn(c["batch"], 3, c["image"], c["image"]).to(DTYPES[c["dtype"]])
        return pixels, torch.randint(0, c["vocab"], (c["batch"],))
    ids = torch.randint(0, c["vocab"], (c["batch"], c["seq"]))
    return ids, torch.randint(0, c["vocab"], (c["batch"], c["seq"]))


def measure(c):
    global METER, DROP
    DROP = c["dropout"]
    m = build(c)
    ids, labels = inputs(c)
    METER = Meter(m)
    with torch.autograd.graph.saved_tensors_hooks(METER.pack, lambda t: t):
        logits, loss, resident = m(ids, labels, c["ckpt"])
    ops = saved_by_op(loss.grad_fn)
    raw, cuda = METER.totals(), METER.totals(cuda=True, ops=ops)
    log = {}
    for k, (b, nb, d, sh) in METER.saved.items():
        log.setdefault(b, []).append([sh, d, nb, sorted(set(ops.get(k, [])))])
    METER = None
    loss.backward()  # the graph must be consistent
    del logits, loss
    n = c["layers"]
    rec = {
        "layers": [raw.get("layer%d" % i, 0) for i in range(n)],
        "layers_cuda": [cuda.get("layer%d" % i, 0) for i in range(n)],
    }
    if "enc_layers" in c:
        rec["encoder_layers"] = [raw.get("enc%d" % i, 0) for i in range(c["enc_layers"])]
        rec["encoder_layers_cuda"] = [cuda.get("enc%d" % i, 0) for i in range(c["enc_layers"])]
    for k in ("embedding", "final_norm", "head", "shared", "ids"):
        rec[k] = raw.get(k, 0)
        rec[k + "_cuda"] = cuda.get(k, 0)
    rec["resident_inputs"] = resident
    rec["layer0_saved"] = log.get("layer0", [])
    rec["profiler_peak_bytes"] = profile_peak(c)
    rec["profiler_forward_peak_bytes"] = profile_peak(c, backward=False)
    return rec


def profile_peak(c, backward=True):
    """The CPU profiler's peak of live bytes (docs/reference.md#peak-of-live-bytes) during
    forward (and backward), relative to the bytes live before the forward."""
    from torch.profiler import profile, ProfilerActivity
    m = build(c)
    ids, labels = inputs(c)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
        logits, loss, _ = m(ids, labels, c["ckpt"])
        if backward:
            loss.backward()
        del logits, loss
    ev = sorted((e.start_us(), e.nbytes()) for e in p.profiler.kineto_results.events() if e.name() == "[memory]")
    cur = peak = 0
    for _, n in ev:
        cur += n
        peak = max(peak, cur)
    return peak


def grid():
    shapes = {
        # (batch, seq, hidden, heads, kv_heads, intermediate, vocab)
        "llama": [(1, 16, 64, 4, 4, 172, 1000), (2, 32, 64, 4, 2, 128, 1000), (2, 64, 128, 8, 2, 344, 1000),
                  (1, 128, 256, 8, 1, 512, 1000), (4, 32, 96, 6, 3, 256, 1000)],
        "gpt2": [(1, 16, 64, 4, 4, 256, 1000), (2, 32, 96, 6, 6, 384, 1000), (2, 64, 128, 4, 4, 512, 1000),
                 (1, 128, 64, 2, 2, 256, 1000)],
        "bert": [(1, 16, 64, 4, 4, 256, 1000), (2, 32, 96, 6, 6, 384, 1000), (2, 64, 128, 4, 4, 512, 1000),
                 (3, 128, 64, 2, 2, 256, 1000)],
    }
    for arch, rows in shapes.items():
        for (b, s, h, H, KV, I, V) in rows:
            for dt in ("fp32", "bf16"):
                for ck in ("none", "reentrant"):
                    c = dict(arch=arch, batch=b, seq=s, hidden=h, heads=H, kv_heads=KV, head_dim=h // H,
                             intermediate=I, vocab=V, layers=2, dtype=dt, ckpt=ck, dropout=0.0)
                    if arch != "llama":
                        c["positions"] = 256
                    yield c
    # Dropout p = 0.1 (native_dropout: 1-byte masks, as on CUDA).
    for arch, (b, s, h, H, KV, I, V) in (("llama", (2, 32, 64, 4, 2, 128, 1000)), ("gpt2", (2, 32, 96, 6, 6, 384, 1000)),
                                         ("bert", (2, 32, 96, 6, 6, 384, 1000)), ("gpt2", (1, 64, 64, 4, 4, 256, 1000))):
        for dt in ("fp32", "bf16"):
            c = dict(arch=arch, batch=b, seq=s, hidden=h, heads=H, kv_heads=KV, head_dim=h // H, intermediate=I,
                     vocab=V, layers=2, dtype=dt, ckpt="none", dropout=0.1)
            if arch != "llama":
                c["positions"] = 256
            yield c
    # Qwen3 (q/k norms) and Gemma2 (Gemma RMSNorm, sandwich norms, soft-capping; head_dim·heads != hidden).
    for variant, (b, s, h, H, KV, d, I) in (("qwen3", (2, 32, 64, 4, 2, 16, 128)), ("gemma2", (2, 24, 64, 4, 2, 32, 128))):
        for dt in ("fp32", "bf16"):
            for ck in ("none", "reentrant"):
                yield dict(arch="llama", variant=variant, batch=b, seq=s, hidden=h, heads=H, kv_heads=KV, head_dim=d,
                           intermediate=I, vocab=1000, layers=2, dtype=dt, ckpt=ck, dropout=0.0)
    # Mixtral-style MoE blocks: E experts, top-k routing.
    for (b, s, h, H, KV, I, E, k) in ((1, 16, 64, 4, 2, 96, 4, 2), (2, 32, 64, 4, 4, 128, 8, 2), (2, 24, 96, 6, 2, 64, 3, 1)):
        for dt in ("fp32", "bf16"):
            for ck in ("none", "reentrant"):
                yield dict(arch="mixtral", batch=b, seq=s, hidden=h, heads=H, kv_heads=KV, head_dim=h // H,
                           intermediate=I, experts=E, active=k, vocab=1000, layers=2, dtype=dt, ckpt=ck, dropout=0.0)
    # ViT (gelu) and CLIP vision (quick_gelu, pre-LayerNorm): patches + CLS.
    for arch, (b, img, P, h, H, I) in (("vit", (2, 32, 8, 64, 4, 256)), ("vit", (1, 48, 8, 96, 6, 384)),
                                       ("clip", (2, 28, 7, 64, 4, 256))):
        for dt in ("fp32", "bf16"):
            for ck, p in (("none", 0.0), ("reentrant", 0.0), ("none", 0.1)):
                if arch == "clip" and p > 0:
                    continue
                yield dict(arch=arch, batch=b, seq=(img // P) ** 2 + 1, image=img, patch=P, hidden=h, heads=H,
                           kv_heads=H, head_dim=h // H, intermediate=I, vocab=10, layers=2, dtype=dt, ckpt=ck,
                           dropout=p)
    # Encoder-decoders: T5 (relu and gated-gelu, d_kv·heads != d_model) and Whisper (conv front-end).
    for arch, (b, se, sd, h, H, d, I, gated) in (("t5", (2, 24, 16, 64, 4, 8, 128, False)),
                                                 ("t5", (1, 32, 12, 64, 4, 16, 96, True)),
                                                 ("whisper", (2, 24, 16, 64, 4, 16, 128, False))):
        for dt in ("fp32", "bf16"):
            for ck, p in (("none", 0.0), ("reentrant", 0.0), ("none", 0.1)):
                c = dict(arch=arch, batch=b, seq=sd, enc_seq=se, hidden=h, heads=H, kv_heads=H, head_dim=d,
                         intermediate=I, vocab=1000, layers=2, enc_layers=2, dtype=dt, ckpt=ck, dropout=p, gated=gated)
                if arch == "whisper":
                    c.update(mel=8, frames=se, positions=64, head_dim=h // H)
                yield c
    # The non-reentrant path, once per architecture.
    for arch in ("llama", "gpt2", "bert"):
        c = dict(arch=arch, batch=2, seq=32, hidden=64, heads=4, kv_heads=4, head_dim=16, intermediate=256,
                 vocab=1000, layers=2, dtype="bf16", ckpt="nonreentrant", dropout=0.0)
        if arch != "llama":
            c["positions"] = 256
        yield c


def main():
    cases = []
    for c in grid():
        r = measure(c)
        cases.append({"config": c, "saved": r})
        print(c["arch"], c["dtype"], c["ckpt"], c["batch"], c["seq"], c["hidden"], r["layers"], file=sys.stderr)
    out = {
        "generator": "tools/oracle/activations.py",
        "torch_version": torch.__version__,
        "units": "bytes",
        "method": "saved_tensors_hooks pack hook, counted by storage, parameters excluded, "
                  "attributed to the first model part that saves the storage; *_cuda: LayerNorm "
                  "mean/rstd of 16-bit inputs counted in fp32 as CUDA keeps them, and storages saved "
                  "only by MeanBackward1 dropped (torch 2.x saves sizes only), 0-dim float64 wrapped "
                  "Python scalars dropped (CPU scalars on CUDA)",
        "cases": cases,
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
