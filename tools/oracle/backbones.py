#!/usr/bin/python3
"""CPU oracle for gpumem's activation model of vision backbones (ResNet,
ConvNeXt, Swin: model/vision_cnn_act.go).

What it measures
----------------
The bytes autograd saves for backward during one training forward pass of
small plain-torch backbones, by storage, parameters and buffers excluded
(BatchNorm's running statistics, Swin's relative_position_index), with the
pack hook and corrections of tools/oracle/activations.py (its Meter and
saved_by_op are imported). Each storage counts in the first part that saves
it:

  stem              the stem (ResNet: 7x7/2 convolution, BatchNorm, ReLU,
                    3x3/2 max-pool with int64 indices; ConvNeXt: patch
                    convolution and channels-first LayerNorm; Swin: patch
                    convolution and LayerNorm)
  s<i>b<j>          block j of stage i (ConvNeXt: a stage's downsampling
                    layer counts in its first block)
  s<i>merge         Swin's patch merging after stage i
  final_norm        ConvNeXt's and Swin's final LayerNorm (and Swin's pool)
  head              the classifier and the loss
  ids               the int64 labels

The modules follow the op order of (written from, not copied):
  - torchvision/models/resnet.py (pytorch/vision 054e54c573ba46e5b9c63f1eea3ad4d103afbea2):
    conv-bn-relu(inplace=True), stride on the 3x3, out += identity, relu_;
    variant "hf" follows transformers modeling_resnet.py (00cbbe53b2f70d551ce82a1f6b43a2e4a4debe42):
    nn.ReLU() out of place, shortcut after the main branch;
  - transformers modeling_convnext.py (00fea5de3f39d68bacc08b65261aa60eda7df10d);
  - transformers modeling_swin.py (0004a3c206a354820edc45954e80b6657f10a7c7), eager attention;
  - transformers modeling_efficientnet.py (03569cc9f4a87c3337cac6e33d3cbb086f5165e3), its nn.Dropout
    as CUDA runs it (native_dropout, a 1-byte mask).

The "_cuda" figures apply activations.py's corrections (torch 2.x mean.dim
saves no input; wrapped Python floats are CPU scalars; LayerNorm statistics
of 16-bit inputs are fp32) and one more: BatchNorm's save_mean/save_invstd
are fp32 on CUDA for every input dtype (cuDNN and the native CUDA kernel
keep them in the accumulate type).

How to regenerate testdata/oracle/backbones.json
------------------------------------------------
  apt-get update && apt-get install -y python3-torch   # Debian bookworm: torch 1.13, CPU only
  cd <repo root> && /usr/bin/python3 tools/oracle/backbones.py > testdata/oracle/backbones.json
A few seconds on one core; deterministic. The Go test is
`go test ./model/ -run TestBackboneOracle -v`.
"""

import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import activations as base  # noqa: E402  (Meter, saved_by_op, LayerNorm)

torch.manual_seed(0)
torch.set_num_threads(1)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def phase(p):
    base.set_phase(p)


class BatchNorm(nn.BatchNorm2d):
    """nn.BatchNorm2d that tells the meter which saved tensors are its statistics."""

    def forward(self, x):
        if base.METER is None:
            return super().forward(x)
        METER_BN[0] = True
        try:
            return super().forward(x)
        finally:
            METER_BN[0] = False


METER_BN = [False]
BN_STATS = set()


def pack(t):
    if METER_BN[0] and t.dim() == 1:
        BN_STATS.add(t.storage().data_ptr())
    return base.METER.pack(t)


# ---------------------------------------------------------------------------
# ResNet
# ---------------------------------------------------------------------------

