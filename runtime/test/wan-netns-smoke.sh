#!/usr/bin/env bash
# Emulated-WAN smoke test: two ranks in network namespaces joined by a
# 100mbit tbf link (runtime/scripts/wan-netns.sh); rank 0 sends 4 MiB to
# rank 1 per iteration through strait-run's Gloo send/recv. Checks that the
# job succeeds, that the achieved throughput (rank 1's received bytes over
# its iteration times, iterations 2..N) is within [60%, 105%] of the rate,
# and that no namespace is left behind. Then both ranks on one host
# (--hosts 0,0, 10mbit link): their traffic stays inside the namespace and
# must run at more than 10x the link's rate.
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
# "rank 1 iteration N/6 time MS ms loss 0 sent - recv 0:BYTES" -> Mbit/s
measure() {
  awk '/^rank 1 iteration / { split($4, f, "/"); if (f[1] < 2) next
      for (i = 1; i <= NF; i++) { if ($i == "time") ms += $(i + 1); if ($i == "recv") { split($(i + 1), b, ":"); bytes += b[2] } } n++ }
    END { if (n == 0 || ms <= 0) exit 1; printf "%.1f\n", bytes * 8 / (ms / 1000) / 1e6 }' "$work/logs/rank1.log"
}
mbit=$(measure) || { echo "FAIL: no iterations in rank1.log"; exit 1; }
echo "wan-netns: achieved $mbit Mbit/s over a ${rate_mbit}mbit tbf link (5 iterations of 4 MiB)"
awk -v m="$mbit" -v r=$rate_mbit 'BEGIN { exit !(m >= 0.6 * r && m <= 1.05 * r) }' ||
  { echo "FAIL: throughput outside [60%, 105%] of the rate"; exit 1; }
"$src/runtime/scripts/wan-netns.sh" --ranks 2 --hosts 0,0 --rate 10mbit --strait-run "$run" \
  -- "$work" --steps $steps --threads 1 --timeout-ms 60000
local_mbit=$(measure) || { echo "FAIL: no iterations in rank1.log"; exit 1; }
echo "wan-netns: two ranks on one host: $local_mbit Mbit/s (link 10mbit, not crossed)"
awk -v m="$local_mbit" 'BEGIN { exit !(m > 100) }' ||
  { echo "FAIL: ranks of one host were shaped"; exit 1; }
if ip netns list | grep -q "^straitwan-"; then
  echo "FAIL: namespaces left behind:"; ip netns list | grep "^straitwan-"; exit 1
fi
