#!/bin/sh
# The fi_xpu(3) example on a device without RDMA write (emulated gen2, like rdma-core v44): it
# must notice from fi_getinfo that write is not offered and stop at once with a clear message and
# exit status 2, instead of posting writes that can never complete.
# $1: the example.
out=$(timeout 20 "$1" 4096 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 2 ] || { echo "FAIL: exit $rc, want 2"; exit 1; }
echo "$out" | grep -q "does not offer RDMA write (fi_getinfo caps lack FI_WRITE)" ||
  { echo "FAIL: no message naming the missing capability"; exit 1; }
echo "$out" | grep -q "^step  2:" && { echo "FAIL: went past fi_getinfo"; exit 1; }
echo PASS