class Bottleneck(nn.Module):
    def __init__(self, cin, cout, stride, hf):
        super().__init__()
        m = cout // 4
        self.hf = hf
        self.conv1, self.bn1 = nn.Conv2d(cin, m, 1, bias=False), BatchNorm(m)
        self.conv2, self.bn2 = nn.Conv2d(m, m, 3, stride, 1, bias=False), BatchNorm(m)
        self.conv3, self.bn3 = nn.Conv2d(m, cout, 1, bias=False), BatchNorm(cout)
        self.relu = nn.ReLU(inplace=not hf)
        self.down = None
        if cin != cout or stride != 1:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), BatchNorm(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = self.down(x) if self.down is not None else x
        out += identity
        return self.relu(out)


class Basic(nn.Module):
    def __init__(self, cin, cout, stride, hf):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), BatchNorm(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), BatchNorm(cout)
        self.relu = nn.ReLU(inplace=not hf)
        self.down = None
        if cin != cout or stride != 1:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), BatchNorm(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = self.down(x) if self.down is not None else x
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, c):
        super().__init__()
        hf = c.get("variant") == "hf"
        self.conv1 = nn.Conv2d(3, c["stem"], 7, 2, 3, bias=False)
        self.bn1 = BatchNorm(c["stem"])
        self.relu = nn.ReLU(inplace=not hf)
        self.pool = nn.MaxPool2d(3, 2, 1)
        blk = Bottleneck if c["bottleneck"] else Basic
        self.stages = nn.ModuleList()
        cin = c["stem"]
        for i, (w, d) in enumerate(zip(c["widths"], c["depths"])):
            s = 2 if i > 0 else 1
            self.stages.append(nn.ModuleList([blk(cin if j == 0 else w, w, s if j == 0 else 1, hf) for j in range(d)]))
            cin = w
        self.avg = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, c["labels"])

    def forward(self, x, labels):
        phase("stem")
        x = self.pool(self.relu(self.bn1(self.conv1(x))))
        for i, st in enumerate(self.stages):
            for j, b in enumerate(st):
                phase("s%db%d" % (i, j))
                x = b(x)
        phase("head")
        logits = self.fc(torch.flatten(self.avg(x), 1))
        return logits, F.cross_entropy(logits, labels)


# ---------------------------------------------------------------------------
# ConvNeXt
# ---------------------------------------------------------------------------

class CFNorm(nn.Module):
    """ConvNextLayerNorm, data_format channels_first: Python ops."""

    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.bias = nn.Parameter(torch.zeros(c))

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + 1e-6)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class ConvNextLayer(nn.Module):
    def __init__(self, d, scale):
        super().__init__()
        self.dwconv = nn.Conv2d(d, d, 7, padding=3, groups=d)
        self.norm = base.LayerNorm(d, eps=1e-6)
        self.pw1, self.pw2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.gamma = nn.Parameter(1e-6 * torch.ones(d)) if scale else None

    def forward(self, h):
        x = self.dwconv(h).permute(0, 2, 3, 1)
        x = self.pw2(F.gelu(self.pw1(self.norm(x))))
        if self.gamma is not None:
            x = self.gamma * x
        return h + x.permute(0, 3, 1, 2)


class ConvNext(nn.Module):
    def __init__(self, c):
        super().__init__()
        w = c["widths"]
        self.patch = nn.Conv2d(3, w[0], c["patch"], c["patch"])
        self.norm0 = CFNorm(w[0])
        self.down = nn.ModuleList()
        self.stages = nn.ModuleList()
        for i, d in enumerate(c["depths"]):
            self.down.append(nn.Sequential(CFNorm(w[i - 1]), nn.Conv2d(w[i - 1], w[i], 2, 2)) if i > 0 else nn.Identity())
            self.stages.append(nn.ModuleList([ConvNextLayer(w[i], c["layer_scale"]) for _ in range(d)]))
        self.norm = base.LayerNorm(w[-1], eps=1e-12)
        self.fc = nn.Linear(w[-1], c["labels"])

    def forward(self, x, labels):
        phase("stem")
        x = self.norm0(self.patch(x))
        for i, st in enumerate(self.stages):
            phase("s%db0" % i)
            x = self.down[i](x)
            for j, b in enumerate(st):
                phase("s%db%d" % (i, j))
                x = b(x)
        phase("final_norm")
        x = self.norm(x.mean([-2, -1]))
        phase("head")
        logits = self.fc(x)
        return logits, F.cross_entropy(logits, labels)


# ---------------------------------------------------------------------------
# Swin
# ---------------------------------------------------------------------------

