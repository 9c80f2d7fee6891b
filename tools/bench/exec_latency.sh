#!/usr/bin/env bash
# 64-byte two-process ping-pong on the emulated EFA as a kernel device (what `./xpufab exec`
# sets up: the preload library, a generated sysfs tree, the shm fabric), next to the project's
# own provider (fabric_bench). One-way latency in microseconds; a benchmark, not a test.
#   bazel run -c opt //tools/bench:exec_latency [-- ITERATIONS]
# Needs fi_pingpong (libfabric-bin) and ib_send_lat (perftest). fi_pingpong's figure includes
# libfabric's own RNR backoff when its first message reaches a peer that has not posted receive
# buffers yet (a fixed cost, a few tenths of a second): more ITERATIONS amortize it.
set -euo pipefail
shim=$(readlink -f "$1")
make_sysfs=$(readlink -f "$2")
fabric_bench=$(readlink -f "$3")
shift 3
iters=${1:-2000}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/exec_latency.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$make_sysfs" "$tmp/sysfs"
mkdir -p "$tmp/shm"
port=$((20000 + $$ % 20000))

# $1: a tag that keeps each pair on a fabric of its own; the rest: the command.
on_emu() {
  local tag=$1
  shift
  SYSFS_PATH=$tmp/sysfs LD_PRELOAD=$shim FI_EFA_EMU_FABRIC=shm FI_EFA_EMU_SHM_DIR=$tmp/shm \
    FI_EFA_EMU_FABRIC_KEY=exec_latency_$$_$tag FI_EFA_ENABLE_SHM_TRANSFER=0 "$@"
}

run_fi_pingpong() {
  port=$((port + 1))
  local args=(-p efa -e rdm -S 64 -I "$iters")
  on_emu fi timeout 120 fi_pingpong "${args[@]}" -B "$port" >"$tmp/fi.server.txt" 2>&1 &
  local server=$! ok=0
  for _ in $(seq 1 50); do
    sleep 0.2
    if on_emu fi timeout 120 fi_pingpong "${args[@]}" -P "$port" 127.0.0.1 >"$tmp/fi.txt" 2>&1; then
      ok=1
      break
    fi
    kill -0 "$server" 2>/dev/null || break
  done
  wait "$server" || ok=0
  [ $ok = 1 ] || { echo "exec_latency: fi_pingpong failed" >&2; cat "$tmp/fi.server.txt" "$tmp/fi.txt" >&2; }
  awk '$1 == "64" {print $7}' "$tmp/fi.txt"
}

run_ib_send_lat() {
  port=$((port + 1))
  local args=(-c SRD -x 0 -s 64 -n "$iters" -p "$port")
  on_emu ib timeout 120 ib_send_lat "${args[@]}" >"$tmp/ib.server.txt" 2>&1 &
  local server=$! ok=0
  for _ in $(seq 1 50); do
    sleep 0.2
    if on_emu ib timeout 120 ib_send_lat "${args[@]}" 127.0.0.1 >"$tmp/ib.txt" 2>&1; then
      ok=1
      break
    fi
    kill -0 "$server" 2>/dev/null || break
  done
  wait "$server" || ok=0
  [ $ok = 1 ] || { echo "exec_latency: ib_send_lat failed" >&2; cat "$tmp/ib.server.txt" "$tmp/ib.txt" >&2; }
  # bytes iterations t_min t_max t_typical t_avg ...
  awk '$1 == "64" && NF >= 6 {print $5, $6}' "$tmp/ib.txt"
}

echo "exec_latency: 64 B two-process ping-pong, $iters iterations, one-way latency"
fi_us=$(run_fi_pingpong)
ib=$(run_ib_send_lat)
ib_typ=${ib% *}
ib_avg=${ib#* }
own_us=$("$fabric_bench" --quick 2>/dev/null | awk '/^emulated EFA 64 B send latency/ {print $(NF-1)}')

row() { printf '%-58s %12s %s\n' "$1" "${2:-failed}" "$3"; }
echo
row "libfabric efa fi_pingpong -p efa -e rdm (./xpufab exec)" "$fi_us" "us"
row "perftest ib_send_lat -c SRD, typical (./xpufab exec)" "$ib_typ" "us"
row "perftest ib_send_lat -c SRD, average (./xpufab exec)" "$ib_avg" "us"
row "project provider, emulated EFA (fabric_bench --quick)" "$own_us" "us"
echo
if [ -n "$fi_us" ] && [ -n "$own_us" ]; then
  awk -v a="$fi_us" -v b="$own_us" 'BEGIN {
    r = a / b
    printf "%-58s %12.2f x    target <= 3.00  %s\n", "libfabric efa / project provider", r, r <= 3 ? "MET" : "NOT MET"
  }'
fi
if [ -n "$ib_typ" ] && [ -n "$own_us" ]; then
  awk -v a="$ib_typ" -v b="$own_us" 'BEGIN {
    printf "%-58s %12.2f x\n", "ib_send_lat typical / project provider", a / b
  }'
fi
[ -n "$fi_us" ] && [ -n "$ib_typ" ] && [ -n "$own_us" ]
