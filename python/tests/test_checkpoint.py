"""strait-run checkpoints: --checkpoint / --checkpoint-every / --resume / --max-restarts.

The job is the README's: gpt2-tiny in 2 pipeline stages x 2 data-parallel replicas on the 4-CPU
cluster, AdamW. References are the same job run without interruption: a resumed run must end with
bit-identical parameters (the data stream, the lr schedule and AdamW's step all continue from the
checkpoint's step), a restart after a killed rank too, and a resume under another plan (one rank,
the same global batch) must agree within the summation-order noise of the other plan.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import numpy as np
import pytest

from jobutil import (GPT2_TINY, ROOT, STRAITC, STRAIT_RUN, cpu_cluster, needs_gpt2_tiny, run,
                     saved_params, write_tokens)

pytestmark = needs_gpt2_tiny()

CLUSTER = os.path.join(ROOT, "examples", "clusters", "local-4cpu.yaml")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpt")
    pipe = d / "pipe"   # 2 stages x 2 replicas, 8 x 64 tokens per replica
    one = d / "one"     # one rank, the same 16 x 64 global batch
    run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=8x64", "--loss", "cross-entropy",
         "--optimizer", "adamw", "--cluster", CLUSTER, "--global-batch", "16", "--num-stages", "2",
         "-o", str(pipe)])
    run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=16x64", "--loss", "cross-entropy",
         "--optimizer", "adamw", "-o", str(one)])
    data = write_tokens(d / "tokens.bin", seed=11, n=1 << 15)
    return d, pipe, one, data


def launch(job, data, steps, *extra, check=True):
    cmd = [STRAIT_RUN, str(job), "--steps", str(steps), "--lr", "0.003", "--data", str(data),
           "--data-format", "tokens-u16", "--threads", "1", "--timeout-ms", "20000", *map(str, extra)]
    if check:
        return run(cmd)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def losses(stdout):
    return {int(s): float(l) for s, l in re.findall(r"^step (\d+)/\d+ loss (\S+)", stdout, re.M)}


def worker_pids(job, rank):
    """Pids of the strait-run workers of `job` started with --rank `rank` (from /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv]
        if str(job) in args and "--rank" in args and args[args.index("--rank") + 1:][:1] == [str(rank)]:
            pids.append(int(entry))
    return pids


@pytest.fixture(scope="module")
def reference(jobs):
    """8 uninterrupted steps of the pipeline job: losses and final parameters."""
    d, pipe, _, data = jobs
    p = launch(pipe, data, 8, "--save-params", d / "ref-params")
    return losses(p.stdout), saved_params(d / "ref-params")


def test_resume_is_bit_identical(jobs, reference):
    d, pipe, _, data = jobs
    ck = d / "ck-resume"
    launch(pipe, data, 4, "--checkpoint", ck, "--checkpoint-every", 2)
    # Both checkpoints are complete; only the first replica's ranks wrote.
    for step in (2, 4):
        meta = json.loads((ck / f"step-{step}" / "checkpoint.json").read_text())
        assert meta["step"] == step and meta["world_size"] == 4
        written = sorted(p.name for p in (ck / f"step-{step}").iterdir() if p.is_dir())
        assert written == [f"rank{r}" for r in meta["writers"]] and len(written) == 2
    # Every parameter of the model and both AdamW moments of each, once.
    names = []
    for r in json.loads((ck / "step-4" / "checkpoint.json").read_text())["writers"]:
        names += [line.split("\t")[3].strip()
                  for line in (ck / "step-4" / f"rank{r}" / "index.tsv").read_text().splitlines()]
    ref_losses, ref_params = reference
    for name in ref_params:
        assert name in names and name + ".adam_m" in names and name + ".adam_v" in names, name
    # Resuming from the folder (the newest complete step) continues at step 5.
    p = launch(pipe, data, 8, "--resume", ck, "--save-params", d / "resumed-params")
    got = losses(p.stdout)
    assert sorted(got) == [5, 6, 7, 8]
    assert all(got[s] == ref_losses[s] for s in got), (got, ref_losses)
    resumed = saved_params(d / "resumed-params")
    assert resumed.keys() == ref_params.keys()
    for name, ref in ref_params.items():
        assert np.array_equal(resumed[name], ref), name
    # A checkpoint value is what numpy reads back: the step-8 parameters
    # equal the state --save-params wrote.
    launch(pipe, data, 8, "--resume", ck / "step-4", "--checkpoint", ck)
    meta = json.loads((ck / "step-8" / "checkpoint.json").read_text())
    for r in meta["writers"]:
        for line in (ck / "step-8" / f"rank{r}" / "index.tsv").read_text().splitlines():
            file, dtype, shape, name = line.split("\t")
            if name in ref_params:
                assert dtype == "f32"
                assert np.array_equal(np.load(ck / "step-8" / f"rank{r}" / file), ref_params[name])


