"""Hosts that join a running job: `strait-run DIR --host C --run-id ID --rendezvous URL --join`
(docs/runtime.md, "A host joins"; runtime/tools/strait-run/HostJoin.h).

One launcher per "machine" (hosts a, b, c of a cluster file, one CPU device each; gpt2-tiny in
data-parallel replicas, global batch 12), meeting in a shared-folder store, a checkpoint every
step, the running launchers started with --on-host-join replan:

  - a standby host: the cluster file excludes c (`exclude_hosts: [c]`), so the job runs on a and b
    (2 replicas x 3 micro-batches); once it runs, c's launcher starts with --join. a's launcher
    (rank 0's host) re-plans with `include_hosts: [c]` (3 replicas x 2 micro-batches, the global
    batch kept), every rank checkpoints at the stop step and all three launchers resume under
    DIR/host-join-1. The checkpoint of the switch is the uninterrupted 2-host run's at that step,
    bit for bit, and the final parameters are those of the new plan resumed by hand from it;
    the loss goes on from where it was and falls;
  - a lost host comes back: c's launcher and rank are SIGKILLed mid-run (a dead machine); a and b
    go on without it (--on-host-loss replan); a plain restart of c's launcher is refused (the run
    id is used), one with --join is taken in, and the job ends on three hosts again;
  - a joiner that dies before the switch: the others stop at the switch's step, wait
    --timeout-ms for it, and go on under their running plan from the same checkpoint (the final
    parameters equal the uninterrupted 2-host run's, bit for bit);
  - a wrong run id, an unknown host, a plain start of a standby host and bad flags are clear errors.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

import jobutil
from jobutil import GPT2_TINY, STRAIT_RUN, STRAITC, cpu_cluster, write_tokens

pytestmark = jobutil.needs_gpt2_tiny()

LINKS = "  intra_site: {bandwidth_gbps: 10, latency_ms: 0.1}\n"
# The switch comes about half a second of steps (at most 48) after the deciding launcher sees c's
# announcement (kStopNoticeMs, Replan.h: time for the other launchers to tell their ranks). 96
# steps of gpt2-tiny (about 10 ms each here) leave steps after it.
STEPS = 96
TIMEOUT_MS = 5000


def compile_job(tmp, name, extra=""):
    cluster = tmp / f"{name}.yaml"
    cluster.write_text(cpu_cluster(name, [(f"d{h}", h, "s") for h in "abc"], LINKS) + extra)
    jobutil.run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=2x32", "--loss",
                 "cross-entropy", "--optimizer", "adamw", "--global-batch", "12",
                 "--num-stages", "1", "--cluster", str(cluster), "-o", str(tmp / name)])
    return tmp / name


def hosts_of(job):
    return [r["host"] for r in json.loads((job / "straitc.json").read_text())["ranks"]]


@pytest.fixture(scope="module")
def standby(tmp_path_factory):
    """The job on a and b, c excluded (a standby host), its data, and the uninterrupted run of
    it (one launcher): its parameters and its checkpoint of every step."""
    tmp = tmp_path_factory.mktemp("hostjoin")
    job = compile_job(tmp, "ab-c", "exclude_hosts: [c]\n")
    assert hosts_of(job) == ["a", "b"]
    data = write_tokens(tmp / "tokens.bin", seed=5, n=1 << 13)
    jobutil.run([STRAIT_RUN, str(job), "--steps", str(STEPS), "--lr", "0.003", "--data",
                 str(data), "--threads", "1", "--checkpoint", str(tmp / "ref-ck"),
                 "--checkpoint-every", "1", "--save-params", str(tmp / "ref-params"),
                 "--log-dir", str(tmp / "ref-logs")])
    return job, data, tmp


class Launcher:
    """One strait-run launcher (its own process group: one machine), its output read as it
    comes."""

    def __init__(self, args):
        self.p = subprocess.Popen([STRAIT_RUN, *map(str, args)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.out, self.err = [], []
        self.lock = threading.Lock()
        self.readers = [threading.Thread(target=self._read, args=(f, buf), daemon=True)
                        for f, buf in ((self.p.stdout, self.out), (self.p.stderr, self.err))]
        for r in self.readers:
            r.start()

    def _read(self, f, buf):
        for line in f:
            with self.lock:
                buf.append(line)

    def text(self):
        with self.lock:
            return "".join(self.out)

    def wait_for(self, pattern, timeout=90):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = re.search(pattern, self.text(), re.M)
            if m:
                return m
            if self.p.poll() is not None:
                time.sleep(0.2)  # the last lines
                m = re.search(pattern, self.text(), re.M)
                if m:
                    return m
                break
            time.sleep(0.02)
        raise AssertionError(f"no {pattern!r} (exit {self.p.poll()}):\n{self.text()[-3000:]}\n"
                             f"{''.join(self.err)[-3000:]}")

    def finish(self, timeout=120):
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.p.wait()
        for r in self.readers:
            r.join(timeout=10)
        return self.p.returncode, self.text(), "".join(self.err)

    def kill(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def launch(job, host, tmp, data, run_id, *flags):
    return Launcher([job, "--host", host, "--run-id", run_id, "--rendezvous", tmp / "store",
                     "--timeout-ms", TIMEOUT_MS, "--steps", STEPS, "--lr", "0.003", "--data",
                     data, "--threads", "1", "--checkpoint", tmp / "ck", "--checkpoint-every", 1,
                     "--save-params", tmp / "params", "--log-dir", tmp / f"logs-{host}",
                     "--link-retries", 0, "--straitc", STRAITC, *flags])


def finish_all(launchers):
    try:
        return {h: l.finish() for h, l in launchers.items()}
    finally:
        for l in launchers.values():
            l.kill()


def steps_of(out):
    """{step: loss} of the merged progress lines (the last line of a step wins)."""
    return {int(m[1]): float(m[2]) for m in re.finditer(r"^step (\d+)/\d+ loss (\S+)", out, re.M)}


def assert_same_files(a, b):
    names = sorted(n for n in os.listdir(a) if n.endswith(".npy"))
    assert names and names == sorted(n for n in os.listdir(b) if n.endswith(".npy"))
    for n in names:
        x, y = np.load(a / n), np.load(b / n)
        assert x.dtype == y.dtype and np.array_equal(x, y), n


def resume_by_hand(plan, checkpoint, data, out):
    """The documented way: the new plan resumed from the switch's checkpoint by one launcher."""
    jobutil.run([STRAIT_RUN, str(plan), "--steps", str(STEPS), "--lr", "0.003", "--data",
                 str(data), "--threads", "1", "--resume", str(checkpoint), "--save-params",
                 str(out / "by-hand-params"), "--log-dir", str(out / "by-hand-logs")])
    return out / "by-hand-params"


