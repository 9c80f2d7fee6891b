#!/usr/bin/env bash
# The tagged and atomic figures of DESIGN.md §8 side by side: one plain libfabric program
# (tagged_bench) on xpufab's library over the emulated EFA (fabric "efa", shared-memory fabric),
# and on Debian's libfabric 1.17 with its shm and tcp;ofi_rxm providers. Prints each provider's
# figures and xpufab's ratios against shm (goals: 64 B latency <= 2x, 1 MiB bandwidth >= 0.8x).
# xpufab_efa_gen2 is the same library on a device without RDMA write, where fi_write goes by
# packets: its wbw1m beside xpufab_efa's is what RDMA write gives. The 64 B ping-pong also runs
# with FI_MSG endpoints (fi_send/fi_recv) on xpufab's efa-direct fabric and on Debian's shm: the
# message latency fi_pingpong measures (goal <= 1.5x shm). The latency and bandwidth ratios come
# from rounds that run both sides back to back, the latencies as median round trips (which a
# preempted round trip on a shared machine does not move); see TAGGED_BENCH_ROUNDS below.
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

xpufab_env=("LD_LIBRARY_PATH=$work/prefix/lib" FI_EFA_BACKEND=emu FI_EFA_EMU_FABRIC=shm "FI_EFA_EMU_SHM_DIR=$work")
results=$(
  run xpufab_efa "${xpufab_env[@]}" "FI_EFA_EMU_FABRIC_KEY=tagged-bench-$$" -- efa efa
  run xpufab_efa_gen2 "${xpufab_env[@]}" "FI_EFA_EMU_FABRIC_KEY=tagged-bench-gen2-$$" \
      FI_EFA_EMU_PROFILE=gen2 -- efa efa
  run debian_shm FI_SHM_DISABLE_CMA=0 -- shm
  run debian_tcp_rxm FI_PROVIDER=tcp\;ofi_rxm -- "tcp;ofi_rxm"
)
echo "$results"

# The latency and bandwidth ratios: TAGGED_BENCH_ROUNDS (default 7) rounds, each running xpufab
# and shm back to back (tagged, then FI_MSG for the latency), so that both sides of a ratio share
# the machine's stretch; the ratio printed is the median of the rounds' ratios (of median
# latencies, and of bandwidths).
wanted() { [[ ",${TAGGED_BENCH_PARTS:-lat,bw}," == *,$1,* ]]; }
round_parts=""
for p in lat bw; do
  if wanted "$p"; then round_parts+="$p,"; fi
done
rounds=""
if [ -n "$round_parts" ]; then
  for k in $(seq "${TAGGED_BENCH_ROUNDS:-7}"); do
    rounds+=$(
      run efa_tagged "${xpufab_env[@]}" "FI_EFA_EMU_FABRIC_KEY=tagged-bench-r$k-$$" \
          "TAGGED_BENCH_PARTS=$round_parts" -- efa efa
      echo
      run shm_tagged FI_SHM_DISABLE_CMA=0 "TAGGED_BENCH_PARTS=$round_parts" -- shm
      if wanted lat; then
        echo
        run direct_msg "${xpufab_env[@]}" "FI_EFA_EMU_FABRIC_KEY=tagged-bench-m$k-$$" \
            TAGGED_BENCH_CAPS=msg TAGGED_BENCH_PARTS=lat -- efa efa-direct
        echo
        run shm_msg FI_SHM_DISABLE_CMA=0 TAGGED_BENCH_CAPS=msg TAGGED_BENCH_PARTS=lat -- shm
      fi
    )$'\n'
  done
  awk 'NF >= 13 { printf "  %-10s lat64_median_us %s lat64_us %s lat64_p99_us %s bw1m_MBps %s\n", $1, $11, $3, $13, $5 }' <<<"$rounds"
fi
{
  echo "$results"
  echo "$rounds"
} | awk '
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  $1 == "xpufab_efa" { l = $3; b = $5; s = $7; w = $9 }
  $1 == "xpufab_efa_gen2" { pw = $9 }
  $1 == "debian_shm" { sl = $3; sb = $5; ss = $7 }
  $1 == "debian_tcp_rxm" { tl = $3; tb = $5; ts = $7 }
  $1 == "efa_tagged" { et = $11; eb = $5 }
  $1 == "shm_tagged" && et > 0 && $11 > 0 { rt[++nt] = et / $11 }
  $1 == "shm_tagged" && eb > 0 && $5 > 0 { rb[++nb] = eb / $5 }
  $1 == "shm_tagged" { et = 0; eb = 0 }
  $1 == "direct_msg" { dm = $11 }
  $1 == "shm_msg" && dm > 0 && $11 > 0 { rm[++nm] = dm / $11; dm = 0 }
  function list(a, n,   i, out) {
    for (i = 1; i <= n; i++) out = out sprintf(" %.2f", a[i])
    return out
  }
  END {
    if (nt > 0) printf "ratio lat64 efa/shm %.2f (median of %d rounds; goal <= 2):%s\n", median(rt, nt), nt, list(rt, nt)
    if (nm > 0) printf "ratio msg lat64 efa-direct/shm %.2f (median of %d rounds; goal <= 1.5):%s\n", median(rm, nm), nm, list(rm, nm)
    if (nb > 0) printf "ratio bw1m efa/shm %.2f (median of %d rounds; goal >= 0.8):%s\n", median(rb, nb), nb, list(rb, nb)
    if (s > 0 && ss > 0) printf "ratio sum8 efa/shm %.2f\n", s / ss
    if (l > 0 && tl > 0) printf "ratio lat64 efa/tcp;ofi_rxm %.2f\n", l / tl
    if (b > 0 && tb > 0) printf "ratio bw1m efa/tcp;ofi_rxm %.2f\n", b / tb
    if (s > 0 && ts > 0) printf "ratio sum8 efa/tcp;ofi_rxm %.2f\n", s / ts
    if (w > 0 && pw > 0) printf "ratio wbw1m rdma-write/packets (gen4/gen2) %.2f\n", w / pw
  }'
