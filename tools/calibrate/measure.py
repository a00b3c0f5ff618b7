"""Measures one calibration case on a CUDA GPU, in a process of its own.

Run by calibrate.py, one fresh interpreter per case, so that an OOM (or a
fragmented allocator, or a leaked CUDA context) cannot affect the next case:

    python3 measure.py '<case as JSON>'

It prints exactly one line that starts with "CALIBRATE-ROW " followed by the
row as JSON (schema: tools/calibrate/README.md) and exits 0 whatever the
case's outcome (ok, oom, unsupported, error); a non-zero exit means the
harness itself failed.

What it measures, per phase (forward, backward, optimizer step of each
training step; prefill and decode of generation; the forward of prefill):
torch.cuda.reset_peak_memory_stats() before the phase, then after it
max_memory_allocated, max_memory_reserved, the current allocated and
reserved bytes, a few memory_stats counters, and the process's device memory
as the driver reports it (NVML through pynvml when importable, else
nvidia-smi --query-compute-apps). The device figure is read at the end of the
phase, not sampled during it; the caching allocator keeps what it reserved
until empty_cache(), so at the end of a phase it holds the phase's peak
reserved, except after an allocation retry that freed cached blocks
(memory_stats num_alloc_retries, recorded).

Models are built from their config with random weights directly on the GPU
(AutoModelFor*.from_config under `with torch.device("cuda")`), never
downloaded.
"""

import contextlib
import json
import os
import subprocess
import sys
import time
import traceback

MARK = "CALIBRATE-ROW "
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


class Unsupported(Exception):
    """The case cannot run with the installed libraries (no peft, an
    attention implementation the model lacks)."""


# --- device memory as the driver sees it -------------------------------------------------


class DeviceReader:
    """Reads the memory the driver attributes to this process on GPU 0.

    NVML reports host PIDs; inside a container with its own PID namespace
    our PID may be absent. Then, when exactly one process uses the GPU, its
    figure is ours (method "...-only-process"); else the device-wide used
    memory minus what was used before this process touched CUDA
    ("nvml-used-minus-baseline")."""

    def __init__(self):
        self.nvml = None
        self.handle = None
        self.baseline_used = None
        try:
            import pynvml  # nvidia-ml-py
            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CALIBRATE_NVML_INDEX", "0")))
            self.baseline_used = int(pynvml.nvmlDeviceGetMemoryInfo(self.handle).used)
        except Exception:
            self.nvml = None
        self.smi = None
        if self.nvml is None:
            self.smi = _which("nvidia-smi")

    def source(self):
        return "pynvml" if self.nvml else ("nvidia-smi" if self.smi else None)

    def read(self):
        """Returns (bytes or None, method)."""
        pid = os.getpid()
        if self.nvml:
            try:
                procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
                for p in procs:
                    if p.pid == pid and p.usedGpuMemory is not None:
                        return int(p.usedGpuMemory), "nvml-pid"
                if len(procs) == 1 and procs[0].usedGpuMemory is not None:
                    return int(procs[0].usedGpuMemory), "nvml-only-process"
                used = int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)
                return used - self.baseline_used, "nvml-used-minus-baseline"
            except Exception as e:  # noqa: BLE001 - a reading, not the case, failed
                return None, "nvml-error: %s" % e
        if self.smi:
            try:
                out = subprocess.run([self.smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=20).stdout
                rows = [r.split(",") for r in out.strip().splitlines() if r.strip()]
                rows = [(int(a), int(b) * 1024 * 1024) for a, b in rows if a.strip().isdigit() and b.strip().isdigit()]
                for p, mib in rows:
                    if p == pid:
                        return mib, "nvidia-smi-pid (MiB resolution)"
                if len(rows) == 1:
                    return rows[0][1], "nvidia-smi-only-process (MiB resolution)"
                return None, "nvidia-smi: process not found"
            except Exception as e:  # noqa: BLE001
                return None, "nvidia-smi-error: %s" % e
        return None, "unavailable"


def _which(name):
    for d in os.environ.get("PATH", "").split(os.pathsep):
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


# --- environment -----------------------------------------------------------------------------


def environment(torch, reader):
    env = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "transformers": _version("transformers"),
        "peft": _version("peft"),
        "device_source": reader.source(),
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "PYTORCH_ALLOC_CONF": os.environ.get("PYTORCH_ALLOC_CONF"),
        "CUDA_MODULE_LOADING": os.environ.get("CUDA_MODULE_LOADING"),
    }
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update({
            "gpu": p.name, "gpu_total_memory": int(p.total_memory),
            "compute_capability": "%d.%d" % (p.major, p.minor),
        })
    env["driver"] = _driver(reader)
    return env


