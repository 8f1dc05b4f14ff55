"""1F1B against GPipe: the same training, less activation memory per stage.

Compiles models/gpt2-tiny for examples/clusters/local-4cpu.yaml with forced
stages and 4 micro-batches, once per schedule (`straitc --schedule`), runs
both jobs with strait-run on the same tokens and checks
  - every rank's program has the schedule's order (under 1F1B stage s runs
    the planner's warm-up forwards ahead: plan.json's in-flight count - 1, at
    least the classic min(S-1-s, M), never more than the stage before) and
    deferred transfers only under 1F1B,
  - the losses are identical and the saved parameters bit-identical (the
    backwards run in micro-batch order under both schedules, so the
    accumulated gradients are the same sums),
  - every rank's activation arena (the executor's log) is smaller under 1F1B
    (no larger on a stage whose warm-up covers every micro-batch).
gpt2-tiny in two stages of two replicas each (with and without int8 codecs
on the cut) on token data, and a 4-layer MLP (written here in the graph
dialect) in four stages of one replica each, the last one holding only the
fused loss (zero inputs: no data file; its biases make the activations
non-zero).
"""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from jobutil import GPT2_TINY, PROTO_DIR, ROOT, STRAIT_RUN, STRAITC, needs_gpt2_tiny, run, \
    write_tokens

CLUSTER = os.path.join(ROOT, "examples", "clusters", "local-4cpu.yaml")


def write_mlp(path, layers=4, width=16, batch=8):
    """A graph-dialect MLP: Gemm (+ bias) and Tanh per layer, constant weights."""
    lines = [f"graph.Variable @w{i} : tensor<{width}x{width}xf32> = "
             f"dense<{0.05 - 0.02 * i}> : tensor<{width}x{width}xf32>" for i in range(layers)]
    lines += [f"graph.Variable @b{i} : tensor<{width}xf32> = dense<{0.5 / (i + 1)}> : "
              f"tensor<{width}xf32>" for i in range(layers)]
    t, w = f"tensor<{batch}x{width}xf32>", f"tensor<{width}x{width}xf32>"
    lines.append(f'func.func @main(%x: {t} {{graph.name = "x"}}) -> ({t} {{graph.name = "logits"}}) {{')
    prev = "%x"
    for i in range(layers):
        lines += [f"  %w{i} = graph.ReadVariable @w{i} : {w}",
                  f"  %b{i} = graph.ReadVariable @b{i} : tensor<{width}xf32>",
                  f"  %h{i} = graph.Gemm {prev}, %w{i}, %b{i} : ({t}, {w}, tensor<{width}xf32>) -> {t}"]
        prev = f"%h{i}"
        if i + 1 < layers:
            lines.append(f"  %r{i} = graph.Tanh %h{i} : {t}")
            prev = f"%r{i}"
    lines += [f"  return {prev} : {t}", "}"]
    path.write_text("\n".join(lines) + "\n")
    return path

pytestmark = needs_gpt2_tiny()


def compile_job(out, model, shape, stages, micro_batches, schedule, extra=()):
    p = run([STRAITC, model, "--input-shape", shape, "--loss", "cross-entropy",
             "--optimizer", "adamw", "--cluster", CLUSTER, "--num-stages", str(stages),
             "--micro-batches", str(micro_batches), "--schedule", schedule, *extra,
             "-o", str(out)])
    assert f"in {'1F1B' if schedule == '1f1b' else 'GPipe'} order" in p.stdout, p.stdout
    return out


