"""Names the ops a training step's backward peak falls in, for one grid case.

    python3 where.py ID...      (in the chroot of setup.sh, as saved.py:
                                 PYTHONPATH=/opt/gpumem/stubs:/opt/gpumem/transformers-src/src,
                                 GPUMEM_CATALOG=/opt/gpumem/configs, OMP_NUM_THREADS=1;
                                 where.py beside measure.py in /opt/gpumem/measure)

testdata/measured/cpu/where/where-2.6.0.jsonl holds its output for the cases
misses.tsv cites it for (stdout only; the chroot's warnings go to stderr).

For each case id of measure.py's grid (fp32 or bf16-mixed training, full
checkpointing as measure.py enables it, no compilation), builds the model and its inputs as measure.py
does (same seed), runs one warm-up forward and backward, drops the
gradients, then profiles one forward (with the loss) and its backward with
profile_memory on, as measure.py's rows are measured. It prints one JSON
line: the id, the level at the forward's end and at the peak (bytes
allocated since the profile began: the saved tensors, the gradients made so
far and the transients; the parameters and inputs made before are not in
it), the ops enclosing the peak's allocation, outermost first, and the
memory events just before and after it (delta and the innermost op), so a
peak can be named to the op. No optimizer runs: the optimizer's state, made
before a row's forward, is not part of these levels."""

import contextlib
import json
import sys

import measure

CONTEXT = 12


def where(torch, transformers, job):
    from torch.profiler import ProfilerActivity, profile, record_function
    torch.manual_seed(0)
    model = measure.build_model(torch, transformers, job)
    x, labels = measure.inputs(torch, job, model.config)
    model.train()
    if job["checkpointing"] == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ac = (torch.autocast("cpu", dtype=torch.bfloat16) if job["precision"] == "bf16-mixed"
          else contextlib.nullcontext())
    with ac:
        out = model(**x, labels=labels)
    out.loss.backward()
    del out
    model.zero_grad(set_to_none=True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with record_function("where:forward"):
            with ac:
                out = model(**x, labels=labels)
            loss = out.loss
            del out
        with record_function("where:backward"):
            loss.backward()
            del loss
    events = list(prof.profiler.kineto_results.events())
    mem = sorted((e.start_ns(), i, e.nbytes()) for i, e in enumerate(events) if e.name() == "[memory]")
    ops = [(e.start_ns(), e.end_ns(), e.name()) for e in events if e.name() != "[memory]"]
    forward_end = max(o[1] for o in ops if o[2] == "where:forward")
    level, levels, peak, at, end = 0, [], 0, 0, 0
    for k, (t, _, d) in enumerate(mem):
        level += d
        levels.append((t, level, d))
        if t <= forward_end:
            end = level
        if level > peak:
            peak, at = level, k

    def innermost(t):
        inside = [o for o in ops if o[0] <= t <= o[1]]
        return min(inside, key=lambda o: o[1] - o[0])[2] if inside else ""

    t = levels[at][0]
    enclosing = [o[2] for o in sorted((o for o in ops if o[0] <= t <= o[1]), key=lambda o: o[0])]
    around = [{"level": lv, "delta": d, "op": innermost(tt)}
              for tt, lv, d in levels[max(0, at - CONTEXT):at + 3]]
    return {"forward_end": end, "peak": peak, "over_forward_end": peak - end,
            "enclosing": enclosing, "around": around}


def main(ids):
    import torch
    transformers = measure.import_transformers()
    grid = {c["id"]: c["job"] for c in measure.build_grid()}
    for i in ids:
        r = where(torch, transformers, grid[i])
        print(json.dumps({"id": i, "torch": torch.__version__, "transformers": transformers.__version__,
                          "transformers_commit": measure.transformers_commit(), **r}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