def test_resume_under_another_plan(jobs, reference):
    """The pipeline job's step-4 checkpoint continued by a one-rank plan of the same model."""
    d, pipe, one, data = jobs
    ck = d / "ck-replan"
    launch(pipe, data, 4, "--checkpoint", ck)
    p = launch(one, data, 8, "--resume", ck, "--save-params", d / "one-params")
    got = losses(p.stdout)
    ref_losses, ref_params = reference
    assert sorted(got) == [5, 6, 7, 8]
    for s in got:
        assert got[s] == pytest.approx(ref_losses[s], rel=1e-4)
    mine = saved_params(d / "one-params")
    assert mine.keys() == ref_params.keys()
    # AdamW moves every weight by about lr = 3e-3 per step, whatever its gradient: a resume that
    # lost the moments or the step would be off by that much; the other plan's summation order
    # leaves ~1e-6.
    for name, ref in ref_params.items():
        np.testing.assert_allclose(mine[name], ref, rtol=1e-4, atol=1e-5, err_msg=name)


def test_restart_after_a_killed_rank(jobs, reference, tmp_path):
    """SIGKILL one rank mid-run: the launcher restarts every rank from the newest checkpoint and
    the job ends as if nothing happened."""
    _, pipe, _, data = jobs
    ref_losses, ref_params = reference
    ck = tmp_path / "ck"
    out = tmp_path / "params"
    cmd = [STRAIT_RUN, str(pipe), "--steps", "8", "--lr", "0.003", "--data", str(data),
           "--data-format", "tokens-u16", "--threads", "1", "--timeout-ms", "20000",
           "--checkpoint", str(ck), "--checkpoint-every", "2", "--max-restarts", "1",
           "--save-params", str(out), "--log-dir", str(tmp_path / "logs")]
    # The job cannot run past step 4 before the kill, however the test process is scheduled: the
    # step-4 index of every rank is a FIFO (its writer's open blocks until a reader comes, and
    # every rank waits for it in the checkpoint's barrier); they go once rank 1 is dead, before
    # the restarted ranks (from step 2) write step 4 again.
    fifos = []
    for r in range(4):
        (ck / "step-4" / f"rank{r}").mkdir(parents=True)
        fifos.append(ck / "step-4" / f"rank{r}" / "index.tsv.tmp")
        os.mkfifo(fifos[-1])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if (ck / "step-2" / "checkpoint.json").exists():
            break
        time.sleep(0.01)
    # Rank 1 (stage 0, replica 1): the worker the launcher started with --rank 1.
    pids = worker_pids(pipe, 1)
    assert proc.poll() is None and pids, "the job ended before rank 1 could be killed"
    for p in pids:
        os.kill(p, signal.SIGKILL)
    for f in fifos:
        f.unlink()
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stdout[-2000:] + stderr[-2000:]
    assert re.search(r"rank 1 failed \(exit code 137\)", stderr), stderr[-2000:]
    m = re.search(r"restarting every rank from (\S+) \(step (\d+)\), restart 1 of 1", stderr)
    assert m and int(m.group(2)) == 2, stderr[-2000:]  # step 4 could not complete before the kill
    assert (tmp_path / "logs" / "rank1.restart1.log").exists()
    got = saved_params(out)
    assert got.keys() == ref_params.keys()
    for name, ref in ref_params.items():
        assert np.array_equal(got[name], ref), name
    # The merged progress of the restart covers the steps after the checkpoint.
    after = {s: l for s, l in losses(stdout).items() if s > int(m.group(2))}
    assert after and all(l == ref_losses[s] for s, l in after.items())


