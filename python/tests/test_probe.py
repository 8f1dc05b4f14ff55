"""strait-probe: its profile parses in the planner and changes the plan.

  - `strait-probe --quick --cluster examples/clusters/local-4cpu.yaml -o F`
    writes a complete cluster file; `straitc --emit=plan --cluster F` plans
    with it, and the planned forward time differs from the unprofiled file's
    (the measured GEMM rate replaces peak x efficiency); every op kind the
    planner knows has a positive efficiency; the GEMM rate is plausible for a
    CPU (1 GFLOP/s .. 10 TFLOP/s);
  - a cluster that already has profiles is refused with a clear error;
  - two probes (ranks 0 and 1 over Gloo on loopback) measure the link.
"""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("STRAIT_BUILD_DIR", os.path.join(ROOT, "build"))
STRAITC = os.path.join(BUILD, "bin", "straitc")
PROBE = next((p for p in (os.path.join(BUILD, "runtime", "tools", "strait-probe"),
                           os.path.join(ROOT, "build-rt", "runtime", "tools", "strait-probe"))
              if os.path.isfile(p)), "")
MODEL = os.path.join(ROOT, "models", "gpt2-tiny", "gpt2-tiny.onnx")
CLUSTER = os.path.join(ROOT, "examples", "clusters", "local-4cpu.yaml")
KINDS = ["matmul", "conv", "elementwise", "norm", "softmax", "embedding", "other"]

pytestmark = pytest.mark.skipif(not PROBE, reason="strait-probe not built")


def run(cmd, timeout=300):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def plan(cluster, tmp_path, name):
    out = tmp_path / f"{name}.json"
    run([STRAITC, MODEL, "--input-shape", "input_ids=8x64", "--loss", "cross-entropy",
         "--optimizer", "adamw", "--cluster", str(cluster), "--emit=plan", "--plan-json", str(out)])
    return json.loads(out.read_text())


def test_probe_profile_plans(tmp_path):
    probed = tmp_path / "probed.yaml"
    run([PROBE, "--quick", "--threads", "1", "--cluster", CLUSTER, "-o", str(probed)])
    text = probed.read_text()
    assert text.startswith(open(CLUSTER).read().rstrip("\n")), text[:200]
    m = re.search(r"^profiles:\n  - \{type: cpu, gemm_tflops: ([\d.e+-]+), peak_tflops: ([\d.e+-]+), "
                  r"mem_bandwidth_gbs: ([\d.e+-]+), gemm_curve: \{([^}]*)\}, efficiency: \{([^}]*)\}, "
                  r"op_tflops: \{([^}]*)\}, op_gbs: \{([^}]*)\}\}$", text, re.M)
    assert m, text
    gemm, peak, bandwidth = float(m.group(1)), float(m.group(2)), float(m.group(3))
    assert 1e-3 <= gemm <= 10, gemm
    assert peak == gemm  # no --peak-tflops: the efficiencies are fractions of the GEMM rate
    assert 0.1 <= bandwidth <= 1000, bandwidth
    # The GEMM rate by intensity: the square product's point and the skinny ones below it.
    curve = [tuple(map(float, kv.split(":"))) for kv in m.group(4).split(",")]
    assert len(curve) >= 3 and all(r > 0 for _, r in curve), curve
    assert max(i for i, _ in curve) == pytest.approx(2 * 384 ** 3 / (12 * 384 ** 2), rel=1e-3)
    eff = dict((k, float(v)) for k, v in re.findall(r"(\w+): ([\d.e+-]+)", m.group(5)))
    # The fused kernels rated on their own: attention in TFLOP/s, the rest in GB/s.
    ops = lambda g: dict((k, float(v)) for k, v in re.findall(r"(\w+): ([\d.e+-]+)", m.group(g)))
    assert sorted(ops(6)) == ["FusedAttention", "FusedAttentionGrad"], m.group(6)
    assert sorted(ops(7)) == sorted(["AdamW", "LayerNormalizationGrad", "RMSNormalizationGrad",
                                     "SoftmaxCrossEntropyLossWithGrad"]), m.group(7)
    assert all(v > 0 for v in {**ops(6), **ops(7)}.values())
    assert sorted(eff) == sorted(KINDS) and all(v > 0 for v in eff.values()), eff
    if not (os.path.exists(STRAITC) and os.path.exists(MODEL)):
        pytest.skip("needs build/bin/straitc for the planning half")
    base, measured = plan(CLUSTER, tmp_path, "base"), plan(probed, tmp_path, "probed")
    assert measured["feasible"], measured
    fwd = lambda p: sum(s["forward_s"] for s in p["stages"])
    assert fwd(measured) != fwd(base), (fwd(measured), fwd(base))
    # The profile carries the rates it measured: the device type's nominal peak and bandwidth
    # (here scaled by 10) no longer change a probed plan.
    scaled = tmp_path / "scaled.yaml"
    scaled.write_text(re.sub(r"(peak_tflops: \{fp32: |mem_bandwidth_gbs: )([\d.]+)",
                             lambda x: x.group(1) + str(float(x.group(2)) * 10),
                             text.split("profiles:")[0], count=2) + "profiles:" +
                      text.split("profiles:")[1])
    assert scaled.read_text() != text
    assert fwd(plan(scaled, tmp_path, "scaled")) == pytest.approx(fwd(measured), rel=1e-9)
    # The plan splits each stage's iteration by op kind and by op type, both adding up to its
    # forward, backward (all micro-batches) and update time; the measured op rates time their
    # ops, and a view (Reshape) moves no bytes.
    for st in measured["stages"]:
        total = (st["forward_s"] + st["backward_s"]) * measured["micro_batches"] + st["update_s"]
        assert sum(st["time_by_kind_s"].values()) == pytest.approx(total, rel=1e-6)
        assert sum(st["time_by_op_s"].values()) == pytest.approx(total, rel=1e-6)
        assert st["update_s"] > 0 and "AdamW" in st["time_by_op_s"], st
        assert "Reshape" not in st["time_by_op_s"], st["time_by_op_s"]
    print(f"probe: GEMM {gemm * 1e3:.1f} GFLOP/s; planned forward {fwd(base) * 1e3:.3f} ms with "
          f"the file's peak, {fwd(measured) * 1e3:.3f} ms with the probe")