def _version(mod):
    try:
        return __import__(mod).__version__
    except Exception:  # noqa: BLE001 - absent or broken: not installed for our purpose
        return None


def _driver(reader):
    if reader.nvml:
        try:
            v = reader.nvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else v
        except Exception:  # noqa: BLE001
            pass
    smi = _which("nvidia-smi")
    if smi:
        try:
            return subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                                  capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
        except Exception:  # noqa: BLE001
            return None
    return None


# --- measuring phases --------------------------------------------------------------------------


STATS = ["requested_bytes.all.peak", "active_bytes.all.peak", "inactive_split_bytes.all.peak",
         "segment.all.peak", "num_alloc_retries", "num_ooms"]


class Meter:
    """Records the allocator's peaks and the device reading of each phase."""

    def __init__(self, torch, reader):
        self.torch = torch
        self.reader = reader
        self.phases = []
        self.current = None

    def start(self, phase, step=None):
        self.torch.cuda.synchronize()
        self.torch.cuda.reset_peak_memory_stats()
        self.current = (phase, step)

    def snapshot(self):
        t = self.torch
        t.cuda.synchronize()
        dev, how = self.reader.read()
        s = {
            "allocated_peak": int(t.cuda.max_memory_allocated()),
            "reserved_peak": int(t.cuda.max_memory_reserved()),
            "allocated": int(t.cuda.memory_allocated()),
            "reserved": int(t.cuda.memory_reserved()),
            "device": dev, "device_method": how,
        }
        try:
            st = t.cuda.memory_stats()
            s["stats"] = {k: int(st[k]) for k in STATS if k in st}
        except Exception:  # noqa: BLE001 - older torch
            pass
        return s

    def end(self):
        phase, step = self.current
        rec = {"phase": phase, "step": step}
        rec.update(self.snapshot())
        self.phases.append(rec)
        self.current = None
        return rec


def peak_of(phases):
    out = {}
    for k, src in (("allocated", "allocated_peak"), ("reserved", "reserved_peak"), ("device", "device")):
        vals = [p[src] for p in phases if p.get(src) is not None]
        out[k] = max(vals) if vals else None
    return out


# --- building models and inputs ---------------------------------------------------------------


DTYPES = {"fp32": "float32", "bf16-mixed": "float32", "fp16-mixed": "float32", "bf16": "bfloat16",
          "fp16": "float16"}


def auto_class(transformers, kind, arch):
    names = {
        "causal": ["AutoModelForCausalLM"],
        "masked": ["AutoModelForMaskedLM"],
        "seq2seq": ["AutoModelForSeq2SeqLM"],
        "speech": ["AutoModelForSpeechSeq2Seq"],
        "vision": ["AutoModelForImageClassification"],
        "llava": ["AutoModelForImageTextToText", "AutoModelForVision2Seq"],
    }[kind]
    for n in names:
        if hasattr(transformers, n):
            return getattr(transformers, n)
    return getattr(transformers, arch)


def hf_config(transformers, job):
    c = dict(job["config"])
    mt = c.pop("model_type")
    if job["kind"] == "vision":
        c.setdefault("num_labels", 1000)  # ViTForImageClassification with an ImageNet-1k head
    return transformers.AutoConfig.for_model(mt, **c)


