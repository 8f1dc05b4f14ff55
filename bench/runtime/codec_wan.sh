#!/usr/bin/env bash
# Tokens per second of gpt2-tiny trained by 4 ranks as two hosts of two
# (examples/clusters/local-4cpu.yaml) over a tbf-shaped link, with the
# gradient all-reduce uncompressed and compressed, measured in the same run
# (root only: runtime/scripts/wan-netns.sh). The plan is forced to 4
# data-parallel replicas (--strategy pipedream --num-stages 1), so the
# exporter writes islands {0,1},{2,3} and the codec applies between hosts.
#
#   bench/runtime/codec_wan.sh [--build build] [--rates 10mbit,100mbit]
#                              [--codecs none,int8,topk:0.01] [--steps 10]
#
# Prints per rate and codec: the median iteration time of the slowest rank
# (iterations 2..steps, from the rank logs), tokens/s and the ratio to
# "none", the loss at the last step, and the bytes rank 0 sent across the
# link in one iteration. Needs out/text/train.bin
# (runtime/scripts/make-text-tokens.py out/text).
set -euo pipefail
build=build rates=10mbit,100mbit codecs=none,int8,topk:0.01 steps=10
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --codecs) codecs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "codec_wan: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
[ "$(id -u)" = 0 ] || { echo "codec_wan: needs root (network namespaces)" >&2; exit 77; }
[ -f out/text/train.bin ] || { echo "codec_wan: run runtime/scripts/make-text-tokens.py out/text first" >&2; exit 2; }
work=$(mktemp -d /tmp/strait-codec-wan-XXXXXX)
trap 'rm -rf "$work"' EXIT
IFS=, read -ra codecList <<< "$codecs"
IFS=, read -ra rateList <<< "$rates"
for c in "${codecList[@]}"; do
  "$build/bin/straitc" models/gpt2-tiny/gpt2-tiny.onnx --input-shape input_ids=8x64 \
    --loss cross-entropy --optimizer adamw --cluster examples/clusters/local-4cpu.yaml \
    --global-batch 16 --strategy pipedream --num-stages 1 --compress "$c" \
    -o "$work/${c//[:.]/_}" > /dev/null
done
echo "| link | codec | step ms | tokens/s | vs none | loss at step $steps | bytes rank0 -> rank2 per step |"
echo "|---|---|---|---|---|---|---|"
for rate in "${rateList[@]}"; do
  base=""
  for c in "${codecList[@]}"; do
    job="$work/${c//[:.]/_}"
    rm -rf "$job/logs" "$job/rendezvous"
    runtime/scripts/wan-netns.sh --ranks 4 --hosts 0,0,1,1 --rate "$rate" \
      --strait-run "$build/runtime/tools/strait-run" -- "$job" --data out/text/train.bin \
      --data-format tokens-u16 --steps "$steps" --lr 0.003 > "$work/run.out" 2>&1 ||
      { tail -5 "$work/run.out" >&2; exit 1; }
    line=$(python3 - "$job" "$steps" <<'PY'
import re, statistics, sys
job, steps = sys.argv[1], int(sys.argv[2])
slowest, loss, cross = {}, "-", "-"
for r in range(4):
    for text in open(f"{job}/logs/rank{r}.log"):
        m = re.search(r"iteration (\d+)/\d+ time ([\d.]+) ms(?: loss ([\d.]+))?.* sent (\S+)", text)
        if not m:
            continue
        it, t = int(m.group(1)), float(m.group(2))
        slowest[it] = max(slowest.get(it, 0.0), t)
        if r == 0 and it == steps:
            loss = m.group(3) or "-"
            cross = dict(kv.split(":") for kv in m.group(4).split(",") if ":" in kv).get("2", "-")
ms = statistics.median(slowest[i] for i in range(2, steps + 1))
print(f"{ms:.1f} {16 * 64 / (ms / 1000):.0f} {loss} {cross}")
PY
)
    read -r ms tps loss cross <<< "$line"
    [ -n "$base" ] || base=$tps
    ratio=$(python3 -c "print(f'{$tps / $base:.2f}x')")
    echo "| $rate | $c | $ms | $tps | $ratio | $loss | $cross |"
  done
done
