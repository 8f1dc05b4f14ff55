"""Local steps (DiLoCo-like outer synchronization): straitc --local-steps / --outer-lr /
--outer-momentum and strait-run's outer step.

The job: gpt2-tiny (AdamW) as 4 data-parallel replicas on a cluster of two sites, east (r0, r1 on
host he) and west (r2, r3 on host hw), joined by 100 Mbit/s: the hierarchical all-reduce's islands
are {0,1} and {2,3}. References:
  - --local-steps 1 writes the same programs as no flag, and trains to the same losses;
  - the outer step against numpy: with outer lr 1 and momentum 0 the parameters after an outer
    step are the mean of the two islands' parameters (read from a run that skips that outer step,
    --no-final-outer-step, which is otherwise identical); with the defaults (0.7, 0.9) the
    Nesterov update of the second outer step from the first's saved state (checkpoints hold
    theta_outer and the momentum);
  - H=8 trains like the synchronous job on real text and sends ~8x fewer bytes across the
    islands;
  - a checkpoint at step 6 (H=4) resumes bit-identically;
  - bad flags and a bad program fail naming the flag / field and rank.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from jobutil import (GPT2_TINY, PROTO_DIR, ROOT, STRAITC, STRAIT_RUN, checkpoint_values, cpu_cluster,
                     needs_gpt2_tiny, run, write_tokens)

pytestmark = needs_gpt2_tiny()

TWO_SITES = cpu_cluster(
    "two-sites",
    [("r0", "he", "east"), ("r1", "he", "east"), ("r2", "hw", "west"), ("r3", "hw", "west")],
    "  intra_host: {bandwidth_gbps: 10, latency_us: 20}\n"
    "  sites:\n    - {between: [east, west], bandwidth_mbps: 100, latency_ms: 1}\n")
EAST, WEST = (0, 1), (2, 3)


def compile_job(d, name, *flags):
    out = d / name
    p = run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=4x32", "--loss", "cross-entropy",
             "--optimizer", "adamw", "--cluster", str(d / "two-sites.yaml"), "--global-batch", "16",
             "--num-stages", "1", *map(str, flags), "-o", str(out)])
    return out, p


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("local-steps")
    (d / "two-sites.yaml").write_text(TWO_SITES)
    data = write_tokens(d / "tokens.bin", seed=5, n=1 << 15)
    return d, data


def launch(job, data, steps, *extra, check=True):
    cmd = [STRAIT_RUN, str(job), "--steps", str(steps), "--lr", "0.003", "--data", str(data),
           "--data-format", "tokens-u16", "--threads", "1", "--timeout-ms", "60000",
           *map(str, extra)]
    if check:
        return run(cmd)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def losses(stdout):
    return [float(x) for x in re.findall(r"^step \d+/\d+ loss (\S+)", stdout, re.M)]


def saved(folder):
    """{rank: {parameter name: array}} of a --save-params folder."""
    out = {}
    for f in os.listdir(folder):
        m = re.fullmatch(r"params\.rank(\d+)\.txt", f)
        if m:
            out[int(m.group(1))] = {
                name: np.load(os.path.join(folder, file))
                for file, name in (line.split() for line in open(os.path.join(folder, f)))}
    return out


def checkpoint(step_dir):
    """{rank: {name: array}} of a checkpoint step folder (every rank writes under local steps)."""
    out = {}
    for entry in os.listdir(step_dir):
        m = re.fullmatch(r"rank(\d+)", entry)
        if not m:
            continue
        out[int(m.group(1))] = checkpoint_values(step_dir, int(m.group(1)))
    return out


def decode(job, rank=0):
    with open(job / f"rank{rank}.program.pb", "rb") as f:
        p = subprocess.run(["protoc", "--decode=strait.program.Program", "-I", PROTO_DIR,
                            "strait_program.proto"], stdin=f, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode()


def rank_lines(job, rank):
    """(iteration, line) of each progress line in DIR/logs/rank<R>.log."""
    out = []
    for line in open(job / "logs" / f"rank{rank}.log"):
        m = re.match(rf"rank {rank} iteration (\d+)/\d+ ", line)
        if m:
            out.append((int(m.group(1)), line))
    return out


def bytes_to(line, peers, key):
    m = re.search(rf" {key} (\S+)", line)
    total = 0
    for item in m.group(1).split(","):
        if ":" in item:
            peer, n = item.split(":")
            total += int(n) if int(peer) in peers else 0
    return total


def test_program_carries_the_outer_sync(env):
    d, _ = env
    job, p = compile_job(d, "h4", "--local-steps", "4", "--outer-lr", "0.5",
                         "--outer-momentum", "0.8")
    assert "local steps: stage 0" in p.stdout
    text = decode(job, rank=2)
    sync = re.search(r"^outer_sync \{\n((?:  .*\n)*?)\}", text, re.M)
    assert sync, "rank 2's program has no outer_sync"
    body = sync.group(1)
    assert "local_steps: 4" in body and "lr: 0.5" in body and "momentum: 0.8" in body
    assert re.findall(r"islands \{\n((?:    .*\n)*?)  \}", body) == \
        ["    ranks: 0\n    ranks: 1\n", "    ranks: 2\n    ranks: 3\n"]
    # Every per-step all-reduce stays inside rank 2's island, without islands or a codec.
    reduces = re.findall(r"^  all_reduce \{\n((?:    .*\n)*?)  \}", text, re.M)
    assert reduces
    for r in reduces:
        assert re.findall(r"ranks: (\d+)", r) == ["2", "3"], r
        assert "islands" not in r and "codec" not in r and "reduce: REDUCE_MEAN" in r
    channels = {int(c) for c in re.findall(r"channel: (\d+)", text.split("outer_sync {")[0])}
    assert int(re.search(r"channel: (\d+)", body).group(1)) not in channels


def test_h1_is_synchronous_training(env):
    d, data = env
    plain, _ = compile_job(d, "sync")
    h1, _ = compile_job(d, "h1", "--local-steps", "1")
    for r in range(4):  # as text: the binary order of the attribute maps varies between runs
        assert decode(plain, r) == decode(h1, r)
    assert "outer_sync" not in decode(h1)
    a = launch(plain, data, 3, "--save-params", d / "p-sync")
    b = launch(h1, data, 3, "--save-params", d / "p-h1")
    assert losses(a.stdout) == losses(b.stdout) and len(losses(a.stdout)) == 3
    pa, pb = saved(d / "p-sync"), saved(d / "p-h1")
    for r in range(4):
        for name in pa[r]:
            assert np.array_equal(pa[r][name], pb[r][name]), name


def test_outer_step_averages_the_islands(env):
    """lr 1, momentum 0: theta = theta_outer - mean(theta_outer - theta_i) = mean(theta_i)."""
    d, data = env
    job, _ = compile_job(d, "h4-plain", "--local-steps", "4", "--outer-lr", "1",
                         "--outer-momentum", "0")
    for steps in (3, 6):  # the last step's outer step: the first one, and one after step 4's
        synced, apart = d / f"synced{steps}", d / f"apart{steps}"
        a = launch(job, data, steps, "--save-params", synced)
        assert re.search(rf"^step {steps}/{steps} .* outer-step", a.stdout, re.M)
        launch(job, data, steps, "--save-params", apart, "--no-final-outer-step")
        after, before = saved(synced), saved(apart)
        names = sorted(after[0])
        assert len(names) > 10
        for name in names:
            # The islands trained apart: equal inside an island, different across.
            assert np.array_equal(before[0][name], before[1][name])
            assert np.array_equal(before[2][name], before[3][name])
            for r in range(1, 4):
                assert np.array_equal(after[0][name], after[r][name]), (name, r)
            reference = (before[0][name].astype(np.float64) + before[2][name]) / 2
            np.testing.assert_allclose(after[0][name], reference, rtol=0, atol=1e-6,
                                       err_msg=name)
        moved = sum(not np.array_equal(before[0][n], before[2][n]) for n in names)
        assert moved > len(names) // 2


def test_nesterov_outer_step_matches_numpy(env):
    """Defaults (lr 0.7, momentum 0.9): the outer step after step 7 from the state of step 4's."""
    d, data = env
    job, _ = compile_job(d, "h4", "--local-steps", "4")
    a, b = d / "ck-a", d / "ck-b"
    launch(job, data, 7, "--checkpoint", a, "--checkpoint-every", "4")
    launch(job, data, 7, "--checkpoint", b, "--no-final-outer-step")
    s4, after, before = checkpoint(a / "step-4"), checkpoint(a / "step-7"), checkpoint(b / "step-7")
    assert sorted(s4) == sorted(after) == sorted(before) == [0, 1, 2, 3]
    names = [n[len("outer_sync.theta/"):] for n in s4[0] if n.startswith("outer_sync.theta/")]
    assert len(names) > 10
    lr, mu = 0.7, 0.9
    for name in names:
        outer = s4[0]["outer_sync.theta/" + name].astype(np.float64)
        m = s4[0]["outer_sync.momentum/" + name].astype(np.float64)
        assert np.array_equal(s4[0][name], s4[0]["outer_sync.theta/" + name])
        delta = np.mean([outer - before[r][name] for r in range(4)], axis=0)
        m = mu * m + delta
        theta = outer - lr * (delta + mu * m)
        for r in range(4):
            np.testing.assert_allclose(after[r]["outer_sync.momentum/" + name], m, rtol=0,
                                       atol=1e-6, err_msg=name)
            np.testing.assert_allclose(after[r][name], theta, rtol=0, atol=1e-6, err_msg=name)
            assert np.array_equal(after[r][name], after[r]["outer_sync.theta/" + name])


