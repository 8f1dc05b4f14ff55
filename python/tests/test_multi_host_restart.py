"""Restarts across machines, and an authenticated Redis store.

`strait-run DIR --host NAME --max-restarts N`: one launcher per machine, and a rank that dies on
one machine restarts every machine's ranks from the newest checkpoint they all find complete, the
launchers agreeing through the rendezvous store (runtime/tools/strait-run/HostRestart.h). Here the
two "machines" are two launchers on this one (hosts alpha and beta of a 2-stage x 2-replica
gpt2-tiny job) and the store is a private redis-server with a password (--requirepass), which the
launchers and ranks get from $STRAIT_REDIS_PASSWORD (or, with a warning, from the URL).

Checked against the job run by one launcher without interruption: the restarted job's final
parameters are equal bit for bit. Also: a failure that repeats exhausts --max-restarts and both
launchers exit 1 naming the rank, its host and the exit code; a launcher whose peer machine never
comes gives up after --timeout-ms naming the host; a wrong or missing password fails before any
rank starts, naming the store and "authentication".
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time

import numpy as np
import pytest

from jobutil import (GPT2_TINY, STRAIT_RUN, STRAITC, cpu_cluster, needs_gpt2_tiny, run,
                     saved_params, write_tokens)

pytestmark = [needs_gpt2_tiny(),
              pytest.mark.skipif(shutil.which("redis-server") is None,
                                 reason="needs redis-server")]

CLUSTER = cpu_cluster("two-machines",
                      [("d0", "alpha", "east"), ("d1", "alpha", "east"),
                       ("d2", "beta", "west"), ("d3", "beta", "west")],
                      "  intra_host: {bandwidth_gbps: 10, latency_us: 20}\n"
                      "  hosts:\n    - {between: [alpha, beta], bandwidth_mbps: 1, "
                      "latency_ms: 1}\n")  # far below loopback: --replan always sees it
# Room for a re-plan: with --host its stop step comes up to 48 steps (half a second of steps) after
# the decision (kStopNoticeMs, Replan.h).
STEPS = 64
PASSWORD = "s3cret-for-tests"


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("mhrestart")
    (d / "cluster.yaml").write_text(CLUSTER)
    run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=4x32", "--loss", "cross-entropy",
         "--optimizer", "adamw", "--cluster", str(d / "cluster.yaml"), "--global-batch", "8",
         "--num-stages", "2", "-o", str(d / "job")])
    data = write_tokens(d / "tokens.bin", seed=5, n=1 << 13)
    return d / "job", data


@pytest.fixture(scope="module")
def redis_url():
    """A redis-server on a free loopback port that requires PASSWORD; stopped at the end."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no", "--requirepass", PASSWORD],
                              stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):  # until it accepts connections
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def env(password=PASSWORD):
    e = dict(os.environ)
    e.pop("STRAIT_REDIS_PASSWORD", None)
    if password is not None:
        e["STRAIT_REDIS_PASSWORD"] = password
    return e


def common(data, tmp, host):
    return ["--steps", STEPS, "--lr", "0.003", "--data", data, "--threads", "1",
            "--save-params", tmp / "params", "--log-dir", tmp / f"logs-{host}"]


