"""strait-run survives broken links in process (docs/runtime.md, "Flaky links").

Faults come from outside the processes: `ss -K` aborts an established TCP connection between two
ranks (both ends see a reset) while the job trains. Every rank then rebuilds its connections and
replays the interrupted step from its in-memory snapshot: the job finishes with the same worker
processes, no restart, logs that name the broken link and the replayed step, and final parameters
bit-identical to an uninterrupted run. Beyond --link-retries the job fails with a clear message,
or --max-restarts restarts it; an error that is not a link failure is not retried.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import threading
import time

import numpy as np
import pytest

from jobutil import (GPT2_TINY, ROOT, STRAITC, STRAIT_RUN, connections, cpu_cluster,
                     drop_link, job_worker_pids as worker_pids, needs_gpt2_tiny, run,
                     saved_params, wan_unavailable, write_tokens)

CLUSTER = os.path.join(ROOT, "examples", "clusters", "local-4cpu.yaml")


def ss_kill_unavailable():
    if os.geteuid() != 0:
        return "ss -K needs root (CAP_NET_ADMIN)"
    if shutil.which("ss") is None:
        return "ss (iproute2) unavailable"
    return ""


pytestmark = [needs_gpt2_tiny(),
              pytest.mark.skipif(bool(ss_kill_unavailable()), reason=ss_kill_unavailable())]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    d = tmp_path_factory.mktemp("flaky")
    base = [STRAITC, GPT2_TINY, "--input-shape", "input_ids=4x32", "--loss", "cross-entropy",
            "--optimizer", "adamw"]
    # The README layout: 2 stages x 2 data-parallel replicas.
    run(base + ["--cluster", CLUSTER, "--global-batch", "8", "--num-stages", "2",
                "-o", str(d / "pipe")])
    # The same with 4x the tokens per step: steps long enough to break every one.
    run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=8x64", "--loss", "cross-entropy",
         "--optimizer", "adamw", "--cluster", CLUSTER, "--global-batch", "16", "--num-stages", "2",
         "-o", str(d / "slow")])
    # 1F1B (deferred sends) with int8 on the cut and the all-reduces (error feedback).
    run(base + ["--cluster", CLUSTER, "--global-batch", "16", "--num-stages", "2",
                "--micro-batches", "2", "--schedule", "1f1b", "--compress", "int8",
                "-o", str(d / "f1b")])
    # Two data-parallel ranks on two sites (sealed links, ranks started one by one).
    (d / "two-sites.yaml").write_text(cpu_cluster(
        "two-sites", [("rank0", "a", "east"), ("rank1", "b", "west")],
        "  intra_host: {bandwidth_gbps: 10, latency_us: 20}\n"
        "  hosts:\n    - {between: [a, b], bandwidth_mbps: 100, latency_ms: 10}\n"))
    run(base + ["--cluster", str(d / "two-sites.yaml"), "--num-stages", "1",
                "--global-batch", "8", "-o", str(d / "dp")])
    data = write_tokens(d / "tokens.bin", seed=3, n=1 << 14)
    key = d / "link.key"
    run([STRAIT_RUN, "--make-link-secret", str(key)])
    return d, data, key


def args(job, data, steps, *extra):
    return [str(job), "--steps", str(steps), "--lr", "0.003", "--data", str(data),
            "--data-format", "tokens-u16", "--threads", "1", "--timeout-ms", "20000",
            *map(str, extra)]


def assert_same_params(got, ref):
    assert got.keys() == ref.keys() and ref
    for name, value in ref.items():
        assert np.array_equal(got[name], value), name


def wait_for(path, pattern, proc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(path) and re.search(pattern, open(path, errors="replace").read(), re.M):
            return True
        time.sleep(0.005)
    return False


def launch_with_drops(job, data, steps, drops, logs, *extra):
    """Runs the launcher; at each (iteration, rank a, rank b) of `drops` (when rank a's log shows
    that iteration done) aborts the link a-b. Returns (process, stdout, stderr, pids seen at each
    drop)."""
    proc = subprocess.Popen([STRAIT_RUN, *args(job, data, steps, "--log-dir", logs, *extra)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = {}
    reader = threading.Thread(target=lambda: out.update(zip(("out", "err"), proc.communicate())))
    reader.start()
    seen = []
    for it, a, b in drops:
        assert wait_for(logs / f"rank{a}.log", rf"^rank {a} iteration {it}/", proc), \
            f"rank {a} did not reach iteration {it}"
        pids = worker_pids(job)
        assert drop_link(pids, a, b) >= 1, f"no connection between ranks {a} and {b}"
        seen.append(pids)
    reader.join(timeout=300)
    return proc, out["out"], out["err"], seen


def check_recovered(logs, stderr, seen, drops, world):
    assert "restarting" not in stderr, stderr[-2000:]
    assert not list(logs.glob("*.restart*.log"))
    assert all(pids == seen[0] and len(pids) == world for pids in seen), seen
    text = {r: (logs / f"rank{r}.log").read_text() for r in range(world)}
    for epoch, (it, a, b) in enumerate(drops):
        # The broken link is named (a rank at either end reports its peer), and every rank
        # resumes at the step the drop interrupted (after `it`: the drop lands while the job
        # runs on).
        ends = [rf"rank {a} .*peer {b}: link failure", rf"rank {b} .*peer {a}: link failure"]
        assert any(re.search(e, text[r]) for e in ends for r in (a, b)), text[a][-3000:]
        for r in range(world):
            m = re.search(rf"rank {r}: recovery epoch {epoch}: every rank resumes at step (\d+)",
                          text[r])
            assert m and int(m.group(1)) >= it, text[r][-3000:]
            assert re.search(rf"rank {r}: reconnected \(epoch {epoch + 1}\)", text[r])


@pytest.mark.parametrize("name", ["pipe", "f1b"])
def test_training_survives_dropped_links(jobs, tmp_path, name):
    """README layout (GPipe) and 1F1B with int8: a pipeline link, then a data-parallel one."""
    d, data, _ = jobs
    job = d / name
    steps = 30
    run([STRAIT_RUN, *args(job, data, steps, "--save-params", tmp_path / "ref",
                           "--log-dir", tmp_path / "ref-logs")])
    drops = [(4, 0, 2), (14, 1, 0)]  # stage 0 -> stage 1 of replica 0; the replicas of stage 0
    logs = tmp_path / "logs"
    proc, out, err, seen = launch_with_drops(job, data, steps, drops, logs,
                                             "--save-params", tmp_path / "got")
    assert proc.returncode == 0, out[-2000:] + err[-3000:]
    check_recovered(logs, err, seen, drops, 4)
    assert_same_params(saved_params(tmp_path / "got"), saved_params(tmp_path / "ref"))


def redis_server():
    """A private redis-server; (its rendezvous URL, the process)."""
    port = 21000 + os.getpid() % 20000
    server = subprocess.Popen(["redis-server", "--port", str(port), "--save", "",
                               "--appendonly", "no", "--bind", "127.0.0.1"],
                              stdout=subprocess.DEVNULL)
    time.sleep(0.3)
    return f"redis://127.0.0.1:{port}", server


@pytest.mark.parametrize("store", ["file", "redis"])
def test_sealed_ranks_started_one_by_one(jobs, tmp_path, store):
    """Two ranks started on their own (as on two machines: no launcher), sealed links: the
    rendezvous store carries the protocol."""
    d, data, key = jobs
    job, server, where = d / "dp", None, []
    if store == "redis":
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server unavailable")
        url, server = redis_server()
        where = ["--rendezvous", url]
    try:
        steps = 14
        run([STRAIT_RUN, *args(job, data, steps, "--save-params", tmp_path / "ref",
                               "--link-secret", key, "--log-dir", tmp_path / "ref-logs", *where)])
        logs = [tmp_path / f"rank{r}.out" for r in range(2)]
        procs = [subprocess.Popen([STRAIT_RUN, *args(job, data, steps, "--rank", r, "--run-id",
                                                     f"flaky-{store}-{os.getpid()}",
                                                     "--link-secret", key,
                                                     "--save-params", tmp_path / "got",
                                                     *where)],
                                  stdout=open(logs[r], "w"), stderr=subprocess.STDOUT)
                 for r in range(2)]
        assert wait_for(logs[0], r"^rank 0 iteration 5/", procs[0])
        pids = {r: p.pid for r, p in enumerate(procs)}
        assert drop_link(pids, 0, 1) >= 1
        for p in procs:
            assert p.wait(timeout=120) == 0, [l.read_text()[-3000:] for l in logs]
        for r in range(2):
            text = logs[r].read_text()
            m = re.search(rf"rank {r}: recovery epoch 0: every rank resumes at step (\d+)", text)
            assert m and int(m.group(1)) >= 5, text[-3000:]
            assert f"rank {r} done" in text
        assert any(re.search(rf"rank {r} .*peer {1 - r}: link failure", logs[r].read_text())
                   for r in range(2))
        assert_same_params(saved_params(tmp_path / "got"), saved_params(tmp_path / "ref"))
    finally:
        if server:
            server.terminate()
            server.wait(timeout=30)


@contextlib.contextmanager
def private_network():
    """A network namespace of its own (loopback only), deleted at the end: its TCP connections
    are this test's alone."""
    name = f"strait-flaky-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_beyond_the_retry_budget(jobs, tmp_path):
    """A link that stays down (the loopback of a network namespace of the job's own, its
    connections aborted): after --link-retries recoveries in a row the job fails with a clear
    message, and with --max-restarts the launcher restarts it from the checkpoint; it still ends
    bit-identical."""
    if wan_unavailable():
        pytest.skip(wan_unavailable())
    d, data, _ = jobs
    job = d / "slow"
    steps = 8
    run([STRAIT_RUN, *args(job, data, steps, "--save-params", tmp_path / "ref",
                           "--log-dir", tmp_path / "ref-logs")])
    with private_network() as ns:
        # (Without --max-restarts the job fails there: rank R failed (exit code 3), its
        # message in the log; the restarted run shows both.)
        for restarts in (1,):
            logs = tmp_path / f"logs{restarts}"
            extra = ["--link-retries", 1, "--link-retry-wait", 0, "--log-dir", logs,
                     "--timeout-ms", 2000,
                     "--save-params", tmp_path / f"got{restarts}"]
            if restarts:
                extra += ["--checkpoint", tmp_path / "ck", "--checkpoint-every", 2,
                          "--max-restarts", 1]
            proc = subprocess.Popen(["ip", "netns", "exec", ns, STRAIT_RUN,
                                     *args(job, data, steps, *extra)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert wait_for(logs / "rank0.log", r"^rank 0 iteration 3/", proc)
            # The link goes down (loopback of the namespace) and its connections break: every
            # reconnection fails, until a rank gives up; then the link comes back.
            netns = ["ip", "netns", "exec", ns]
            subprocess.run(netns + ["ip", "link", "set", "lo", "down"], check=True)
            subprocess.run(netns + ["ss", "-K", "-tn", "state", "established"], check=True,
                           capture_output=True)
            deadline = time.time() + 60
            while time.time() < deadline and proc.poll() is None and not any(
                    "giving up" in (logs / f"rank{r}.log").read_text() for r in range(4)):
                time.sleep(0.01)
            subprocess.run(netns + ["ip", "link", "set", "lo", "up"], check=True)
            out, err = proc.communicate(timeout=300)
            text = "".join((logs / f"rank{r}.log").read_text() for r in range(4))
            assert re.search(r"recoveries in a row, more than --link-retries 1; giving up",
                             text), text[-3000:]
            assert proc.returncode == 0, err[-3000:]
            assert re.search(r"rank \d failed \(exit code 3\)", err), err[-2000:]
            assert "link failure" in err and "restarting every rank from" in err
            assert_same_params(saved_params(tmp_path / "got1"), saved_params(tmp_path / "ref"))


def test_an_error_of_the_data_is_not_retried(jobs, tmp_path):
    """Another link secret on one rank: the first buffer does not authenticate. That is not a
    broken link: no recovery, both ranks fail promptly."""
    d, data, key = jobs
    other = tmp_path / "other.key"
    run([STRAIT_RUN, "--make-link-secret", str(other)])
    start = time.monotonic()
    procs = [subprocess.Popen([STRAIT_RUN, *args(d / "dp", data, 3, "--rank", r, "--run-id",
                                                 f"flaky-secret-{os.getpid()}", "--link-secret",
                                                 key if r == 0 else other, "--timeout-ms", 8000)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode != 0 for p in procs), outs
    assert time.monotonic() - start < 40
    assert any("authentication failed" in o for o in outs), outs
    # The rank whose peer failed sees a broken link, but learns why and does not replay.
    assert not any("resumes at step" in o for o in outs), outs