def test_checkpoint_errors(jobs, tmp_path):
    d, pipe, one, data = jobs
    # A folder that does not exist.
    p = launch(one, data, 3, "--resume", tmp_path / "missing", check=False)
    assert p.returncode != 0 and "checkpoint folder" in p.stderr and "missing" in p.stderr
    # A step folder without checkpoint.json is incomplete, and skipped.
    ck = tmp_path / "ck"
    launch(one, data, 2, "--checkpoint", ck, "--checkpoint-every", 1)
    (ck / "step-2" / "checkpoint.json").unlink()
    p = launch(one, data, 3, "--resume", ck, "--save-params", tmp_path / "p")
    assert "resumed from" in open(one / "logs" / "rank0.log").read()
    assert sorted(losses(p.stdout)) == [2, 3]  # from step-1, the newest complete one
    (ck / "step-1" / "checkpoint.json").unlink()
    p = launch(one, data, 3, "--resume", ck, check=False)
    assert p.returncode != 0 and "no complete checkpoint" in p.stderr and "step-2" in p.stderr
    # Nothing left to run.
    launch(one, data, 2, "--checkpoint", tmp_path / "ck2")
    p = launch(one, data, 2, "--resume", tmp_path / "ck2", check=False)
    assert p.returncode != 0 and "leaves nothing to run" in p.stderr
    # A value whose shape differs from the program's: the file and the variable are named.
    index = tmp_path / "ck2" / "step-2" / "rank0" / "index.tsv"
    lines = index.read_text().splitlines()
    file, dtype, shape, name = lines[0].split("\t")
    lines[0] = "\t".join([file, dtype, "3x3", name])
    index.write_text("\n".join(lines) + "\n")
    p = launch(one, data, 4, "--resume", tmp_path / "ck2", check=False)
    assert p.returncode != 0 and file in p.stderr and name in p.stderr and "3x3" in p.stderr
    # A checkpoint of another job (SGD: no AdamW moments) names the missing state.
    sgd = d / "sgd"
    run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=16x64", "--loss", "cross-entropy",
         "--optimizer", "sgd", "-o", str(sgd)])
    launch(sgd, data, 1, "--checkpoint", tmp_path / "ck3")
    p = launch(one, data, 3, "--resume", tmp_path / "ck3", check=False)
    assert p.returncode != 0 and "has no optimizer state" in p.stderr and "adam_m" in p.stderr
    # --checkpoint-every and --max-restarts without --checkpoint: a usage error.
    p = launch(one, data, 3, "--max-restarts", 1, check=False)
    assert p.returncode == 2 and "need --checkpoint" in p.stderr


def three_host_cluster(path):
    """Three CPUs on three hosts of one site joined by 100 Mbit/s: a flat all-reduce of 3 ranks,
    whose codec keeps one error-feedback stream per chunk (sub-streams)."""
    path.write_text(cpu_cluster("three-hosts", [(f"c{i}", f"h{i}", "s") for i in range(3)],
                                "  intra_host: {bandwidth_gbps: 100, latency_us: 5}\n"
                                "  intra_site: {bandwidth_mbps: 100, latency_ms: 1}\n"))
    return path


