"""Tests of the calibration harness that need no GPU and no transformers.

    /usr/bin/python3 -m unittest discover -s tools/calibrate -v

- the grid: unique ids, configs that parse, ladders, gpumem command lines;
- the driver: resume, OOM-edge pruning, the time budget, per-case timeouts
  and crashes, with a stand-in for measure.py that writes made-up rows into
  a temporary file (never into testdata/measured);
- measure.py's job loops (train, prefill, generate) on the CPU with a tiny
  plain-torch model, when torch is importable (Debian's python3-torch 1.13
  is enough), with a meter that records phases instead of CUDA statistics.
"""

import functools
import json
import os
import sys
import tempfile
import textwrap
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import calibrate  # noqa: E402
import grid  # noqa: E402
import measure  # noqa: E402

SCHEMA = os.path.join(grid.ROOT, "testdata", "measured", "schema.json")

try:
    import torch
except ImportError:  # the loop tests are skipped
    torch = None


class GridTest(unittest.TestCase):
    def test_configs_parse(self):
        self.assertEqual(grid.check_grid(), [])

    def test_ids_unique_and_ordered_by_tier(self):
        cases = grid.build_grid()
        ids = [c["id"] for c in cases]
        self.assertEqual(len(ids), len(set(ids)))
        tiers = [c["tier"] for c in cases]
        self.assertEqual(tiers, sorted(tiers))
        self.assertGreater(len(cases), 100)

    def test_ladders_prune(self):
        cases = [c for c in grid.build_grid() if c["series"]]
        p = calibrate.Progress([{"id": cases[2]["id"], "status": "oom", "series": cases[2]["series"],
                                 "vary": cases[2]["vary"], "job": cases[2]["job"]}])
        same = [c for c in cases if c["series"] == cases[2]["series"]]
        v = cases[2]["job"][cases[2]["vary"]]
        for c in same:
            want = "done" if c["id"] == cases[2]["id"] else (None if c["job"][c["vary"]] < v else "above")
            got = p.skip(c)
            self.assertTrue(got == want or (want == "above" and got.startswith("above")), (c["id"], got))

    def test_ladders_ascend(self):
        # Within a tier; an anchor that is also a rung runs earlier, in
        # tier 1 (pruning compares values, so the order does not matter).
        last = {}
        for c in grid.build_grid():
            if not c["series"]:
                continue
            key = (c["series"], c["tier"])
            v = c["job"][c["vary"]]
            self.assertGreater(v, last.get(key, 0), c["id"])
            last[key] = v

    def test_families(self):
        models = {c["job"]["model"] for c in grid.build_grid()}
        for want in ("gpt2", "opt-350m", "bert-large", "t5-base", "whisper-small", "vit-large-patch16-224",
                     "mixtral-small", "llava-1.5-7b", "qwen2.5-0.5b", "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b"):
            self.assertIn(want, models)

    def test_gpumem_flags(self):
        by_id = {c["id"]: c for c in grid.build_grid()}
        self.assertEqual(by_id["gpt2/train/bf16-mixed/adamw/sdpa/ckpt-none/b4/s1024"]["gpumem_flags"],
                         "--model gpt2 --train --optimizer adamw --checkpointing none --dropout --batch 4 --seq 1024 "
                         "--precision bf16-mixed --attention sdpa")
        self.assertIsNone(by_id["mixtral-small/train/bf16-mixed/adamw/sdpa/ckpt-none/b4/s2048"]["gpumem_flags"])
        gen = by_id["llama-3.2-1b/generate/bf16/sdpa/b1/s512/g128"]
        self.assertIn("--infer --generate 128", gen["gpumem_flags"])
        mix = gen = by_id["mixtral-small/prefill/bf16/sdpa/b1/s2048"]["job"]["config"]
        self.assertEqual(mix["hidden_size"], 1024)
        self.assertEqual(mix["num_local_experts"], 8)

    def test_tier_filter(self):
        self.assertTrue(all(c["tier"] == 1 for c in grid.build_grid(1)))


