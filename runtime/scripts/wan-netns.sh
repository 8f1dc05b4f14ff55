#!/usr/bin/env bash
# Emulated WAN for a strait-run job on one machine (root only).
#
#   wan-netns.sh --ranks N [--hosts H0,H1,...] [--rate 100mbit | --rates R0,R1,...]
#                [--delay 20ms] [--strait-run PATH] -- DIR [strait-run worker args...]
#
# Creates one network namespace per host (default: one host per rank;
# --hosts gives each rank's host index, e.g. 0,0,1,1 for
# examples/clusters/local-4cpu.yaml) and a hub namespace with a bridge; host
# H's namespace gets 10.213.0.(H+1)/24 on a veth whose other end is on the
# bridge. Both directions of host H's link are shaped with tbf to its rate
# (--rates: one per host; the last repeats), the uplink in its namespace and
# the downlink on the hub side, so traffic between two hosts of rate R runs
# at R; --delay adds a netem delay on each uplink (the one-way latency
# between hosts). Ranks of one host talk inside their namespace, unshaped.
# Then every rank runs as
#   ip netns exec NS strait-run DIR --rank R --run-id ID --listen-address 10.213.0.(H+1) ARGS
# with its log in DIR/logs/rank<R>.log (the rendezvous is the plan's file
# store, a folder all namespaces see). When a rank fails the others are
# stopped and the script exits 1 naming the rank; Ctrl-C stops all and exits
# 130. Namespaces and links are removed on every exit (trap). Only addresses
# inside the namespaces created here are touched.
set -euo pipefail

ranks=0 rates="" delay="" run="" hosts=""
die() { echo "wan-netns: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --ranks) ranks=$2; shift 2 ;;
    --rate) rates=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --strait-run) run=$2; shift 2 ;;
    --) shift; break ;;
    *) die "unknown argument '$1' (see the header of $0)" ;;
  esac
done
[ $# -ge 1 ] || die "missing -- DIR"
dir=$1; shift
[[ $ranks =~ ^[0-9]+$ ]] && [ "$ranks" -ge 1 ] && [ "$ranks" -le 250 ] || die "--ranks N (1..250) is required"
[ -n "$rates" ] || rates=100mbit
[ "$(id -u)" = 0 ] || die "needs root (network namespaces and tc)"
command -v ip >/dev/null && command -v tc >/dev/null || die "needs ip and tc (iproute2)"
if [ -z "$run" ]; then
  here=$(cd "$(dirname "$0")/../.." && pwd)
  for c in "$here/build-rt/runtime/tools/strait-run" "$here/build/runtime/tools/strait-run" \
           "$(command -v strait-run || true)"; do
    [ -n "$c" ] && [ -x "$c" ] && { run=$c; break; }
  done
fi
[ -n "$run" ] && [ -x "$run" ] || die "strait-run not found; pass --strait-run PATH"
[ -f "$dir/plan.pb" ] || die "no plan at $dir/plan.pb"

IFS=, read -r -a rate_list <<<"$rates"
host_of=()
if [ -n "$hosts" ]; then
  IFS=, read -r -a host_of <<<"$hosts"
  [ "${#host_of[@]}" -eq "$ranks" ] || die "--hosts has ${#host_of[@]} entries for $ranks ranks"
else
  for ((r = 0; r < ranks; r++)); do host_of+=("$r"); done
fi
nhosts=0
for h in "${host_of[@]}"; do
  [[ $h =~ ^[0-9]+$ ]] && [ "$h" -lt 250 ] || die "--hosts: '$h' is not a host index 0..249"
  [ "$h" -lt "$nhosts" ] || nhosts=$((h + 1))
done
rate_of() { # host -> rate
  local r=$1
  [ "$r" -lt "${#rate_list[@]}" ] && echo "${rate_list[$r]}" || echo "${rate_list[${#rate_list[@]}-1]}"
}
bits_of() { # "100mbit" -> bits per second
  local v=${1,,} n unit
  [[ $v =~ ^([0-9]+)(bit|kbit|mbit|gbit)$ ]] || die "rate '$1': expected NUMBER{bit,kbit,mbit,gbit}"
  n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]}
  case $unit in bit) echo "$n" ;; kbit) echo $((n * 1000)) ;; mbit) echo $((n * 1000000)) ;; gbit) echo $((n * 1000000000)) ;; esac
}