def test_probe_refuses_cluster_with_profiles(tmp_path):
    c = tmp_path / "c.yaml"
    c.write_text(open(CLUSTER).read() + "profiles:\n  - {type: cpu, gemm_tflops: 1}\n")
    p = subprocess.run([PROBE, "--quick", "--cluster", str(c)], capture_output=True, text=True)
    assert p.returncode == 2 and "already has a 'profiles:' section" in p.stderr, p.stderr
    p = subprocess.run([PROBE, "--link-rank", "0"], capture_output=True, text=True)
    assert p.returncode == 2 and "--link-store go together" in p.stderr, p.stderr


def test_probe_link_between_two_ranks(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    cmd = [PROBE, "--quick", "--threads", "1", "--link-store", str(store), "--link-mib", "4"]
    procs = [subprocess.Popen(cmd + ["--link-rank", str(r)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    m = re.search(r"# link to rank 1 \(127.0.0.1\): ([\d.e+]+) Mbit/s, latency ([\d.e+-]+) ms", outs[0][0])
    assert m, outs[0][0]
    mbit, ms = float(m.group(1)), float(m.group(2))
    assert mbit > 100 and 0 < ms < 100, (mbit, ms)  # loopback: well above 100 Mbit/s
    # The latency is half the fastest round trip (the slower ones waited for a core).
    q = re.search(r"# round trips \(ms\): min ([\d.e+-]+), p10 ([\d.e+-]+), median ([\d.e+-]+), "
                  r"max ([\d.e+-]+)", outs[0][1])
    assert q, outs[0][1]
    trips = [float(x) for x in q.groups()]
    assert trips == sorted(trips), trips
    assert abs(ms - trips[0] / 2) <= 1e-3 * ms + 1e-6, (ms, trips)
    # The runtime's all-reduce at 4 KiB-4 MiB; the fitted per-step latency (what the bandwidth
    # and the sums leave, >= 0) is written as a link field. (No bound on the times: under load
    # the fastest of 10 all-reduces of 16 KiB took 4.06 ms and of 4 MiB 2.07 ms.)
    a = re.search(r"# all-reduce \(2 ranks, fastest of \d+; ms\):((?: \d+ KiB [\d.e+-]+)+)", outs[0][1])
    assert a, outs[0][1]
    sizes = re.findall(r"(\d+) KiB ([\d.e+-]+)", a.group(1))
    assert [int(k) for k, _ in sizes] == [4, 16, 64, 256, 1024, 4096], sizes
    assert all(float(t) > 0 for _, t in sizes), sizes
    s = re.search(r"all-reduce step ([\d.e+-]+) ms -> links.hosts: \{between: \[A, B\], "
                  r"bandwidth_mbps: [\d.e+-]+, latency_ms: [\d.e+-]+, "
                  r"allreduce_latency_ms: ([\d.e+-]+)\}", outs[0][0])
    assert s and s.group(1) == s.group(2) and float(s.group(1)) >= 0, outs[0][0]
    print(f"probe link over loopback: {mbit:.0f} Mbit/s, {ms:.3f} ms")
