#!/usr/bin/env bash
# The UCT suite on the hardware backend (FI_EFA_BACKEND=hw): libuct_xpufab.so reaches the device
# through Debian's libibverbs and libefa, which the kernel-device shim serves from the emulator.
# Usage: uct_srd_hw_test.sh SHIM MAKE_SYSFS TEST_BINARY LIBUCT_XPUFAB
source "$(dirname "$0")/../fake_rdma/fake_rdma_env.sh" "$1" "$2"
test_bin=$(readlink -f "$3")
export XPUFAB_UCT_LIB
XPUFAB_UCT_LIB=$(readlink -f "$4")
export FI_EFA_BACKEND=hw
# gen2 (RDMA read, no RDMA write) is what rdma-core 44 reports of any generation, and what the
# suite's expectations read from the profile.
export FI_EFA_EMU_PROFILE=gen2
# UCX's memory hooks patch mmap/munmap in every loaded library, so libefa's mappings of the
# device's queues would reach the kernel instead of the shim that serves them; on an EFA instance
# the kernel serves them and the hooks stay on.
export UCX_MEM_MMAP_HOOK_MODE=none
with_shim "$test_bin"
