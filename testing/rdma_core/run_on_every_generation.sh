#!/usr/bin/env bash
# Runs a program ($3...) under the preload library once per emulated generation; fails if any
# run fails.
source "$(dirname "$0")/rdma_core_env.sh" "$1" "$2"
shift 2
for gen in "${GENERATIONS[@]}"; do
  echo "== $gen"
  FI_EFA_EMU_PROFILE=$gen with_shim "$@" || fail "$gen: $*"
done
echo "PASS"
