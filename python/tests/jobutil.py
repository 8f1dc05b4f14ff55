"""Helpers shared by the tests that compile a job with straitc and run it with strait-run."""
from __future__ import annotations

import os
import re
import struct
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("STRAIT_BUILD_DIR", os.path.join(ROOT, "build"))
STRAITC = os.path.join(BUILD, "bin", "straitc")
# $STRAIT_RUN, else the build's launcher (a file, or inside its folder), else build-rt's.
STRAIT_RUN = next((p for p in (os.environ.get("STRAIT_RUN", ""),
                                os.path.join(BUILD, "runtime", "tools", "strait-run", "strait-run"),
                                os.path.join(BUILD, "runtime", "tools", "strait-run"),
                                os.path.join(ROOT, "build-rt", "runtime", "tools", "strait-run"))
                   if p and os.path.isfile(p)), os.path.join(BUILD, "runtime", "tools", "strait-run"))
PROTO_DIR = os.path.join(ROOT, "runtime", "proto")


def run(cmd, timeout=300, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


GPT2_TINY = os.path.join(ROOT, "models", "gpt2-tiny", "gpt2-tiny.onnx")


def needs_gpt2_tiny():
    """A pytest mark: skip the module without straitc, strait-run and models/gpt2-tiny."""
    import pytest
    return pytest.mark.skipif(
        not all(os.path.exists(p) for p in (STRAITC, STRAIT_RUN, GPT2_TINY)),
        reason="needs build/bin/straitc, strait-run and models/gpt2-tiny")


def kernel_ops(job):
    """Op of every kernel of rank 0's program."""
    with open(job / "rank0.program.pb", "rb") as f:
        p = subprocess.run(["protoc", "--decode=strait.program.Program", "-I", PROTO_DIR,
                            "strait_program.proto"], stdin=f, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    return re.findall(r'^kernels \{\n(?:  .*\n)*?  op: "([^"]+)"', p.stdout.decode(), re.M)


def step_losses(job, data, steps=5, lr=0.1):
    """The launcher's merged loss of each step of `steps` on token file `data`."""
    p = run([STRAIT_RUN, str(job), "--steps", str(steps), "--lr", str(lr), "--data", str(data),
             "--threads", "2", "--timeout-ms", "60000"])
    return [float(x) for x in re.findall(rf"^step \d+/{steps} loss (\S+)", p.stdout, re.M)]


def train_saving_params(job, data, out, steps=5, lr=0.01, threads=2):
    """Losses (as printed) and the saved parameters ({file: numpy array}) after `steps` steps."""
    import numpy as np
    p = run([STRAIT_RUN, str(job), "--steps", str(steps), "--lr", str(lr), "--data", str(data),
             "--threads", str(threads), "--timeout-ms", "60000", "--save-params", str(out)])
    losses = re.findall(rf"^step \d+/{steps} loss (\S+)", p.stdout, re.M)
    params = {f: np.load(os.path.join(out, f))
              for f in sorted(os.listdir(out)) if f.endswith(".npy")}
    return losses, params


def saved_params(folder):
    """{parameter name: array} of a strait-run --save-params folder, replicas merged (they are
    equal)."""
    import numpy as np
    out = {}
    for f in sorted(os.listdir(folder)):
        if f.startswith("params.rank"):
            for line in open(os.path.join(folder, f)):
                file, name = line.split()
                out.setdefault(name, np.load(os.path.join(folder, file)))
    return out


def checkpoint_values(step_dir, rank=0):
    """{name: array} of one rank's values in a checkpoint step folder (its index.tsv)."""
    import numpy as np
    folder = os.path.join(step_dir, f"rank{rank}")
    values = {}
    for line in open(os.path.join(folder, "index.tsv")):
        file, _, _, name = line.rstrip("\n").split("\t")
        values[name] = np.load(os.path.join(folder, file))
    return values


def cpu_cluster(name, devices, links):
    """A cluster file (text) of CPU devices of the local cluster's nominal type (0.2 TFLOP/s fp32,
    20 GB/s, 8 GiB): `devices` lists (name, host, site), `links` is the body of `links:` (YAML
    lines indented by two spaces)."""
    rows = "".join(f"  - {{name: {n}, type: cpu, host: {h}, site: {s}}}\n" for n, h, s in devices)
    return (f"name: {name}\ndevice_types:\n"
            "  - {name: cpu, kind: cpu, peak_tflops: {fp32: 0.2}, mem_bandwidth_gbs: 20, "
            "memory_gib: 8}\n"
            f"devices:\n{rows}links:\n{links}")


def write_tokens(path, seed, n=4096, vocab=256):
    """`n` uint16 token ids below `vocab` from a fixed linear congruential sequence."""
    state, ids = seed, []
    for _ in range(n):
        state = (1103515245 * state + 12345) % (1 << 31)
        ids.append(state % vocab)
    path.write_bytes(struct.pack(f"<{len(ids)}H", *ids))
    return path


def wan_unavailable():
    """Why the emulated WAN (network namespaces, veth, tc) cannot run here; "" when it can."""
    if os.geteuid() != 0:
        return "the emulated WAN needs root (network namespaces and tc)"
    probe = f"straitwan-probe-{os.getpid()}"
    p = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if p.returncode != 0:
        return f"ip netns unavailable: {p.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe])
    if subprocess.run(["sh", "-c", "command -v tc"], capture_output=True).returncode != 0:
        return "tc (iproute2) unavailable"
    return ""


# --- Broken links (python/tests/test_flaky_links.py, bench/runtime/link_flap.py) ---------------

def job_worker_pids(job):
    """{rank: pid} of the strait-run workers of `job` (from /proc)."""
    pids = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0")]
        except OSError:
            continue
        if str(job) in argv and "--rank" in argv:
            pids[int(argv[argv.index("--rank") + 1])] = int(entry)
    return pids


def connections(pids):
    """[(rank a, rank b, local address of a, its peer's)] of the established TCP connections
    between two of the workers `pids` ({rank: pid})."""
    p = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True, text=True,
                       timeout=30)
    rank_of = {pid: r for r, pid in pids.items()}
    owner, ends = {}, []
    for line in p.stdout.splitlines():
        cols = line.split()
        m = re.search(r"pid=(\d+)", line)
        if len(cols) < 4 or not m or int(m.group(1)) not in rank_of:
            continue
        owner[cols[2]] = rank_of[int(m.group(1))]
        ends.append((rank_of[int(m.group(1))], cols[2], cols[3]))
    return [(a, owner[peer], local, peer) for a, local, peer in ends if peer in owner]


def drop_link(pids, a, b):
    """Aborts every connection between ranks a and b (ss -K); how many it found."""
    found = [(l, p) for x, y, l, p in connections(pids) if (x, y) == (a, b)]
    for local, peer in found:
        subprocess.run(["ss", "-K", "-tn", f"( src {local} and dst {peer} )"], check=True,
                       capture_output=True, timeout=30)
    return len(found)
