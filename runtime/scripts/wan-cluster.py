#!/usr/bin/env python3
"""Emulated WAN from a cluster file: run a strait-run job's ranks in network
namespaces whose pairwise links have the cluster's bandwidths (root only).

  wan-cluster.py --cluster FILE.yaml [--level host|site] [--latency] [--cpu-cap CORES]
                 [--strait-run PATH] [--dry-run] -- DIR [strait-run worker args...]
  wan-cluster.py --cluster FILE.yaml [--level host|site] --measure [--seconds S]

One namespace per host (or per site with --level site) of the devices the
plan (DIR/plan.json) uses; every pair of namespaces is joined by its own veth
pair, both ends shaped with tbf to the pair's bandwidth, resolved as the
planner does (docs/planner.md): links.devices is ignored, then links.hosts,
links.sites, then intra_site inside a site and inter_site between sites.
Pairs of 10 Gbit/s or more stay unshaped (tbf cannot emulate them on a small
machine). Namespace i owns 10.214.0.(i+1)/32 (on lo), reachable from
namespace j only over the i-j veth (a host route), so traffic between two
namespaces runs at their pair's rate and traffic inside one is unshaped.
--latency adds the pair's latency as a netem delay on both ends (needs
sch_netem; a clear error otherwise). Rank r of the plan is device
plan.json stages[s].devices[i] for the manifest's (stage s, replica i), and
runs in its device's namespace as
  ip netns exec NS strait-run DIR --rank r --run-id ID --listen-address 10.214.0.(i+1) ARGS
with its log in DIR/logs/rank<r>.log. When a rank fails the others are
stopped and the exit code is 1 (naming the rank); SIGINT/SIGTERM stop all
(130/143). The namespaces are removed on every exit.

--cpu-cap CORES puts every rank in a cpu cgroup of its own capped at CORES
cores (cgroup v2 cpu.max or v1 cfs quota, with a high weight so the ranks
get their share on a busy machine; removed on exit): each rank then
computes like a device of fixed speed, however many ranks share the
machine's cores (bench/runtime/baselines_wan.py, which probes the devices
under the same cap).

--measure builds the namespaces for every host (site) of the cluster and,
for each shaped pair, streams TCP data for --seconds from one namespace to
the other (a small Python socket sender), printing achieved / configured.

Limits: a `shared: true` rule is emulated per pair (the pairs that share one
WAN uplink do not split its rate); links between devices of one host are
not shaped.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

try:
    import yaml
except ImportError:  # pragma: no cover
    sys.exit("wan-cluster: needs PyYAML (python3-yaml)")

UNSHAPED_BITS = 10e9


def die(msg, code=2):
    print(f"wan-cluster: {msg}", file=sys.stderr)
    sys.exit(code)


# ----------------------------------------------------------------- cluster
def bits_per_s(rule, where):
    for key, scale in (("bandwidth_gbps", 1e9), ("bandwidth_mbps", 1e6), ("bandwidth_gbs", 8e9)):
        if key in rule:
            v = float(rule[key])
            if v <= 0:
                die(f"{where}: field '{key}' must be positive")
            return v * scale
    die(f"{where}: a link needs bandwidth_gbps, bandwidth_mbps or bandwidth_gbs")


def latency_s(rule):
    if "latency_ms" in rule:
        return float(rule["latency_ms"]) * 1e-3
    if "latency_us" in rule:
        return float(rule["latency_us"]) * 1e-6
    return 0.0


def load_devices(cluster):
    """[(name, host, site)] with device groups expanded as ClusterParser does."""
    out = []
    for i, d in enumerate(cluster.get("devices") or []):
        site = str(d.get("site", ""))
        if "name" in d:
            out.append((str(d["name"]), str(d.get("host", d["name"])), site))
            continue
        if "prefix" not in d or "count" not in d:
            die(f"devices[{i}]: needs 'name', or 'prefix' and 'count'")
        prefix, count, start = str(d["prefix"]), int(d["count"]), int(d.get("start", 0))
        per_host = int(d.get("per_host", 0))
        for k in range(count):
            host = str(d.get("host", ""))
            if per_host >= 1:
                host = str(d.get("host_prefix") or prefix + "host") + str(start // per_host + k // per_host)
            name = prefix + str(start + k)
            out.append((name, host or name, site))
    return out


def pair_link(cluster, a, b, level):
    """(bits/s, seconds) between groups a and b: (host, site) tuples."""
    links = cluster.get("links") or {}
    if level == "host":
        for rule in links.get("hosts") or []:
            if sorted(map(str, rule.get("between", []))) == sorted([a[0], b[0]]):
                return bits_per_s(rule, f"links.hosts {rule['between']}"), latency_s(rule)
    if a[1] != b[1]:
        for rule in links.get("sites") or []:
            if sorted(map(str, rule.get("between", []))) == sorted([a[1], b[1]]):
                return bits_per_s(rule, f"links.sites {rule['between']}"), latency_s(rule)
    order = ["intra_site", "inter_site"] if a[1] == b[1] else ["inter_site"]
    for key in order:
        if key in links:
            return bits_per_s(links[key], f"links.{key}"), latency_s(links[key])
    die(f"no link between {a} and {b} in the cluster file (add links.hosts/sites/inter_site)")


def rate_text(bits):
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits >= scale and abs(bits / scale - round(bits / scale)) < 1e-9:
            return f"{int(round(bits / scale))}{unit}"
    return f"{int(bits)}bit"


# ---------------------------------------------------------------- netns
class Net:
    def __init__(self, groups, links, latency, prefix="straitwan"):
        self.tag = f"{prefix}-{os.getpid()}"
        self.groups, self.links, self.latency = groups, links, latency
        self.namespaces = []

    def sh(self, *cmd):
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()}")

    def ns(self, i):
        return f"{self.tag}-n{i}"

    def addr(self, i):
        return f"10.214.0.{i + 1}"

    def shape(self, ns, dev, bits, delay):
        parent = ["root"]
        if self.latency and delay > 0:
            try:
                self.sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root",
                        "handle", "1:", "netem", "delay", f"{delay * 1e3:.3f}ms")
            except RuntimeError as e:
                raise RuntimeError(f"netem delay failed on {dev} (no sch_netem in this kernel?); "
                                   f"drop --latency: {e}")
            parent = ["parent", "1:", "handle", "2:"]
        burst = max(16384, int(bits / 8 / 100))  # 10 ms of the rate
        self.sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, *parent, "tbf",
                "rate", rate_text(bits), "burst", str(burst), "latency", "100ms")

    def up(self):
        for i, g in enumerate(self.groups):
            ns = self.ns(i)
            self.sh("ip", "netns", "add", ns)
            self.namespaces.append(ns)
            self.sh("ip", "-n", ns, "link", "set", "lo", "up")
            self.sh("ip", "-n", ns, "addr", "add", self.addr(i) + "/32", "dev", "lo")
        k = 0
        for (i, j), (bits, delay) in sorted(self.links.items()):
            a, b = f"sw{os.getpid() % 100000}p{k}a", f"sw{os.getpid() % 100000}p{k}b"
            self.sh("ip", "link", "add", a, "netns", self.ns(i), "type", "veth", "peer", "name", b,
                    "netns", self.ns(j))
            for ns, dev, mine, peer, other in ((self.ns(i), a, i, j, 1), (self.ns(j), b, j, i, 2)):
                self.sh("ip", "-n", ns, "addr", "add", f"10.215.{k}.{other}/30", "dev", dev)
                self.sh("ip", "-n", ns, "link", "set", dev, "up")
                self.sh("ip", "-n", ns, "route", "add", self.addr(peer) + "/32", "dev", dev,
                        "src", self.addr(mine))
                if bits < UNSHAPED_BITS:
                    self.shape(ns, dev, bits, delay)
            k += 1

    def down(self):
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.namespaces = []


# ---------------------------------------------------------------- cpu caps
class CpuCaps:
    """cpu cgroups of `cores` cores each (cgroup v2 cpu.max or v1 cfs quota), one per
    process given to `preexec`; a weight well above the default so that the capped
    processes get their share while other work runs; all removed by `remove`."""

    PERIOD_US = 10000  # 10 ms: a capped process waits at most 10 x (1 - cap) ms at a time

    def __init__(self, tag, cores):
        if cores <= 0:
            raise ValueError(f"--cpu-cap must be positive, not {cores}")
        self.tag, self.cores, self.paths = tag, cores, []
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            self.root, self.v2 = "/sys/fs/cgroup", True
        elif os.path.isdir("/sys/fs/cgroup/cpu"):
            self.root, self.v2 = "/sys/fs/cgroup/cpu", False
        else:
            raise RuntimeError("no cpu cgroup controller (/sys/fs/cgroup/cpu or cgroup v2)")

    def make(self, name):
        path = os.path.join(self.root, f"{self.tag}-{name}")
        try:
            os.mkdir(path)
            self.paths.append(path)
            quota = max(1000, int(self.cores * self.PERIOD_US))
            if self.v2:
                with open(os.path.join(self.root, "cgroup.subtree_control"), "w") as f:
                    f.write("+cpu")
                files = {"cpu.max": f"{quota} {self.PERIOD_US}", "cpu.weight": "800"}
            else:
                files = {"cpu.cfs_period_us": str(self.PERIOD_US),
                         "cpu.cfs_quota_us": str(quota), "cpu.shares": "8192"}
            for k, v in files.items():
                with open(os.path.join(path, k), "w") as f:
                    f.write(v)
        except OSError as e:
            raise RuntimeError(f"cannot create the cpu cgroup {path}: {e}")
        return path

    @staticmethod
    def preexec(path):
        """A preexec_fn moving the child into the cgroup `path` (its children follow)."""
        procs = os.path.join(path, "cgroup.procs")

        def join():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        return join

    def remove(self):
        for path in self.paths:
            for _ in range(50):  # a process that has just exited may still be listed
                try:
                    os.rmdir(path)
                    break
                except OSError:
                    time.sleep(0.1)
        self.paths = []


# ---------------------------------------------------------------- modes
SENDER = r"""
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
buf = b"\0" * 65536
end = time.time() + float(sys.argv[3])
while time.time() < end:
    s.sendall(buf)
