"""The cost of a host joining a running job (strait-run --join; docs/runtime.md, "A host joins").

The fixture of python/tests/test_host_join.py (gpt2-tiny, 2 replicas on hosts a and b, standby c,
one launcher per host on this machine, a checkpoint every step), 40 steps, c joining as the
ranks start: on a's merged progress lines, the gap between step S (the stop) and S+1 (checkpoint,
verdict, every rank restarted under the 3-host plan) against the median step before and after.
Run from the repository root: .venv/bin/python bench/runtime/host_join.py
"""
import os, sys, pathlib, shutil, tempfile, time, re, statistics
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python",
                                "tests"))
import test_host_join as t
t.STEPS = 40
stamps = []
class L(t.Launcher):
    def _read(self, f, buf):
        for line in f:
            with self.lock:
                buf.append(line); stamps.append((time.time(), self, line))
for trial in range(3):
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="host-join-"))
    job = t.compile_job(tmp, "ab-c", "exclude_hosts: [c]\n")
    data = t.write_tokens(tmp / "tokens.bin", seed=5, n=1 << 13)
    t.Launcher = L; stamps.clear()
    run = {h: t.launch(job, h, tmp, data, "m", "--on-host-join", "replan") for h in "ab"}
    run["a"].wait_for(r"^strait-run: rank 0 pid ")
    run["c"] = t.launch(job, "c", tmp, data, "m", "--on-host-join", "replan", "--join")
    outs = t.finish_all(run)
    a = run["a"]
    steps = {int(m[1]): ts for ts, l, line in stamps if l is a for m in [re.match(r"step (\d+)/", line)] if m}
    S = int(re.search(r"checkpoints after step (\d+)", outs["a"][1])[1])
    gaps = [steps[s + 1] - steps[s] for s in range(2, S)]
    after = [steps[s + 1] - steps[s] for s in range(S + 2, t.STEPS)]
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"trial {trial}: stop {S}, steps before {statistics.median(gaps)*1e3:.1f} ms, switch gap {(steps[S+1]-steps[S])*1e3:.0f} ms, steps after {statistics.median(after)*1e3:.1f} ms")