def launch(job, *args, password=PASSWORD):
    return subprocess.Popen([STRAIT_RUN, str(job), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env(password))


def host_args(host, run_id, url, ck):
    return ["--host", host, "--run-id", run_id, "--rendezvous", url, "--checkpoint", ck,
            "--max-restarts", 1]


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def worker_pids(job, rank):
    """Pids of the strait-run workers of `job` started with --rank `rank` (from /proc)."""
    pids = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = [a.decode(errors="replace") for a in f.read().split(b"\0")]
        except OSError:
            continue
        if str(job) in args and "--rank" in args and args[args.index("--rank") + 1] == str(rank):
            pids.append(int(entry))
    return pids


@pytest.fixture(scope="module")
def reference(job, tmp_path_factory):
    """The job by one launcher, uninterrupted."""
    plan, data = job
    out = tmp_path_factory.mktemp("ref")
    run([STRAIT_RUN, str(plan), *map(str, common(data, out, "all"))])
    return saved_params(out / "params")


def block_at_step_4(ck):
    """Nothing runs past step 4, however this process is scheduled: the step-4 index of every
    rank is a FIFO (a writer's open blocks until a reader comes, and every rank waits in the
    checkpoint's barrier). Returns the FIFOs, to unlink."""
    fifos = []
    for r in range(4):
        (ck / "step-4" / f"rank{r}").mkdir(parents=True)
        fifos.append(ck / "step-4" / f"rank{r}" / "index.tsv.tmp")
        os.mkfifo(fifos[-1])
    return fifos


def start_blocked(plan, data, tmp_path, redis_url, run_id):
    """Both hosts' launchers, once the step-2 checkpoint is complete (the job then waits at
    step 4)."""
    ck = tmp_path / "ck"  # one folder both "machines" reach (a shared file system)
    fifos = block_at_step_4(ck)
    procs = {h: launch(plan, *host_args(h, run_id, redis_url, ck), "--checkpoint-every", 2,
                       "--timeout-ms", 20000, *common(data, tmp_path, h))
             for h in ("alpha", "beta")}
    deadline = time.time() + 120
    while time.time() < deadline and all(p.poll() is None for p in procs.values()):
        if (ck / "step-2" / "checkpoint.json").exists():
            break
        time.sleep(0.01)
    return ck, fifos, procs


def test_a_rank_killed_on_one_host_restarts_both(job, reference, redis_url, tmp_path):
    plan, data = job
    # The FIFOs go once rank 2 is dead, before the restarted ranks (from step 2) write step 4.
    ck, fifos, procs = start_blocked(plan, data, tmp_path, redis_url, "mhr-kill")
    pids = worker_pids(plan, 2)  # rank 2: on beta
    assert all(p.poll() is None for p in procs.values()) and pids, "the job ended too soon"
    for p in pids:
        os.kill(p, signal.SIGKILL)
    for f in fifos:
        f.unlink()
    outs = {h: p.communicate(timeout=240) for h, p in procs.items()}
    for h, p in procs.items():
        assert p.returncode == 0, f"{h}: exit {p.returncode}\n{outs[h][1][-3000:]}"
    assert re.search(r"rank 2 failed \(exit code 137\)", outs["beta"][1]), outs["beta"][1]
    # alpha stopped its healthy ranks on beta's word, through the store.
    assert re.search(r"rank 2 on host beta failed \(exit code 137\) \(the store says\); "
                     r"stopping the ranks of host alpha", outs["alpha"][1]), outs["alpha"][1]
    for h in ("alpha", "beta"):
        m = re.search(rf"restarting the ranks of host {h} from (\S+) \(step (\d+), the newest "
                      r"checkpoint every host finds complete\), restart 1 of 1", outs[h][1])
        assert m and m.group(2) == "2", outs[h][1][-2000:]
        assert m.group(1) == str(ck / "step-2")
    assert (tmp_path / "logs-beta" / "rank2.restart1.log").exists()
    assert (tmp_path / "logs-alpha" / "rank0.restart1.log").exists()
    got = saved_params(tmp_path / "params")
    assert got.keys() == reference.keys()
    for name, ref in reference.items():
        np.testing.assert_array_equal(got[name], ref, err_msg=name)


def test_an_interrupted_launcher_stops_the_other_host_at_once(job, redis_url, tmp_path):
    """Ctrl-C on alpha: alpha stops its ranks and exits 130; beta stops its ranks and exits 1
    naming alpha, without waiting out --timeout-ms (20 s) for it."""
    plan, data = job
    ck, fifos, procs = start_blocked(plan, data, tmp_path, redis_url, "mhr-int")
    assert all(p.poll() is None for p in procs.values()), "the job ended too soon"
    start = time.time()
    procs["alpha"].send_signal(signal.SIGINT)
    outs = {h: p.communicate(timeout=120) for h, p in procs.items()}
    for f in fifos:
        f.unlink()
    assert procs["alpha"].returncode == 130, outs["alpha"][1][-2000:]
    err = outs["beta"][1]
    assert procs["beta"].returncode == 1, err[-2000:]
    assert "the launcher of host alpha was interrupted" in err, err[-2000:]
    assert re.search(r"the launcher of host alpha stopped \(the launcher of host alpha was "
                     r"interrupted\); giving up", err), err[-2000:]
    assert time.time() - start < 15, err[-2000:]


@pytest.mark.parametrize("store", ["redis", "file"])
def test_a_failure_that_repeats_exhausts_the_restarts_on_both_hosts(job, redis_url, tmp_path,
                                                                     store):
    """beta's ranks fail at every start (their data file is missing): after one restart both
    launchers give up naming the rank, its host and the exit code. Over Redis alpha gives its
    password in the URL: it works, with a warning; a shared folder works as the store too."""
    plan, data = job
    ck = tmp_path / "ck"
    if store == "redis":
        url = {"alpha": redis_url.replace("redis://", f"redis://:{PASSWORD}@"),
               "beta": redis_url}
    else:
        url = dict.fromkeys(("alpha", "beta"), f"file://{tmp_path / 'store'}")
    procs = {"alpha": launch(plan, *host_args("alpha", "mhr-exhaust", url["alpha"], ck),
                             "--timeout-ms", 20000, *common(data, tmp_path, "alpha"),
                             password=None),
             "beta": launch(plan, *host_args("beta", "mhr-exhaust", url["beta"], ck),
                            "--timeout-ms", 20000,
                            *common(tmp_path / "missing.bin", tmp_path, "beta"))}
    if store == "redis":  # the launcher hides the password from ps; its ranks never see it
        deadline = time.time() + 10
        while time.time() < deadline and procs["alpha"].poll() is None:
            # Until the launcher's own command line reads without the password (an empty read,
            # as right after the exec, is not that: the fresh-clone CI broke out on one once).
            own = cmdline(procs["alpha"].pid)
            if b"--host" in own and PASSWORD.encode() not in own:
                break
            time.sleep(0.01)
        shown = [pid for pid in filter(str.isdigit, os.listdir("/proc"))
                 if PASSWORD.encode() in cmdline(pid)]
        assert not shown, [cmdline(pid) for pid in shown]
    outs = {h: p.communicate(timeout=120) for h, p in procs.items()}
    if store == "redis":
        assert "the Redis password in --rendezvous is visible" in outs["alpha"][1]
    for h, p in procs.items():
        err = outs[h][1]
        assert p.returncode == 1, f"{h}: exit {p.returncode}\n{err[-3000:]}"
        assert "restart 1 of 1" in err, err[-2000:]
        assert re.search(r"giving up after 1 restart\(s\) \(--max-restarts 1\): rank [23] on "
                         r"host beta failed \(exit code 1\)", err), err[-2000:]
        assert "authentication" not in err
    assert (tmp_path / "logs-beta" / "rank2.restart1.log").exists()


def test_a_host_that_never_comes_times_out(job, redis_url, tmp_path):
    """alpha alone: its ranks time out waiting for beta's, and alpha does not wait for beta's
    launcher longer than --timeout-ms either."""
    plan, data = job
    start = time.time()
    p = launch(plan, *host_args("alpha", "mhr-alone", redis_url, tmp_path / "ck"),
               "--timeout-ms", 2000, *common(data, tmp_path, "alpha"))
    out, err = p.communicate(timeout=120)
    assert p.returncode == 1, err[-3000:]
    assert re.search(r"host\(s\) beta did not answer in redis store 127\.0\.0\.1:\d+ within "
                     r"2000 ms", err), err[-2000:]
    assert time.time() - start < 60


@pytest.mark.parametrize("password, why", [
    ("wrong", r"authentication failed \(WRONGPASS"),
    (None, r"the store requires authentication \(NOAUTH"),
])
def test_a_bad_password_fails_before_any_rank_starts(job, redis_url, tmp_path, password, why):
    plan, data = job
    p = launch(plan, "--host", "alpha", "--run-id", "mhr-auth", "--rendezvous", redis_url,
               *common(data, tmp_path, "alpha"), password=password)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 2, err
    port = redis_url.rsplit(":", 1)[1]
    assert re.search(rf"cannot open redis store 127\.0\.0\.1:{port}: {why}", err), err
    assert "pid" not in out  # no rank was started
    assert PASSWORD not in err and PASSWORD not in out


def test_replan_across_hosts(job, reference, redis_url, tmp_path):
    """--replan auto with --host: alpha (rank 0's host) times its ranks' links to beta's, finds
    them far faster than the 1 Mbit/s the plan assumed, re-plans, and publishes the switch in the
    store; beta's launcher passes the stop step on to its ranks, every rank checkpoints there and
    both launchers resume under the new plan. The planning itself is test_replan.py's: here a
    stand-in straitc (--straitc) writes the same plan with a lower predicted step time, so that
    the switch always happens and the job must end with the uninterrupted run's parameters, bit
    for bit."""
    plan, data = job
    # A job folder both "machines" reach (a shared file system): a copy, since the re-plan writes
    # into it.
    shared = tmp_path / "job"
    shutil.copytree(plan, shared, ignore=shutil.ignore_patterns("logs", "rendezvous"))
    fake = tmp_path / "straitc"
    fake.write_text(f"""#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
cp {plan}/*.pb {plan}/plan.json {plan}/cluster.yaml "$out"/
sed 's/"predicted_iteration_s": [0-9.e+-]*/"evaluated_plan_iteration_s": 1.0, "predicted_iteration_s": 1e-06/' \\
    {plan}/straitc.json > "$out"/straitc.json
""")
    fake.chmod(0o755)
    procs = {h: launch(shared, "--host", h, "--run-id", "mhr-replan", "--rendezvous", redis_url,
                       "--replan", "auto", "--replan-window", 2, "--replan-after", 1,
                       "--straitc", fake, "--timeout-ms", 20000, *common(data, tmp_path, h))
             for h in ("alpha", "beta")}
    outs = {h: p.communicate(timeout=240) for h, p in procs.items()}
    for h, p in procs.items():
        assert p.returncode == 0, f"{h}: exit {p.returncode}\n{outs[h][0][-3000:]}\n{outs[h][1][-3000:]}"
    m = re.search(r"re-plan 1: switching; every rank checkpoints after step (\d+) and resumes "
                  r"under (\S+)", outs["alpha"][0])
    assert m, outs["alpha"][0][-3000:]
    step, new = m.group(1), m.group(2)
    assert new == str(shared / "replan-1")
    # The calibration is the stand-in's re-simulated step of the running plan.
    print("".join(x for x in outs["alpha"][0].splitlines(True) if "re-plan" in x))
    assert "the current plan's 1 s re-simulated on the measured links" in outs["alpha"][0]
    assert re.search(rf"re-plan \(host alpha's launcher\): every rank checkpoints after step "
                     rf"{step} and resumes under replan-1", outs["beta"][0]), outs["beta"][0]
    for h in ("alpha", "beta"):
        assert f"re-planned: resuming 4 rank(s) from {shared}/replan-checkpoints/step-{step} " \
               f"under {new}" in outs[h][0], outs[h][0][-2000:]
    assert (tmp_path / "logs-beta" / "rank3.restart1.log").exists()
    got = saved_params(tmp_path / "params")
    assert got.keys() == reference.keys()
    for name, ref in reference.items():
        np.testing.assert_array_equal(got[name], ref, err_msg=name)