@pytest.mark.parametrize("layout", ["pipeline", "three-replicas"])
def test_resume_with_compression_is_bit_identical(jobs, tmp_path, layout):
    """Error-feedback residuals are training state: a compressed job resumes bit-identically."""
    _, _, _, data = jobs
    job = tmp_path / "job"
    if layout == "pipeline":  # the README job, int8 on the cut and on the all-reduces
        flags = ["--input-shape", "input_ids=8x64", "--cluster", CLUSTER, "--global-batch", "16",
                 "--num-stages", "2"]
    else:
        flags = ["--input-shape", "input_ids=4x64", "--global-batch", "12", "--num-stages", "1",
                 "--cluster", str(three_host_cluster(tmp_path / "three.yaml"))]
    compile_flags = [GPT2_TINY, "--loss", "cross-entropy", "--optimizer", "adamw", *flags]
    run([STRAITC, *compile_flags, "--compress", "int8", "-o", str(job)])
    ref = launch(job, data, 6, "--save-params", tmp_path / "ref")
    ck = tmp_path / "ck"
    launch(job, data, 4, "--checkpoint", ck, "--checkpoint-every", 2)
    # Every rank with error feedback wrote its residuals (not only the first replica), each a
    # finite f32 vector, with the fingerprint of the program that wrote them.
    feedback = sorted(ck.glob("step-4/rank*/feedback/index.tsv"))
    assert len(feedback) >= 2
    for index in feedback:
        lines = index.read_text().splitlines()
        assert lines[0].startswith("program\t") and len(lines) > 1
        for line in lines[1:]:
            file, numel, key = line.split("\t")
            r = np.load(index.parent / file)
            assert r.dtype == np.float32 and r.shape == (int(numel),) and np.isfinite(r).all()
            assert np.abs(r).max() > 0, key
        if layout == "three-replicas":
            assert any(".p" in line for line in lines[1:])  # the chunks' sub-streams
    # The residuals are what the planner's model says each stage keeps per rank (docs/planner.md,
    # "Memory of error feedback": the whole gradient over 2 replicas, 4/3 of it over 3, where
    # each rank encodes the reduced third again): the most of any of the stage's ranks.
    plan_json = tmp_path / "plan.json"
    run([STRAITC, *compile_flags, "--compress", "int8", "--emit=plan", "--plan-json",
         str(plan_json)])
    plan = json.loads(plan_json.read_text())
    model = {m["stage"]: m["residual_bytes"]
             for m in plan["compression"]["error_feedback_memory"]}
    stage_of = {d: s["stage"] for s in plan["stages"] for d in s["devices"]}
    device_of = {r["rank"]: r["device"]
                 for r in json.loads((job / "straitc.json").read_text())["ranks"]}
    kept = {}
    for index in feedback:
        rank = int(index.parent.parent.name[len("rank"):])
        numel = sum(int(line.split("\t")[1]) for line in index.read_text().splitlines()[1:])
        stage = stage_of[device_of[rank]]
        kept[stage] = max(kept.get(stage, 0), 4 * numel)
    assert kept.keys() == model.keys()
    for stage, bytes_ in kept.items():  # chunks of n/k round per bucket: a few values apart
        assert abs(bytes_ - model[stage]) <= 64, (stage, bytes_, model[stage])
    p = launch(job, data, 6, "--resume", ck, "--save-params", tmp_path / "res")
    assert losses(p.stdout) == {s: l for s, l in losses(ref.stdout).items() if s > 4}
    log = open(job / "logs" / "rank1.log").read()
    assert "error-feedback residual" in log and "restored" in log
    ref_params, res_params = saved_params(tmp_path / "ref"), saved_params(tmp_path / "res")
    for name, value in ref_params.items():
        assert np.array_equal(res_params[name], value), name
    # Without the residuals the run is not the same (the test can fail): they start at zero.
    for index in feedback:
        index.unlink()
    launch(job, data, 6, "--resume", ck, "--save-params", tmp_path / "zero")
    assert "start at zero" in open(job / "logs" / "rank1.log").read()
    zero = saved_params(tmp_path / "zero")
    assert any(not np.array_equal(zero[n], v) for n, v in ref_params.items())
    if layout != "pipeline":
        return
    # Under another plan (int4 instead of int8) the residuals are not taken: they start at zero.
    launch(job, data, 4, "--checkpoint", ck, "--checkpoint-every", 2)
    other = tmp_path / "int4"
    run([STRAITC, *compile_flags, "--compress", "int4", "-o", str(other)])
    launch(other, data, 6, "--resume", ck)
    assert "written under another plan" in open(other / "logs" / "rank1.log").read()
    # A residual file that does not match its index: an error naming the file.
    index = sorted(ck.glob("step-4/rank*/feedback/index.tsv"))[0]
    lines = index.read_text().splitlines()
    file, numel, key = lines[1].split("\t")
    lines[1] = "\t".join([file, str(int(numel) + 1), key])
    index.write_text("\n".join(lines) + "\n")
    p = launch(job, data, 6, "--resume", ck, check=False)
    assert p.returncode != 0 and file in p.stderr and key in p.stderr
    # A key naming sub-streams that no all-reduce of this program makes (a corrupt or hostile
    # index; each level used to allocate up to 2^20 streams): an error naming the key.
    bad = key + ".p1048576" * 40
    lines[1] = "\t".join([file, numel, bad])
    index.write_text("\n".join(lines) + "\n")
    p = launch(job, data, 6, "--resume", ck, check=False)
    assert p.returncode != 0 and "names no error-feedback stream" in p.stderr and bad in p.stderr