def step_order(job, rank):
    """(phase, micro-batch) of the rank's kernel steps in order, repeats merged, and whether
    each transfer of the micro-batch phases is deferred."""
    with open(job / f"rank{rank}.program.pb", "rb") as f:
        p = subprocess.run(["protoc", "--decode=strait.program.Program", "-I", PROTO_DIR,
                            "strait_program.proto"], stdin=f, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    order, deferred = [], []
    for step in p.stdout.decode().split("\nsteps {")[1:]:
        label = re.search(r'label: "(\w+) (?:ch\d+ )?mb(\d+)"', step)
        if not label:
            continue  # the update's steps
        kind, mb = label.group(1), int(label.group(2))
        if kind in ("send", "recv"):
            deferred.append("deferred: true" in step)
        elif not order or order[-1] != (kind, mb):
            order.append((kind, mb))
    return order, deferred


def train(job, data, out, steps=3):
    """Losses (as printed) and the saved parameters after `steps` steps."""
    import numpy as np
    cmd = [STRAIT_RUN, str(job), "--steps", str(steps), "--lr", "0.01", "--threads", "1",
           "--timeout-ms", "60000", "--save-params", str(out)]
    p = run(cmd + (["--data", str(data)] if data else []))
    losses = re.findall(rf"^step \d+/{steps} loss (\S+)", p.stdout, re.M)
    params = {f: np.load(os.path.join(out, f)) for f in sorted(os.listdir(out))
              if f.endswith(".npy")}
    return losses, params


def arenas(job):
    """Activation arena bytes of every rank, from the workers' logs."""
    found = {}
    for name in os.listdir(job / "logs"):
        with open(job / "logs" / name) as f:
            for rank, arena in re.findall(r"^rank (\d+): memory arena (\d+) bytes", f.read(), re.M):
                found[int(rank)] = int(arena)
    return found


def planned_warmups(job, stages, m):
    """Warm-up forwards per stage: the plan's in-flight micro-batches - 1 (plan.json), at least
    the classic min(S-1-s, M), never more than the stage before (the exporter's rule)."""
    with open(job / "plan.json") as f:
        in_flight = [s["in_flight"] for s in json.load(f)["stages"]]
    assert len(in_flight) == stages
    out, bound = [], m
    for s in range(stages):
        bound = min(bound, max(stages - 1 - s, in_flight[s] - 1))
        out.append(max(0, min(bound, m)))
    return out


def expected_order(warmup, m, schedule):
    if schedule == "gpipe":
        return [("forward", i) for i in range(m)] + [("backward", i) for i in range(m)]
    order = [("forward", i) for i in range(warmup)]
    for i in range(m):
        if i + warmup < m:
            order.append(("forward", i + warmup))
        order.append(("backward", i))
    return order


@pytest.mark.parametrize("model,shape,stages,micro_batches,extra", [
    (GPT2_TINY, "input_ids=2x64", 2, 4, ()),
    (GPT2_TINY, "input_ids=2x64", 2, 4, ("--compress", "int8")),
    ("mlp", "x=8x16", 4, 8, ()),
], ids=["gpt2-tiny-2-stages", "gpt2-tiny-2-stages-int8", "mlp-4-stages"])
def test_1f1b_trains_like_gpipe_in_less_memory(tmp_path, model, shape, stages, micro_batches,
                                               extra):
    data = write_tokens(tmp_path / "tokens.bin", seed=11) if model == GPT2_TINY else None
    if model == "mlp":
        model = str(write_mlp(tmp_path / "mlp.mlir"))
    results = {}
    for schedule in ("gpipe", "1f1b"):
        job = compile_job(tmp_path / schedule, model, shape, stages, micro_batches, schedule,
                          extra)
        ranks_per_stage = 4 // stages
        warmups = planned_warmups(job, stages, micro_batches)
        for rank in range(4):
            order, deferred = step_order(job, rank)
            # A stage may have no backward kernels (the MLP's loss stage: its
            # only backward step is the dScores send).
            expected = expected_order(warmups[rank // ranks_per_stage], micro_batches, schedule)
            assert order == [e for e in expected if e in order], f"rank {rank} ({schedule})"
            assert [e for e in expected if e[0] == "forward"] == \
                [e for e in order if e[0] == "forward"], f"rank {rank} ({schedule})"
            assert deferred and all(d == (schedule == "1f1b") for d in deferred), \
                f"rank {rank} ({schedule}): deferred flags {deferred}"
        losses, params = train(job, data, tmp_path / f"params-{schedule}")
        assert len(losses) == 3, losses
        results[schedule] = (losses, params, arenas(job), warmups)
    (gl, gp, ga, _), (ol, op, oa, warmups) = results["gpipe"], results["1f1b"]
    assert ol == gl, f"losses: gpipe {gl}, 1f1b {ol}"
    assert gp.keys() == op.keys() and gp
    for name in gp:
        assert gp[name].tobytes() == op[name].tobytes(), name
    assert sorted(ga) == sorted(oa) == [0, 1, 2, 3], (ga, oa)
    ranks_per_stage = 4 // stages
    for rank in ga:
        # A stage that warms up with every micro-batch holds what GPipe holds.
        if warmups[rank // ranks_per_stage] + 1 >= micro_batches:
            assert oa[rank] <= ga[rank], f"rank {rank}: arena 1f1b {oa[rank]} > gpipe {ga[rank]}"
        else:
            assert oa[rank] < ga[rank], f"rank {rank}: arena 1f1b {oa[rank]} >= gpipe {ga[rank]}"
    print(f"{os.path.basename(model)}, {stages} stages, {micro_batches} micro-batches "
          f"{' '.join(extra)}: warm-up {warmups}; losses {ol}; "
          f"arena bytes per rank gpipe "
          f"{[ga[r] for r in range(4)]}, 1f1b {[oa[r] for r in range(4)]}")
