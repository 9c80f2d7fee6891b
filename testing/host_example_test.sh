#!/bin/sh
# Runs the host example on the emulated device and checks that it verified its data.
set -e
out=$("$1" 50)
echo "$out"
echo "$out" | grep -q "50 round trips of 64 B verified"
echo "$out" | grep -q "RDMA write+read of 2048 B verified"
