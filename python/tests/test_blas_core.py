"""OpenBLAS runs on the kernels this CPU supports (runtime/lib/cpu/BlasCore.cpp).

Debian bookworm's OpenBLAS 0.3.21 does not know CPUs newer than it (Sapphire Rapids) and falls
back to its SSE3 "Prescott" kernels, 4x slower GEMMs. strait-run and strait-probe then re-execute
themselves with OPENBLAS_CORETYPE naming the AVX-512 or AVX2 kernels the CPU has:
  - on a CPU with AVX2 and FMA, the rank's log names a core that is not SSE-only;
  - a user's OPENBLAS_CORETYPE stands (here: Prescott, which every x86-64 CPU runs);
  - strait-probe's profile comment names the core it measured.
"""
from __future__ import annotations

import os
import platform
import re

import pytest

from jobutil import GPT2_TINY, STRAITC, STRAIT_RUN, needs_gpt2_tiny, run

pytestmark = [needs_gpt2_tiny(),
              pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 OpenBLAS cores")]

SSE_ONLY = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Opteron",
            "Opteron_SSE3", "Barcelona", "Nano", "Katmai", "Coppermine", "Northwood", "Banias"}
PROBE = os.path.join(os.path.dirname(STRAIT_RUN), "strait-probe")


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def rank_core(tmp_path, env):
    job = tmp_path / "job"
    if not job.exists():
        run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
             "-o", str(job)])
    run([STRAIT_RUN, str(job), "--steps", "1", "--threads", "1"], env=env)
    log = (job / "logs" / "rank0.log").read_text()
    m = re.search(r"device cpu \(OpenBLAS (\w+)\)", log)
    assert m, log[-2000:]
    return m.group(1)


def test_native_core_unless_the_user_chose(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    core = rank_core(tmp_path, env)
    flags = cpu_flags()
    if {"avx2", "fma"} <= flags:
        assert core not in SSE_ONLY, core
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        # OpenBLAS's own choice (it knows the CPU) or ours: AVX-512 kernels either way.
        assert core in {"SkylakeX", "Cooperlake", "SapphireRapids"}, core
    assert rank_core(tmp_path, dict(env, OPENBLAS_CORETYPE="Prescott")) == "Prescott"


def test_probe_names_the_core():
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    p = run([PROBE, "--quick", "--threads", "1"], env=env)
    m = re.search(r"CPU backend \(OpenBLAS sgemm, (\w+) kernels\)", p.stdout)
    assert m, p.stdout
    if {"avx2", "fma"} <= cpu_flags():
        assert m.group(1) not in SSE_ONLY
    # The GEMM curve: rates at increasing intensities, each point positive.
    curve = re.search(r"gemm_curve: \{([^}]*)\}", p.stdout)
    assert curve, p.stdout
    points = [tuple(map(float, kv.split(":"))) for kv in curve.group(1).split(",")]
    assert len(points) >= 3 and all(r > 0 for _, r in points)
    assert [i for i, _ in points] == sorted(i for i, _ in points)