def test_standby_host_joins(standby, tmp_path):
    job, data, ref = standby
    flags = ["--on-host-join", "replan"]
    run = {h: launch(job, h, tmp_path, data, "join-standby", *flags) for h in "ab"}
    try:
        # The job runs (its ranks start): c joins early enough for steps to remain after the
        # switch, however fast they are.
        run["a"].wait_for(r"^strait-run: rank 0 pid ")
        run["c"] = launch(job, "c", tmp_path, data, "join-standby", *flags, "--join")
    finally:
        outs = finish_all(run)
    for h, (code, out, err) in outs.items():
        assert code == 0, f"{h}: exit {code}\n{out[-3000:]}\n{err[-3000:]}"
    a, b, c = (outs[h][1] for h in "abc")
    new = job / "host-join-1"
    assert re.search(r"host-join: host c's launcher announced itself \(join/c/1\) at step \d+", a)
    assert f"host-join-1: re-planning for 3 host(s) (a, b, c) with c: straitc into {new}" in a, a
    assert re.search(r"host-join-1: new plan \(straitc [\d.]+ s\): 3 rank\(s\), 1 stage x 3 "
                     r"replicas, 2 micro-batches, predicted step [\d.]+ ms \(the running plan: 2 "
                     r"rank\(s\), 1 stage x 2 replicas, 3 micro-batches, [\d.]+ ms\); global "
                     r"batch 12 \(unchanged\)", a), a
    m = re.search(r"host-join-1: switching; every rank checkpoints after step (\d+) and resumes "
                  rf"under {re.escape(str(new))} \(host c starts its ranks there\)", a)
    assert m, a
    stop = int(m[1])
    switch = tmp_path / "ck" / f"step-{stop}"
    assert hosts_of(new) == ["a", "b", "c"]
    assert (new / "with-joined-hosts.yaml").read_text().endswith("include_hosts: [c]\n")
    assert f"host-join (host a's launcher): every rank checkpoints after step {stop} and " \
           "resumes under host-join-1" in b, b
    for h, out in (("a", a), ("b", b), ("c", c)):
        assert f"host-join: resuming 1 of 3 rank(s) from {switch} under {new}" in out, (h, out)
    assert re.search(r"host-join: host c announced itself to run id join-standby \(file store "
                     r"\S+, join/c/1\); waiting for the deciding launcher", c), c
    assert re.search(r"host-join: host a's launcher saw it at step \d+; waiting for the new "
                     r"plan", c), c
    # c's rank ran exactly the steps after the switch; everyone's loss goes on and falls.
    seen_a, seen_c = steps_of(a), steps_of(c)
    assert sorted(seen_c) == list(range(stop + 1, STEPS + 1)), sorted(seen_c)
    assert set(range(1, STEPS + 1)) <= set(seen_a), sorted(seen_a)
    assert seen_c[stop + 1] < seen_a[1] - 0.5 * (seen_a[1] - seen_a[stop]), (seen_a, seen_c)
    assert np.mean([seen_c[s] for s in sorted(seen_c)[-3:]]) < seen_a[stop], seen_c
    # The switch's checkpoint is the uninterrupted 2-host run's at that step, bit for bit (the
    # replicas' state is written once, by rank 0) ...
    writers = sorted(d.name for d in (ref / "ref-ck" / f"step-{stop}").iterdir() if d.is_dir())
    assert writers and writers == sorted(d.name for d in switch.iterdir() if d.is_dir())
    for rank in (int(w[4:]) for w in writers):
        got = jobutil.checkpoint_values(switch, rank)
        want = jobutil.checkpoint_values(ref / "ref-ck" / f"step-{stop}", rank)
        assert got.keys() == want.keys() and got
        for name in want:
            assert np.array_equal(got[name], want[name]), (rank, name)
    # ... and the 3-host job went on from it exactly as the new plan resumed by hand does.
    assert_same_files(tmp_path / "params", resume_by_hand(new, switch, data, tmp_path))


