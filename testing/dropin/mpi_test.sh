#!/usr/bin/env bash
# Debian's Open MPI (4.1, built against Debian's libfabric) runs an MPI program on xpufab's
# library: its ofi MTL asks fi_getinfo for tagged messages without registering any memory
# (no FI_MR_LOCAL, FI_COMPLETION as default flags, an FI_AV_MAP, API 1.5), and its two ranks
# exchange sizes from 8 bytes to 2 MiB over the protocol fabric "efa" on the emulated
# EFA, each message checked, then reduce. The ranks must select the efa provider, not Open
# MPI's own shared-memory transport: the cm PML admits only an MTL.
source testing/dropin/install_prefix.sh

fail() { echo "mpi_test: $*"; exit 1; }
command -v mpicc >/dev/null || fail "mpicc not found (Debian packages openmpi-bin libopenmpi-dev)"

work="${TEST_TMPDIR:-$(mktemp -d)}"
mpicc -O2 -o "$work/mpi_pingpong" testing/dropin/mpi_pingpong.c || fail "mpicc failed"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export FI_EFA_EMU_SHM_DIR="$work"
export FI_EFA_EMU_FABRIC_KEY="mpi-test-$$"
rc=0
env "${san_env[@]}" timeout 120 mpirun --oversubscribe -np 2 \
    --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include efa --mca mtl_base_verbose 1 \
    -x LD_LIBRARY_PATH -x FI_EFA_BACKEND -x FI_EFA_EMU_FABRIC -x FI_EFA_EMU_SHM_DIR \
    -x FI_EFA_EMU_FABRIC_KEY "$work/mpi_pingpong" >"$work/out" 2>&1 || rc=$?
cat "$work/out"
[ "$rc" -eq 0 ] || fail "mpirun exited $rc"
grep -q '^allreduce 3$' "$work/out" || fail "no allreduce result"
[ "$(grep -c '^size .* one-way' "$work/out")" -eq 7 ] || fail "not every size was exchanged"
grep -q "mtl:ofi:provider: efa_.*-rdm" "$work/out" || fail "the ofi MTL did not select the efa provider's -rdm domain"
echo "mpi_test: passed"
