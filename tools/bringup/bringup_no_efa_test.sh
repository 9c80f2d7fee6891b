#!/usr/bin/env bash
# The bring-up tool on a machine without EFA: it names the absence reason for the hardware side,
# runs the whole emulator side (every conformance test and the example pass) and exits 3.
set -uo pipefail
out=$("$1" --out "$TEST_TMPDIR/bringup" 2>&1)
rc=$?
echo "$out"
fail() { echo "FAIL: $*"; exit 1; }
[ $rc -eq 3 ] || fail "exit $rc, want 3 (no hardware side)"
grep -Eq '^hw: absent \((library-missing|rdma-core-too-old|no-efa-device)\): .+' <<<"$out" ||
  fail "no absence reason"
grep -Eq '^hw side skipped: absent \((library-missing|rdma-core-too-old|no-efa-device)\)' <<<"$out" ||
  fail "hw side not reported as skipped"
grep -q '^fi_getinfo emu host: fabric=efa-direct' <<<"$out" || fail "no emulator offer"
grep -Eq '^emu: [1-9][0-9]* passed, 0 failed; example exit 0$' <<<"$out" || fail "emulator side did not pass"
# The emulator side recorded completion traces (send/recv at least) in the documented format.
grep -Eqh '^d[0-9]+\.q[0-9]+ rq send status=0:OK len=[0-9]+ imm=' "$TEST_TMPDIR"/bringup/emu/trace/*.txt ||
  fail "no receive completions traced"
echo PASS
