#!/usr/bin/env bash
# One 64 B ping-pong program (same_pingpong.c, built here against Debian's libfabric) on Debian's
# shm provider and on the installed library's efa provider over the emulated EFA's shm fabric,
# alternated ROUNDS times; prints every run (with the lowest and highest p50 of its slices: on a
# shared host the emulated EFA's compute-bound path changes level within a run where shm's does
# not) and the median over rounds of the efa/shm ratios of the median and of the mean. A
# benchmark, not a test.
#   bazel run -c opt //tools/bench:same_pingpong [-- ROUNDS [ROUND_TRIPS]]
# Needs cc and Debian's libfabric-dev.
set -euo pipefail
src=$(readlink -f "$1")
shift
rounds=${1:-10}
trips=${2:-20000}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/same_pingpong.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tools/install.sh "$tmp/prefix" >/dev/null
cc -O2 -o "$tmp/same_pingpong" "$src" -lfabric

# PROVIDER [VAR=VALUE...]: the program's "mean M p10 A p50 B ... slice-p50 LO-HI" as "M B LO-HI".
run() {
  local prov=$1
  shift
  env "$@" timeout 120 "$tmp/same_pingpong" "$prov" "$trips" | awk '{ print $5, $9, $15 }'
}

echo "same_pingpong: 64 B one-way us (fi_send, send and receive completions awaited on both sides), load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %10s %10s %10s %10s %12s %12s %14s\n' round "shm mean" "shm p50" "efa mean" "efa p50" "mean ratio" \
    "p50 ratio" "efa slice p50"
for r in $(seq "$rounds"); do
  read -r shm_mean shm_p50 _ < <(run shm)
  read -r efa_mean efa_p50 efa_slices < <(run efa LD_LIBRARY_PATH="$tmp/prefix/lib" FI_EFA_BACKEND=emu \
                                   FI_EFA_EMU_FABRIC=shm FI_EFA_EMU_SHM_DIR="$tmp")
  awk -v r="$r" -v a="$shm_mean" -v b="$shm_p50" -v c="$efa_mean" -v d="$efa_p50" -v e="$efa_slices" \
    'BEGIN { printf "%-6s %10.3f %10.3f %10.3f %10.3f %11.2fx %11.2fx %14s\n", r, a, b, c, d, c / a, d / b, e }'
done | tee "$tmp/rows"
# COLUMN: the median over rounds of that column of the rows.
median_of() {
  sort -n -k"$1,$1" "$tmp/rows" |
    awk -v c="$1" '{ m[NR] = $c + 0 } END { printf "%.2f", (NR % 2) ? m[(NR + 1) / 2] : (m[NR / 2] + m[NR / 2 + 1]) / 2 }'
}
echo "median of the rounds: mean ratio $(median_of 6)x, p50 ratio $(median_of 7)x (goal: at most 1.5x)"
