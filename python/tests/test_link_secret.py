"""Sealed links end to end: strait-run --link-secret (docs/runtime.md, "Sealed links").

Compiles gpt2-tiny for a two-site cluster as two 2-rank jobs (two pipeline
stages: activations and gradients cross the link; two data-parallel replicas:
the gradient all-reduce crosses it) and checks that
  - with a link secret (--link-secret, or $STRAIT_LINK_SECRET_FILE) every
    step's loss equals the plain run's, and the ranks log sealed links;
  - `strait-run --make-link-secret FILE` writes 64 hex characters, mode 0600,
    and does not replace a file;
  - a missing, malformed or group-readable key file stops the launcher before
    any rank starts (exit 2), naming the file;
  - a rank given another secret fails with an authentication error naming
    the peer instead of hanging (both ranks exit within the timeout);
  - the ranks the launcher starts get the key file's path on their command
    line, never the secret (nor in their environment).
"""
from __future__ import annotations

import os
import re
import stat
import subprocess
import time

import pytest

from jobutil import GPT2_TINY, STRAIT_RUN, STRAITC, cpu_cluster, needs_gpt2_tiny, run, write_tokens

pytestmark = needs_gpt2_tiny()

CLUSTER = cpu_cluster("two-sites", [("rank0", "a", "east"), ("rank1", "b", "west")],
                      "  intra_host: {bandwidth_gbps: 10, latency_us: 20}\n"
                      "  hosts:\n    - {between: [a, b], bandwidth_mbps: 100, latency_ms: 10}\n")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    d = tmp_path_factory.mktemp("sealed")
    (d / "two-sites.yaml").write_text(CLUSTER)
    base = [STRAITC, GPT2_TINY, "--input-shape", "input_ids=4x32", "--loss", "cross-entropy",
            "--optimizer", "adamw", "--cluster", str(d / "two-sites.yaml")]
    run(base + ["--num-stages", "2", "-o", str(d / "pipe")])
    run(base + ["--num-stages", "1", "--global-batch", "8", "-o", str(d / "dp")])
    data = write_tokens(d / "tokens.bin", seed=5, n=1 << 14)
    key = d / "link.key"
    run([STRAIT_RUN, "--make-link-secret", str(key)])
    return d, data, key


def losses(job, data, *extra, env=None):
    p = subprocess.run([STRAIT_RUN, str(job), "--steps", "3", "--lr", "0.003", "--data", str(data),
                        "--threads", "1", "--timeout-ms", "30000", *map(str, extra)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    found = re.findall(r"^step \d+/3 loss (\S+)", p.stdout, re.M)
    assert len(found) == 3, p.stdout
    return found


def sealed_in_logs(job):
    logs = [(job / "logs" / f"rank{r}.log").read_text() for r in range(2)]
    return all("Gloo links sealed" in log for log in logs)


@pytest.mark.parametrize("job", ["pipe", "dp"])
def test_sealed_losses_equal_plain(jobs, job):
    d, data, key = jobs
    plain = losses(d / job, data)
    assert not sealed_in_logs(d / job)
    if job == "pipe":
        sealed = losses(d / job, data, "--link-secret", key)
    else:  # the environment variable instead of the flag
        sealed = losses(d / job, data, env={**os.environ, "STRAIT_LINK_SECRET_FILE": str(key)})
    assert sealed_in_logs(d / job)
    assert sealed == plain


def test_make_link_secret(jobs):
    d, _, key = jobs
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert re.fullmatch(r"[0-9a-f]{64}\n", key.read_text())
    p = subprocess.run([STRAIT_RUN, "--make-link-secret", str(key)], capture_output=True, text=True)
    assert p.returncode == 2 and str(key) in p.stderr and "exists" in p.stderr, p.stderr


@pytest.mark.parametrize("name,text,mode,expect", [
    ("missing.key", None, 0o600, "No such file"),
    ("short.key", "abcd\n", 0o600, "exactly 64 hex characters"),
    ("bad.key", "z" * 64 + "\n", 0o600, "exactly 64 hex characters"),
    ("shared.key", "ab" * 32 + "\n", 0o644, "chmod 600"),
])
def test_bad_key_file_stops_the_launcher(jobs, name, text, mode, expect):
    d, data, _ = jobs
    path = d / name
    if text is not None:
        path.write_text(text)
        path.chmod(mode)
    p = subprocess.run([STRAIT_RUN, str(d / "pipe"), "--steps", "1", "--data", str(data),
                        "--link-secret", str(path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"'{path}'" in p.stderr and expect in p.stderr, p.stderr
    assert "pid" not in p.stdout, "a rank started: " + p.stdout


def test_another_secret_fails_without_hanging(jobs, tmp_path):
    d, data, key = jobs
    other = tmp_path / "other.key"
    run([STRAIT_RUN, "--make-link-secret", str(other)])
    start = time.monotonic()
    procs = [subprocess.Popen([STRAIT_RUN, str(d / "pipe"), "--rank", str(r), "--run-id",
                               f"wrong-secret-{os.getpid()}", "--steps", "2", "--data", str(data),
                               "--threads", "1", "--timeout-ms", "10000",
                               "--link-secret", str(key if r == 0 else other)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert time.monotonic() - start < 60
    assert all(p.returncode != 0 for p in procs), outs
    # Rank 1 receives the first activations from rank 0: they do not verify.
    assert re.search(r"rank 1 .*authentication failed: .* from rank 0 to rank 1", outs[1]), outs[1]


def test_ranks_get_the_path_not_the_secret(jobs):
    """The workers' command lines (what `ps` shows) hold the key file's path, not the secret."""
    d, data, key = jobs
    secret = key.read_text().strip()
    launcher = subprocess.Popen([STRAIT_RUN, str(d / "pipe"), "--steps", "400", "--data", str(data),
                                 "--threads", "1", "--link-secret", str(key), "--quiet"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 2 and launcher.poll() is None and time.monotonic() < deadline:
            for pid in os.listdir("/proc"):
                if not pid.isdigit() or int(pid) == launcher.pid:
                    continue
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        args = f.read().decode(errors="replace").split("\0")
                except OSError:
                    continue
                if str(d / "pipe") in args and "--rank" in args and args not in seen:
                    try:
                        with open(f"/proc/{pid}/environ", "rb") as f:
                            assert secret.encode() not in f.read(), "the secret is in the environment"
                    except OSError:
                        pass
                    seen.append(args)
            time.sleep(0.01)
    finally:
        launcher.wait(timeout=120)
    assert launcher.returncode == 0, launcher.stderr.read()
    if not seen:
        pytest.skip("the job ended before its workers could be observed")
    for args in seen:
        assert "--link-secret" in args and str(key.resolve()) in args, args
        assert not any(secret in a for a in args), args
