"""strait-run --replan: re-planning when links change (docs/runtime.md, "Re-planning when
links change").

  - the emulated link (root and `ip netns` only, else skipped with the reason): the launcher
    runs in a network namespace of this test whose loopback is shaped with tbf, so the two
    ranks of a gpt2-tiny job planned for a 4 Gbit/s link between two hosts (straitc picks two
    data-parallel replicas) talk over it; after 8 steps the test slows the link to 10 Mbit/s
    with `tc qdisc change`. The job re-plans (straitc on the measured cluster: one rank, no
    cross-host replica), checkpoints, resumes under the new plan, the loss goes on from where
    it was, and its steps put nothing on the slow link (the slow steps before the re-plan carried
    gradients over it both ways; how much faster the resumed steps are is a timing, measured by
    bench/runtime/replan.py, not asserted here). With --replan off the same slowdown changes
    nothing;
  - steady links (the fast link throughout) re-plan nothing;
  - a re-plan that returns the running plan is predicted at the measured step and kept (the
    calibration re-simulates the running plan on the measured cluster, straitc --evaluate-plan);
  - a launcher far behind its ranks (SIGSTOPped for a second) still stops them at a step none
    passed (the lease), and the switched job ends bit-identical to an uninterrupted one;
  - bad flag values, a job without straitc.json and a malformed one are clear errors;
    straitc.json says what it should, byte for byte the same for the same command; a re-plan
    without a straitc to run keeps the plan (no root needed).
"""
from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

import pytest

import jobutil

pytestmark = jobutil.needs_gpt2_tiny()

FAST = "rate 10gbit burst 4mb latency 100ms"
SLOW = "rate 10mbit burst 32kb latency 100ms"
# Loopback samples on a loaded 2-core machine span 0.3-9 Gbit/s at full speed (the ranks'
# threads wait for a core; a window's median of 40 Mbit/s, 50 ms for a 250 KB exchange, twice in a
# row is what a machine at load 12 can produce), so the test's band is 100x: the slow link (4.6-4.8
# Mbit/s measured against the plan's 4 Gbit/s) is about 850x off the plan.
FLAGS = ["--replan", "auto", "--replan-factor", "100", "--replan-window", "3"]


