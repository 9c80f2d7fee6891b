#!/bin/sh
# Builds the WQE fuzz target with clang's libFuzzer + ASan/UBSan and runs it.
#   emu/run_wqe_fuzzer.sh [RUNS] [extra libFuzzer flags...]     (from the repository root)
# Outside Bazel on purpose: Bazel 4's toolchain is gcc, and libFuzzer needs clang.
set -eu
runs=${1:-20000}
[ $# -gt 0 ] && shift
out=${TMPDIR:-/tmp}/xpufab_wqe_fuzzer
clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I. -Iapi/include \
  emu/wqe_fuzz.cc emu/wqe_decode.cc emu/device.cc emu/objects.cc emu/control.cc emu/qp_state.cc \
  emu/doorbells.cc emu/requester.cc emu/responder.cc emu/completions.cc emu/engine.cc emu/stats.cc \
  emu/fabric.cc emu/profile.cc emu/faults/plan.cc emu/trace/trace.cc api/backend/registry.cc \
  -lpthread -o "$out"
exec "$out" -runs="$runs" -max_len=2048 "$@"
