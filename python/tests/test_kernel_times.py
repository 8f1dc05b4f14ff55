"""Measured kernel times in the planner (vTrain's method; docs/planner.md, section 3).

  - `straitc --emit=kernels` lists the distinct kernels of gpt2-tiny's training step (with the
    fused elementwise kernels the job runs) and `strait-probe --kernels` times them into the
    profile's `kernel_times`; a fused kernel's time is charged to its ops by their shares;
  - plan.json then costs every listed kernel at its measured time: the loss kernel's time by op
    type is exactly its measured time, doubling every kernel time doubles every listed op type's
    time, and a kernel without an entry falls back to the model (the plan without kernel times);
  - kernel times of another model, a corrupt kernel list and a program that is not a kernel list
    are refused with clear errors.
"""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from jobutil import cpu_cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("STRAIT_BUILD_DIR", os.path.join(ROOT, "build"))
STRAITC = os.path.join(BUILD, "bin", "straitc")
PROBE = os.path.join(BUILD, "runtime", "tools", "strait-probe")
MODELS = os.path.join(ROOT, "models")
GPT2 = ["--input-shape", "input_ids=4x16", "--loss", "cross-entropy", "--optimizer", "adamw"]
DIGITS = ["--input-shape", "images=8x1x8x8", "--loss", "cross-entropy", "--optimizer", "sgd"]
LOSS = "SoftmaxCrossEntropyLossWithGrad"

pytestmark = pytest.mark.skipif(not (os.path.isfile(PROBE) and os.path.isfile(STRAITC)),
                                reason="straitc or strait-probe not built")


def run(cmd, ok=True):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if ok:
        assert p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def model(name):
    return os.path.join(MODELS, name, name + ".onnx")


def kernel_times(text):
    m = re.search(r", kernel_times: \{([^}]*)\}\}$", text, re.M)
    assert m, text[-2000:]
    return {k: float(v) for k, v in (e.split(": ") for e in m.group(1).split(", "))}


def with_times(text, times):
    body = ", ".join(f"{k}: {v:.6g}" for k, v in times.items())
    return re.sub(r", kernel_times: \{[^}]*\}\}$", f", kernel_times: {{{body}}}}}", text, flags=re.M)


def plan(tmp_path, cluster_text, name, flags=GPT2, net="gpt2-tiny"):
    cluster, out = tmp_path / f"{name}.yaml", tmp_path / f"{name}.json"
    cluster.write_text(cluster_text)
    p = run([STRAITC, model(net), *flags, "--cluster", str(cluster), "--emit=plan",
             "--plan-json", str(out)], ok=False)
    return (json.loads(out.read_text()) if p.returncode == 0 else None), p


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """The gpt2-tiny kernel list, timed on a one-CPU cluster: (cluster text, kernel count)."""
    tmp = tmp_path_factory.mktemp("kernels")
    base = tmp / "base.yaml"
    base.write_text(cpu_cluster("one-cpu", [("rank0", "h0", "local")],
                                "  intra_host: {bandwidth_gbps: 10, latency_us: 10}\n"))
    kernels = tmp / "gpt2.kernels.pb"
    out = run([STRAITC, model("gpt2-tiny"), *GPT2, "--emit=kernels", "-o", str(kernels)]).stdout
    count = int(re.search(r"\((\d+) kernels\)", out).group(1))
    probed = tmp / "probed.yaml"
    p = run([PROBE, "--quick", "--threads", "1", "--cluster", str(base), "--kernels", str(kernels),
             "-o", str(probed)])
    assert re.search(rf"timed {count} kernels of .* in [\d.e+-]+ s", p.stderr), p.stderr
    text = probed.read_text()
    # The GELU's forward and backward chains run fused: timed so, charged to their ops.
    fused = re.findall(r"^#   fused FusedElementwise\.\w+ \((\d+) ops\): [\d.e+-]+ ms", text, re.M)
    assert len(fused) == 2 and all(int(n) >= 5 for n in fused), text[:3000]
    return text, count - len(fused), str(kernels)