id=$$
hub=straitwan-$id-hub
namespaces=() pids=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 0.2
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "wan-netns: interrupted; stopping all ranks" >&2; exit 130' INT
trap 'exit 143' TERM

shape() { # ns dev rate uplink(0/1)
  local ns=$1 dev=$2 rate=$3 up=$4 bits burst parent=root
  bits=$(bits_of "$rate")
  burst=$((bits / 8 / 100)) # 10 ms worth of bytes, at least 16 KB
  [ "$burst" -ge 16384 ] || burst=16384
  if [ -n "$delay" ] && [ "$up" = 1 ]; then
    ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: netem delay "$delay" ||
      { echo "wan-netns: netem delay '$delay' failed on $dev (no sch_netem in this kernel?); drop --delay" >&2; exit 1; }
    parent="parent 1: handle 2:"
  fi
  # shellcheck disable=SC2086
  ip netns exec "$ns" tc qdisc add dev "$dev" $parent tbf rate "$rate" burst "$burst" latency 100ms
}

ip netns add "$hub"; namespaces+=("$hub")
ip -n "$hub" link add br0 type bridge
ip -n "$hub" link set br0 up
ip -n "$hub" link set lo up
for ((h = 0; h < nhosts; h++)); do
  ns=straitwan-$id-h$h
  ip netns add "$ns"; namespaces+=("$ns")
  ip link add "sw${id}h${h}a" netns "$ns" type veth peer name "sw${id}h${h}b" netns "$hub"
  ip -n "$ns" link set "sw${id}h${h}a" name eth0
  ip -n "$ns" addr add "10.213.0.$((h + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip -n "$hub" link set "sw${id}h${h}b" master br0
  ip -n "$hub" link set "sw${id}h${h}b" up
  shape "$ns" eth0 "$(rate_of $h)" 1
  shape "$hub" "sw${id}h${h}b" "$(rate_of $h)" 0
  rs=""
  for ((r = 0; r < ranks; r++)); do [ "${host_of[$r]}" = "$h" ] && rs+=" $r"; done
  echo "wan-netns: host $h ($ns, 10.213.0.$((h + 1))): ranks$rs, link $(rate_of $h)${delay:+, delay $delay}"
done

mkdir -p "$dir/logs" "$dir/rendezvous" # the file store of straitc's plans
run_id=wan-$id-$(date +%s)
for ((r = 0; r < ranks; r++)); do
  h=${host_of[$r]}
  ip netns exec "straitwan-$id-h$h" env RANK=$r WORLD_SIZE=$ranks LOCAL_RANK=$r \
    "$run" "$dir" --rank "$r" --run-id "$run_id" --listen-address "10.213.0.$((h + 1))" "$@" \
    >"$dir/logs/rank$r.log" 2>&1 &
  pids+=($!)
done

status=0
declare -A rank_of
for ((r = 0; r < ranks; r++)); do rank_of[${pids[$r]}]=$r; done
live=("${pids[@]}")
while [ ${#live[@]} -gt 0 ]; do
  set +e
  wait -n -p done_pid "${live[@]}"
  rc=$?
  set -e
  [ -n "${done_pid:-}" ] || continue
  r=${rank_of[$done_pid]}
  next=()
  for p in "${live[@]}"; do [ "$p" = "$done_pid" ] || next+=("$p"); done
  live=("${next[@]}")
  if [ "$rc" -ne 0 ]; then
    echo "wan-netns: rank $r failed (exit code $rc); stopping the other ranks. Last lines of $dir/logs/rank$r.log:" >&2
    tail -n 5 "$dir/logs/rank$r.log" | sed 's/^/  | /' >&2
    status=1
    break
  fi
done
[ "$status" -eq 0 ] && echo "wan-netns: all $ranks ranks finished; logs in $dir/logs"
exit "$status"