s.close()
"""
RECEIVER = r"""
import socket, sys, time
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], int(sys.argv[2]))); srv.listen(1); print("ready", flush=True)
c, _ = srv.accept()
n = 0; first = None; last = None
while True:
    b = c.recv(1 << 20)
    if not b:
        break
    now = time.time()
    if first is None:
        first = now
    else:
        n += len(b)
    last = now
print(n * 8 / max(last - first, 1e-9) if first and last > first else 0.0)
"""


def measure(net, names, seconds):
    results = []
    for (i, j), (bits, _) in sorted(net.links.items()):
        if bits >= UNSHAPED_BITS:
            print(f"{names[i]} <-> {names[j]}: {rate_text(bits)} (not shaped, not measured)")
            continue
        recv = subprocess.Popen(["ip", "netns", "exec", net.ns(j), sys.executable, "-c", RECEIVER,
                                 net.addr(j), "5301"], stdout=subprocess.PIPE, text=True)
        assert recv.stdout.readline().strip() == "ready"
        subprocess.run(["ip", "netns", "exec", net.ns(i), sys.executable, "-c", SENDER,
                        net.addr(j), "5301", str(seconds)], check=True)
        got = float(recv.communicate(timeout=60)[0].strip() or 0)
        results.append((names[i], names[j], bits, got))
        print(f"{names[i]} -> {names[j]}: achieved {got / 1e6:.1f} Mbit/s / configured "
              f"{bits / 1e6:.1f} Mbit/s = {got / bits:.3f}", flush=True)
    return results


def run_job(net, args, rank_group, strait_run, job_dir, worker_args, caps=None):
    os.makedirs(os.path.join(job_dir, "logs"), exist_ok=True)
    os.makedirs(os.path.join(job_dir, "rendezvous"), exist_ok=True)
    run_id = f"wan-{os.getpid()}-{int(time.time())}"
    cgroups = [caps.make(f"rank{r}") for r in range(len(rank_group))] if caps else None
    procs = {}
    for r, g in enumerate(rank_group):
        log = open(os.path.join(job_dir, "logs", f"rank{r}.log"), "w")
        cmd = ["ip", "netns", "exec", net.ns(g), "env", f"RANK={r}", f"WORLD_SIZE={len(rank_group)}",
               f"LOCAL_RANK={r}", strait_run, job_dir, "--rank", str(r), "--run-id", run_id,
               "--listen-address", net.addr(g), *worker_args]
        extra = {"preexec_fn": CpuCaps.preexec(cgroups[r])} if caps else {}
        procs[r] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, **extra)
    status = 0
    try:
        live = dict(procs)
        while live:
            for r, p in list(live.items()):
                rc = p.poll()
                if rc is None:
                    continue
                del live[r]
                if rc != 0:
                    tail = open(os.path.join(job_dir, "logs", f"rank{r}.log")).read().splitlines()[-5:]
                    print(f"wan-cluster: rank {r} failed (exit code {rc}); stopping the other ranks. "
                          f"Last lines of {job_dir}/logs/rank{r}.log:", file=sys.stderr)
                    for line in tail:
                        print("  | " + line, file=sys.stderr)
                    status = 1
                    live = {}
                    break
            time.sleep(0.05)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        deadline = time.time() + 5
        for p in procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
    if status == 0:
        print(f"wan-cluster: all {len(rank_group)} ranks finished; logs in {job_dir}/logs")
    return status


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--level", choices=["host", "site"], default="host")
    ap.add_argument("--latency", action="store_true", help="netem delay of each pair's latency")
    ap.add_argument("--strait-run", default="")
    ap.add_argument("--name-prefix", default="straitwan",
                    help="prefix of the namespaces' and cgroups' names (PREFIX-PID-...)")
    ap.add_argument("--cpu-cap", type=float, default=0.0,
                    help="cap every rank at this many cores (a cpu cgroup per rank)")
    ap.add_argument("--dry-run", action="store_true", help="print the layout, create nothing")
    ap.add_argument("--measure", action="store_true", help="measure each shaped pair, no job")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
    try:
        with open(a.cluster) as f:
            cluster = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        die(f"cannot read cluster file {a.cluster}: {e}")
    if not isinstance(cluster, dict):
        die(f"{a.cluster}: not a cluster mapping")
    devices = {name: (host, site) for name, host, site in load_devices(cluster)}
    key = (lambda hs: hs) if a.level == "host" else (lambda hs: ("", hs[1]))

    rank_group, job_dir = [], None
    if a.measure:
        groups = sorted({key(hs) for hs in devices.values()})
    else:
        if not rest:
            die("missing -- DIR (a straitc job folder with plan.json)")
        job_dir, worker_args = os.path.abspath(rest[0]), rest[1:]
        plan_path = os.path.join(job_dir, "plan.json")
        if not os.path.isfile(plan_path):
            die(f"no {plan_path} (straitc --cluster writes it)")
        plan = json.load(open(plan_path))
        stage_devices = [s["devices"] for s in plan.get("stages", [])]
        # Rank order of straitc's manifest: stage by stage, replica by replica.
        ranked = [d for devs in stage_devices for d in devs]
        for d in ranked:
            if d not in devices:
                die(f"plan device '{d}' is not a device of {a.cluster}")
        groups = sorted({key(devices[d]) for d in ranked})
        rank_group = [groups.index(key(devices[d])) for d in ranked]
    names = [g[0] if a.level == "host" else g[1] for g in groups]
    links = {}
    for i in range(len(groups)):
        for j in range(i + 1, len(groups)):
            links[(i, j)] = pair_link(cluster, groups[i], groups[j], a.level)
    for i, name in enumerate(names):
        ranks = [r for r, g in enumerate(rank_group) if g == i]
        print(f"wan-cluster: {a.level} {name}: namespace {i} (10.214.0.{i + 1})"
              + (f", ranks {','.join(map(str, ranks))}" if ranks else ""))
    for (i, j), (bits, lat) in sorted(links.items()):
        shaped = "" if bits < UNSHAPED_BITS else " (not shaped)"
        print(f"wan-cluster: {names[i]} <-> {names[j]}: {rate_text(bits)}{shaped}"
              + (f", latency {lat * 1e3:g} ms" + ("" if a.latency else " (not emulated)") if lat else ""))
    if a.dry_run:
        return 0
    if os.geteuid() != 0:
        die("needs root (network namespaces and tc)")
    strait_run = a.strait_run
    if not a.measure and not strait_run:
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        for c in (os.path.join(here, "build", "runtime", "tools", "strait-run"),
                  os.path.join(here, "build-rt", "runtime", "tools", "strait-run")):
            if os.path.isfile(c) and os.access(c, os.X_OK):
                strait_run = c
                break
        if not strait_run:
            die("strait-run not found; pass --strait-run PATH")

    if not re.fullmatch(r"[A-Za-z0-9_-]{1,24}", a.name_prefix):
        die(f"--name-prefix '{a.name_prefix}': letters, digits, '-' and '_' only (1-24)")
    net = Net(groups, links, a.latency, a.name_prefix)
    caps = None
    if a.cpu_cap:
        try:
            caps = CpuCaps(f"{a.name_prefix}-{os.getpid()}", a.cpu_cap)
        except (ValueError, RuntimeError) as e:
            die(str(e))

    def stop(signum, _frame):
        raise SystemExit(130 if signum == signal.SIGINT else 143)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        try:
            net.up()
        except RuntimeError as e:
            print(f"wan-cluster: {e}", file=sys.stderr)
            return 1
        if a.measure:
            measure(net, names, a.seconds)
            return 0
        return run_job(net, a, rank_group, strait_run, job_dir, worker_args, caps)
    except RuntimeError as e:  # a cgroup that cannot be made
        print(f"wan-cluster: {e}", file=sys.stderr)
        return 1
    finally:
        net.down()
        if caps:
            caps.remove()


if __name__ == "__main__":
    sys.exit(main())
