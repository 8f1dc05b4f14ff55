"""One launcher per machine: `strait-run DIR --host NAME --run-id ID --rendezvous URL`.

A job across machines starts, on each machine, only the ranks the plan puts on that machine's
host (the cluster file's host names), and the ranks meet through a store every machine reaches:
a redis-server (`redis://HOST:PORT`) or a shared folder. Here the "machines" are two launchers
on this one, for the two hosts of a 2-stage x 2-replica job; each must give the same losses and
final parameters as the one launcher that starts every rank, bit for bit. Mistakes (a host the
plan does not have, a missing run id, a malformed rendezvous URL, a store that is not there)
stop the launcher before any rank starts, or the rank, with exit code 2 or 3 and a message that
names what is wrong, instead of hanging.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time

import numpy as np
import pytest

from jobutil import (GPT2_TINY, STRAIT_RUN, STRAITC, cpu_cluster, needs_gpt2_tiny, run,
                     saved_params, write_tokens)

pytestmark = needs_gpt2_tiny()

CLUSTER = cpu_cluster("two-machines",
                      [("d0", "alpha", "east"), ("d1", "alpha", "east"),
                       ("d2", "beta", "west"), ("d3", "beta", "west")],
                      "  intra_host: {bandwidth_gbps: 10, latency_us: 20}\n"
                      "  hosts:\n    - {between: [alpha, beta], bandwidth_mbps: 100, "
                      "latency_ms: 1}\n")
STEPS = 4


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("multihost")
    (d / "cluster.yaml").write_text(CLUSTER)
    run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=4x32", "--loss", "cross-entropy",
         "--optimizer", "adamw", "--cluster", str(d / "cluster.yaml"), "--global-batch", "8",
         "--num-stages", "2", "-o", str(d / "job")])
    data = write_tokens(d / "tokens.bin", seed=11, n=1 << 14)
    return d, d / "job", data


def common(data, out, logs):
    return ["--steps", str(STEPS), "--lr", "0.003", "--data", str(data), "--threads", "1",
            "--timeout-ms", "30000", "--save-params", str(out), "--log-dir", str(logs)]


def losses(stdout):
    return re.findall(rf"^step \d+/{STEPS} loss (\S+)", stdout, re.M)


def launch(job, *args, cwd=None):
    return subprocess.Popen([os.path.abspath(STRAIT_RUN), str(job), *map(str, args)],
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd)


def two_launchers(job, data, tmp, rendezvous, run_id, cwd=None):
    """Runs the hosts' launchers at once (in `cwd`); returns beta's losses (the last stage's
    host) and the parameters both saved."""
    procs = {h: launch(job, "--host", h, "--run-id", run_id, "--rendezvous", rendezvous,
                       *common(data, tmp / "params", tmp / f"logs-{h}"), cwd=cwd)
             for h in ("alpha", "beta")}
    outs = {h: p.communicate(timeout=300) for h, p in procs.items()}
    for h, p in procs.items():
        assert p.returncode == 0, f"{h}: exit {p.returncode}\n{outs[h][0][-2000:]}\n{outs[h][1][-3000:]}"
    # Each launcher started only its host's ranks.
    assert re.findall(r"strait-run: rank (\d+) pid", outs["alpha"][0]) == ["0", "1"]
    assert re.findall(r"strait-run: rank (\d+) pid", outs["beta"][0]) == ["2", "3"]
    return losses(outs["beta"][0]), saved_params(tmp / "params")


@pytest.fixture(scope="module")
def reference(job, tmp_path_factory):
    d, plan, data = job
    out = tmp_path_factory.mktemp("ref")
    p = run([STRAIT_RUN, str(plan), *common(data, out / "params", out / "logs")])
    found = losses(p.stdout)
    assert len(found) == STEPS
    return found, saved_params(out / "params")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_same(got, ref):
    assert got[0] == ref[0]
    assert sorted(got[1]) == sorted(ref[1])
    for name in ref[1]:
        np.testing.assert_array_equal(got[1][name], ref[1][name], err_msg=name)


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_one_launcher_per_host_over_redis(job, reference, tmp_path):
    d, plan, data = job
    port = free_port()
    store = plan / "rendezvous"
    before = set(os.listdir(store)) if store.exists() else set()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--save", "",
                               "--appendonly", "no", "--bind", "127.0.0.1"],
                              stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):  # until the server accepts connections
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        got = two_launchers(plan, data, tmp_path, f"redis://127.0.0.1:{port}", "mh-redis")
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert_same(got, reference)
    # The job folder's file store was not used.
    assert (set(os.listdir(store)) if store.exists() else set()) == before


def test_one_launcher_per_host_over_a_shared_folder(job, reference, tmp_path):
    d, plan, data = job
    store = tmp_path / "shared-store"
    got = two_launchers(plan, data, tmp_path, f"file://{store}", "mh-file")
    assert_same(got, reference)
    assert any(store.iterdir()), "the ranks did not meet in the shared folder"
    # The job ended, its keys stay in the store: the same run id again is refused before any
    # rank starts (its ranks would meet the old run's addresses).
    p = launch(plan, "--host", "alpha", "--run-id", "mh-file", "--rendezvous", f"file://{store}",
               *common(data, tmp_path / "again", tmp_path / "logs-again"))
    out, err = p.communicate(timeout=60)
    assert p.returncode == 2, err
    assert re.search(r"strait-run: --host alpha: run id mh-file was already used on this store "
                     r"\(host alpha started it at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\); pick a "
                     r"new --run-id", err), err
    assert " pid " not in out, out


def test_a_relative_store_folder_is_the_working_directorys(job, reference, tmp_path):
    """`--rendezvous store` names a folder of the launchers' working directory, as every other
    path flag does; the ranks (which run elsewhere) meet there, not in a folder of that name
    under the job's."""
    d, plan, data = job
    work = tmp_path / "work"
    work.mkdir()
    got = two_launchers(plan, data, tmp_path, "store", "mh-relative", cwd=work)
    assert_same(got, reference)
    assert any((work / "store").iterdir()), "the ranks did not meet in ./store"
    assert not (plan / "store").exists()


