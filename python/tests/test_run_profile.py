"""strait-run --profile: time per op type of a real training step (gpt2-tiny, one rank, CPU).

Checks the table against the program itself: every op type of the step's kernels appears with as
many launches per iteration as the program has kernels of that type, the per-op times add up to
the "in kernels" total, and that total fits in the iterations' wall time.
"""
from __future__ import annotations

import collections
import re

from jobutil import GPT2_TINY, STRAITC, STRAIT_RUN, kernel_ops, needs_gpt2_tiny, run, write_tokens

pytestmark = needs_gpt2_tiny()

ROW = re.compile(r"^rank 0 profile: (\S+)\s+([\d.]+) launches\s+([\d.]+) ms\s+([\d.]+) %\s+([\d.]+) GB/s$",
                 re.M)


def test_profile_table_matches_the_program(tmp_path):
    job = tmp_path / "job"
    run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=4x32", "--loss", "cross-entropy",
         "--optimizer", "adamw", "-o", str(job)])
    data = write_tokens(tmp_path / "tokens.bin", seed=3)
    p = run([STRAIT_RUN, str(job), "--steps", "4", "--threads", "1", "--data", str(data),
             "--data-format", "tokens-u16", "--profile", "--quiet"])
    # The launcher echoes rank 0's table after the run.
    head = re.search(r"^rank 0 profile: (\d+) iterations, ([\d.]+) ms each, ([\d.]+) ms in kernels",
                     p.stdout, re.M)
    assert head, p.stdout
    iterations, wall, kernels = int(head.group(1)), float(head.group(2)), float(head.group(3))
    assert iterations == 3  # the first iteration (allocation, once steps) is not profiled
    assert 0 < kernels <= wall * 1.01
    rows = {m.group(1): (float(m.group(2)), float(m.group(3)), float(m.group(4)))
            for m in ROW.finditer(p.stdout)}
    want = collections.Counter(kernel_ops(job))
    assert set(rows) == set(want), (sorted(rows), sorted(want))
    for op, n in want.items():
        assert rows[op][0] == n, (op, rows[op][0], n)
    assert abs(sum(r[1] for r in rows.values()) - kernels) <= 0.01 * kernels + 0.01
    assert sum(r[2] for r in rows.values()) <= 101
    # A GEMM-heavy step: the products take a visible share.
    assert rows["Gemm"][1] > 0
