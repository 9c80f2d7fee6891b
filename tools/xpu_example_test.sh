#!/bin/sh
# Runs the fi_xpu(3) example on the emulated device with kernels on the host XPU and checks that
# every part verified its data and the error completion came through fi_xpu_cq_readerr.
set -e
out=$("$1" 4096)
echo "$out"
for step in 1 2 3 4 5 6 7 8 9 10 11 12 13 14; do
  echo "$out" | grep -q "^step *$step:" || { echo "step $step missing"; exit 1; }
done
echo "$out" | grep -q "send/recv:  32 x 4096 B = 131072 B, counter reached 32, .* data verified"
echo "$out" | grep -q "rdma write: 131072 B written, 32 completions, data verified"
echo "$out" | grep -q "rdma read:  131072 B read back, 32 completions, data verified"
echo "$out" | grep -q "steady:     20 more launches each, all completions read, data verified"
echo "$out" | grep -q "error:      fi_xpu_cq_read -> -FI_EAVAIL; fi_xpu_cq_readerr -> err [1-9]"
echo "$out" | grep -q "total: 393216 B moved, 129 completions read on the XPU, all data verified"