def from_config(cls, config, dtype, attention):
    """cls.from_config with the dtype keyword of the installed transformers
    (dtype in v5, torch_dtype before) and the attention implementation."""
    kw = {"attn_implementation": attention}
    for name in ("dtype", "torch_dtype"):
        try:
            return cls.from_config(config, **{name: dtype}, **kw)
        except TypeError as e:
            if name not in str(e):
                raise
    raise Unsupported("from_config accepts neither dtype nor torch_dtype")


def build_model(torch, transformers, job, device):
    """Builds the job's model with random weights on device (in place
    under `with torch.device(device)` on torch >= 2.0, else on the CPU and
    moved), with LoRA adapters from peft when job["lora_rank"] > 0."""
    config = hf_config(transformers, job)
    cls = auto_class(transformers, job["kind"], job["config"]["architectures"][0])
    dtype = getattr(torch, DTYPES[job["precision"]])
    in_place = hasattr(torch.device(device), "__enter__")
    ctx = torch.device(device) if in_place else contextlib.nullcontext()
    with ctx:
        try:
            model = from_config(cls, config, dtype, job["attention"])
        except (ValueError, ImportError) as e:
            msg = str(e)
            if "attn_implementation" in msg or "does not support" in msg or "scaled_dot_product" in msg:
                raise Unsupported(msg)
            raise
        if job.get("lora_rank"):
            try:
                import peft
            except ImportError:
                raise Unsupported("peft is not importable")
            lc = peft.LoraConfig(r=job["lora_rank"], lora_alpha=2 * job["lora_rank"], lora_dropout=0.0,
                                 target_modules=job.get("lora_targets"))
            model = peft.get_peft_model(model, lc)
    if not in_place:
        model = model.to(device)
    return model


def model_info(model):
    seen, params, trainable, pbytes = set(), 0, 0, 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        params += p.numel()
        pbytes += p.numel() * p.element_size()
        if p.requires_grad:
            trainable += p.numel()
    bbytes = sum(b.numel() * b.element_size() for b in model.buffers())
    drop = sum(1 for mod in model.modules() if type(mod).__name__ == "Dropout" and getattr(mod, "p", 0) > 0)
    return {"class": type(model).__name__, "params": params, "trainable_params": trainable,
            "param_bytes": pbytes, "buffer_bytes": bbytes, "dropout_modules": drop}


def inputs(torch, job, config, device):
    """Random inputs of the job's shape, and labels for training."""
    b, s = job["batch"], job["seq"]
    kind = job["kind"]
    g = torch.Generator(device="cpu").manual_seed(0)
    dtype = getattr(torch, DTYPES[job["precision"]])

    def ids(n, vocab):
        return torch.randint(0, vocab, (b, n), generator=g).to(device)

    if kind in ("causal", "masked"):
        x = ids(s, min(config.vocab_size, 32000))
        return {"input_ids": x}, x
    if kind == "seq2seq":
        x = ids(job["encoder_seq"], min(config.vocab_size, 32000))
        return {"input_ids": x}, ids(job["decoder_seq"], min(config.vocab_size, 32000))
    if kind == "speech":
        # 30 s of log-mel frames: the encoder's convolutions halve them to
        # max_source_positions (1500).
        feats = torch.randn(b, config.num_mel_bins, 2 * config.max_source_positions, generator=g).to(device, dtype)
        return {"input_features": feats}, ids(job["decoder_seq"], min(config.vocab_size, 50000))
    if kind == "vision":
        px = torch.randn(b, 3, config.image_size, config.image_size, generator=g).to(device, dtype)
        return {"pixel_values": px}, torch.randint(0, config.num_labels, (b,), generator=g).to(device)
    if kind == "llava":
        vc = config.vision_config
        n_img = (vc.image_size // vc.patch_size) ** 2  # "default" strategy drops the CLS token
        tok = getattr(config, "image_token_index", None)
        if tok is None:
            tok = config.image_token_id
        img = torch.full((b, n_img * job["images"]), tok, dtype=torch.long).to(device)
        text = ids(s, min(config.text_config.vocab_size, tok))
        x = torch.cat([img, text], dim=1)
        labels = x.clone()
        labels[:, : img.shape[1]] = -100
        px = torch.randn(b * job["images"], 3, vc.image_size, vc.image_size, generator=g).to(device, dtype)
        return {"input_ids": x, "pixel_values": px}, labels
    raise Unsupported("no inputs for kind %r" % kind)


def make_optimizer(torch, name, params):
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-5)
    if name == "adamw_torch_fused":
        return torch.optim.AdamW(params, lr=1e-5, fused=True)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-4)
    if name == "adafactor":
        from transformers.optimization import Adafactor
        # The settings of Trainer's optim="adafactor".
        return Adafactor(params, lr=1e-4, scale_parameter=False, relative_step=False, warmup_init=False)
    raise Unsupported("optimizer %r" % name)


