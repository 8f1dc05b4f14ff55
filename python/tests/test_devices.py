"""Devices of a compiled job: straitc writes cuda:N for GPU ranks, strait-run runs them.

A cluster of two hosts with two GPUs each: straitc must give every rank the
device "cuda:N" (N its index among its host's GPUs) and its host in the
manifest. strait-run then needs a GPU for those ranks: on a machine without
one (or a build without the CUDA backend) it must fail before the
rendezvous with a message naming the device and the way out (--device cpu),
and with --device cpu the same job must train on the CPU with the same
losses as a job compiled for CPU devices.
"""
from __future__ import annotations

import os
import re
import subprocess

import pytest

from test_pipeline_e2e import MODEL, STRAIT_RUN, STRAITC, blocks, decode, losses, run

pytestmark = pytest.mark.skipif(
    not (os.path.exists(STRAITC) and STRAIT_RUN and os.path.exists(MODEL)),
    reason="needs build/bin/straitc, strait-run and models/gpt2-tiny")

CLUSTER = """
name: two-gpu-hosts
device_types:
  - name: H100
    kind: gpu
    peak_tflops: {fp32: 67, bf16: 989}
    mem_bandwidth_gbs: 3350
    memory_gib: 80
devices:
  - {prefix: g, count: 4, per_host: 2, host_prefix: node, type: H100, site: dc}
links:
  intra_host: {bandwidth_gbps: 3600, latency_us: 3}
  intra_site: {bandwidth_gbps: 100, latency_us: 10}
"""


def compile_job(tmp_path, cluster_text, name):
    cluster = tmp_path / f"{name}.yaml"
    cluster.write_text(cluster_text)
    job = tmp_path / name
    run([STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
         "--optimizer", "sgd", "--cluster", str(cluster), "--num-stages", "2",
         "--global-batch", "4", "-o", str(job)])
    return job


def manifest_ranks(job):
    out = []
    for b in blocks(decode(job / "plan.pb", "PlanManifest"), "ranks"):
        m = re.search(r"^\s*rank: (\d+)", b, re.M)
        rank = int(m.group(1)) if m else 0  # proto3 text omits a zero
        device = re.search(r'device: "([^"]*)"', b).group(1)
        host = re.search(r'host: "([^"]*)"', b).group(1)
        out.append((rank, device, host))
    return sorted(out)


def test_gpu_ranks_get_cuda_devices_of_their_host(tmp_path):
    job = compile_job(tmp_path, CLUSTER, "gpu")
    ranks = manifest_ranks(job)
    assert len(ranks) == 4
    by_host = {}
    for rank, device, host in ranks:
        assert re.fullmatch(r"cuda:\d", device), (rank, device)
        assert host in ("node0", "node1"), (rank, host)
        by_host.setdefault(host, []).append(device)
        # The program carries the same device as the manifest.
        prog = decode(job / f"rank{rank}.program.pb")
        assert f'device: "{device}"' in prog
    assert sorted(by_host) == ["node0", "node1"]
    for devices in by_host.values():
        assert sorted(devices) == ["cuda:0", "cuda:1"]


def test_gpu_job_without_a_gpu_fails_clearly_and_runs_with_device_cpu(tmp_path):
    job = compile_job(tmp_path, CLUSTER, "gpu")
    p = subprocess.run([STRAIT_RUN, str(job), "--steps", "1", "--timeout-ms", "20000"],
                       capture_output=True, text=True, timeout=120)
    logs = "".join((job / "logs" / f"rank{r}.log").read_text() for r in range(4))
    if p.returncode == 0:
        pytest.skip("this machine has usable GPUs: the job ran on them")
    assert p.returncode == 1, p.stderr
    text = p.stderr + logs
    assert re.search(r"device cuda:\d", text), text[-2000:]
    assert "--device cpu runs it on the CPU" in text, text[-2000:]
    assert "iteration 1/1" not in logs

    # The same job on the CPU trains like the job compiled for CPU devices.
    cpu_job = compile_job(tmp_path, CLUSTER.replace("kind: gpu", "kind: cpu"), "cpu")
    assert all(d == "cpu" for _, d, _ in manifest_ranks(cpu_job))
    run([STRAIT_RUN, str(job), "--steps", "3", "--device", "cpu", "--timeout-ms", "60000"])
    run([STRAIT_RUN, str(cpu_job), "--steps", "3", "--timeout-ms", "60000"])

    def rank_losses(j):
        return [losses((j / "logs" / f"rank{r}.log").read_text()) for r in range(4)]
    got, want = rank_losses(job), rank_losses(cpu_job)
    assert got == want
    assert sum(len(x) for x in got) >= 3  # the last stage's ranks print the loss
    log0 = (job / "logs" / "rank0.log").read_text()
    assert re.search(r"device cpu \(OpenBLAS \w+\), communication gloo", log0), log0[-2000:]


@pytest.mark.parametrize("flag,value", [("--device", "tpu"), ("--device", "cuda:x"),
                                        ("--comm", "mpi"), ("--matmul-precision", "fp8")])
def test_bad_device_flags_are_usage_errors(tmp_path, flag, value):
    p = subprocess.run([STRAIT_RUN, str(tmp_path), flag, value], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2
    assert value in p.stderr
