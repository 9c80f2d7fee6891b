#!/usr/bin/env bash
# The tagged and atomic figures of DESIGN.md §8 side by side: one plain libfabric program
# (tagged_bench) on xpufab's library over the emulated EFA (fabric "efa", shared-memory fabric),
# and on Debian's libfabric 1.17 with its shm and tcp;ofi_rxm providers. Prints each provider's
# figures and xpufab's ratios against shm (goals: 64 B latency <= 2x, 1 MiB bandwidth >= 0.8x).
# xpufab_efa_gen2 is the same library on a device without RDMA write, where fi_write goes by
# packets: its wbw1m beside xpufab_efa's is what RDMA write gives.
#   bazel run -c opt //testing/efa_fabric:tagged_bench
set -euo pipefail
bench="$1"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tools/install.sh "$work/prefix" >/dev/null

run() {  # NAME ENV... -- ARGS...
  local name="$1"; shift
  local env=()
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  local out
  if out=$(env "${env[@]}" timeout 300 "$bench" "$@" 2>"$work/$name.err"); then
    grep '^RESULT' <<<"$out" | sed "s/^RESULT provider [^ ]*/$name/"
  else
    echo "$name failed:"; cat "$work/$name.err"
  fi
  grep -v '^tagged_bench \[' "$work/$name.err" >&2 || true
}

results=$(
  run xpufab_efa "LD_LIBRARY_PATH=$work/prefix/lib" FI_EFA_BACKEND=emu FI_EFA_EMU_FABRIC=shm \
      "FI_EFA_EMU_SHM_DIR=$work" "FI_EFA_EMU_FABRIC_KEY=tagged-bench-$$" -- efa efa
  run xpufab_efa_gen2 "LD_LIBRARY_PATH=$work/prefix/lib" FI_EFA_BACKEND=emu FI_EFA_EMU_FABRIC=shm \
      "FI_EFA_EMU_SHM_DIR=$work" "FI_EFA_EMU_FABRIC_KEY=tagged-bench-gen2-$$" \
      FI_EFA_EMU_PROFILE=gen2 -- efa efa
  run debian_shm FI_SHM_DISABLE_CMA=0 -- shm
  run debian_tcp_rxm FI_PROVIDER=tcp\;ofi_rxm -- "tcp;ofi_rxm"
)
echo "$results"
awk '
  $1 == "xpufab_efa" { l = $3; b = $5; s = $7; w = $9 }
  $1 == "xpufab_efa_gen2" { pw = $9 }
  $1 == "debian_shm" { sl = $3; sb = $5; ss = $7 }
  $1 == "debian_tcp_rxm" { tl = $3; tb = $5; ts = $7 }
  END {
    if (l > 0 && sl > 0) printf "ratio lat64 efa/shm %.2f (goal <= 2)\n", l / sl
    if (b > 0 && sb > 0) printf "ratio bw1m efa/shm %.2f (goal >= 0.8)\n", b / sb
    if (s > 0 && ss > 0) printf "ratio sum8 efa/shm %.2f\n", s / ss
    if (l > 0 && tl > 0) printf "ratio lat64 efa/tcp;ofi_rxm %.2f\n", l / tl
    if (b > 0 && tb > 0) printf "ratio bw1m efa/tcp;ofi_rxm %.2f\n", b / tb
    if (s > 0 && ts > 0) printf "ratio sum8 efa/tcp;ofi_rxm %.2f\n", s / ts
    if (w > 0 && pw > 0) printf "ratio wbw1m rdma-write/packets (gen4/gen2) %.2f\n", w / pw
  }' <<<"$results"