def autocast(torch, precision):
    if precision == "bf16-mixed":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if precision == "fp16-mixed":
        return torch.autocast("cuda", dtype=torch.float16)
    return contextlib.nullcontext()


# --- the jobs ------------------------------------------------------------------------------------


def train(torch, model, job, x, labels, meter, make_opt, steps):
    """steps optimizer steps of grad_accum micro-batches each; phases
    forward/backward per micro-batch and step per step."""
    model.train()
    if job["checkpointing"] == "full":
        try:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        except TypeError:
            model.gradient_checkpointing_enable()
    elif job["checkpointing"] != "none":
        raise Unsupported("checkpointing %r" % job["checkpointing"])
    opt = make_opt([p for p in model.parameters() if p.requires_grad])
    scaler = torch.cuda.amp.GradScaler() if job["precision"] == "fp16-mixed" else None
    ga = max(1, job.get("grad_accum") or 1)
    for step in range(steps):
        for micro in range(ga):
            meter.start("forward", step)
            with autocast(torch, job["precision"]):
                out = model(**x, labels=labels)
                loss = out.loss / ga
            meter.end()
            del out
            meter.start("backward", step)
            (scaler.scale(loss) if scaler else loss).backward()
            del loss
            meter.end()
        meter.start("step", step)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        meter.end()


def prefill(torch, model, job, x, meter, runs=2):
    """runs forward passes without gradients and without a KV cache; the
    logits of every position are kept until the pass ends."""
    model.eval()
    kw = {}
    if job["kind"] in ("causal", "llava"):
        kw["use_cache"] = False
    if job["kind"] in ("seq2seq", "speech"):
        # The decoder sees seq tokens; for seq2seq the encoder sees x.
        kw["decoder_input_ids"] = x.pop("_decoder_input_ids")
        kw["use_cache"] = False
    with torch.inference_mode():
        for r in range(runs):
            meter.start("prefill", r)
            out = model(**x, **kw)
            meter.end()
            del out


def generate(torch, model, job, x, meter):
    """Greedy generation of job["generate"] tokens after a prompt of
    job["seq"] tokens, as a loop of forward passes with the KV cache the
    model returns (what generate() does, without its configuration-
    dependent extras): the prompt pass keeps the logits of the last
    position only, like generate()'s logits_to_keep=1."""
    model.eval()
    n = job["generate"]
    with torch.inference_mode():
        meter.start("prefill", 0)
        kw = {"use_cache": True}
        if job["kind"] in ("seq2seq", "speech"):
            kw["decoder_input_ids"] = x.pop("_decoder_input_ids")
        else:
            kw.update(_logits_to_keep(model))
        out = model(**x, **kw)
        nxt = out.logits[:, -1:, :].argmax(-1)
        pkv = out.past_key_values
        enc = getattr(out, "encoder_last_hidden_state", None)
        del out
        meter.end()
        meter.start("decode", 0)
        for _ in range(n - 1):
            kw = {"use_cache": True, "past_key_values": pkv}
            if job["kind"] in ("seq2seq", "speech"):
                out = model(encoder_outputs=(enc,), decoder_input_ids=nxt, **kw)
            else:
                out = model(input_ids=nxt, **kw)
            nxt = out.logits[:, -1:, :].argmax(-1)
            pkv = out.past_key_values
            del out
        meter.end()