def test_lost_host_rejoins(tmp_path):
    job = compile_job(tmp_path, "abc")
    assert hosts_of(job) == ["a", "b", "c"]
    data = write_tokens(tmp_path / "tokens.bin", seed=5, n=1 << 13)
    flags = ["--on-host-loss", "replan", "--on-host-join", "replan"]
    run = {h: launch(job, h, tmp_path, data, "join-back", *flags) for h in "abc"}
    try:
        run["a"].wait_for(r"^step 3/")
        run["c"].kill()  # c's machine is gone
        run["a"].wait_for(r"^strait-run: host-loss: resuming 1 of 2 rank\(s\)")
        # c comes back: a plain start of its launcher finds the run id used ...
        code, out, err = launch(job, "c", tmp_path, data, "join-back", *flags).finish(30)
        assert code == 2, out + err
        assert re.search(r"--host c: run id join-back was already used on this store \(host c "
                         r"started it at [^)]+\); pick a new --run-id, or add --join to bring "
                         r"host c back into the running job", err), err
        # ... and --join takes it back in.
        run["c"] = launch(job, "c", tmp_path, data, "join-back", *flags, "--join")
    finally:
        outs = finish_all(run)
    code, a, err = outs["a"]
    assert code == 0, a[-3000:] + err[-3000:]
    assert outs["b"][0] == 0, outs["b"][1][-3000:] + outs["b"][2][-3000:]
    code, c, err = outs["c"]
    assert code == 0, c[-3000:] + err[-3000:]
    assert re.search(r"host c lost: host\(s\) c did not answer in file store \S+ within 5000 ms",
                     a), a
    assert re.search(r"host-join-1: new plan \(straitc [\d.]+ s\): 3 rank\(s\), 1 stage x 3 "
                     r"replicas, 2 micro-batches, predicted step [\d.]+ ms \(the running plan: 2 "
                     r"rank\(s\), 1 stage x 2 replicas, 3 micro-batches, [\d.]+ ms\); global "
                     r"batch 12 \(unchanged\)", a), a
    new = job / "host-join-1"
    cluster = (new / "with-joined-hosts.yaml").read_text()
    assert cluster.index("exclude_hosts: [c]") < cluster.index("include_hosts: [c]"), cluster
    assert hosts_of(new) == ["a", "b", "c"]
    m = re.search(rf"host-join: resuming 1 of 3 rank\(s\) from (\S+/step-(\d+)) under "
                  rf"{re.escape(str(new))}$", c, re.M)
    assert m, c
    stop = int(m[2])
    assert sorted(steps_of(c)) == list(range(stop + 1, STEPS + 1)), c
    assert_same_files(tmp_path / "params", resume_by_hand(new, m[1], data, tmp_path))