def window_partition(x, w):
    b, h, wd, c = x.shape
    x = x.view(b, h // w, w, wd // w, w, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, w, w, c)


def window_reverse(x, w, h, wd):
    c = x.shape[-1]
    x = x.view(-1, h // w, wd // w, w, w, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, h, wd, c)


class SwinLayer(nn.Module):
    def __init__(self, d, heads, window, shift, ratio):
        super().__init__()
        self.heads, self.window, self.shift = heads, window, shift
        self.ln1 = base.LayerNorm(d, eps=1e-5)
        self.table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads) * 0.02)
        ch = torch.arange(window)
        coords = torch.stack(torch.meshgrid([ch, ch], indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += window - 1
        rel[:, :, 1] += window - 1
        rel[:, :, 0] *= 2 * window - 1
        self.register_buffer("index", rel.sum(-1))
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln2 = base.LayerNorm(d, eps=1e-5)
        self.fc1, self.fc2 = nn.Linear(d, ratio * d), nn.Linear(ratio * d, d)

    def mask(self, hp, dtype):
        if self.shift == 0:
            return None
        w, s = self.window, self.shift
        img = torch.zeros((1, hp, hp, 1), dtype=dtype)
        cnt = 0
        for hs in (slice(0, -w), slice(-w, -s), slice(-s, None)):
            for ws in (slice(0, -w), slice(-w, -s), slice(-s, None)):
                img[:, hs, ws, :] = cnt
                cnt += 1
        mw = window_partition(img, w).view(-1, w * w)
        m = mw.unsqueeze(1) - mw.unsqueeze(2)
        return m.masked_fill(m != 0, float(-100.0)).masked_fill(m == 0, float(0.0))

    def split(self, x):
        return x.view(x.size()[:-1] + (self.heads, -1)).permute(0, 2, 1, 3)

    def attention(self, x, mask):
        bw, n, c = x.shape
        q = self.q(x)
        k, v, q = self.split(self.k(x)), self.split(self.v(x)), self.split(q)
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(c // self.heads)
        bias = self.table[self.index.view(-1)].view(n, n, -1).permute(2, 0, 1).contiguous()
        s = s + bias.unsqueeze(0)
        if mask is not None:
            nm = mask.shape[0]
            s = s.view(bw // nm, nm, self.heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
            s = s.view(-1, self.heads, n, n)
        p = F.softmax(s, dim=-1)
        ctx = torch.matmul(p, v).permute(0, 2, 1, 3).contiguous()
        return self.o(ctx.view(bw, n, c))

    def forward(self, x, hw):
        h, wd = hw
        b, _, c = x.shape
        shortcut = x
        x = self.ln1(x).view(b, h, wd, c)
        w = self.window
        pr, pb = (w - wd % w) % w, (w - h % w) % w
        x = F.pad(x, (0, 0, 0, pr, 0, pb))
        hp, wp = x.shape[1], x.shape[2]
        if self.shift > 0:
            x = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        win = window_partition(x, w).view(-1, w * w, c)
        a = self.attention(win, self.mask(hp, x.dtype))
        a = window_reverse(a.view(-1, w, w, c), w, hp, wp)
        if self.shift > 0:
            a = torch.roll(a, shifts=(self.shift, self.shift), dims=(1, 2))
        if pr > 0 or pb > 0:
            a = a[:, :h, :wd, :].contiguous()
        x = shortcut + a.view(b, h * wd, c)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Merge(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.red = nn.Linear(4 * d, 2 * d, bias=False)
        self.norm = base.LayerNorm(4 * d, eps=1e-5)

    def forward(self, x, hw):
        h, w = hw
        b, _, c = x.shape
        x = x.view(b, h, w, c)
        if h % 2 or w % 2:
            x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))
        x = torch.cat([x[:, 0::2, 0::2, :], x[:, 1::2, 0::2, :], x[:, 0::2, 1::2, :], x[:, 1::2, 1::2, :]], -1)
        return self.red(self.norm(x.view(b, -1, 4 * c)))


class Swin(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, P = c["embed"], c["patch"]
        self.patch = nn.Conv2d(3, d, P, P)
        self.norm0 = base.LayerNorm(d, eps=1e-5)
        self.stages, self.merges = nn.ModuleList(), nn.ModuleList()
        res = c["image"] // P
        for i, (depth, heads) in enumerate(zip(c["depths"], c["heads"])):
            dim = d * 2 ** i
            win, shift = c["window"], c["window"] // 2
            if res <= win:
                win, shift = res, 0
            self.stages.append(nn.ModuleList([SwinLayer(dim, heads, win, 0 if j % 2 == 0 else shift, 4)
                                              for j in range(depth)]))
            self.merges.append(Merge(dim) if i < len(c["depths"]) - 1 else None)
            res = (res + 1) // 2
        self.norm = base.LayerNorm(d * 2 ** (len(c["depths"]) - 1), eps=1e-5)
        self.fc = nn.Linear(d * 2 ** (len(c["depths"]) - 1), c["labels"])

    def forward(self, x, labels):
        phase("stem")
        x = self.patch(x)
        hw = (x.shape[2], x.shape[3])
        x = self.norm0(x.flatten(2).transpose(1, 2))
        for i, st in enumerate(self.stages):
            for j, b in enumerate(st):
                phase("s%db%d" % (i, j))
                x = b(x, hw)
            if self.merges[i] is not None:
                phase("s%dmerge" % i)
                x = self.merges[i](x, hw)
                hw = ((hw[0] + 1) // 2, (hw[1] + 1) // 2)
        phase("final_norm")
        x = self.norm(x)
        x = torch.flatten(F.adaptive_avg_pool1d(x.transpose(1, 2), 1), 1)
        phase("head")
        logits = self.fc(x)
        return logits, F.cross_entropy(logits, labels)


# ---------------------------------------------------------------------------
# EfficientNet
# ---------------------------------------------------------------------------

class MBConv(nn.Module):
    """EfficientNetBlock: expansion, depthwise, squeeze-excite, projection."""

    def __init__(self, cin, cout, k, stride, r, se_ratio, pad, rate, skip):
        super().__init__()
        x = cin * r
        se = max(1, int(cin * se_ratio))
        self.expand = None
        if r != 1:
            self.expand = nn.Sequential(nn.Conv2d(cin, x, 1, bias=False), BatchNorm(x), nn.SiLU())
        self.stride, self.pad = stride, pad
        self.dw = nn.Conv2d(x, x, k, stride, padding="valid" if stride == 2 else "same", groups=x, bias=False)
        self.dw_bn, self.dw_act = BatchNorm(x), nn.SiLU()
        self.reduce, self.expand_se = nn.Conv2d(x, se, 1), nn.Conv2d(se, x, 1)
        self.project, self.project_bn = nn.Conv2d(x, cout, 1, bias=False), BatchNorm(cout)
        self.rate, self.skip = rate, skip

    def forward(self, h):
        emb = h
        if self.expand is not None:
            h = self.expand(h)
        if self.stride == 2:
            h = F.pad(h, self.pad)
        h = self.dw_act(self.dw_bn(self.dw(h)))
        s = F.adaptive_avg_pool2d(h, 1)
        s = torch.sigmoid(self.expand_se(F.silu(self.reduce(s))))
        h = torch.mul(h, s)
        h = self.project_bn(self.project(h))
        if not self.skip:
            if self.rate > 0:
                h = torch.native_dropout(h, self.rate, True)[0]  # CUDA's F.dropout: a 1-byte mask
            h = h + emb
        return h


class EfficientNet(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(3, c["stem"], 3, 2, padding="valid", bias=False)
        self.bn, self.act = BatchNorm(c["stem"]), nn.SiLU()
        self.stages = nn.ModuleList()
        n = sum(c["depths"])
        blk = 0
        for i, d in enumerate(c["depths"]):
            k = c["kernels"][i]
            st = nn.ModuleList()
            for j in range(d):
                cin = c["inputs"][i] if j == 0 else c["widths"][i]
                adjust = blk not in c["no_adjust"]
                pad = (k // 2 - 1, k // 2, k // 2 - 1, k // 2) if adjust else (k // 2,) * 4
                st.append(MBConv(cin, c["widths"][i], k, c["strides"][i] if j == 0 else 1, c["expand"][i],
                                 0.25, pad, c["drop_connect"] * blk / n, j == 0))
                blk += 1
            self.stages.append(st)
        self.top = nn.Conv2d(c["widths"][-1], c["top"], 1, bias=False)
        self.top_bn, self.top_act = BatchNorm(c["top"]), nn.SiLU()
        self.pool = nn.AvgPool2d(c["top"], ceil_mode=True)
        self.dropout = c["dropout"]
        self.fc = nn.Linear(c["top"], c["labels"])

    def forward(self, x, labels):
        phase("stem")
        x = self.act(self.bn(self.conv(F.pad(x, (0, 1, 0, 1)))))
        for i, st in enumerate(self.stages):
            for j, b in enumerate(st):
                phase("s%db%d" % (i, j))
                x = b(x)
        phase("final_norm")
        x = self.top_act(self.top_bn(self.top(x)))
        x = self.pool(x)
        x = x.reshape(x.shape[:2])
        phase("head")
        if self.dropout > 0:
            x = torch.native_dropout(x, self.dropout, True)[0]
        logits = self.fc(x)
        return logits, F.cross_entropy(logits, labels)


MODELS = {"resnet": ResNet, "convnext": ConvNext, "swin": Swin, "efficientnet": EfficientNet}


def measure(c):
    torch.manual_seed(0)
    m = MODELS[c["arch"]](c).to(DTYPES[c["dtype"]])
    m.train()
    torch.manual_seed(1)
    pixels = torch.randn(c["batch"], 3, c["image"], c["image"]).to(DTYPES[c["dtype"]])
    labels = torch.randint(0, c["labels"], (c["batch"],))
    meter = base.Meter(m)
    meter.params |= {b.storage().data_ptr() for b in m.buffers()}
    base.METER = meter
    BN_STATS.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits, loss = m(pixels, labels)
    ops = base.saved_by_op(loss.grad_fn)
    raw, cuda = meter.totals(), meter.totals(cuda=True, ops=ops)
    for k, (b, n, d, sh) in meter.saved.items():
        if k in BN_STATS and d in ("bfloat16", "float16"):
            cuda[b] = cuda.get(b, 0) + n  # fp32 statistics on CUDA
    log = {}
    for k, (b, n, d, sh) in meter.saved.items():
        log.setdefault(b, []).append([sh, d, n, sorted(set(ops.get(k, [])))])
    base.METER = None
    loss.backward()
    return {"raw": raw, "cuda": cuda, "detail": {k: v for k, v in log.items() if k in ("stem", "s0b0", "s1b0")}}


def grid():
    for dt in ("fp32", "bf16"):
        for variant in ("torchvision", "hf"):
            yield dict(arch="resnet", variant=variant, bottleneck=True, stem=8, widths=[16, 32, 64], depths=[2, 2, 1],
                       image=64, batch=2, labels=10, dtype=dt)
        yield dict(arch="resnet", variant="torchvision", bottleneck=False, stem=8, widths=[8, 16, 32], depths=[2, 1, 2],
                   image=48, batch=3, labels=10, dtype=dt)
        yield dict(arch="convnext", widths=[8, 16, 32], depths=[2, 1, 2], patch=4, layer_scale=True,
                   image=64, batch=2, labels=10, dtype=dt)
        yield dict(arch="convnext", widths=[8, 16], depths=[1, 2], patch=4, layer_scale=False,
                   image=32, batch=3, labels=10, dtype=dt)
        # 64 px / 4 = 16 patches, window 4: 16 windows, then 8 (4 windows), then 4 (whole map, no shift).
        yield dict(arch="swin", embed=8, depths=[2, 2, 1], heads=[2, 2, 4], window=4, patch=4,
                   image=64, batch=2, labels=10, dtype=dt)
        # 56 px / 4 = 14 patches, window 4: padded to 16; 7 -> padded to 8; merge of an odd side.
        yield dict(arch="swin", embed=8, depths=[2, 2], heads=[2, 4], window=4, patch=4,
                   image=56, batch=2, labels=10, dtype=dt)
        # EfficientNet: a stage without expansion, 5x5 and 3x3 depthwise kernels at stride 2 with
        # transformers' asymmetric padding, or symmetric (depthwise_padding) on an odd side.
        yield dict(arch="efficientnet", stem=8, inputs=[8, 8, 12], widths=[8, 12, 16], kernels=[3, 5, 3],
                   strides=[1, 2, 2], depths=[1, 2, 2], expand=[1, 4, 6], top=32, no_adjust=[],
                   drop_connect=0.2, dropout=0.2, image=64, batch=2, labels=10, dtype=dt)
        yield dict(arch="efficientnet", stem=8, inputs=[8, 8], widths=[8, 16], kernels=[3, 5],
                   strides=[1, 2], depths=[2, 2], expand=[1, 6], top=24, no_adjust=[2],
                   drop_connect=0.0, dropout=0.0, image=57, batch=3, labels=10, dtype=dt)


def main():
    cases = []
    for c in grid():
        r = measure(c)
        cases.append({"config": c, "saved": r})
        print(c["arch"], c.get("variant", ""), c["dtype"], r["cuda"], file=sys.stderr)
    out = {
        "generator": "tools/oracle/backbones.py",
        "torch_version": torch.__version__,
        "units": "bytes",
        "method": "tools/oracle/activations.py's pack hook (by storage, first part that saves it), "
                  "parameters and buffers excluded; cuda: its corrections plus BatchNorm statistics in fp32",
        "cases": cases,
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
