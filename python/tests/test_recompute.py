"""Activation recomputation (straitc --recompute) on the CPU runtime.

gpt2-tiny and llama-tiny, on 1 rank and in a 2-stage pipeline (2 micro-batches, 1F1B): the job
compiled with `--recompute full` (every block's forward cloned before its backward,
graph-recompute-blocks) trains to bit-identical losses and parameters as the job without it (the
clones are the same float ops on the same inputs, in the same order), and its executor memory
(the liveness-planned arena less its gradient accumulators, runtime/lib/core/MemoryPlan.cpp) is
lower where more than
one micro-batch is in flight (the same on the last stage of a 1F1B pipeline); plan.json marks
the recomputing stages and predicts that memory within [0.75, 1.35], as test_plan_memory checks for
plans without recomputation.
"""
import json
import os
import re

import numpy as np
import pytest
from jobutil import ROOT, STRAIT_RUN, STRAITC, run, write_tokens

MODELS = {name: os.path.join(ROOT, "models", name, name + ".onnx")
          for name in ("gpt2-tiny", "llama-tiny")}

pytestmark = pytest.mark.skipif(
    not (os.path.exists(STRAITC) and os.path.isfile(STRAIT_RUN)
         and all(os.path.exists(m) for m in MODELS.values())),
    reason="needs build/bin/straitc, strait-run and models/")


def cluster(path, devices):
    rows = "".join(f"  - {{name: cpu{i}, type: cpu, host: h0, site: s0}}\n" for i in range(devices))
    path.write_text("name: recompute-test\ndevice_types:\n"
                    "  - {name: cpu, kind: cpu, peak_tflops: {fp32: 0.2}, mem_bandwidth_gbs: 20, "
                    "memory_gib: 8}\n"
                    f"devices:\n{rows}links:\n  intra_host: {{bandwidth_gbps: 10, latency_ms: 0}}\n")
    return str(path)


def compile_and_train(tmp, model, devices, mode, data, steps=3):
    job = tmp / f"job-{mode}"
    args = ["--num-stages", "2", "--micro-batches", "2"] if devices == 2 else []
    run([STRAITC, MODELS[model], "--input-shape", "input_ids=4x32", "--loss", "cross-entropy",
         "--optimizer", "adamw", "--cluster", cluster(tmp / f"c{devices}.yaml", devices),
         "--recompute", mode, *args, "-o", str(job)])
    out = tmp / f"params-{mode}"
    p = run([STRAIT_RUN, str(job), "--steps", str(steps), "--lr", "0.01", "--data", str(data),
             "--threads", "1", "--timeout-ms", "60000", "--save-params", str(out)])
    losses = re.findall(rf"^step \d+/{steps} loss (\S+)", p.stdout, re.M)
    assert len(losses) == steps, p.stdout
    params = {f: np.load(out / f) for f in sorted(os.listdir(out)) if f.endswith(".npy")}
    plan = json.load(open(job / "plan.json"))
    memory = []
    for rank in range(devices):
        log = open(job / "logs" / f"rank{rank}.log").read()
        m = re.search(r"memory arena (\d+) bytes, persistent (\d+) bytes, "
                      r"gradient accumulators (\d+) bytes", log)
        assert m, f"rank {rank}: no memory line in its log:\n{log}"
        memory.append((int(m.group(1)), int(m.group(2)), int(m.group(3))))
    return losses, params, plan, memory


@pytest.mark.parametrize("devices", [1, 2])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_recompute_is_exact_and_saves_memory(model, devices, tmp_path):
    data = write_tokens(tmp_path / "tokens.bin", seed=7)
    base = compile_and_train(tmp_path, model, devices, "none", data)
    full = compile_and_train(tmp_path, model, devices, "full", data)
    assert full[0] == base[0], f"losses {full[0]} != {base[0]}"
    assert sorted(full[1]) == sorted(base[1]) and full[1]
    for name, value in base[1].items():
        assert np.array_equal(full[1][name], value), f"{name} differs after recomputation"
    assert [s["recompute"] for s in base[2]["stages"]] == [False] * devices
    assert [s["recompute"] for s in full[2]["stages"]] == [True] * devices
    for rank in range(devices):
        (arena0, persistent0, grads0), (arena1, persistent1, grads1) = base[3][rank], full[3][rank]
        assert persistent1 == persistent0 and grads1 == grads0
        # The activations' share of the arena, which also holds the gradient accumulators (the
        # same in both jobs). A stage with one micro-batch in flight (the last under 1F1B) runs
        # each backward right after its forward: recomputing saves nothing there and costs one
        # block's working set.
        act0, act1 = arena0 - grads0, arena1 - grads1
        if full[2]["stages"][rank]["in_flight"] > 1:
            assert act1 < 0.75 * act0, (
                f"rank {rank}: arena {arena1} bytes recomputing, {arena0} without, "
                f"{grads0} of them accumulators")
        else:
            assert act1 < 1.25 * act0, (
                f"rank {rank}: arena {arena1} bytes recomputing, {arena0} without, "
                f"{grads0} of them accumulators")
        predicted = full[2]["stages"][rank]["peak_memory_bytes"]
        ratio = (arena1 + persistent1) / predicted
        assert 0.75 <= ratio <= 1.35, (
            f"rank {rank}: executor {arena1 + persistent1} bytes, predicted {predicted:.0f}")
