#!/usr/bin/env bash
# What the emulator's fault hooks cost when no hooks are installed, in instructions: the NIC
# engine's message-rate workload (//emu:engine_bench, 64 B SEND and RDMA WRITE, one thread
# driving both devices, no faults) runs under callgrind, and the instructions retired on the
# source lines that test for hooks (`opt_.faults`) are set against all the engine's instructions
# (DeviceImpl::step, inclusive). A benchmark, not a test; the goal is < 3 %.
#   tools/bench/fault_hook_cost.sh [MIN_TIME_S]     (from the repository root; default 0.5)
# Needs valgrind (callgrind_annotate comes with it).
set -euo pipefail
cd "$(dirname "$0")/../.."
min_time=${1:-0.5}
command -v valgrind >/dev/null || { echo "fault_hook_cost: valgrind not installed" >&2; exit 2; }
root=$PWD
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fault_hook_cost.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Line tables are needed to attribute instructions to the hook tests; -g does not change code.
bazel build -c opt --copt=-g --noshow_progress //emu:engine_bench >"$tmp/build.txt" 2>&1 ||
  { cat "$tmp/build.txt" >&2; exit 1; }
bin=$(bazel info -c opt --copt=-g bazel-bin 2>/dev/null)/emu/engine_bench
valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$bin" \
  --benchmark_filter='BM_(Send|Write)64Rate/0$' --benchmark_min_time="$min_time" >"$tmp/run.txt" 2>&1 ||
  { cat "$tmp/run.txt" >&2; exit 1; }
grep -E '^BM_' "$tmp/run.txt" | sed 's/^/  /'
callgrind_annotate --auto=yes --show-percs=no --include="$root" "$tmp/cg.out" >"$tmp/lines.txt" 2>/dev/null
callgrind_annotate --inclusive=yes --show-percs=no "$tmp/cg.out" >"$tmp/incl.txt" 2>/dev/null
# Annotated source lines: "  88,064      if (opt_.faults != nullptr) {"
hooks=$(awk '/opt_\.faults/ && $1 ~ /^[0-9,]+$/ { gsub(",", "", $1); s += $1; n++ }
             END { printf "%d %d\n", s, n }' "$tmp/lines.txt")
hook_ir=${hooks% *}
hook_lines=${hooks#* }
engine_ir=$(awk '/DeviceImpl::step\(int\) \[/ && $1 ~ /^[0-9,]+$/ { gsub(",", "", $1); print $1; exit }' \
  "$tmp/incl.txt")
total_ir=$(awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }' "$tmp/incl.txt")
[ -n "$engine_ir" ] && [ "$engine_ir" -gt 0 ] && [ "$hook_lines" -gt 0 ] ||
  { echo "fault_hook_cost: could not attribute instructions (no engine or hook lines found)" >&2; exit 1; }
awk -v h="$hook_ir" -v e="$engine_ir" -v t="$total_ir" -v n="$hook_lines" 'BEGIN {
  printf "fault hooks off: %d instructions on %d hook-test lines of %d in the engine (%d in the program)\n", h, n, e, t
  printf "overhead: %.3f %% of the engine'"'"'s instructions (goal < 3 %%)\n", 100 * h / e
}'
