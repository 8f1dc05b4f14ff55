"""Execution traces: strait-run --trace and straitc --trace-plan (docs/runtime.md, "Traces").

One gpt2-tiny job, 2 pipeline stages x 2 replicas on 4 local ranks (examples/clusters/local-4cpu.yaml,
2 micro-batches), compiled with --trace-plan and run with --trace and --profile. Checks
  - the merged trace is Chrome trace event JSON (ph, pid, tid, ts, dur, name, cat), every rank is a
    process named with its host and device, and the lanes are named;
  - the spans of one lane nest and never overlap otherwise;
  - per rank and op, the kernel spans are the --profile table's launches, and their time holds its
    time in kernels within the iterations' wall time (same iterations);
  - every send on rank A to B has its recv on B from A: same bytes, in the same order, the recv
    ends after the send started (one machine: one clock; the trace says so);
  - the predicted trace holds every stage with its ranks and each micro-batch's forward and
    backward, and the plot script draws both;
  - bad arguments (unwritable file, bad step range, a file that is not a trace) are clear errors
    that leave no file behind;
  - a worker (--rank) writes its own rank's trace, and --merge-traces merges files.
"""
from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys

import pytest

from jobutil import GPT2_TINY, ROOT, STRAITC, STRAIT_RUN, needs_gpt2_tiny, run, write_tokens

pytestmark = needs_gpt2_tiny()

CLUSTER = os.path.join(ROOT, "examples", "clusters", "local-4cpu.yaml")
PLOT = os.path.join(ROOT, "scripts", "plot-trace.py")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("trace")
    plan = d / "plan-trace.json"
    run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=4x32", "--loss", "cross-entropy",
         "--optimizer", "adamw", "--cluster", CLUSTER, "--global-batch", "16", "--num-stages", "2",
         "--micro-batches", "2", "--trace-plan", str(plan), "-o", str(d / "job")])
    data = write_tokens(d / "tokens.bin", seed=5)
    measured = d / "trace.json"
    p = run([STRAIT_RUN, str(d / "job"), "--steps", "4", "--threads", "1", "--data", str(data),
             "--data-format", "tokens-u16", "--profile", "--trace", str(measured),
             "--trace-steps", "2:4", "--timeout-ms", "60000"])
    with open(measured) as f:
        trace = json.load(f)
    with open(plan) as f:
        predicted = json.load(f)
    return {"dir": d, "trace": trace, "plan": predicted, "stdout": p.stdout, "data": data,
            "measured": measured, "plan_file": plan}