STUB = textwrap.dedent("""
    import json, os, sys, time
    case = json.loads(sys.argv[1])
    job = case["job"]
    time.sleep(float(os.environ.get("STUB_SLEEP", "0")))
    if os.environ.get("STUB_CRASH"):
        sys.exit(3)
    oom = job["batch"] >= int(os.environ.get("STUB_OOM_BATCH", "1000"))
    row = {"schema": 1, "id": case["id"], "status": "oom" if oom else "ok", "job": job,
           "gpumem_flags": case.get("gpumem_flags"), "phases": [],
           "peak": {"allocated": 1, "reserved": 2, "device": 3}, "env": {"gpu": "stub"}}
    print("noise from a library")
    print("CALIBRATE-ROW " + json.dumps(row))
""")

LADDER = r"^gpt2/train/bf16-mixed/adamw/sdpa/ckpt-none/b\d+/s1024$"


class DriverTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.child = os.path.join(self.dir.name, "stub.py")
        with open(self.child, "w") as f:
            f.write(STUB)
        self.out = os.path.join(self.dir.name, "out.jsonl")
        self.env = dict(os.environ)

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.env)
        self.dir.cleanup()

    def drive(self, *extra, **env):
        os.environ.update({k: str(v) for k, v in env.items()})
        args = ["--gpu", "Stub GPU", "--out", self.out, "--child", self.child, "--filter", LADDER] + list(extra)
        self.assertEqual(calibrate.main(args), 0)
        return calibrate.read_rows([self.out])

    def test_oom_edge_and_resume(self):
        rows = self.drive(STUB_OOM_BATCH=8)
        got = [(r["job"]["batch"], r["status"]) for r in rows]
        # b4 is the tier-1 anchor, run first, and a rung of the ladder,
        # which stops at b8.
        self.assertEqual(got, [(4, "ok"), (1, "ok"), (2, "ok"), (8, "oom")])
        self.assertEqual({r["series"] for r in rows}, {rows[0]["series"]})
        self.assertIsNotNone(rows[0]["series"])
        self.assertEqual(self.drive(STUB_OOM_BATCH=8), rows, "a second run adds nothing")

    def test_budget_stops_and_resumes(self):
        rows = self.drive("--budget", "2.5", "--min-case", "0.5", STUB_SLEEP=1)
        self.assertGreaterEqual(len(rows), 1)
        self.assertLess(len(rows), 10)
        rows = self.drive(STUB_SLEEP=0)
        self.assertEqual(len(rows), 9)  # 9 rungs, the anchor b4 among them
        self.assertEqual(len({r["id"] for r in rows}), 9)

    def test_case_timeout_is_recorded(self):
        rows = self.drive("--case-timeout", "0.5", "--limit", "1", STUB_SLEEP=3)
        self.assertEqual([r["status"] for r in rows], ["timeout"])
        self.assertIn("timeout after", rows[0]["error"])

    def test_crash_is_recorded(self):
        rows = self.drive("--limit", "1", STUB_CRASH=1)
        self.assertEqual([r["status"] for r in rows], ["error"])
        self.assertIn("exit 3 without a row", rows[0]["error"])

    def test_rows_have_the_schema_fields(self):
        rows = self.drive(STUB_OOM_BATCH=2)
        with open(SCHEMA) as f:
            schema = json.load(f)
        for r in rows:
            for k in schema["required"]:
                self.assertIn(k, r, r["id"])
            for k in schema["properties"]["job"]["required"]:
                self.assertIn(k, r["job"], r["id"])
            self.assertIn(r["status"], schema["properties"]["status"]["enum"])

    def test_dry_run(self):
        out = os.path.join(self.dir.name, "grid.jsonl")
        self.assertEqual(calibrate.main(["--dry-run", "--tier", "1", "--out", out]), 0)
        rows = calibrate.read_rows([out])
        self.assertEqual(len(rows), len(grid.build_grid(1)))
        self.assertTrue(all(r["dry_run"] for r in rows))
        self.assertTrue(all("model_info" in r for r in rows))