def text_tokens(d):
    """The byte-level token file of runtime/scripts/make-text-tokens.py (real text: the LCG tokens
    of write_tokens are periodic, which any optimizer drives to zero loss)."""
    out = d / "text"
    if not (out / "train.bin").exists():
        subprocess.run([sys.executable, os.path.join(ROOT, "runtime", "scripts",
                                                     "make-text-tokens.py"), str(out),
                        "--max-bytes", "400000", "--no-docstrings"], check=True,
                       capture_output=True)
    path = out / "train.bin"
    if path.stat().st_size < 2 * 100000:
        pytest.skip("no licence texts to build the token file from")
    return path


def test_h8_trains_and_crosses_islands_8x_less(env):
    d, _ = env
    data = text_tokens(d)
    steps = 64
    sync, _ = compile_job(d, "sync8")
    h8, _ = compile_job(d, "h8", "--local-steps", "8")
    a = losses(launch(sync, data, steps).stdout)
    b = losses(launch(h8, data, steps).stdout)
    assert len(a) == len(b) == steps
    # Both train (from ln(256) = 5.5 to the tiny model's plateau near 3.1); over the last 8 steps
    # H=8 stays within 5% of the synchronous run (measured: 1-2%).
    last_a, last_b = np.mean(a[-8:]), np.mean(b[-8:])
    assert last_a < a[0] - 2 and last_b < b[0] - 2, (a, b)
    assert abs(last_b - last_a) < 0.05 * last_a, (last_a, last_b)
    # Bytes from the east island's ranks to the west's (and back), per the ranks' own counters.
    def across(job):
        sent = recv = 0
        for r in EAST:
            for _, line in rank_lines(job, r):
                sent += bytes_to(line, WEST, "sent")
                recv += bytes_to(line, WEST, "recv")
        return sent, recv
    (sa, ra), (sb, rb) = across(sync), across(h8)
    assert sb > 0 and rb > 0
    assert 7.0 < sa / sb < 9.0 and 7.0 < ra / rb < 9.0, (sa, sb, ra, rb)
    # Only outer steps cross: every 8th iteration of rank 0.
    crossing = [it for it, line in rank_lines(h8, 0) if bytes_to(line, WEST, "sent") > 0]
    assert crossing == list(range(8, steps + 1, 8))
    assert all(("outer-step" in line) == (it in crossing) for it, line in rank_lines(h8, 0))


