#!/usr/bin/env bash
# MPI over the emulated EFA against MPI's own transports in one run: the one-way latency of
# testing/dropin/mpi_pingpong (8 B to 2 MiB) under Debian's Open MPI on the efa provider (ofi
# MTL, buffers unregistered), on the UCT transport srd (pml ucx) and on Open MPI's own vader
# (shared memory) and tcp BTLs, then under MPICH over UCX on srd and on UCX's own sm transports.
# Prints one row per size with the ratios of efa and srd to vader; a benchmark, not a test.
#   bazel run -c opt //tools/bench:mpi_bench [-- ROUNDS]
# Needs Debian's openmpi-bin, libopenmpi-dev, mpich and libmpich-dev.
set -euo pipefail
src=$(readlink -f "$1")
shift
rounds=${1:-1}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mpi_bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tools/install.sh "$tmp/prefix" >/dev/null
lib_dir="$tmp/prefix/lib"
uct="$lib_dir/libuct_xpufab.so"
mpicc.openmpi -O2 -o "$tmp/ompi_pingpong" "$src"
mpicc.mpich -O2 -o "$tmp/mpich_pingpong" "$src"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export FI_EFA_BACKEND=emu FI_EFA_EMU_FABRIC=shm FI_EFA_EMU_SHM_DIR="$tmp" UCX_MEM_MMAP_HOOK_MODE=none
# [VAR=VALUE...] MPIRUN_ARGS...: the ping-pong under Open MPI.
ompi() {
  local vars=()
  while [[ "$1" == *=* ]]; do vars+=("$1"); shift; done
  env "${vars[@]}" timeout 300 mpirun.openmpi --oversubscribe --mca plm isolated -np 2 "$@" \
      "$tmp/ompi_pingpong"
}
# Open MPI's memory hooks off, as in //testing/dropin:mpi_test (README, the UCT transport).
ucx_mca=(--mca pml ucx --mca osc ucx --mca btl self --mca opal_common_ucx_tls any
         --mca opal_common_ucx_devices any --mca opal_common_ucx_opal_mem_hooks 0
         -x LD_PRELOAD -x UCX_TLS -x UCX_MEM_MMAP_HOOK_MODE
         -x FI_EFA_BACKEND -x FI_EFA_EMU_FABRIC -x FI_EFA_EMU_SHM_DIR)
# NAME COMMAND...: the run's "size N one-way T us" lines as "N T" in $tmp/NAME (empty on failure).
run() {
  local name=$1
  shift
  { "$@" 2>"$tmp/$name.err" || true; } | awk '$1 == "size" { print $2, $4 }' >"$tmp/$name"
}

echo "mpi_bench: one-way latency (us), two ranks, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq "$rounds"); do
  run efa ompi LD_LIBRARY_PATH="$lib_dir" --mca pml cm --mca mtl ofi \
      --mca mtl_ofi_provider_include efa -x LD_LIBRARY_PATH -x FI_EFA_BACKEND -x FI_EFA_EMU_FABRIC \
      -x FI_EFA_EMU_SHM_DIR
  run srd ompi LD_PRELOAD="$uct" UCX_TLS=srd,self "${ucx_mca[@]}"
  run vader ompi --mca pml ob1 --mca btl self,vader
  run tcp ompi --mca pml ob1 --mca btl self,tcp
  run mpich_srd env LD_PRELOAD="$uct" UCX_TLS=srd,self \
      timeout 300 mpirun.mpich -launcher fork -np 2 "$tmp/mpich_pingpong"
  run mpich_sm env UCX_TLS=sm,self timeout 300 mpirun.mpich -launcher fork -np 2 "$tmp/mpich_pingpong"
  printf '%-9s %10s %10s %10s %10s %12s %10s %10s %10s\n' size "ompi-efa" "ompi-srd" vader tcp \
      "mpich-srd" "mpich-sm" "efa/vader" "srd/vader"
  join <(sort -k1,1 "$tmp/efa") <(sort -k1,1 "$tmp/srd") |
    join - <(sort -k1,1 "$tmp/vader") | join - <(sort -k1,1 "$tmp/tcp") |
    join - <(sort -k1,1 "$tmp/mpich_srd") | join - <(sort -k1,1 "$tmp/mpich_sm") | sort -n |
    awk '{ printf "%-9s %10s %10s %10s %10s %12s %10s %9.2fx %9.2fx\n", $1, $2, $3, $4, $5, $6, $7,
           $2 / $4, $3 / $4 }'
  for f in efa srd vader tcp mpich_srd mpich_sm; do
    [ -s "$tmp/$f" ] || { echo "mpi_bench: the $f run failed:"; cat "$tmp/$f.err"; }
  done
done
