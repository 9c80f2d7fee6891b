#!/usr/bin/env bash
# 64-byte two-process ping-pong on the emulated EFA as a kernel device (what `./xpufab exec`
# sets up: the preload library, a generated sysfs tree, the shm fabric), next to the project's
# own provider (fabric_bench). One-way latency in microseconds; a benchmark, not a test.
#   bazel run -c opt //tools/bench:exec_latency [-- ITERATIONS]
# Needs fi_pingpong (libfabric-bin) and ib_send_lat (perftest).
#
# fi_pingpong times its first iteration too, and libfabric's efa provider fills its packet pools
# (about 250 MB of memset per process with the emulated device's queue sizes, as on hardware)
# and takes an RNR at its first message inside it: a fixed start-up cost of a few tenths of a
# second. fi_pingpong has no warm-up, so it runs twice, ITERATIONS and ITERATIONS/10, and the
# steady-state latency is the slope between them; that figure is the one compared with the
# project's provider (fabric_bench warms up). The raw figure and the start-up cost are printed
# too. Each process's emulator counters (XPUFAB_EMU_STATS) are printed per iteration: engine
# steps, verbs-call passes, service-thread passes and sleeps, RNR NAKs, retransmits, counts
# that do not depend on the machine's load as the times do.
set -euo pipefail
shim=$(readlink -f "$1")
make_sysfs=$(readlink -f "$2")
fabric_bench=$(readlink -f "$3")
shift 3
iters=${1:-5000}
short_iters=$((iters / 10 > 0 ? iters / 10 : 1))
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

# $1: iterations. Prints the total time of the run in microseconds (usec/xfer times 2 x iterations).
run_fi_pingpong() {
  local n=$1
  port=$((port + 1))
  local args=(-p efa -e rdm -S 64 -I "$n")
  : >"$tmp/stats.txt"
  XPUFAB_EMU_STATS=$tmp/stats.txt on_emu fi timeout 300 fi_pingpong "${args[@]}" -B "$port" \
    >"$tmp/fi.server.txt" 2>&1 &
  local server=$! ok=0
  for _ in $(seq 1 50); do
    sleep 0.2
    if XPUFAB_EMU_STATS=$tmp/stats.txt on_emu fi timeout 300 fi_pingpong "${args[@]}" -P "$port" \
      127.0.0.1 >"$tmp/fi.txt" 2>&1; then
      ok=1
      break
    fi
    kill -0 "$server" 2>/dev/null || break
  done
  wait "$server" || ok=0
  [ $ok = 1 ] || { echo "exec_latency: fi_pingpong failed" >&2; cat "$tmp/fi.server.txt" "$tmp/fi.txt" >&2; }
  cp "$tmp/stats.txt" "$tmp/stats.fi.$n.txt"
  awk -v n="$n" '$1 == "64" {printf "%.1f\n", $7 * 2 * n}' "$tmp/fi.txt"
}

# Per-iteration counters of each process of a run: $1 the statistics file, $2 the iterations.
per_iteration() {
  awk -v n="$2" '{
    line = ""
    for (i = 1; i <= NF; ++i) {
      split($i, kv, "=")
      if (kv[1] ~ /^(steps|caller_passes|caller_lock_busy|service_passes|service_sleeps|engine_sleeps|rnr_naks|rnr_retries|retransmits)$/)
        line = line sprintf(" %s=%.2f", kv[1], kv[2] / n)
    }
    print "  " $1 line
  }' "$1"
}

run_ib_send_lat() {
  port=$((port + 1))
  local args=(-c SRD -x 0 -s 64 -n "$iters" -p "$port")
  : >"$tmp/stats.txt"
  XPUFAB_EMU_STATS=$tmp/stats.txt on_emu ib timeout 120 ib_send_lat "${args[@]}" \
    >"$tmp/ib.server.txt" 2>&1 &
  local server=$! ok=0
  for _ in $(seq 1 50); do
    sleep 0.2
    if XPUFAB_EMU_STATS=$tmp/stats.txt on_emu ib timeout 120 ib_send_lat "${args[@]}" 127.0.0.1 \
      >"$tmp/ib.txt" 2>&1; then
      ok=1
      break
    fi
    kill -0 "$server" 2>/dev/null || break
  done
  wait "$server" || ok=0
  [ $ok = 1 ] || { echo "exec_latency: ib_send_lat failed" >&2; cat "$tmp/ib.server.txt" "$tmp/ib.txt" >&2; }
  cp "$tmp/stats.txt" "$tmp/stats.ib.txt"
  # bytes iterations t_min t_max t_typical t_avg ...
  awk '$1 == "64" && NF >= 6 {print $5, $6}' "$tmp/ib.txt"
}

echo "exec_latency: 64 B two-process ping-pong, $iters iterations, one-way latency; $(uptime | sed 's/.*load/load/')"
fi_long=$(run_fi_pingpong "$iters")
fi_short=$(run_fi_pingpong "$short_iters")
fi_raw= fi_us= fi_startup=
if [ -n "$fi_long" ] && [ -n "$fi_short" ]; then
  read -r fi_raw fi_us fi_startup < <(awk -v a="$fi_long" -v b="$fi_short" -v n="$iters" -v m="$short_iters" 'BEGIN {
    slope = (a - b) / (2 * (n - m))
    printf "%.2f %.2f %.0f\n", a / (2 * n), slope, (a - 2 * n * slope) / 1000
  }')
fi
ib=$(run_ib_send_lat)
ib_typ=${ib% *}
ib_avg=${ib#* }
own_us=$("$fabric_bench" --quick 2>/dev/null | awk '/^emulated EFA 64 B send latency/ {print $(NF-1)}')

row() { printf '%-62s %12s %s\n' "$1" "${2:-failed}" "$3"; }
echo
row "libfabric efa fi_pingpong -p efa -e rdm, steady state" "$fi_us" "us"
row "libfabric efa fi_pingpong, as printed (start-up included)" "$fi_raw" "us"
row "libfabric efa fi_pingpong, start-up cost (pools, first RNR)" "$fi_startup" "ms"
row "perftest ib_send_lat -c SRD, typical (./xpufab exec)" "$ib_typ" "us"
row "perftest ib_send_lat -c SRD, average (./xpufab exec)" "$ib_avg" "us"
row "project provider, emulated EFA (fabric_bench --quick)" "$own_us" "us"
echo
if [ -n "$fi_us" ] && [ -n "$own_us" ]; then
  awk -v a="$fi_us" -v b="$own_us" 'BEGIN {
    r = a / b
    printf "%-62s %12.2f x    target <= 3.00  %s\n", "libfabric efa (steady state) / project provider", r, r <= 3 ? "MET" : "NOT MET"
  }'
fi
if [ -n "$ib_typ" ] && [ -n "$own_us" ]; then
  awk -v a="$ib_typ" -v b="$own_us" 'BEGIN {
    printf "%-62s %12.2f x\n", "ib_send_lat typical / project provider", a / b
  }'
fi
echo
echo "per iteration, each process (fi_pingpong $iters iterations; ib_send_lat $iters):"
[ -s "$tmp/stats.fi.$iters.txt" ] && per_iteration "$tmp/stats.fi.$iters.txt" "$iters"
[ -s "$tmp/stats.ib.txt" ] && per_iteration "$tmp/stats.ib.txt" "$iters"
echo "load after the runs: $(uptime | sed 's/.*load/load/')"
[ -n "$fi_us" ] && [ -n "$ib_typ" ] && [ -n "$own_us" ]
