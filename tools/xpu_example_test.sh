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
# The timed launches say what was timed and where the time went.
echo "$out" | grep -q "each timed on the host from launch() to its return: 1 work-group of 32 work-items on one thread, each posting one 4096 B operation"
echo "$out" | grep -Eq "write, medians: to work-item 0 [0-9.]+ ms, posting [0-9.]+ ms, NIC until the counter reached 32 [0-9.]+ ms, reading the completions [0-9.]+ ms, back to the host [0-9.]+ ms"
echo "$out" | grep -Eq "read, medians:  to work-item 0 [0-9.]+ ms, posting [0-9.]+ ms, NIC and reading the completions [0-9.]+ ms, back to the host [0-9.]+ ms"
echo "$out" | grep -Eq "CPU per launch \(getrusage\): write [0-9.]+ ms on the launching thread \+ [0-9.]+ ms on the process's other threads \(the emulated NIC\), read [0-9.]+ ms \+ [0-9.]+ ms; slowest launch: write [0-9.]+ ms, read [0-9.]+ ms"
# The number of timed launches is the second argument.
"$1" 4096 3 | grep -q "steady:     3 more launches each, all completions read, data verified"
"$1" 4096 0 >/dev/null 2>&1 && { echo "0 timed launches accepted"; exit 1; }
echo "$out" | grep -q "error:      fi_xpu_cq_read -> -FI_EAVAIL; fi_xpu_cq_readerr -> err [1-9]"
echo "$out" | grep -q "total: 393216 B moved, 129 completions read on the XPU, all data verified"