def test_joiner_that_dies_before_the_switch(standby, tmp_path):
    job, data, ref = standby
    flags = ["--on-host-join", "replan"]
    run = {h: launch(job, h, tmp_path, data, "join-dies", *flags) for h in "ab"}
    try:
        run["a"].wait_for(r"^strait-run: rank 0 pid ")
        joiner = launch(job, "c", tmp_path, data, "join-dies", *flags, "--join")
        run["a"].wait_for(r"host c's launcher announced itself")
        joiner.kill()  # before it could confirm: the checkpoint of the switch is steps away
        joiner.finish()
    finally:
        outs = finish_all(run)
    for h, (code, out, err) in outs.items():
        assert code == 0, f"{h}: exit {code}\n{out[-3000:]}\n{err[-3000:]}"
        assert "host-join: the launcher of host c did not confirm within 5000 ms " \
               "(--timeout-ms); the job goes on under its running plan" in out, (h, out)
        m = re.search(rf"host-join: resuming 1 of 2 rank\(s\) from \S+/step-(\d+) under "
                      rf"{re.escape(str(job))}$", out, re.M)
        assert m, (h, out)
    # The job resumed its own plan from the switch's checkpoint: the uninterrupted run's result.
    assert_same_files(tmp_path / "params", ref / "ref-params")


def test_errors(standby, tmp_path):
    job, data, _ = standby

    def start(*args):
        p = subprocess.run([STRAIT_RUN, str(job), *map(str, args)], capture_output=True,
                           text=True, timeout=60)
        return p.returncode, p.stderr

    store = ["--rendezvous", tmp_path / "store", "--checkpoint", tmp_path / "ck"]
    code, err = start("--host", "c", "--join", "--run-id", "nope", *store)
    assert code == 2 and re.search(r"--host c --join: no launcher of run id nope is in file "
                                   r"store \S+ \(none of hosts a, b, c started it\): give the "
                                   r"running job's --run-id and --rendezvous", err), err
    code, err = start("--host", "zz", "--join", "--run-id", "nope", *store)
    assert code == 2 and (f"--host zz --join: no device of the job's cluster file "
                          f"({job}/cluster.yaml) is on host zz (its hosts: a, b, c)") in err, err
    code, err = start("--host", "c", "--run-id", "x", *store)
    assert code == 2 and ("--host c: no rank of the plan is on it (a host the running job "
                          "leaves out joins it with --join) (the plan's hosts: a, b)") in err, err
    for flags, message in ((["--join", "--run-id", "x", *store], "--join is the launcher's of "
                             "one machine (strait-run DIR --host NAME, without --rank) and "
                             "needs --checkpoint DIR"),
                           (["--on-host-join", "sometimes"], "--on-host-join takes replan or "
                                                             "refuse")):
        code, err = start(*flags)
        assert code == 2 and message in err, err