def _logits_to_keep(model):
    import inspect
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return {}
    for name in ("logits_to_keep", "num_logits_to_keep"):
        if name in params:
            return {name: 1}
    return {}


# --- one case ------------------------------------------------------------------------------------


# Failures that are the GPU running out of memory without PyTorch's
# OutOfMemoryError: a library's own allocation failing near the edge.
OOM_TEXTS = ("out of memory", "cublas_status_alloc_failed", "cudnn_status_alloc_failed",
             "cudnn_status_not_enough_workspace", "cudaerrormemoryallocation")


def is_oom(torch, e):
    oom = getattr(torch.cuda, "OutOfMemoryError", None) or getattr(torch, "OutOfMemoryError", None)
    msg = str(e).lower()
    return (oom is not None and isinstance(e, oom)) or any(t in msg for t in OOM_TEXTS)


def run_case(case, steps=3):
    t0 = time.time()
    job = case["job"]
    row = {"schema": 1, "id": case["id"], "status": "error", "job": job, "gpumem_flags": case.get("gpumem_flags"),
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0))}
    reader = DeviceReader()  # before CUDA is touched: the NVML baseline
    try:
        import torch
    except ImportError as e:
        row.update(status="unsupported", error="torch is not importable: %s" % e)
        return row
    row["env"] = environment(torch, reader)
    if not torch.cuda.is_available():
        row.update(status="unsupported", error="no CUDA device")
        return row
    meter = Meter(torch, reader)
    phase = "context"
    try:
        import transformers
        row["env"]["transformers"] = transformers.__version__
        # The CUDA context with one 512-byte block (a 2 MiB segment).
        torch.ones(1, device="cuda")
        row["context"] = meter.snapshot()
        phase = "load"
        torch.cuda.reset_peak_memory_stats()
        model = build_model(torch, transformers, job, "cuda")
        row["model_info"] = model_info(model)
        row["load"] = meter.snapshot()
        x, labels = inputs(torch, job, model.config, "cuda")
        if job["mode"] != "train" and job["kind"] in ("seq2seq", "speech"):
            x["_decoder_input_ids"] = labels  # the decoder's prompt, decoder_seq tokens
        phase = job["mode"]
        if job["mode"] == "train":
            train(torch, model, job, x, labels, meter, lambda ps: make_optimizer(torch, job["optimizer"], ps), steps)
        elif job["mode"] == "prefill":
            prefill(torch, model, job, x, meter)
        elif job["mode"] == "generate":
            generate(torch, model, job, x, meter)
        else:
            raise Unsupported("mode %r" % job["mode"])
        row["status"] = "ok"
    except Unsupported as e:
        row.update(status="unsupported", error=str(e)[:2000])
    except Exception as e:  # noqa: BLE001 - every outcome becomes a row
        if is_oom(torch, e):
            row.update(status="oom", error=str(e)[:4000], oom_phase=meter.current[0] if meter.current else phase)
            try:
                row["at_oom"] = meter.snapshot()
            except Exception:  # noqa: BLE001
                pass
        else:
            row.update(status="error", error=(str(e) + "\n" + traceback.format_exc())[-4000:])
    row["phases"] = meter.phases
    row["peak"] = peak_of(meter.phases)
    row["seconds"] = round(time.time() - t0, 2)
    return row


def main(argv):
    if len(argv) != 2:
        print("usage: measure.py '<case JSON>'", file=sys.stderr)
        return 2
    case = json.loads(argv[1])
    row = run_case(case, steps=int(os.environ.get("CALIBRATE_STEPS", "3")))
    sys.stdout.flush()
    print(MARK + json.dumps(row, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
