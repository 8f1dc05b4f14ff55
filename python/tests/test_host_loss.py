"""strait-run --on-host-loss replan: a job goes on with the machines that are left when one is
lost for good (docs/runtime.md, "Losing a host"; runtime/tools/strait-run/HostLoss.h).

  - one launcher, a 3-host local cluster (one CPU device on each of hosts a, b, c; three
    data-parallel replicas), a checkpoint every step: host c's rank is SIGKILLed once step 3
    has merged and on every start after that (a wrapper around strait-run that the launcher
    starts its workers through). With --max-restarts 1, the first kill restarts every rank,
    the second leaves c without restarts: the launcher re-plans without c (straitc's recorded
    command on the cluster file with `exclude_hosts: [c]`: two replicas on a and b, the
    global batch kept by more micro-batches), resumes both remaining ranks from the newest
    checkpoint and finishes. The loss goes on from where it was and falls; the job's final
    parameters equal, bit for bit, those of the new plan resumed by hand from the same
    checkpoint (`strait-run host-loss-1 --resume step-S`, the documented way), i.e. the switch
    resumed exactly the checkpoint's state;
  - --min-hosts 3: the same loss ends the job, naming the hosts left and the floor;
  - two launchers (--host a, --host b) over a shared-folder store: b's launcher and its rank are
    SIGKILLed mid-run (a dead machine); a's launcher finds b silent past --timeout-ms, re-plans
    for a alone and finishes (again equal to the new plan resumed by hand);
  - bad flags and a job without straitc.json are clear errors.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading

import numpy as np
import pytest

import jobutil
from jobutil import GPT2_TINY, STRAIT_RUN, STRAITC, cpu_cluster, write_tokens

pytestmark = jobutil.needs_gpt2_tiny()

LINKS = "  intra_site: {bandwidth_gbps: 10, latency_ms: 0.1}\n"
STEPS = 10


def compile_job(tmp, name, hosts, batch):
    cluster = tmp / f"{name}.yaml"
    cluster.write_text(cpu_cluster(name, [(f"d{h}", h, "s") for h in hosts], LINKS))
    jobutil.run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=2x32", "--loss",
                 "cross-entropy", "--optimizer", "adamw", "--global-batch", str(batch),
                 "--num-stages", "1", "--cluster", str(cluster), "-o", str(tmp / name)])
    return tmp / name


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostloss")
    job = compile_job(tmp, "abc", ["a", "b", "c"], 12)
    assert [r["host"] for r in json.loads((job / "straitc.json").read_text())["ranks"]] == \
        ["a", "b", "c"]
    wrapper = tmp / "strait-run-wrapper"
    # The launcher starts its workers as its own argv[0]: the wrapper kills rank KILL_RANK of
    # KILL_JOB (host c's) at start once KILL_MARK exists.
    wrapper.write_text(
        "#!/bin/bash\n"
        'if [ "$1" = "$KILL_JOB" ] && [ "$2" = --rank ] && [ "$3" = "$KILL_RANK" ] && '
        '[ -e "$KILL_MARK" ]; then kill -9 $$; fi\n'
        f'exec -a "$0" {STRAIT_RUN} "$@"\n')
    wrapper.chmod(0o755)
    return tmp, job, wrapper, write_tokens(tmp / "tokens.bin", seed=5, n=1 << 13)


def losses(out):
    return {int(m[1]): float(m[2]) for m in re.finditer(r"^step (\d+)/\d+ loss (\S+)", out, re.M)}


def files_equal(a, b):
    names = sorted(os.listdir(a))
    assert names == sorted(os.listdir(b)) and names, (names, os.listdir(b))
    for n in names:
        if n.endswith(".npy"):
            x, y = np.load(a / n), np.load(b / n)
            assert x.dtype == y.dtype and np.array_equal(x, y), n


def common(data, ck, params, logs):
    return ["--steps", str(STEPS), "--lr", "0.003", "--data", str(data), "--threads", "1",
            "--checkpoint", str(ck), "--checkpoint-every", "1", "--save-params", str(params),
            "--log-dir", str(logs), "--link-retries", "0", "--straitc", STRAITC]


def run_losing_c(three, tag, flags, kill_after=3):
    """Runs the 3-host job through the wrapper, rank 2 (host c) killed once step `kill_after`
    merged and at every start after; returns (returncode, stdout, stderr)."""
    tmp, job, wrapper, data = three
    mark = tmp / f"{tag}.kill"
    env = dict(os.environ, KILL_JOB=str(job), KILL_RANK="2", KILL_MARK=str(mark))
    if kill_after == 0:
        mark.touch()
    p = subprocess.Popen([str(wrapper), str(job), *common(data, tmp / f"{tag}-ck",
                                                          tmp / f"{tag}-params",
                                                          tmp / f"{tag}-logs"), *flags],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    timer = threading.Timer(120, p.kill)
    timer.start()
    err = []
    reader = threading.Thread(target=lambda: err.append(p.stderr.read()))
    reader.start()
    lines = []
    try:
        for line in p.stdout:
            lines.append(line)
            m = re.match(r"strait-run: rank 2 pid (\d+) ", line)
            if m:
                pid = int(m[1])
            if kill_after and line.startswith(f"step {kill_after}/") and not mark.exists():
                mark.touch()  # every later start of host c's rank dies at once
                os.kill(pid, signal.SIGKILL)
        p.wait()
    finally:
        timer.cancel()
        reader.join()
    return p.returncode, "".join(lines), err[0]


def test_job_goes_on_without_a_lost_host(three):
    tmp, job, _, data = three
    code, out, err = run_losing_c(three, "lose", ["--max-restarts", "1", "--on-host-loss",
                                                   "replan"])
    assert code == 0, out[-3000:] + err[-3000:]
    # The first kill costs a restart, the second is beyond c's --max-restarts.
    assert re.search(r"restarting every rank from \S+ \(step \d+\), restart 1 \(host c's "
                     r"failure 1 of 2 before it is lost\)", err), err[-3000:]
    assert "strait-run: host c lost: its ranks failed 2 time(s), more than --max-restarts 1" in out
    assert re.search(r"host-loss 1: re-planning for 2 host\(s\) \(a, b; --min-hosts 1\) without "
                     r"c: straitc into \S+/host-loss-1", out), out
    assert re.search(r"host-loss 1: new plan \(straitc [\d.]+ s\): 2 rank\(s\), 1 stage x 2 "
                     r"replicas, 3 micro-batches, predicted step [\d.]+ ms \(the lost plan: 3 "
                     r"rank\(s\), 1 stage x 3 replicas, 2 micro-batches, [\d.]+ ms\); global "
                     r"batch 12 \(unchanged\)", out), out
    new = job / "host-loss-1"
    rec = json.loads((new / "straitc.json").read_text())
    assert [r["host"] for r in rec["ranks"]] == ["a", "b"], rec
    assert "exclude_hosts: [c]" in (new / "without-lost-hosts.yaml").read_text()
    m = re.search(r"host-loss: resuming 2 of 2 rank\(s\) from (\S+/step-(\d+)) under (\S+)", out)
    assert m and m[3] == str(new), out
    resumed_from, stop = m[1], int(m[2])
    assert stop >= 2, out  # step 3 had merged: step 2 was checkpointed before it ran
    # Steps stop+1 .. STEPS, each once after the switch, by 2 ranks (no rank 2 on the progress
    # lines; a step past the checkpoint may have merged before the kill too).
    seen = losses(out)
    assert sorted(seen) == list(range(1, STEPS + 1)), sorted(seen)
    after = [ln for ln in out[m.end():].splitlines() if ln.startswith("step ")]
    assert [int(ln.split()[1].split("/")[0]) for ln in after] == \
        list(range(stop + 1, STEPS + 1)), after
    assert all("rank2" not in ln and "rank1 sent 0:" in ln for ln in after), after
    # The loss goes on from where it was (a start from scratch would be back near step 1's)
    # and falls.
    assert seen[stop + 1] < seen[1] - 0.5 * (seen[1] - seen[stop]), seen
    assert np.mean([seen[s] for s in range(STEPS - 2, STEPS + 1)]) < seen[stop], seen
    # The switch resumed exactly the checkpoint: the new plan resumed by hand from it ends with
    # the same parameters, bit for bit.
    ref = tmp / "lose-ref-params"
    jobutil.run([STRAIT_RUN, str(new), "--steps", str(STEPS), "--lr", "0.003", "--data",
                 str(data), "--threads", "1", "--resume", resumed_from, "--save-params",
                 str(ref), "--log-dir", str(tmp / "lose-ref-logs")])
    files_equal(tmp / "lose-params", ref)


def test_floor_refuses(three):
    code, out, err = run_losing_c(three, "floor", ["--on-host-loss", "replan", "--min-hosts",
                                                    "3"], kill_after=0)
    assert code == 1, out[-3000:] + err[-3000:]
    assert ("strait-run: --on-host-loss: host c lost (its ranks failed 1 time(s), more than "
            "--max-restarts 0); 2 host(s) would remain (a, b), fewer than --min-hosts 3: the job "
            "ends") in err, err[-3000:]
    assert "re-planning" not in out and "resuming" not in out, out


def test_lost_launcher_the_other_finishes_alone(tmp_path):
    job = compile_job(tmp_path, "ab", ["a", "b"], 8)
    data = write_tokens(tmp_path / "tokens.bin", seed=5, n=1 << 13)
    ck, store = tmp_path / "ck", tmp_path / "store"

    def launch(host):
        return subprocess.Popen(
            [STRAIT_RUN, str(job), "--host", host, "--run-id", "lost-launcher", "--rendezvous",
             str(store), "--timeout-ms", "5000", "--on-host-loss", "replan",
             *common(data, ck, tmp_path / "params", tmp_path / f"logs-{host}")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)  # b's launcher and rank: one process group, one machine

    a, b = launch("a"), launch("b")
    timer = threading.Timer(120, lambda: (a.kill(), os.killpg(b.pid, signal.SIGKILL)))
    timer.start()
    err = []
    reader = threading.Thread(target=lambda: err.append(a.stderr.read()))
    reader.start()
    lines = []
    try:
        for line in a.stdout:
            lines.append(line)
            if line.startswith("step 3/") and b.poll() is None:
                os.killpg(b.pid, signal.SIGKILL)  # the machine of host b is gone
        a.wait()
        b.wait()
    finally:
        timer.cancel()
        reader.join()
        b.stdout.close()
        b.stderr.close()
    out = "".join(lines)
    assert a.returncode == 0, out[-3000:] + err[0][-3000:]
    assert re.search(r"host b lost: host\(s\) b did not answer in file store \S+ within 5000 ms",
                     out), out
    m = re.search(r"host-loss: resuming 1 of 1 rank\(s\) from (\S+/step-(\d+)) under (\S+)", out)
    assert m and m[3] == str(job / "host-loss-1"), out
    assert "told the other host(s) to resume under host-loss-1" in out
    seen = losses(out)
    stop = int(m[2])
    assert set(range(stop + 1, STEPS + 1)) <= set(seen), seen
    assert np.mean([seen[s] for s in range(STEPS - 2, STEPS + 1)]) < seen[1], seen
    ref = tmp_path / "ref-params"
    jobutil.run([STRAIT_RUN, str(job / "host-loss-1"), "--steps", str(STEPS), "--lr", "0.003",
                 "--data", str(data), "--threads", "1", "--resume", m[1], "--save-params",
                 str(ref), "--log-dir", str(tmp_path / "ref-logs")])
    files_equal(tmp_path / "params", ref)


@pytest.mark.parametrize("flags,message", [
    (["--on-host-loss", "sometimes"], "--on-host-loss takes replan or fail"),
    (["--min-hosts", "0"], "--min-hosts takes an integer of at least 1"),
    (["--on-host-loss", "replan"], "--on-host-loss replan is the launcher's (strait-run DIR "
                                   "without --rank) and needs --checkpoint DIR"),
])
def test_bad_flags(tmp_path, flags, message):
    p = subprocess.run([STRAIT_RUN, str(tmp_path), *flags], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2 and message in p.stderr, p.stderr


def test_job_without_record(tmp_path):
    job = tmp_path / "job"
    jobutil.run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=4x16", "--loss",
                 "cross-entropy", "-o", str(job)])
    p = subprocess.run([STRAIT_RUN, str(job), "--on-host-loss", "replan", "--checkpoint",
                        str(tmp_path / "ck")], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stderr
    assert f"--on-host-loss: {job}/straitc.json does not exist" in p.stderr, p.stderr
