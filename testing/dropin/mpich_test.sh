#!/usr/bin/env bash
# Debian's MPICH 4.0 (its ch4 device over UCX) runs the MPI programs of mpi_test on the UCT
# transport srd alone (LD_PRELOAD of the installed libuct_xpufab.so, UCX_TLS=srd,self): a
# ping-pong to 2 MiB, MPI's matching on three ranks, and one-sided put, accumulate and get. The
# transport's statistics (a line per UCT interface) show that srd carried the traffic.
source testing/dropin/install_prefix.sh
source testing/dropin/mpi_checks.sh

fail() { echo "mpich_test: $*"; exit 1; }
# MPICH's own commands by name: mpicc and mpirun follow the alternatives, which another MPI may
# hold.
command -v mpicc.mpich >/dev/null || fail "mpicc.mpich not found (Debian packages mpich libmpich-dev)"

work="${TEST_TMPDIR:-$(mktemp -d)}"
for prog in mpi_pingpong mpi_matching mpi_onesided; do
  mpicc.mpich -O2 -o "$work/$prog" "testing/dropin/$prog.c" || fail "mpicc $prog failed"
done

preload="$prefix/lib/libuct_xpufab.so"
for e in "${san_env[@]}"; do [[ "$e" == LD_PRELOAD=* ]] && preload="${e#LD_PRELOAD=}:$preload"; done
export FI_EFA_EMU_SHM_DIR="$work" UCX_TLS=srd,self UCX_MEM_MMAP_HOOK_MODE=none XPUFAB_UCT_STATS=1
# NAME NP PROGRAM: one job on this host (started by fork, no ssh), its output in $work/NAME.
# Hydra passes the environment on.
run() {
  local name="$1" np="$2" prog="$3" rc=0
  FI_EFA_EMU_FABRIC_KEY="mpich-test-$name-$$" LD_PRELOAD="$preload" ASAN_OPTIONS=detect_leaks=0 \
      timeout 120 mpirun.mpich -launcher fork -np "$np" "$work/$prog" >"$work/$name" 2>&1 || rc=$?
  echo "== $name (rc $rc)"; cat "$work/$name"
  [ "$rc" -eq 0 ] || fail "$name: mpirun exited $rc"
  check_srd_traffic "$work/$name" "$np"
}
run pingpong 2 mpi_pingpong
check_pingpong "$work/pingpong"
run matching 3 mpi_matching
check_matching "$work/matching"
run onesided 2 mpi_onesided
check_onesided "$work/onesided"
echo "mpich_test: passed"
