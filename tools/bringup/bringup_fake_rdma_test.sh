#!/usr/bin/env bash
# The bring-up tool end to end with its hardware side on Debian's rdma-core over the emulated EFA
# (the preload library and sysfs tree of `./xpufab exec`): the device is found, its caps select
# the emulator generation and the caps it lacks (external-memory CQs and completion counters on
# libefa v44) are cleared on the emulator side, so every conformance test, XPU ones included, and
# the example run on both sides with no difference.
# $1: preload library, $2: make_sysfs.sh, $3: fake_rdma_env.sh, $4: the tool.
set -uo pipefail
tool=$4
source "$3" "$1" "$2"
out=$(with_shim "$tool" --out "$TEST_TMPDIR/bringup" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "exit $rc, want 0 (no difference)"
grep -q '^device efa_0: vendor_part_id=0xefa' <<<"$out" || fail "device not listed"
grep -q '^hw: available$' <<<"$out" || fail "hw side not available"
grep -q '^emulator profile for the comparison: gen2$' <<<"$out" || fail "profile not matched to libefa v44 caps"
grep -q '^emulator caps cleared: .*cq_with_ext_mem' <<<"$out" || fail "ext-mem CQ cap not cleared"
grep -q '^emulator caps cleared: .*comp_cntr' <<<"$out" || fail "comp_cntr cap not cleared"
grep -Eq '^hw: [1-9][0-9]* passed' <<<"$out" || fail "hw side passed nothing"
grep -q 'not run' "$TEST_TMPDIR"/bringup/{hw,emu}/log/example.txt && fail "example not run"
grep -q '^[^ ]*XpuConformance' "$TEST_TMPDIR/bringup/list.txt" || fail "XPU tests not in the run"
grep -Eq '^0 of [1-9][0-9]* runs differ' <<<"$out" || fail "differences"
# The hardware side really recorded completions through rdma-core's queues.
grep -Eqh '^d[0-9]+\.q[0-9]+ rq send status=0:OK len=[0-9]+' "$TEST_TMPDIR"/bringup/hw/trace/*.txt ||
  fail "no hw receive completions traced"
echo PASS