def spans(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def test_chrome_trace_schema_and_every_rank(job):
    events = job["trace"]["traceEvents"]
    assert events
    for e in events:
        assert e["ph"] in ("X", "M"), e
        assert isinstance(e["pid"], (int, float)) and isinstance(e["name"], str), e
        if e["ph"] == "X":
            for key in ("tid", "ts", "dur", "cat", "args"):
                assert key in e, (key, e)
            assert e["dur"] >= 0 and e["ts"] >= 0, e
    procs = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(procs) == [0, 1, 2, 3]
    for pid, name in procs.items():
        assert re.fullmatch(rf"rank {pid} \(.+, cpu\)", name), name
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    for pid in procs:
        assert lanes.get((pid, 1)) == "compute" and lanes.get((pid, 2)) == "comm", lanes
    cats = collections.Counter((e["pid"], e["cat"]) for e in spans(job["trace"]))
    for pid in procs:
        for cat in ("iteration", "kernel", "optimizer", "data", "allreduce"):
            assert cats[(pid, cat)] > 0, (pid, cat, cats)
        assert cats[(pid, "iteration")] == 3  # --trace-steps 2:4
    # Stage 0 (ranks 0, 1) sends activations and receives gradients; stage 1 the other way.
    assert all(cats[(pid, "send")] > 0 and cats[(pid, "recv")] > 0 for pid in procs)
    ranks = job["trace"]["otherData"]["ranks"]
    assert sorted(r["rank"] for r in ranks) == [0, 1, 2, 3]
    assert all(r["first_step"] == 2 and r["last_step"] == 4 for r in ranks)
    assert "trace of iterations 2-4 of 4 rank(s)" in job["stdout"]


def test_spans_nest_within_a_lane(job):
    lanes = collections.defaultdict(list)
    for e in spans(job["trace"]):
        lanes[(e["pid"], e["tid"])].append(e)
    eps = 0.002  # us: the 1 ns resolution of the written times, twice
    for key, lane in lanes.items():
        lane.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in lane:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"] + eps:
                stack.pop()
            if stack:  # starts inside the top: must end inside it too
                top = stack[-1]
                assert e["ts"] + e["dur"] <= top["ts"] + top["dur"] + eps, (key, top, e)
            stack.append(e)


def test_kernel_spans_add_up_to_the_profile(job):
    # --profile times iterations 2..4, the traced ones: per rank and op, the kernel spans are the
    # table's launches (same count), and their time holds the table's "ms in kernels" (the span
    # also holds the kernel's argument setup: a little more) inside the iterations' wall time. How
    # much more is not asserted: on a loaded machine a rank descheduled between a kernel's own
    # timer and its span's end adds that time to the span only (bench/runtime/trace_overhead.py
    # measures what tracing costs).
    heads = {int(m.group(1)): (int(m.group(2)), float(m.group(3)), float(m.group(4)))
             for m in re.finditer(r"^rank (\d) profile: (\d+) iterations, ([\d.]+) ms each, "
                                  r"([\d.]+) ms in kernels", job["stdout"], re.M)}
    assert sorted(heads) == [0, 1, 2, 3], job["stdout"][-2000:]
    launches = collections.defaultdict(dict)  # rank -> op -> launches per iteration
    for m in re.finditer(r"^rank (\d) profile: (\S+) +([\d.]+) launches +[\d.]+ ms",
                         job["stdout"], re.M):
        launches[int(m.group(1))][m.group(2)] = float(m.group(3))
    total = collections.Counter()
    counts = collections.defaultdict(collections.Counter)
    for e in spans(job["trace"]):
        if e["cat"] in ("kernel", "optimizer"):
            total[e["pid"]] += e["dur"] / 1e3
            counts[e["pid"]][e["args"]["op"]] += 1
    ratios = {}
    for rank, (iterations, wall, per_iteration) in heads.items():
        assert iterations == 3
        assert launches[rank] and set(counts[rank]) == set(launches[rank]), \
            (rank, counts[rank], launches[rank])
        for op, n in counts[rank].items():  # the table prints launches per iteration to 0.1
            assert abs(n - launches[rank][op] * iterations) <= 0.05 * iterations + 1e-9, \
                (rank, op, n, launches[rank][op])
        traced = total[rank] / iterations
        # Never less than the kernels' own timers (rounding: 1 us per printed figure), never more
        # than the iterations that hold them.
        assert per_iteration * 0.97 - 0.05 <= traced <= wall * 1.01 + 0.05, \
            (rank, traced, per_iteration, wall)
        ratios[rank] = round(traced / per_iteration, 3)
    print(f"kernel spans over the profile's kernel time, per rank: {ratios}")


def test_sends_match_receives(job):
    ranks = job["trace"]["otherData"]["ranks"]
    # One machine: every rank reads rank 0's clock, and the round-trip estimate agrees within
    # its precision.
    for r in ranks:
        assert r["clock_offset_us"] == 0
        if r["rank"] > 0:
            assert r["same_clock_as_rank0"] is True
            assert abs(r["clock_estimate_us"]) <= r["estimate_precision_us"] + 0.002, r
    sends = collections.defaultdict(list)
    recvs = collections.defaultdict(list)
    for e in spans(job["trace"]):
        if e["cat"] == "send":
            sends[(e["pid"], e["args"]["peer"])].append(e)
        elif e["cat"] == "recv":
            recvs[(e["args"]["peer"], e["pid"])].append(e)
    assert sends and set(sends) == set(recvs), (sorted(sends), sorted(recvs))
    for pair in sends:
        s = sorted(sends[pair], key=lambda e: e["ts"])
        r = sorted(recvs[pair], key=lambda e: e["ts"])
        assert len(s) == len(r), pair
        for a, b in zip(s, r):
            assert a["args"]["bytes"] == b["args"]["bytes"] > 0, (pair, a, b)
            assert a["args"]["codec"] == b["args"]["codec"], (pair, a, b)
            assert b["ts"] + b["dur"] >= a["ts"], (pair, a, b)
    # The transport split: a receive's wait for its peer and its transfer lie inside it.
    inner = [e for e in spans(job["trace"]) if e["cat"] in ("wait", "transfer")]
    assert inner


def test_predicted_trace_holds_the_plan(job, tmp_path):
    plan = job["plan"]
    other = plan["otherData"]
    assert other["micro_batches"] == 2 and len(other["stages"]) == 2
    assert [s["ranks"] for s in other["stages"]] == [[0, 1], [2, 3]]
    events = plan["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert "ranks 0,1" in names[0] and "ranks 2,3" in names[1], names
    for stage in (0, 1):
        got = sorted(e["name"] for e in events if e["ph"] == "X" and e["pid"] == stage
                     and e["cat"] in ("forward", "backward"))
        assert got == ["B0", "B1", "F0", "F1"], (stage, got)
        assert any(e["cat"] == "allreduce" for e in events if e["ph"] == "X" and e["pid"] == stage)
        # Compute and bubbles share the stage's compute lane, one after another.
        lane = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                      if e["ph"] == "X" and e["pid"] == stage and e["tid"] == 1)
        assert all(b[0] >= a[1] - 1e-3 for a, b in zip(lane, lane[1:])), lane
    # The plot: measured over predicted, one PNG.
    out = tmp_path / "timeline.png"
    p = subprocess.run([sys.executable, PLOT, str(job["measured"]), "--plan",
                        str(job["plan_file"]), "-o", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "measured iteration 4" in p.stdout and "predicted iteration" in p.stdout
    if "matplotlib not found" not in p.stderr:
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_arguments_leave_no_file(job, tmp_path):
    jobdir = str(job["dir"] / "job")
    missing = tmp_path / "no" / "such" / "trace.json"
    p = subprocess.run([STRAIT_RUN, jobdir, "--steps", "2", "--trace", str(missing)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and f"cannot write trace '{missing}'" in p.stderr, p.stderr
    assert not missing.exists()
    out = tmp_path / "t.json"
    for steps, bad, why in (("3", "3:2", "expected A:B"), ("3", "x", "expected A:B"),
                            ("3", "5:6", "starts after the last step (--steps 3)")):
        p = subprocess.run([STRAIT_RUN, jobdir, "--steps", steps, "--trace", str(out),
                            "--trace-steps", bad], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and why in p.stderr, (bad, p.stderr)
    assert not out.exists() and not list(tmp_path.glob("t.json*"))
    not_trace = tmp_path / "x.json"
    not_trace.write_text('{"a": 1}')
    p = subprocess.run([STRAIT_RUN, "--merge-traces", str(out), str(not_trace)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and str(not_trace) in p.stderr and "not a Chrome trace" in p.stderr
    assert not out.exists()
    p = subprocess.run([STRAITC, GPT2_TINY, "--shape-only", "--input-shape", "input_ids=4x32",
                        "--emit=plan", "--cluster", CLUSTER, "--trace-plan", str(missing)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and str(missing) in p.stderr, p.stderr
    assert not missing.exists()


def test_worker_trace_and_merge(job, tmp_path):
    # A single-rank job run as a worker (--rank 0), as on each machine of a multi-machine job.
    single = tmp_path / "single"
    run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=4x32", "--loss", "cross-entropy",
         "--optimizer", "adamw", "-o", str(single)])
    part = tmp_path / "rank0.json"  # "{rank}" in a worker's file name becomes its rank
    run([STRAIT_RUN, str(single), "--rank", "0", "--steps", "2", "--threads", "1", "--data",
         str(job["data"]), "--data-format", "tokens-u16", "--trace",
         str(tmp_path / "rank{rank}.json")])
    with open(part) as f:
        one = json.load(f)
    assert {e["pid"] for e in one["traceEvents"]} == {0}
    assert [e["name"] for e in spans(one) if e["cat"] == "iteration"] == ["iteration 2"]
    # --merge-traces over the launcher's per-rank parts gives the launcher's trace.
    parts = [str(job["dir"] / "job" / "logs" / f"trace.rank{r}.json") for r in range(4)]
    merged = tmp_path / "merged.json"
    run([STRAIT_RUN, "--merge-traces", str(merged)] + parts)
    with open(merged) as f:
        again = json.load(f)
    key = lambda e: (e["pid"], e.get("tid", -1), e["name"], round(e.get("ts", 0), 2))
    assert sorted(map(key, again["traceEvents"])) == sorted(map(key, job["trace"]["traceEvents"]))