def test_checkpoint_resumes_bit_identically(env):
    d, data = env
    job, _ = compile_job(d, "h4-ckpt", "--local-steps", "4")
    whole, resumed, ck = d / "whole", d / "resumed", d / "ck"
    a = launch(job, data, 10, "--save-params", whole, "--no-final-outer-step")
    # Stopped after step 6 (not an outer step: --no-final-outer-step, else the stop would add one).
    launch(job, data, 6, "--checkpoint", ck, "--no-final-outer-step")
    assert '"writers": [0, 1, 2, 3]' in (ck / "step-6" / "checkpoint.json").read_text()
    b = launch(job, data, 10, "--resume", ck, "--save-params", resumed, "--no-final-outer-step")
    assert losses(a.stdout)[6:] == losses(b.stdout)
    pa, pb = saved(whole), saved(resumed)
    # Steps 9 and 10 ran apart: the islands' parameters differ, and each must match.
    assert any(not np.array_equal(pa[0][n], pa[2][n]) for n in pa[0])
    for r in range(4):
        assert sorted(pa[r]) == sorted(pb[r])
        for name in pa[r]:
            assert np.array_equal(pa[r][name], pb[r][name]), (r, name)


@pytest.mark.parametrize("flags,message", [
    (["--local-steps", "0"], "--local-steps must be at least 1 (got 0)"),
    (["--outer-lr", "0"], "--outer-lr must be a finite number above 0 (got 0)"),
    (["--outer-lr", "-0.5"], "--outer-lr must be a finite number above 0"),
    (["--outer-momentum", "1"], "--outer-momentum must be in [0, 1) (got 1)"),
    (["--outer-momentum", "-0.1"], "--outer-momentum must be in [0, 1)"),
])
def test_bad_flags(env, flags, message):
    d, _ = env
    p = subprocess.run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=4x32", "--loss",
                        "cross-entropy", "--optimizer", "adamw", "--cluster",
                        str(d / "two-sites.yaml"), *flags, "-o", str(d / "bad")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    assert message in p.stderr, p.stderr
    assert not (d / "bad").exists()


