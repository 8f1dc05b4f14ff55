#!/usr/bin/env python3
"""Draws a simulated timeline (strait-plan-bench --timeline DIR) as a Gantt PNG.

usage: plot_timeline.py TIMELINE.json [-o OUT.png]

One row per pipeline stage (forward, backward, all-reduce) and one per cut
(activation and gradient transfers). Needs matplotlib; without it the script
prints a text summary instead and exits 0.
"""
import argparse
import json
import sys

COLORS = {"forward": "#4c72b0", "backward": "#dd8452", "allreduce": "#55a868",
          "send_activation": "#8172b3", "send_gradient": "#c44e52"}


def summary(data):
    print(f"iteration {data['iteration_time']:.4f} s, bubble "
          f"{100 * data['bubble_fraction']:.1f}%, {data['micro_batches']} "
          f"micro-batches, {data['schedule']}")
    for link in data.get("links", []):
        print(f"  {link['name']}: {link['bytes'] / 1e6:.1f} MB, "
              f"utilization {100 * link['utilization']:.1f}%")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("timeline")
    ap.add_argument("-o", "--output", default=None)
    args = ap.parse_args()
    with open(args.timeline) as f:
        data = json.load(f)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not found; text summary only", file=sys.stderr)
        summary(data)
        return 0
    stages = len(data["stages"])
    fig, ax = plt.subplots(figsize=(12, 1 + 0.6 * (2 * stages)))
    labels = []
    for s in range(stages):
        labels.append(f"stage {s}")
    for s in range(max(0, stages - 1)):
        labels.append(f"cut {s}->{s + 1}")
    for e in data["events"]:
        kind = e["kind"]
        if kind.startswith("send"):
            # Activations leave stage s, gradients leave stage s + 1.
            cut = e["stage"] if kind == "send_activation" else e["stage"] - 1
            row = stages + cut
        else:
            row = e["stage"]
        ax.barh(row, e["end"] - e["start"], left=e["start"], height=0.8,
                color=COLORS.get(kind, "grey"), edgecolor="none")
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_title(f"iteration {data['iteration_time']:.3f} s, bubble "
                 f"{100 * data['bubble_fraction']:.0f}%, "
                 f"{data['micro_batches']} micro-batches ({data['schedule']})")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    ax.legend(handles, COLORS.keys(), loc="lower right", fontsize="small")
    out = args.output or args.timeline.rsplit(".", 1)[0] + ".png"
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print("wrote", out)
    summary(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
