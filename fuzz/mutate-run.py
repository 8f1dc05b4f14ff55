#!/usr/bin/env python3
"""Mutation fuzzing of a text input through an uninstrumented tool.

  mutate-run.py --seeds A [B...] --runs N [--timeout S] [--ok 0,1] [--crashes DIR] -- CMD...

Each run writes a mutation of a random seed (byte flips, deleted / repeated /
swapped spans, numbers replaced by extreme ones, lines duplicated or dropped,
spans spliced from another seed) to a temporary file and runs CMD with every
"{}" replaced by its path. An exit code outside --ok (default 0 and 1: the
input was fine, or a clear error), a signal or a run past --timeout is a
finding: its input is saved in --crashes and a CRASH line printed. Stderr
lines of exit code 1 are checked for a message (an empty stderr is a
finding too). The last line sums up. Seeded (--seed) so runs reproduce.
"""
import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time

EXTREME = [b"0", b"-1", b"1e308", b"-1e308", b"nan", b"inf", b"9223372036854775807",
           b"18446744073709551616", b"4294967296", b"1e-320", b"0.0", b"-0", b"1e9999", b"", b"[]",
           b"{}", b"null", b"'", b'"', b"\\", b"~", b"&a", b"*a", b"!!binary", b"- ", b": "]


def mutate(data, other, rng):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(8)
        n = len(data)
        if kind == 0 and n:  # flip bytes
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(n)] = rng.randrange(256)
        elif kind == 1 and n:  # delete a span
            a = rng.randrange(n)
            del data[a:a + rng.randint(1, 64)]
        elif kind == 2 and n:  # repeat a span
            a = rng.randrange(n)
            span = data[a:a + rng.randint(1, 64)]
            data[a:a] = span * rng.randint(1, 50)
        elif kind == 3:  # replace a number
            nums = [m.span() for m in re.finditer(rb"-?\d+(\.\d+)?(e-?\d+)?", bytes(data))]
            if nums:
                a, b = rng.choice(nums)
                data[a:b] = rng.choice(EXTREME)
        elif kind == 4:  # duplicate or drop a line
            lines = bytes(data).split(b"\n")
            i = rng.randrange(len(lines))
            if rng.randrange(2):
                lines.insert(i, lines[i])
            else:
                del lines[i]
            data = bytearray(b"\n".join(lines))
        elif kind == 5 and other:  # splice from another seed
            a, b = rng.randrange(len(other)), rng.randrange(len(other))
            at = rng.randrange(n + 1)
            data[at:at] = other[min(a, b):max(a, b)]
        elif kind == 6 and n:  # insert an extreme token
            at = rng.randrange(n + 1)
            data[at:at] = rng.choice(EXTREME)
        elif kind == 7 and n:  # truncate
            del data[rng.randrange(n):]
    return bytes(data)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", nargs="+", required=True)
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--timeout", type=float, default=30)
    p.add_argument("--ok", default="0,1")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--suffix", default="")
    p.add_argument("--crashes", default="")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    a = p.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    ok = {int(x) for x in a.ok.split(",")}
    seeds = [open(s, "rb").read() for s in a.seeds]
    rng = random.Random(a.seed)
    findings = 0
    codes = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(a.runs):
            data = mutate(rng.choice(seeds), rng.choice(seeds), rng)
            path = os.path.join(tmp, "input" + a.suffix)
            with open(path, "wb") as f:
                f.write(data)
            argv = [c.replace("{}", path) for c in cmd]
            for attempt in range(60):  # a tool being relinked cannot be run for a moment
                try:
                    r = subprocess.run(argv, capture_output=True, timeout=a.timeout)
                    rc, err = r.returncode, r.stderr.decode(errors="replace")
                    break
                except subprocess.TimeoutExpired:
                    rc, err = "timeout", ""
                    break
                except OSError:
                    time.sleep(1)
            else:
                sys.exit(f"mutate-run: cannot run {argv[0]}")
            codes[rc] = codes.get(rc, 0) + 1
            bad = rc not in ok or (rc == 1 and not err.strip())
            if bad:
                findings += 1
                print(f"CRASH rc={rc} run={run}: {err.strip()[-300:]}")
                if a.crashes:
                    os.makedirs(a.crashes, exist_ok=True)
                    with open(os.path.join(a.crashes, f"find-{a.seed}-{run}{a.suffix}"), "wb") as f:
                        f.write(data)
    print(f"mutate-run: {a.runs} runs, exit codes {dict(sorted(codes.items(), key=str))}, "
          f"{findings} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
