#!/usr/bin/env python3
"""Calibration driver: measures GPU memory of real jobs for gpumem.

Runs the grid of grid.py (or the part --tier and --filter select), each case
in a fresh interpreter (measure.py), and appends one JSON line per case to
testdata/measured/<gpu>-<date>.jsonl. It resumes: a case whose id is
already in a file of the same GPU is skipped, and so is every rung of a
batch or sequence ladder above one that ran out of memory. It stops starting
cases when the time budget (default 540 s, one 10-minute window) would be
exceeded, without recording the case it could not finish.

    python3 tools/calibrate/calibrate.py                  # run, default budget
    python3 tools/calibrate/calibrate.py --tier 1 --budget 300
    python3 tools/calibrate/calibrate.py --dry-run --out /tmp/grid.jsonl
    python3 tools/calibrate/calibrate.py --list

--dry-run needs no GPU: it lists the grid with each case's job and gpumem
command line, checks every model config, and, when transformers is
importable, builds each model on the meta device (torch >= 2.0) or a
one-layer copy on the CPU (older torch) to count its parameters. Nothing it
writes is a measurement; it never writes under testdata/measured unless told
to with --out.

See tools/calibrate/README.md for the row schema.
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import grid  # noqa: E402

MEASURED = os.path.join(grid.ROOT, "testdata", "measured")
MARK = "CALIBRATE-ROW "


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# --- the GPU's name without creating a CUDA context in this process -------------------------


def gpu_name():
    try:
        import pynvml
        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        return n.decode() if isinstance(n, bytes) else n
    except Exception:  # noqa: BLE001 - try nvidia-smi next
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def git_commit():
    try:
        out = subprocess.run(["git", "-C", grid.ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# --- resuming ----------------------------------------------------------------------------------


def read_rows(paths):
    rows = []
    for p in paths:
        if not os.path.exists(p):
            continue
        with open(p) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    log("%s:%d: not JSON, ignored" % (p, n))
    return rows


class Progress:
    """What is done: case ids recorded, and the OOM edge of each ladder."""

    def __init__(self, rows):
        self.done = set()
        self.oom_at = {}  # series -> smallest varied value that ran out of memory
        for r in rows:
            self.add(r)

    def add(self, row):
        self.done.add(row.get("id"))
        s, vary = row.get("series"), row.get("vary")
        if row.get("status") == "oom" and s and vary:
            v = row["job"].get(vary)
            if v is not None and (s not in self.oom_at or v < self.oom_at[s]):
                self.oom_at[s] = v

    def skip(self, case):
        """Returns why a case is skipped, or None."""
        if case["id"] in self.done:
            return "done"
        s = case.get("series")
        if s in self.oom_at and case["job"][case["vary"]] > self.oom_at[s]:
            return "above the OOM at %s %d" % (case["vary"], self.oom_at[s])
        return None


# --- running one case --------------------------------------------------------------------------


def run_child(python, case, timeout, child=None):
    """Runs measure.py on one case. Returns (row or None, why-not)."""
    cmd = [python, child or os.path.join(HERE, "measure.py"), json.dumps(case)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        tail = (e.stderr or b"")
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return None, "timeout after %.0f s; stderr tail: %s" % (timeout, tail[-1500:])
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(MARK):
            return json.loads(line[len(MARK):]), None
    return None, "exit %d without a row; stderr tail: %s" % (p.returncode, (p.stderr or "")[-1500:])


def run(args):
    name = args.gpu or gpu_name()
    if not name:
        log("no GPU found (neither pynvml nor nvidia-smi answered); use --dry-run to check the grid without one")
        return 2
    gslug = grid.slug(name)
    out = args.out or os.path.join(MEASURED, "%s-%s.jsonl" % (gslug, datetime.datetime.utcnow().strftime("%Y-%m-%d")))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    previous = [out]
    if not args.rerun and os.path.isdir(MEASURED):
        previous += [os.path.join(MEASURED, f) for f in sorted(os.listdir(MEASURED))
                     if f.startswith(gslug + "-") and f.endswith(".jsonl")]
    progress = Progress([] if args.rerun else read_rows(sorted(set(previous))))
    cases = select(args)
    commit = git_commit()
    t0 = time.time()
    ran = skipped = 0
    log("GPU %s; %d cases selected, %d already recorded; writing %s; budget %.0f s" %
        (name, len(cases), len(progress.done), out, args.budget))
    with open(out, "a") as f:
        for case in cases:
            why = progress.skip(case)
            if why:
                skipped += 1
                continue
            left = args.budget - (time.time() - t0)
            if left < args.min_case:
                log("budget: %.0f s left, stopping; run again to resume" % left)
                break
            timeout = min(args.case_timeout, left)
            row, err = run_child(args.python, case, timeout, args.child)
            if row is None and err.startswith("timeout") and timeout < args.case_timeout:
                log("%s: stopped by the budget, not recorded; run again to resume" % case["id"])
                break
            if row is None:
                row = {"schema": 1, "id": case["id"], "job": case["job"], "gpumem_flags": case.get("gpumem_flags"),
                       "status": "timeout" if err.startswith("timeout") else "error", "error": err,
                       "phases": [], "peak": {"allocated": None, "reserved": None, "device": None}}
            row.update({"tier": case["tier"], "series": case.get("series"), "vary": case.get("vary"),
                        "harness": {"tool": "tools/calibrate", "commit": commit}})
            f.write(json.dumps(row, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
            progress.add(row)
            ran += 1
            pk = row.get("peak") or {}
            log("%-70s %-11s alloc %s reserved %s device %s (%.0f s)" % (
                case["id"], row.get("status"), _gib(pk.get("allocated")), _gib(pk.get("reserved")),
                _gib(pk.get("device")), row.get("seconds") or 0))
    log("ran %d, skipped %d, %.0f s" % (ran, skipped, time.time() - t0))
    return 0


def _gib(v):
    return "-" if v is None else "%.2fGiB" % (v / 2 ** 30)


def select(args):
    cases = grid.build_grid(args.tier)
    if args.filter:
        rx = re.compile(args.filter)
        cases = [c for c in cases if rx.search(c["id"])]
    if args.limit:
        cases = cases[: args.limit]
    return cases


# --- dry run -------------------------------------------------------------------------------------


def dry_build(job, cache):
    """Builds the job's model without a GPU and counts its parameters:
    on the meta device with torch >= 2.0, else a one-layer copy on the CPU.
    Returns a dict; {"built": False, "why": ...} when it cannot."""
    key = (job["model"], job.get("lora_rank"), json.dumps(job.get("lora_targets")))
    if key in cache:
        return cache[key]
    info = {"built": False}
    try:
        import torch
    except ImportError as e:
        info["why"] = "torch is not importable (%s)" % e
        cache[key] = info
        return info
    info["torch"] = torch.__version__
    try:
        import transformers
    except ImportError as e:
        info["why"] = "transformers is not importable (%s): configs checked as JSON only, nothing built" % e
        cache[key] = info
        return info
    import measure
    try:
        meta = hasattr(torch.device("meta"), "__enter__")
        j = dict(job, precision="bf16", attention="eager")
        if not meta:
            j["config"] = shrink(job["config"])
        model = measure.build_model(torch, transformers, j, "meta" if meta else "cpu")
        info.update(measure.model_info(model))
        info.update(built=True, device="meta" if meta else "cpu (one layer: the counts are not the full model's)",
                    transformers=transformers.__version__)
    except Exception as e:  # noqa: BLE001 - report, go on with the next model
        info["why"] = "%s: %s" % (type(e).__name__, str(e)[:500])
    cache[key] = info
    return info


def shrink(config):
    """A one-layer copy of a config, for a CPU build on old torch."""
    c = json.loads(json.dumps(config))
    for k in ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers", "encoder_layers", "decoder_layers"):
        if k in c:
            c[k] = 1
    for sub in ("text_config", "vision_config"):
        if isinstance(c.get(sub), dict):
            c[sub] = shrink(c[sub])
    return c


def dry_run(args):
    problems = grid.check_grid()
    for p in problems:
        log("config problem:", p)
    cases = select(args)
    out = open(args.out, "w") if args.out else sys.stdout
    cache = {}
    counts = {}
    try:
        for c in cases:
            info = dry_build(c["job"], cache)
            row = {"dry_run": True, "id": c["id"], "tier": c["tier"], "series": c.get("series"), "vary": c.get("vary"),
                   "job": c["job"], "gpumem_flags": c.get("gpumem_flags"), "model_info": info}
            out.write(json.dumps(row, sort_keys=True) + "\n")
            k = (c["tier"], c["job"]["mode"])
            counts[k] = counts.get(k, 0) + 1
    finally:
        if out is not sys.stdout:
            out.close()
    log("dry run: %d cases over %d models" % (len(cases), len({c["job"]["model"] for c in cases})))
    for (tier, mode), n in sorted(counts.items()):
        log("  tier %d %-8s %4d" % (tier, mode, n))
    built = [k for k, v in cache.items() if v.get("built")]
    log("models built: %d of %d%s" % (len(built), len(cache), "" if built else
                                       " (" + next(iter(cache.values()), {}).get("why", "") + ")"))
    for k, v in sorted(cache.items(), key=lambda kv: str(kv[0])):
        if v.get("built"):
            log("  %-24s lora %-4s %-32s params %14d trainable %14d" % (k[0], k[1] or 0, v["class"], v["params"],
                                                                       v["trainable_params"]))
    return 1 if problems else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="list the grid and check it without a GPU")
    ap.add_argument("--list", action="store_true", help="print the selected case ids and exit")
    ap.add_argument("--out", help="output JSON Lines file (default testdata/measured/<gpu>-<date>.jsonl; "
                                  "the dry run writes to stdout)")
    ap.add_argument("--budget", type=float, default=540, help="seconds for the whole run (default 540)")
    ap.add_argument("--case-timeout", type=float, default=300, help="seconds for one case (default 300)")
    ap.add_argument("--min-case", type=float, default=25, help="do not start a case with less time left (default 25)")
    ap.add_argument("--tier", type=int, default=4, help="run tiers up to this one (1-4, default 4)")
    ap.add_argument("--filter", help="only case ids matching this regular expression")
    ap.add_argument("--limit", type=int, default=0, help="at most this many cases (after --filter)")
    ap.add_argument("--rerun", action="store_true", help="do not skip cases already recorded")
    ap.add_argument("--gpu", help="the GPU's name for the file name (default: asked of NVML / nvidia-smi)")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the cases (default this one)")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # tests: a stand-in for measure.py
    args = ap.parse_args(argv)
    if args.list:
        for c in select(args):
            print(c["id"])
        return 0
    if args.dry_run:
        return dry_run(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