def test_plan_costs_kernels_at_their_measured_times(probed, tmp_path):
    text, count, _ = probed
    times = kernel_times(text)
    assert len(times) == count and count > 20, (len(times), count)
    assert all(t > 0 for t in times.values())
    # The same kernel (a transformer layer's) is listed once: gpt2-tiny has two layers, one list.
    assert sum(k.startswith("FusedAttentionGrad.") for k in times) == 1, sorted(times)
    measured, _ = plan(tmp_path, text, "measured")
    assert measured["kernels_measured"] == count, measured
    assert measured["kernels"] >= count  # gradient accumulation keeps the model
    stage = measured["stages"][0]
    assert measured["micro_batches"] == 1 and len(measured["stages"]) == 1
    (loss_key,) = [k for k in times if k.startswith(LOSS + ".")]
    assert stage["time_by_op_s"][LOSS] == pytest.approx(times[loss_key], rel=1e-5)

    doubled, _ = plan(tmp_path, with_times(text, {k: 2 * t for k, t in times.items()}), "doubled")
    listed = {k.split(".")[0] for k in times}
    for op, t in stage["time_by_op_s"].items():
        if op in listed:
            assert doubled["stages"][0]["time_by_op_s"][op] == pytest.approx(2 * t, rel=1e-5), op

    # Without the loss kernel's entry: its roofline, as planned without any kernel times.
    partial, _ = plan(tmp_path, with_times(text, {k: t for k, t in times.items() if k != loss_key}),
                      "partial")
    plain, _ = plan(tmp_path, re.sub(r", kernel_times: \{[^}]*\}", "", text), "plain")
    assert partial["kernels_measured"] == count - 1
    assert plain["kernels_measured"] == 0
    assert partial["stages"][0]["time_by_op_s"][LOSS] == pytest.approx(
        plain["stages"][0]["time_by_op_s"][LOSS], rel=1e-9)
    # ... and not the measured time. The roofline may equal the measurement on some machine (the
    # fresh-clone CI's: 0.1384 against 0.1386 ms), so the entry kept is one the roofline is not.
    far = 3 * plain["stages"][0]["time_by_op_s"][LOSS]
    kept, _ = plan(tmp_path, with_times(text, {**times, loss_key: far}), "kept")
    assert kept["stages"][0]["time_by_op_s"][LOSS] == pytest.approx(far, rel=1e-5)


def test_fused_kernels_are_charged_to_their_ops(probed):
    text, _, kernels = probed
    times = kernel_times(text)
    fused_ms = {sig: float(ms) for sig, ms in
                re.findall(r"^#   fused (FusedElementwise\.\w+) \(\d+ ops\): ([\d.e+-]+) ms", text, re.M)}
    # Kernel names in the list: "<fused signature>|<member>=<share>|..." (docs/planner.md),
    # shares as d.dddddde-XX; read out of the protobuf's bytes.
    raw = open(kernels, "rb").read().decode("latin-1")
    names = set(re.findall(r"FusedElementwise\.[0-9A-F]{16}(?:\|\w+\.[0-9A-F]{16}=\d\.\d{6}e[+-]\d\d)+",
                           raw))
    assert {n.split("|")[0] for n in names} == set(fused_ms), (names, fused_ms)
    charged = {}
    for name in names:
        sig, *members = name.split("|")
        shares = [(m.split("=")[0], float(m.split("=")[1])) for m in members]
        assert sum(s for _, s in shares) == pytest.approx(1, abs=1e-4), shares
        for member, share in shares:
            charged.setdefault(member, []).append(fused_ms[sig] * 1e-3 * share)
    assert any(m.startswith("Tanh.") for m in charged), charged
    for member, parts in charged.items():
        assert times[member] == pytest.approx(sum(parts) / len(parts), rel=2e-3), member


def test_kernel_times_of_another_model_are_refused(probed, tmp_path):
    text, count, _ = probed
    result, p = plan(tmp_path, text, "other", flags=DIGITS, net="digits-cnn")
    assert result is None and p.returncode != 0
    assert re.search(rf"the kernel_times of device 'rank0' \({count} kernels\) hold none of the "
                     r"\d+ kernels of the model being planned: they were measured for another model",
                     p.stderr), p.stderr


def test_bad_kernel_lists(probed, tmp_path):
    _, _, kernels = probed
    corrupt = tmp_path / "corrupt.pb"
    corrupt.write_bytes(open(kernels, "rb").read()[:1000])
    p = run([PROBE, "--quick", "--kernels", str(corrupt)], ok=False)
    assert p.returncode == 1 and "is not a valid program" in p.stderr, p.stderr
    job = tmp_path / "job"
    run([STRAITC, model("gpt2-tiny"), *GPT2, "-o", str(job)])
    p = run([PROBE, "--quick", "--kernels", str(job / "rank0.program.pb")], ok=False)
    assert p.returncode == 1 and "not a kernel list" in p.stderr and "--emit=kernels" in p.stderr, p.stderr
    p = run([STRAITC, model("gpt2-tiny"), *GPT2, "--emit=kernels"], ok=False)
    assert p.returncode == 1 and "--emit=kernels needs -o FILE" in p.stderr, p.stderr
    p = run([PROBE, "--quick", "--kernels", kernels, "--kernel-group-mib", "-1"], ok=False)
    assert p.returncode == 2 and "--kernel-group-mib" in p.stderr, p.stderr


def test_each_kernel_in_a_loop(probed):
    """--kernel-group-mib 0 times each kernel alone: the same kernels, other times."""
    text, count, kernels = probed
    p = run([PROBE, "--quick", "--threads", "1", "--kernels", kernels, "--kernel-group-mib", "0"])
    assert set(kernel_times(p.stdout)) == set(kernel_times(text))