def test_local_steps_without_islands_warns(env):
    d, _ = env
    one = cpu_cluster("one-host", [("r0", "h", "s"), ("r1", "h", "s")],
                      "  intra_host: {bandwidth_gbps: 10, latency_us: 20}\n")
    (d / "one-host.yaml").write_text(one)
    p = run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=4x32", "--loss", "cross-entropy",
             "--optimizer", "adamw", "--cluster", str(d / "one-host.yaml"), "--global-batch", "8",
             "--num-stages", "1", "--local-steps", "4", "-o", str(d / "one")])
    assert "warning: --local-steps 4 ignored" in p.stderr
    assert "outer_sync" not in decode(d / "one")


def test_bad_outer_sync_in_program_names_field_and_rank(env):
    d, data = env
    job, _ = compile_job(d, "h4-bad", "--local-steps", "4")
    text = decode(job, rank=1).replace("momentum: 0.9", "momentum: 1.5")
    p = subprocess.run(["protoc", "--encode=strait.program.Program", "-I", PROTO_DIR,
                        "strait_program.proto"], input=text.encode(), capture_output=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    (job / "rank1.program.pb").write_bytes(p.stdout)
    r = launch(job, data, 2, check=False)
    assert r.returncode != 0
    log = (job / "logs" / "rank1.log").read_text()
    assert "program.outer_sync.momentum: 1.5" in log and "rank 1" in log, log[-2000:]


def test_one_replica_per_site(env):
    """Two devices on two sites joined by one link (no bandwidth gap to find): with local steps the
    sites are the islands, each replica reduces with itself, and only outer steps cross."""
    d, data = env
    sites = cpu_cluster("one-per-site", [("r0", "he", "east"), ("r1", "hw", "west")],
                        "  sites:\n    - {between: [east, west], bandwidth_mbps: 100, "
                        "latency_ms: 1}\n")
    (d / "one-per-site.yaml").write_text(sites)
    common = [STRAITC, GPT2_TINY, "--input-shape", "input_ids=4x32", "--loss", "cross-entropy",
              "--optimizer", "adamw", "--cluster", str(d / "one-per-site.yaml"), "--global-batch",
              "8", "--num-stages", "1"]
    run([*common, "-o", str(d / "sites-sync")])
    assert "islands" not in decode(d / "sites-sync")  # as before: one flat all-reduce
    run([*common, "--local-steps", "4", "--outer-lr", "1", "--outer-momentum", "0",
         "-o", str(d / "sites-h4")])
    text = decode(d / "sites-h4", rank=1)
    assert re.search(r"all_reduce \{\n    value_ids: \d+\n    ranks: 1\n    reduce: REDUCE_MEAN\n",
                     text)
    assert re.findall(r"^  islands \{\n    ranks: (\d+)\n  \}", text, re.M) == ["0", "1"]
    job = d / "sites-h4"
    launch(job, data, 6, "--save-params", d / "sites-synced")
    crossing = [it for it, line in rank_lines(job, 0) if bytes_to(line, (1,), "sent") > 0]
    assert crossing == [4, 6]
    launch(job, data, 6, "--save-params", d / "sites-apart", "--no-final-outer-step")
    after, before = saved(d / "sites-synced"), saved(d / "sites-apart")
    for name in after[0]:
        assert np.array_equal(after[0][name], after[1][name])
        reference = (before[0][name].astype(np.float64) + before[1][name]) / 2
        np.testing.assert_allclose(after[0][name], reference, rtol=0, atol=1e-6, err_msg=name)


def test_resume_a_synchronous_checkpoint_under_local_steps(env):
    """A checkpoint without outer-step state (a synchronous run's) resumes under local steps with
    theta_outer = its parameters and zero momentum: the resumed job's first outer step then
    averages how far each island moved from the checkpoint."""
    d, data = env
    sync, _ = compile_job(d, "sync-ck")
    h4, _ = compile_job(d, "h4-from-sync", "--local-steps", "4", "--outer-lr", "1",
                        "--outer-momentum", "0")
    ck = d / "sync-ck-dir"
    launch(sync, data, 3, "--checkpoint", ck)
    assert '"writers": [0]' in (ck / "step-3" / "checkpoint.json").read_text()
    launch(h4, data, 6, "--resume", ck, "--save-params", d / "from-sync")
    log = (h4 / "logs" / "rank2.log").read_text()
    assert "the checkpoint has no outer-step state" in log
    # Outer steps after steps 4 and 6 (the last); every rank ends equal.
    assert [it for it, line in rank_lines(h4, 2) if "outer-step" in line] == [4, 6]
    after = saved(d / "from-sync")
    for name in after[0]:
        for r in range(1, 4):
            assert np.array_equal(after[0][name], after[r][name]), (name, r)