def compile_job(tmp):
    cluster = tmp / "two-hosts.yaml"
    cluster.write_text(jobutil.cpu_cluster(
        "two-hosts", [("c0", "h0", "s"), ("c1", "h1", "s")],
        "  intra_site: {bandwidth_mbps: 4000, latency_ms: 0.1}\n"))
    # Relative paths, run in tmp: the re-plan re-runs the command in the folder it ran in.
    p = subprocess.run([os.path.abspath(jobutil.STRAITC), jobutil.GPT2_TINY, "--input-shape",
                        "input_ids=16x64",
                        "--global-batch", "32", "--loss", "cross-entropy", "--compress", "auto",
                        "--cluster", cluster.name, "-o", "job"], cwd=tmp, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "1 stages" in p.stdout and "[c0,c1]" in p.stdout, p.stdout  # two replicas
    return tmp / "job"


class Netns:
    """A network namespace of this test with its loopback shaped by tbf."""

    def __init__(self, tag, rate=FAST):
        self.name = f"strait50-replan-{os.getpid()}-{tag}"
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        self.exec("ip", "link", "set", "lo", "mtu", "1500")
        self.exec("ip", "link", "set", "lo", "up")
        self.exec("tc", "qdisc", "add", "dev", "lo", "root", "tbf", *rate.split())

    def exec(self, *cmd):
        subprocess.run(["ip", "netns", "exec", self.name, *cmd], check=True,
                       capture_output=True)

    def slow_down(self):
        self.exec("tc", "qdisc", "change", "dev", "lo", "root", "tbf", *SLOW.split())

    def close(self):
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    why = jobutil.wan_unavailable()
    if why:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("replan")
    return compile_job(tmp), jobutil.write_tokens(tmp / "tokens.bin", seed=5, vocab=32)


def run_job(netns, job, data, steps, flags, slow_after=None, timeout=150):
    """Runs the launcher in the namespace; slows the link once step `slow_after` printed.
    Returns (stdout, {step: (loss, ms)})."""
    cmd = ["ip", "netns", "exec", netns.name, jobutil.STRAIT_RUN, str(job), "--steps",
           str(steps), "--data", str(data), "--lr", "0.05", "--threads", "1", *flags]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(timeout, p.kill)
    timer.start()
    lines = []
    try:
        for line in p.stdout:
            lines.append(line)
            if slow_after and line.startswith(f"step {slow_after}/"):
                netns.slow_down()
        p.wait()
    finally:
        timer.cancel()
    out = "".join(lines)
    assert p.returncode == 0, out[-4000:]
    steps_seen = {}
    for m in re.finditer(r"^step (\d+)/\d+ loss (\S+) .*? time (\S+) ms", out, re.M):
        steps_seen[int(m[1])] = (float(m[2]), float(m[3]))
    return out, steps_seen


def test_slow_link_replans_and_resumes(job):
    job_dir, data = job
    netns = Netns("slow")
    try:
        out, steps = run_job(netns, job_dir, data, 40, FLAGS, slow_after=8)
    finally:
        netns.close()
    m = re.search(r"re-plan 1: switching; every rank checkpoints after step (\d+)", out)
    assert m, out[-4000:]
    stop = int(m[1])
    assert re.search(r"re-plan 1 at step \d+: link 0-1 \(h0-h1\) delivers [\d.]+ Mbit/s, the plan "
                     r"assumed 4.00 Gbit/s", out), out[-4000:]
    assert f"re-planned: resuming 1 rank(s) from {job_dir}/replan-checkpoints/step-{stop}" in out
    assert sorted(steps) == list(range(1, 41)), sorted(steps)
    # The measured cluster and the new job folder.
    new = job_dir / "replan-1"
    measured = (new / "measured-cluster.yaml").read_text()
    assert "between: [h0, h1], bandwidth_mbps:" in measured, measured
    rec = json.loads((new / "straitc.json").read_text())
    assert len(rec["ranks"]) == 1 and rec["links"] == [], rec
    # The loss goes on from where it was: the first resumed steps are as far along as the last
    # ones before the stop (a restart from scratch would be back at step 1's loss), and it
    # keeps falling.
    before = [steps[s][0] for s in range(stop - 2, stop + 1)]
    after = [steps[s][0] for s in range(stop + 1, stop + 4)]
    first = steps[1][0]
    assert abs(statistics.mean(after) - statistics.mean(before)) < 0.5 * (first - before[-1]), \
        (first, before, after)
    assert statistics.mean(steps[s][0] for s in range(36, 41)) < statistics.mean(before), steps
    # Why the resumed steps are faster (bench/runtime/replan.py measures by how much: 9.8-16.3x,
    # docs/benchmarks.md): the data-parallel steps before the stop sent gradients over the slow
    # link both ways, the resumed one-rank steps send nothing. The step times are printed only.
    lines = {int(m[1]): m[0] for m in re.finditer(r"^step (\d+)/\d+ .*$", out, re.M)}
    for s in range(stop - 2, stop + 1):
        assert re.search(r"\| rank0 sent 1:\S+ recv 1:\S+ \| rank1 sent 0:\S+ recv 0:", lines[s]), \
            lines[s]
    for s in range(stop + 1, 41):
        assert " sent " not in lines[s] and "rank1" not in lines[s], lines[s]
    slow = [steps[s][1] for s in range(stop - 2, stop + 1)]
    resumed = [steps[s][1] for s in range(stop + 2, 41)]
    print(f"median step: slow {statistics.median(slow):.1f} ms before the stop, "
          f"{statistics.median(resumed):.1f} ms resumed")


def test_replan_off_and_steady_links_change_nothing(job):
    job_dir, data = job
    netns = Netns("off")
    try:
        out, steps = run_job(netns, job_dir, data, 14, ["--replan", "off"], slow_after=3)
        assert "re-plan" not in out, out[-3000:]
        assert sorted(steps) == list(range(1, 15))
        # The slowdown reached the job: its last steps are slow.
        assert statistics.median(steps[s][1] for s in range(10, 15)) > 200, steps
        netns.exec("tc", "qdisc", "change", "dev", "lo", "root", "tbf", *FAST.split())
        out, steps = run_job(netns, job_dir, data, 14, FLAGS)
        assert "re-plan" not in out, out[-3000:]
        assert sorted(steps) == list(range(1, 15))
    finally:
        netns.close()


@pytest.mark.parametrize("flags,message", [
    (["--replan", "sometimes"], "--replan takes auto or off"),
    (["--replan-factor", "1"], "--replan-factor takes a number above 1 (got '1')"),
    (["--replan-factor", "x"], "--replan-factor takes a number above 1 (got 'x')"),
    (["--replan-after", "0"], "--replan-after takes an integer of at least 1"),
    (["--replan-window", "-2"], "--replan-window takes an integer of at least 1"),
    (["--replan", "auto", "--rank", "0"], "--replan is the launcher's"),
])
def test_bad_flags(tmp_path, flags, message):
    p = subprocess.run([jobutil.STRAIT_RUN, str(tmp_path), *flags], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2 and message in p.stderr, p.stderr


def test_job_without_record(tmp_path):
    # A job compiled without --cluster has no straitc.json: --replan says what is missing.
    job = tmp_path / "job"
    jobutil.run([jobutil.STRAITC, jobutil.GPT2_TINY, "--input-shape", "input_ids=4x16",
                 "--loss", "cross-entropy", "-o", str(job)])
    assert not (job / "straitc.json").exists()
    p = subprocess.run([jobutil.STRAIT_RUN, str(job), "--replan", "auto"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2, p.stderr
    assert f"--replan: {job}/straitc.json does not exist" in p.stderr, p.stderr


def test_straitc_records_the_job(tmp_path):
    # straitc.json: the command, its folder, the ranks' devices, hosts, device memory and
    # error-feedback residuals (none: no codec), the assumed link per pair of ranks on different
    # hosts and the prediction; the same command writes the same bytes.
    a = compile_job(tmp_path)
    rec = json.loads((a / "straitc.json").read_text())
    assert rec["format"] == "strait-job-record-1"
    assert rec["cwd"] == str(tmp_path) and rec["argv"][-2:] == ["-o", "job"], rec
    gib8 = 8 * 2**30  # the cluster file's memory_gib: 8
    assert rec["ranks"] == [{"rank": 0, "device": "c0", "host": "h0", "memory_bytes": gib8,
                             "error_feedback_bytes": 0},
                            {"rank": 1, "device": "c1", "host": "h1", "memory_bytes": gib8,
                             "error_feedback_bytes": 0}], rec
    assert rec["links"] == [{"ranks": [0, 1], "bandwidth_bytes_s": 4000e6 / 8,
                             "latency_s": 0.0001, "rule": "intra_site"}], rec
    assert 0 < rec["predicted_iteration_s"] < 1, rec
    assert (a / "cluster.yaml").read_text() == (tmp_path / "two-hosts.yaml").read_text()
    first = (a / "straitc.json").read_bytes()
    compile_job(tmp_path)
    assert (a / "straitc.json").read_bytes() == first


def test_without_straitc_the_job_keeps_its_plan(tmp_path):
    # A plan that assumed 1 Pbit/s: loopback is far slower, so the first window triggers; with no
    # straitc to run, the launcher says so and the job goes on under its plan (no root needed).
    job = compile_job(tmp_path)
    rec = json.loads((job / "straitc.json").read_text())
    rec["links"][0]["bandwidth_bytes_s"] = 1.25e14
    (job / "straitc.json").write_text(json.dumps(rec))
    data = jobutil.write_tokens(tmp_path / "tokens.bin", seed=5, vocab=32)
    # 16 steps: the stop step may come up to 8 (the lease) after the decision, and a job that
    # would end first does not re-plan at all (it failed so on the fresh-clone CI with 8).
    p = subprocess.run([jobutil.STRAIT_RUN, str(job), "--steps", "16", "--data", str(data),
                        "--threads", "1", "--replan", "auto", "--replan-window", "2",
                        "--replan-after", "1", "--replan-max", "1", "--straitc",
                        str(tmp_path / "no-straitc")], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert re.search(r"re-plan 1 at step \d+: link 0-1 \(h0-h1\) delivers .* the plan assumed "
                     r"1000000.00 Gbit/s", p.stdout), p.stdout
    assert (f"re-plan 1: straitc failed (exit 127; {tmp_path}/no-straitc, log "
            f"{job.resolve()}/replan-1/straitc.log); the job keeps its plan") in p.stdout, p.stdout
    assert "cannot run" in (job / "replan-1" / "straitc.log").read_text()
    assert "switching" not in p.stdout and "step 16/16" in p.stdout
    assert "measured by strait-run --replan" in (job / "replan-1" /
                                                  "measured-cluster.yaml").read_text()


@pytest.mark.parametrize("text,message", [
    ("{\"argv\": [\"straitc\"", "straitc.json: not a JSON object (at byte"),
    ("[]", "straitc.json: not a JSON object"),
    ("{\"argv\": [\"straitc\"], \"cwd\": \"/\", \"cluster_file\": \"c.yaml\", "
     "\"predicted_iteration_s\": 0.1, \"ranks\": []}",
     "straitc.json: field 'links' is missing or has the wrong type"),
    ("{\"argv\": [\"straitc\"], \"cwd\": \"/\", \"cluster_file\": \"c.yaml\", "
     "\"predicted_iteration_s\": 0.1, \"ranks\": [{\"device\": \"c0\", \"host\": \"h0\"}], "
     "\"links\": [{\"ranks\": [0, 3], \"bandwidth_bytes_s\": 1, \"latency_s\": 0}]}",
     "straitc.json: a link names a rank outside 0..0 or has no positive bandwidth"),
])
def test_bad_record(tmp_path, text, message):
    job = tmp_path / "job"
    jobutil.run([jobutil.STRAITC, jobutil.GPT2_TINY, "--input-shape", "input_ids=4x16",
                 "--loss", "cross-entropy", "-o", str(job)])
    (job / "straitc.json").write_text(text)
    p = subprocess.run([jobutil.STRAIT_RUN, str(job), "--replan", "auto"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2 and f"strait-run: --replan: {job}/{message}" in p.stderr, p.stderr


def test_a_replan_to_the_running_plan_is_kept(tmp_path):
    # The calibration re-simulates the running plan on the measured cluster (straitc
    # --evaluate-plan): a re-plan that returns the running plan is predicted at exactly the
    # measured step, and kept. A stand-in straitc runs the real one on the job's own cluster file
    # (4 Gbit/s: the same two replicas) while tbf holds the link at 100 Mbit/s from the start.
    # Before, the old plan's step for the measured links was its prediction plus the gradients'
    # bytes at the measured rate minus at the assumed one, serial (0.0122 s + ~0.09 s, though the
    # all-reduce overlaps the backward): the same plan came out ~8x faster and the job switched
    # to it (a checkpoint and a restart for nothing).
    why = jobutil.wan_unavailable()
    if why:
        pytest.skip(why)
    job = compile_job(tmp_path)
    data = jobutil.write_tokens(tmp_path / "tokens.bin", seed=5, vocab=32)
    fake = tmp_path / "straitc"
    fake.write_text(f"""#!{sys.executable}
import os, sys
a = sys.argv[1:]
a[a.index("--cluster") + 1] = "{job}/cluster.yaml"
os.execv("{os.path.abspath(jobutil.STRAITC)}", ["straitc", *a])
""")
    fake.chmod(0o755)
    netns = Netns("same", rate="rate 100mbit burst 64kb latency 100ms")
    try:
        out, steps = run_job(netns, job, data, 10,
                             ["--replan", "auto", "--replan-factor", "10", "--replan-window", "2",
                              "--replan-after", "1", "--replan-max", "1", "--straitc", str(fake)])
    finally:
        netns.close()
    print("".join(line for line in out.splitlines(True) if "re-plan" in line))
    assert re.search(r"re-plan 1 at step \d+: link 0-1 \(h0-h1\) delivers [\d.]+ Mbit/s", out), out
    m = re.search(r"re-plan 1: new plan \(straitc [\d.]+ s, \S+\): predicted (\S+) s x (\S+) = "
                  r"(\S+) ms a step, measured now (\S+) ms \(calibration: the measured step over "
                  r"the current plan's (\S+) s re-simulated on the measured links\)", out)
    assert m, out[-3000:]
    new_pred, calibration, predicted_ms, now_ms, old = map(float, m.groups())
    rec = json.loads((job / "replan-1" / "straitc.json").read_text())
    assert rec["evaluated_plan"] == str(job) and len(rec["ranks"]) == 2, rec
    assert old == pytest.approx(rec["evaluated_plan_iteration_s"], rel=1e-3)
    assert new_pred == pytest.approx(old, rel=1e-3) and predicted_ms == pytest.approx(now_ms,
                                                                                     rel=2e-3)
    assert "not predicted to be at least 10% faster; keeping the current plan" in out, out
    assert "switching" not in out and sorted(steps) == list(range(1, 11))


def test_a_late_stop_waits_for_the_lease(tmp_path):
    # The ranks finish no step beyond the launcher's lease, and the stop step is at least the
    # lease: a launcher far behind its ranks cannot name a step they passed. The test stops the
    # launcher (SIGSTOP) for a second once step 2 merged; before, the ranks ran on some 20 steps
    # meanwhile, the launcher's decision at step 3 put the stop at step 7 or so, and every rank
    # failed ("this rank is past it"). A stand-in straitc returns the same plan predicted faster,
    # so the job always switches; it must end with the uninterrupted run's parameters, bit for
    # bit (no rank lost or repeated a step).
    job = compile_job(tmp_path)
    rec = json.loads((job / "straitc.json").read_text())
    rec["links"][0]["bandwidth_bytes_s"] = 1e4  # loopback is far faster: a re-plan at step 3
    (job / "straitc.json").write_text(json.dumps(rec))
    rec.update(predicted_iteration_s=1e-6, evaluated_plan_iteration_s=1.0)
    (tmp_path / "fake.json").write_text(json.dumps(rec))
    fake = tmp_path / "straitc"
    fake.write_text(f"""#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
cp {job}/*.pb {job}/plan.json {job}/cluster.yaml "$out"/
cp {tmp_path}/fake.json "$out"/straitc.json
""")
    fake.chmod(0o755)
    data = jobutil.write_tokens(tmp_path / "tokens.bin", seed=5, vocab=32)
    common = [jobutil.STRAIT_RUN, str(job), "--steps", "30", "--data", str(data), "--lr", "0.05",
              "--threads", "1"]
    p = subprocess.Popen([*common, "--replan", "auto", "--replan-window", "2", "--replan-after",
                          "1", "--replan-max", "1", "--straitc", str(fake), "--save-params",
                          str(tmp_path / "replanned")], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(120, p.kill)
    timer.start()
    lines = []
    try:
        for line in p.stdout:
            lines.append(line)
            if line.startswith("step 2/"):
                p.send_signal(signal.SIGSTOP)
                time.sleep(1.0)
                p.send_signal(signal.SIGCONT)
        p.wait()
    finally:
        timer.cancel()
    out = "".join(lines)
    assert p.returncode == 0, out[-4000:]
    print("".join(line for line in lines if "re-plan" in line))
    m = re.search(r"re-plan 1 at step (\d+):", out)
    assert m and int(m[1]) == 3, out[-3000:]
    m = re.search(r"re-plan 1: switching; every rank checkpoints after step (\d+)", out)
    assert m, out[-3000:]
    stop = int(m[1])
    assert f"re-planned: resuming 2 rank(s) from {job}/replan-checkpoints/step-{stop}" in out
    assert "past it" not in out
    # The ranks waited at the lease (a tenth of a second of steps beyond step 2 or 3) while the
    # launcher was stopped, and the stop step is the lease: every step ran once.
    steps = [int(x) for x in re.findall(r"^step (\d+)/30", out, re.M)]
    assert sorted(steps) == list(range(1, 31)), steps
    ref = subprocess.run([*common, "--save-params", str(tmp_path / "plain")], capture_output=True,
                         text=True, timeout=120)
    assert ref.returncode == 0, ref.stdout[-3000:] + ref.stderr[-3000:]
    got, want = (sorted((tmp_path / d).iterdir()) for d in ("replanned", "plain"))
    assert [f.name for f in got] == [f.name for f in want] and got, (got, want)
    for a, b in zip(got, want):
        assert a.read_bytes() == b.read_bytes(), a.name