class TinyLM(torch.nn.Module if torch else object):
    """A causal LM with the Hugging Face calling convention: loss, logits,
    and a "cache" that counts the tokens seen."""

    def __init__(self, vocab=64, hidden=16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, hidden)
        self.head = torch.nn.Linear(hidden, vocab)
        self.gc = None

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        self.gc = gradient_checkpointing_kwargs

    def forward(self, input_ids, labels=None, use_cache=None, past_key_values=None, logits_to_keep=0):
        logits = self.head(self.emb(input_ids))
        if logits_to_keep:
            logits = logits[:, -logits_to_keep:, :]
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        seen = (past_key_values or 0) + input_ids.shape[1]
        return types.SimpleNamespace(loss=loss, logits=logits, past_key_values=seen if use_cache else None)


class PhaseMeter:
    def __init__(self):
        self.phases, self.current = [], None

    def start(self, phase, step=None):
        self.current = (phase, step)

    def end(self):
        self.phases.append(self.current)
        self.current = None


@unittest.skipIf(torch is None, "torch is not importable")
class LoopTest(unittest.TestCase):
    def job(self, **kw):
        j = {"kind": "causal", "mode": "train", "batch": 2, "seq": 8, "precision": "fp32", "optimizer": "adamw",
             "checkpointing": "none", "grad_accum": 1, "generate": 5}
        j.update(kw)
        return j

    def test_train_phases(self):
        for ga, opt in ((1, "adamw"), (2, "sgd")):
            model, meter = TinyLM(), PhaseMeter()
            x = torch.randint(0, 64, (2, 8))
            job = self.job(grad_accum=ga, optimizer=opt, checkpointing="full")
            measure.train(torch, model, job, {"input_ids": x}, x, meter,
                          lambda ps: measure.make_optimizer(torch, opt, ps), steps=2)
            want = []
            for s in range(2):
                want += [("forward", s), ("backward", s)] * ga + [("step", s)]
            self.assertEqual(meter.phases, want)
            self.assertEqual(model.gc, {"use_reentrant": False})
            self.assertTrue(all(p.grad is None for p in model.parameters()), "zero_grad(set_to_none=True)")

    def test_prefill_and_generate(self):
        model, meter = TinyLM(), PhaseMeter()
        x = torch.randint(0, 64, (2, 8))
        measure.prefill(torch, model, self.job(mode="prefill"), {"input_ids": x}, meter)
        self.assertEqual(meter.phases, [("prefill", 0), ("prefill", 1)])
        meter = PhaseMeter()
        seen = []
        orig = model.forward

        @functools.wraps(orig)
        def spy(*a, **kw):
            out = orig(*a, **kw)
            seen.append((kw.get("logits_to_keep"), out.logits.shape[1], out.past_key_values))
            return out
        model.forward = spy
        measure.generate(torch, model, self.job(mode="generate"), {"input_ids": x}, meter)
        self.assertEqual(meter.phases, [("prefill", 0), ("decode", 0)])
        # The prompt pass keeps one position's logits; the cache grows to
        # prompt + generated − 1 (the last token is not fed back).
        self.assertEqual(seen[0], (1, 1, 8))
        self.assertEqual(seen[-1][2], 8 + 5 - 1)
        self.assertEqual(len(seen), 5)

    def test_model_info_counts_tied_once(self):
        model = TinyLM()
        model.head.weight = model.emb.weight
        info = measure.model_info(model)
        self.assertEqual(info["params"], 64 * 16 + 64)
        self.assertEqual(info["trainable_params"], info["params"])

    def test_peak_of(self):
        self.assertEqual(measure.peak_of([{"allocated_peak": 1, "reserved_peak": 4, "device": None},
                                          {"allocated_peak": 3, "reserved_peak": 2, "device": 7}]),
                         {"allocated": 3, "reserved": 4, "device": 7})

    def test_no_cuda_is_unsupported(self):
        if torch.cuda.is_available():
            self.skipTest("a GPU is present")
        case = grid.build_grid(1)[0]
        row = measure.run_case(case)
        self.assertEqual(row["status"], "unsupported")
        self.assertEqual(row["error"], "no CUDA device")


if __name__ == "__main__":
    unittest.main()
