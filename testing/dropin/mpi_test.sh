#!/usr/bin/env bash
# Debian's Open MPI 4.1 (built against Debian's libfabric) runs MPI programs on xpufab's library.
# Its ofi MTL asks fi_getinfo for tagged messages without registering any memory (no
# FI_MR_LOCAL, FI_COMPLETION as default flags, an FI_AV_MAP, API 1.5). Two ranks exchange sizes
# from 8 bytes to 2 MiB over the protocol fabric "efa" on the emulated EFA, each message checked,
# and reduce; three ranks run MPI's matching (probes, matched probes, reversed windows,
# truncation, collectives) with packets lost and reordered, and again on 18 ranks. The cm PML admits only an MTL, so
# the ranks cannot fall back to Open MPI's own shared-memory transport. One-sided communication
# runs on osc rdma over the ofi BTL (RMA and atomics, FI_DELIVERY_COMPLETE). Then the same
# programs run through Open MPI's UCX layers on the UCT transport srd.
source testing/dropin/install_prefix.sh
source testing/dropin/mpi_checks.sh

fail() { echo "mpi_test: $*"; exit 1; }
# Open MPI's own commands by name: mpicc and mpirun follow the alternatives, which another MPI
# may hold.
command -v mpicc.openmpi >/dev/null ||
  fail "mpicc.openmpi not found (Debian packages openmpi-bin libopenmpi-dev)"

work="${TEST_TMPDIR:-$(mktemp -d)}"
for prog in mpi_pingpong mpi_matching mpi_onesided; do
  mpicc.openmpi -O2 -o "$work/$prog" "testing/dropin/$prog.c" || fail "mpicc $prog failed"
done

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI's session directories (its daemons' rendezvous) in a directory of this run's own: a
# test sandbox has a PID namespace of its own, so two runs' mpirun may share a PID, and with it a
# job id, in the shared /tmp, and then neither job starts. The path stays short (a Unix socket
# lives there).
session=$(mktemp -d /tmp/mpi-test.XXXXXX)
trap 'rm -rf "$session"' EXIT
export FI_EFA_EMU_SHM_DIR="$work"
# NAME NP PROGRAM [ENV=VALUE...] [-- MPIRUN_ARGS...]: one job on the efa provider, its output
# in $work/NAME. The jobs stay on this host (plm isolated: no ssh needed to start them).
run() {
  local name="$1" np="$2" prog="$3"; shift 3
  local env=() extra=() rc=0
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do env+=("$1"); shift; done
  [ $# -gt 0 ] && { shift; extra=("$@"); }
  env "${san_env[@]}" FI_EFA_EMU_FABRIC_KEY="mpi-test-$name-$$" "${env[@]}" \
      timeout 120 mpirun.openmpi --oversubscribe --mca plm isolated -np "$np" "${extra[@]}" \
      --mca orte_tmpdir_base "$session" \
      --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include efa --mca mtl_base_verbose 1 \
      -x LD_LIBRARY_PATH -x FI_EFA_BACKEND -x FI_EFA_EMU_FABRIC -x FI_EFA_EMU_SHM_DIR \
      -x FI_EFA_EMU_FABRIC_KEY -x FI_EFA_EMU_FAULTS "$work/$prog" >"$work/$name" 2>&1 || rc=$?
  echo "== $name (rc $rc)"; cat "$work/$name"
  [ "$rc" -eq 0 ] || fail "$name: mpirun exited $rc"
  grep -q "mtl:ofi:provider: efa_.*-rdm" "$work/$name" ||
    fail "$name: the ofi MTL did not select the efa provider's -rdm domain"
}

run pingpong 2 mpi_pingpong FI_EFA_EMU_FAULTS=
check_pingpong "$work/pingpong"
# MPI's matching on three ranks, with packets lost and reordered under it.
run matching 3 mpi_matching "FI_EFA_EMU_FAULTS=drop=0.05;reorder=0.2"
check_matching "$work/matching"
# The same on 18 ranks: every rank's AV holds more peers than an endpoint's first peer table, so
# the tables grow (rank 0 takes messages from all 17 others).
run matching_wide 18 mpi_matching FI_EFA_EMU_FAULTS=
check_matching "$work/matching_wide" 18
# One-sided communication through Open MPI's osc rdma on its ofi BTL: RMA and atomics with local
# buffers it registers itself but does not declare (no FI_MR_LOCAL), FI_DELIVERY_COMPLETE.
run onesided 2 mpi_onesided FI_EFA_EMU_FAULTS= -- --mca btl self,ofi --mca osc rdma \
    --mca btl_ofi_provider_include efa --mca btl_base_verbose 100 --mca osc_base_verbose 100
check_onesided "$work/onesided"
grep -q 'init of component ofi returned success' "$work/onesided" || fail "onesided: no ofi BTL"
grep -q 'rdma component destroying window' "$work/onesided" || fail "onesided: osc rdma not used"

# The same programs, and one-sided ones, through Open MPI's UCX layers (pml ucx, osc ucx) on the
# UCT transport srd alone (UCX_TLS=srd,self): Open MPI's default lists name only Mellanox
# transports, so they are opened up. The transport's statistics (a line per UCT interface) show
# that srd carried the traffic. Open MPI's memory hooks stay off (UCX's are already, see
# README): UCX 1.13's handler of the unmap events they forward can deadlock on its own lock when
# a thread's first allocation unmaps memory while the handler's pool grows (about one job in 40).
preload="$prefix/lib/libuct_xpufab.so"
for e in "${san_env[@]}"; do [[ "$e" == LD_PRELOAD=* ]] && preload="${e#LD_PRELOAD=}:$preload"; done
run_ucx() {  # NAME NP PROGRAM
  local name="$1" np="$2" prog="$3" rc=0
  FI_EFA_EMU_FABRIC_KEY="mpi-test-$name-$$" LD_PRELOAD="$preload" UCX_TLS=srd,self \
      UCX_MEM_MMAP_HOOK_MODE=none XPUFAB_UCT_STATS=1 ASAN_OPTIONS=detect_leaks=0 \
      timeout 120 mpirun.openmpi --oversubscribe --mca plm isolated -np "$np" \
      --mca orte_tmpdir_base "$session" \
      --mca pml ucx --mca osc ucx --mca btl self --mca opal_common_ucx_tls any \
      --mca opal_common_ucx_devices any --mca opal_common_ucx_opal_mem_hooks 0 \
      -x LD_PRELOAD -x UCX_TLS -x UCX_MEM_MMAP_HOOK_MODE -x XPUFAB_UCT_STATS -x ASAN_OPTIONS \
      -x FI_EFA_BACKEND -x FI_EFA_EMU_FABRIC -x FI_EFA_EMU_SHM_DIR -x FI_EFA_EMU_FABRIC_KEY \
      "$work/$prog" >"$work/$name" 2>&1 || rc=$?
  echo "== $name (rc $rc)"; cat "$work/$name"
  [ "$rc" -eq 0 ] || fail "$name: mpirun exited $rc"
  check_srd_traffic "$work/$name" "$np"
}
run_ucx ucx_pingpong 2 mpi_pingpong
check_pingpong "$work/ucx_pingpong"
run_ucx ucx_matching 3 mpi_matching
check_matching "$work/ucx_matching"
run_ucx ucx_onesided 2 mpi_onesided
check_onesided "$work/ucx_onesided"
echo "mpi_test: passed"
