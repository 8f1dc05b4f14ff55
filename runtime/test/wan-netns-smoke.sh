#!/usr/bin/env bash
# Emulated-WAN smoke test: two ranks in network namespaces joined by a
# 100mbit tbf link (runtime/scripts/wan-netns.sh); rank 0 sends 4 MiB to
# rank 1 per iteration through strait-run's Gloo send/recv. Checks that the
# job succeeds, that the achieved throughput (rank 1's received bytes over
# its iteration times, iterations 2..N) is within [60%, 105%] of the rate,
# and that no namespace is left behind.
# usage: wan-netns-smoke.sh STRAIT_RUN PLAN_WRITER SOURCE_DIR WORK_DIR
# Exits 77 (ctest skip) when not root or `ip netns` is unavailable.
set -euo pipefail
run=$1 writer=$2 src=$3 work=$4/wan-netns-smoke
if [ "$(id -u)" != 0 ]; then echo "skipped: needs root"; exit 77; fi
probe=straitwan-probe-$$
if ! command -v tc >/dev/null || ! ip netns add "$probe" 2>/dev/null; then
  echo "skipped: ip netns / tc unavailable"; exit 77
fi
ip netns del "$probe"
rm -rf "$work"; mkdir -p "$work"
"$writer" "$work" 1048576 # f32[1M] = 4 MiB per iteration
rate_mbit=100 steps=6
"$src/runtime/scripts/wan-netns.sh" --ranks 2 --rate ${rate_mbit}mbit --strait-run "$run" \
  -- "$work" --steps $steps --threads 1 --timeout-ms 60000
# "rank 1 iteration N/6 time MS ms loss 0 sent - recv 0:BYTES"
awk -v rate=$rate_mbit '
  /^rank 1 iteration / { split($4, f, "/"); if (f[1] < 2) next
    for (i = 1; i <= NF; i++) { if ($i == "time") ms += $(i + 1); if ($i == "recv") { split($(i + 1), b, ":"); bytes += b[2] } } n++ }
  END { if (n == 0 || ms <= 0) { print "FAIL: no iterations in rank1.log"; exit 1 }
        mbit = bytes * 8 / (ms / 1000) / 1e6
        printf "wan-netns: achieved %.1f Mbit/s over a %d mbit tbf link (%.0f%%), %d iterations of %d bytes\n", mbit, rate, 100 * mbit / rate, n, bytes / n
        if (mbit < 0.6 * rate || mbit > 1.05 * rate) { print "FAIL: throughput outside [60%, 105%] of the rate"; exit 1 } }
' "$work/logs/rank1.log"
if ip netns list | grep -q "^straitwan-"; then
  echo "FAIL: namespaces left behind:"; ip netns list | grep "^straitwan-"; exit 1
fi