def test_a_second_launcher_of_a_host_is_refused_and_the_run_goes_on(job, reference, tmp_path):
    """alpha's launcher starts; a second one for alpha with the same run id exits 2 at once
    without starting a rank; beta's, with the same run id, joins and the job is the reference."""
    d, plan, data = job
    store = f"file://{tmp_path / 'shared-store'}"
    args = lambda h, out: ["--host", h, "--run-id", "mh-twice", "--rendezvous", store,
                           *common(data, tmp_path / out, tmp_path / f"logs-{out}")]
    alpha = launch(plan, *args("alpha", "params"))
    try:
        deadline = time.time() + 30  # until alpha claimed the run id and started rank 0
        while time.time() < deadline and alpha.poll() is None and not (
                tmp_path / "logs-params" / "rank0.log").exists():
            time.sleep(0.02)
        assert alpha.poll() is None and (tmp_path / "logs-params" / "rank0.log").exists()
        start = time.time()
        second = launch(plan, *args("alpha", "second"))
        out, err = second.communicate(timeout=60)
        assert second.returncode == 2, err
        assert "run id mh-twice was already used on this store (host alpha started it at " in err
        assert " pid " not in out, out
        assert time.time() - start < 10
        beta = launch(plan, *args("beta", "params"))
        outs = {"alpha": alpha.communicate(timeout=300), "beta": beta.communicate(timeout=300)}
    finally:
        if alpha.poll() is None:
            alpha.kill()
    for h, p in (("alpha", alpha), ("beta", beta)):
        assert p.returncode == 0, f"{h}: exit {p.returncode}\n{outs[h][1][-3000:]}"
    assert_same((losses(outs["beta"][0]), saved_params(tmp_path / "params")), reference)


@pytest.mark.parametrize("args, expect", [
    (["--host", "gamma", "--run-id", "x"], r"--host gamma: no rank of the plan is on it \(a "
                                           r"host the running job leaves out joins it with "
                                           r"--join\) \(the plan's hosts: alpha, beta\)"),
    (["--host", "alpha"], r"--host alpha: --run-id ID is required"),
    (["--rendezvous", "redis://127.0.0.1:99999"], r"--rendezvous: rendezvous "
                                                  r"'redis://127.0.0.1:99999': the port '99999' "
                                                  r"is not a number from 1 to 65535"),
    (["--rendezvous", "redis://:6379"], r"'redis://:6379': no host"),
    (["--rendezvous", "ftp://somewhere/x"], r"unknown scheme 'ftp'"),
])
def test_launcher_refuses_before_starting_ranks(job, tmp_path, args, expect):
    d, plan, data = job
    p = subprocess.run([STRAIT_RUN, str(plan), *args, "--steps", "1", "--data", str(data),
                        "--log-dir", str(tmp_path / "logs")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    assert re.search(expect, p.stderr), p.stderr
    assert "pid" not in p.stdout  # no rank was started


def test_unreachable_redis_fails_the_rank_clearly(job, tmp_path):
    """A worker whose store does not answer stops with the store named (no hang past its
    timeout)."""
    d, plan, data = job
    port = free_port()  # nothing listens there
    p = subprocess.run([STRAIT_RUN, str(plan), "--rank", "0", "--run-id", "mh-down",
                        "--rendezvous", f"redis://127.0.0.1:{port}", "--steps", "1",
                        "--data", str(data), "--timeout-ms", "5000"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode in (1, 3), p.stdout + p.stderr
    assert f"127.0.0.1:{port}" in p.stderr, p.stderr
