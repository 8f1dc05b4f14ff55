#!/usr/bin/env python3
"""Draws a job's measured timeline (strait-run --trace) over its predicted one (straitc --trace-plan).

usage: plot-trace.py MEASURED.json [--plan PREDICTED.json] [--iteration N|fastest] [-o OUT.png]

Top: one iteration of the measured trace (default: the last traced one; `fastest`: the one of
the shortest span over all ranks, the least disturbed on a loaded machine), one row per rank and lane
(compute: kernels, optimizer, data load; comm: sends, receives, all-reduces, codecs, and the waits
for a peer), from the first rank's start of the iteration. Bottom: the simulator's iteration, one
row per stage and lane (forward / backward micro-batches, transfers, all-reduce, bubble), on the
same time scale. Colours by kind. Prints per rank the iteration's time split by kind. Needs
matplotlib for the PNG; without it, prints the summary only.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys

COLORS = {
    "kernel": "#4c72b0", "optimizer": "#2a9d8f", "data": "#937860", "checkpoint": "#8c8c8c",
    "outer_step": "#da8bc3", "send": "#8172b3", "recv": "#c44e52", "allreduce": "#55a868",
    "codec": "#ff9f1c", "wait": "#d9d9d9", "transfer": "#6d597a",
    "forward": "#64b5cd", "backward": "#dd8452", "send_activation": "#b39ddb",
    "send_gradient": "#e48a8a", "bubble": "#eeeeee",
}
# Drawn first (below): the enclosing spans; their children paint over them.
ORDER = ["iteration", "send", "recv", "allreduce", "wait", "transfer", "codec", "data",
         "checkpoint", "outer_step", "kernel", "optimizer"]


def load(path):
    with open(path) as f:
        data = json.load(f)
    if "traceEvents" not in data:
        raise SystemExit(f"plot-trace: {path} is not a Chrome trace (no traceEvents)")
    return data


def names(events, kind):
    """{pid: name} or {(pid, tid): name} from the metadata events."""
    out = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == kind:
            key = e["pid"] if kind == "process_name" else (e["pid"], e.get("tid"))
            out[key] = e["args"]["name"]
    return out


def measured_window(events, iteration):
    """Spans of one iteration, (start, end) of it over every rank, in us."""
    its = [e for e in events if e.get("ph") == "X" and e.get("cat") == "iteration"]
    if not its:
        raise SystemExit("plot-trace: the measured trace has no iteration spans")
    numbers = sorted({int(e["name"].split()[-1]) for e in its})

    def extent(k):
        chosen = [e for e in its if e["name"] == f"iteration {k}"]
        return max(e["ts"] + e["dur"] for e in chosen) - min(e["ts"] for e in chosen)

    if iteration == "fastest":
        n = min(numbers, key=extent)
    else:
        n = int(iteration) if iteration is not None else numbers[-1]
    if n not in numbers:
        raise SystemExit(f"plot-trace: iteration {n} is not in the trace (it has {numbers})")
    chosen = [e for e in its if e["name"] == f"iteration {n}"]
    lo = min(e["ts"] for e in chosen)
    hi = max(e["ts"] + e["dur"] for e in chosen)
    spans = [e for e in events if e.get("ph") == "X" and e["ts"] < hi and e["ts"] + e["dur"] > lo]
    return n, lo, hi, spans


def summary(n, spans, lo, hi):
    print(f"measured iteration {n}: {(hi - lo) / 1e3:.2f} ms over all ranks")
    per = collections.defaultdict(lambda: collections.Counter())
    for e in spans:
        if e["cat"] != "iteration":
            per[e["pid"]][e["cat"]] += e["dur"] / 1e3
    for pid in sorted(per):
        parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(per[pid].items(), key=lambda kv: -kv[1]))
        print(f"  rank {pid} (ms): {parts}")


def draw_rows(ax, rows, spans_by_row, origin, scale):
    for i, key in enumerate(rows):
        by_cat = collections.defaultdict(list)
        for e in spans_by_row[key]:
            by_cat[e["cat"]].append(((e["ts"] - origin) * scale, max(e["dur"] * scale, 1e-6)))
        cats = sorted(by_cat, key=lambda c: ORDER.index(c) if c in ORDER else len(ORDER))
        for cat in cats:
            if cat == "iteration":
                continue
            h = 0.5 if cat in ("wait", "transfer", "codec") else 0.8
            ax.broken_barh(by_cat[cat], (i - h / 2, h), facecolors=COLORS.get(cat, "grey"),
                           edgecolor="none")
    ax.set_yticks(range(len(rows)))
    ax.invert_yaxis()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("measured")
    ap.add_argument("--plan", help="straitc --trace-plan output")
    ap.add_argument("--iteration", default=None, help="N, or fastest (default: the last)")
    ap.add_argument("-o", "--output", default=None)
    ap.add_argument("--title", default=None)
    args = ap.parse_args()
    measured = load(args.measured)["traceEvents"]
    n, lo, hi, spans = measured_window(measured, args.iteration)
    summary(n, spans, lo, hi)
    plan = load(args.plan) if args.plan else None
    if plan:
        other = plan.get("otherData", {})
        print(f"predicted iteration: {1e3 * other.get('iteration_time_s', 0):.2f} ms, bubble "
              f"{100 * other.get('bubble_fraction', 0):.0f} %, {other.get('micro_batches')} "
              f"micro-batches ({other.get('schedule')})")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot-trace: matplotlib not found; summary only", file=sys.stderr)
        return 0
    procs = names(measured, "process_name")
    lanes = names(measured, "thread_name")
    m_rows = sorted({(e["pid"], e["tid"]) for e in spans})
    m_by_row = collections.defaultdict(list)
    for e in spans:
        m_by_row[(e["pid"], e["tid"])].append(e)
    p_rows, p_by_row, p_procs, p_lanes = [], {}, {}, {}
    if plan:
        pe = [e for e in plan["traceEvents"] if e.get("ph") == "X"]
        p_procs = names(plan["traceEvents"], "process_name")
        p_lanes = names(plan["traceEvents"], "thread_name")
        p_rows = sorted({(e["pid"], e["tid"]) for e in pe})
        p_by_row = collections.defaultdict(list)
        for e in pe:
            p_by_row[(e["pid"], e["tid"])].append(e)
    heights = [len(m_rows), len(p_rows)] if plan else [len(m_rows)]
    fig, axes = plt.subplots(len(heights), 1, figsize=(13, 1.2 + 0.32 * sum(heights) + 0.6 * len(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    ax = axes[0][0]
    draw_rows(ax, m_rows, m_by_row, lo, 1e-3)
    ax.set_yticklabels([f"{procs.get(p, f'rank {p}').split(' (')[0]} {lanes.get((p, t), t)}"
                        for p, t in m_rows], fontsize=8)
    ax.set_title(args.title or f"measured: iteration {n}, {(hi - lo) / 1e3:.1f} ms "
                 f"(strait-run --trace)", fontsize=10)
    xmax = (hi - lo) * 1e-3
    if plan:
        pax = axes[1][0]
        draw_rows(pax, p_rows, p_by_row, 0, 1e-3)
        pax.set_yticklabels([f"{p_procs.get(p, f'stage {p}').replace(' predicted', '')} "
                             f"{p_lanes.get((p, t), t)}" for p, t in p_rows], fontsize=8)
        it = 1e3 * plan.get("otherData", {}).get("iteration_time_s", 0)
        pax.set_title(f"predicted: {it:.1f} ms (straitc --trace-plan)", fontsize=10)
        xmax = max(xmax, it)
        pax.set_xlim(0, xmax * 1.02)
        pax.set_xlabel("ms")
    ax.set_xlim(0, xmax * 1.02)
    ax.set_xlabel("ms from the iteration's start")
    used = {e["cat"] for e in spans} | ({e["cat"] for r in p_by_row.values() for e in r}
                                         if plan else set())
    used.discard("iteration")
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS.get(c, "grey")) for c in sorted(used)]
    fig.legend(handles, sorted(used), loc="lower center", ncol=min(8, len(used)), fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    out = args.output or args.measured.rsplit(".", 1)[0] + ".png"
    fig.savefig(out, dpi=110)
    print("wrote", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
