#!/bin/bash
# tools/gpu/check.sh - the GPU run, on a machine with an NVIDIA GPU (from the repository root):
#   tools/gpu/check.sh [ROUNDS]
# 1. checks that a GPU is visible (nvidia-smi and the CUDA runtime) and stops with exit status 2,
#    saying why, when none is;
# 2. builds every `gpu`-tagged test and the latency benchmark (-c opt, nvcc for sm_90);
# 3. runs every `gpu`-tagged test;
# 4. runs tools/gpu:gpu_latency: device-initiated 64 B send and 8 KiB RDMA write latency from one
#    thread, one warp and one block through the emulated EFA;
# and prints a summary. Each step has a time limit so the whole run stays under 8 minutes.
# Exit status: 0 all passed, 1 a step failed, 2 no GPU.
set -u
cd "$(dirname "$0")/../.." || exit 1
rounds=${1:-2000}
start=$(date +%s)
log=$(mktemp -d "${TMPDIR:-/tmp}/xpufab-gpu-check.XXXXXX")
elapsed() { echo $(($(date +%s) - start)); }
fail() { echo "check.sh: FAILED: $*" >&2; echo "check.sh: logs in $log" >&2; exit 1; }

if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "check.sh: no NVIDIA GPU here: nvidia-smi is not installed (driver missing); run this on a GPU machine" >&2
  exit 2
fi
if ! nvidia-smi -L >"$log/gpus.txt" 2>&1 || ! grep -q '^GPU ' "$log/gpus.txt"; then
  echo "check.sh: no NVIDIA GPU here: nvidia-smi -L lists none:" >&2
  sed 's/^/  /' "$log/gpus.txt" >&2
  exit 2
fi
echo "== GPUs"
cat "$log/gpus.txt"

# The gpu-tagged tests, found by query so new ones are picked up.
tests=$(bazel query --noshow_progress 'attr(tags, "\bgpu\b", tests(//...))' 2>"$log/query.txt") ||
  { cat "$log/query.txt" >&2; fail "bazel query for gpu-tagged tests"; }
[ -n "$tests" ] || fail "no gpu-tagged tests found"
echo "== gpu-tagged tests:" $tests

echo "== build ($(elapsed) s)"
# shellcheck disable=SC2086
timeout 300 bazel build -c opt --noshow_progress $tests //tools/gpu:gpu_latency >"$log/build.txt" 2>&1 ||
  { tail -40 "$log/build.txt" >&2; fail "build (see $log/build.txt)"; }

echo "== gpu-tagged tests ($(elapsed) s)"
# shellcheck disable=SC2086
timeout 150 bazel test -c opt --noshow_progress --test_tag_filters=gpu --test_output=errors $tests \
  >"$log/test.txt" 2>&1
test_rc=$?
grep -E '^//.* (PASSED|FAILED|TIMEOUT|NO STATUS)' "$log/test.txt" || tail -40 "$log/test.txt"

echo "== device-initiated latency ($(elapsed) s)"
timeout 120 bazel-bin/tools/gpu/gpu_latency "$rounds" | tee "$log/latency.txt"
lat_rc=${PIPESTATUS[0]}

echo "== summary ($(elapsed) s, logs in $log)"
passed=$(grep -cE '^//.* PASSED' "$log/test.txt")
failed=$(grep -cE '^//.* (FAILED|TIMEOUT|NO STATUS)' "$log/test.txt")
echo "gpu-tagged tests: $passed passed, $failed failed (bazel test exit $test_rc)"
echo "latency benchmark: exit $lat_rc"
grep -E '^(64 B send|8 KiB write)' "$log/latency.txt" | sed 's/^/  /'
[ "$test_rc" -eq 0 ] && [ "$lat_rc" -eq 0 ] || exit 1
