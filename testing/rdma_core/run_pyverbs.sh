#!/usr/bin/env bash
# rdma-core's own tests (Debian's python3-pyverbs, /usr/share/doc/rdma-core/tests) on every
# emulated generation. $1: the preload library, $2: make_sysfs.sh; standalone or as an sh_test.
# RDMA_CORE_TESTS overrides where the tests are read from.
source "$(dirname "$0")/rdma_core_env.sh" "$1" "$2"
src=${RDMA_CORE_TESTS:-/usr/share/doc/rdma-core/tests}
[ -f "$src/run_tests.py" ] || [ -f "$src/run_tests.py.gz" ] || fail "no rdma-core tests in $src (python3-pyverbs)"
suite=$tmp/rdma_core_tests
rm -rf "$suite"
mkdir -p "$suite"
cp -r "$src"/. "$suite"/
find "$suite" -name '*.gz' -exec gunzip -f {} +
runner=$(readlink -f "$(dirname "$0")/pyverbs_run.py")
rc=0
for gen in "${GENERATIONS[@]}"; do
  log=$tmp/pyverbs_$gen.txt
  if FI_EFA_EMU_PROFILE=$gen with_shim timeout 300 /usr/bin/python3 "$runner" "$suite" "$gen" >"$log" 2>&1; then
    grep '^note: ' "$log" || true
    tail -n 1 "$log"
  else
    rc=1
    # The tracebacks and the verdict; the whole -v listing stays in the log.
    sed -n '/^======/,$p' "$log"
    grep -q '^gen' <<<"$(tail -n 1 "$log")" || tail -n 40 "$log"
  fi
done
[ $rc = 0 ] || fail "rdma-core tests"
echo "PASS"
