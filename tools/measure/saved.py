"""Lists the tensors autograd saves in one training forward of a grid case.

    python3 saved.py ID...      (in the chroot of setup.sh, as run.sh runs measure.py:
                                 PYTHONPATH=/opt/gpumem/stubs:/opt/gpumem/transformers-src/src,
                                 GPUMEM_CATALOG=/opt/gpumem/configs, OMP_NUM_THREADS=1;
                                 saved.py beside measure.py in /opt/gpumem/measure)

testdata/measured/cpu/saved/saved-2.6.0.jsonl holds its output for the cases
TestCPUSaved checks (stdout only; the chroot's UCX and cpuinfo warnings go to
stderr or are dropped).

For each case id of measure.py's grid, builds the model and its inputs as
measure.py does (same seed, same LoRA wrapper, same autocast context), runs
one forward with the labels under torch.autograd.graph.saved_tensors_hooks,
and prints one JSON line: the id, and every distinct storage the graph
saves, in the order first saved, with its bytes, dtype and shape and whether
it is a parameter's storage. The sum of the non-parameter storages is what
the forward leaves alive for backward besides the loss (the forward phase's
end level of the case's row, less its start)."""

import contextlib
import json
import sys

import measure


def saved(torch, transformers, job):
    torch.manual_seed(0)
    model = measure.build_model(torch, transformers, job)
    x, labels = measure.inputs(torch, job, model.config)
    model.train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen, order = {}, []

    def pack(t):
        st = t.untyped_storage()
        k = st.data_ptr()
        if k not in seen:
            seen[k] = {"bytes": st.nbytes(), "dtype": str(t.dtype).replace("torch.", ""),
                       "shape": list(t.shape), "param": k in params}
            order.append(k)
        return t

    ac = (torch.autocast("cpu", dtype=torch.bfloat16) if job["precision"] == "bf16-mixed"
          else contextlib.nullcontext())
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with ac:
            out = model(**x, labels=labels)
    del out
    return [seen[k] for k in order]


def main(ids):
    import torch
    transformers = measure.import_transformers()
    grid = {c["id"]: c["job"] for c in measure.build_grid()}
    for i in ids:
        rows = saved(torch, transformers, grid[i])
        print(json.dumps({"id": i, "torch": torch.__version__, "transformers": transformers.__version__,
                          "transformers_commit": measure.transformers_commit(), "saved": rows}))


if __name__ == "__main__":
    main(sys.argv[1:])
