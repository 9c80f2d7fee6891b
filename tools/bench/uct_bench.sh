#!/usr/bin/env bash
# The UCT transport srd on the emulated EFA (shm fabric) against UCX's own transports in the same
# run: ucx_perftest am_lat 8 B (vs tcp), put_bw and get 1 MiB (vs sysv and posix), and UCP tag_lat 8 B
# (UCX_TLS=srd vs tcp), two processes each. Figures are ucx_perftest's own; a benchmark, not a
# test. Under each srd row, what the transport did per operation on the initiating side
# (XPUFAB_UCT_STATS): progress calls (and those that found nothing), RDMA requests, AMs,
# descriptors allocated, the core's packets.   bazel run -c opt //tools/bench:uct_bench [-- ROUNDS]
# Needs ucx_perftest (ucx-utils) and ss (iproute2).
set -euo pipefail
lib=$(readlink -f "$1")
shift
rounds=${1:-1}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/uct_bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

# $1: what to print from the Final: line (lat = typical latency us, bw = MB/s); the rest: the
# ucx_perftest arguments both sides share. Prints the figure, or "-" when the pair failed.
perf() {
  local what=$1
  shift
  port=$((port + 1))
  FI_EFA_EMU_FABRIC_KEY="uct-bench-$$-$port" timeout 120 ucx_perftest -p "$port" "$@" \
    >"$tmp/srv" 2>&1 &
  local spid=$!
  for _ in $(seq 200); do grep -q ":$port " <<<"$(ss -ltn)" && break; sleep 0.05; done
  if FI_EFA_EMU_FABRIC_KEY="uct-bench-$$-$port" timeout 120 ucx_perftest 127.0.0.1 -p "$port" "$@" \
       >"$tmp/cli" 2>&1 && wait "$spid"; then
    # Final: iterations, typical/avg/overall latency (us), bandwidth avg/overall (MB/s), msg rate.
    local line
    line=$(grep '^Final:' "$tmp/cli" | tail -1)
    case $what in
      lat) awk '{print $3}' <<<"$line" ;;
      bw) awk '{print $7}' <<<"$line" ;;
    esac
  else
    wait "$spid" 2>/dev/null || true
    echo "-"
  fi
}

# The transport's work per operation from the client's XPUFAB_UCT_STATS line (perftest's warm-up
# included; nothing from a build without it). $1: the counter that counts operations.
counts() {
  { grep -h '^xpufab srd stats:' "$tmp/cli" || true; } | tail -1 | awk -v per="$1" '{
    for (i = 4; i < NF; i += 2) v[$i] = $(i + 1)
    n = v[per] > 0 ? v[per] : 1
    printf "  per %s: progress %.1f (finding nothing %.1f), rdma_wqes %.2f, am_tx %.2f, am_rx %.2f, tag_rx %.2f, desc_allocs %.4f, core_tx_packets %.2f, credit_packets %.3f\n",
      per, v["progress"] / n, v["idle"] / n, v["rdma_wqes"] / n, v["am_tx"] / n, v["am_rx"] / n, v["tag_rx"] / n,
      v["desc_allocs"] / n, v["core_tx_packets"] / n, v["credit_packets"] / n }'
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2fx", a / b }'; }

export FI_EFA_BACKEND=emu FI_EFA_EMU_FABRIC=shm UCX_MEM_MMAP_HOOK_MODE=none XPUFAB_UCT_STATS=1
echo "uct_bench: ucx_perftest, two processes, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-28s %12s %12s %12s %10s %8s\n' "test" "srd" "tcp" "sysv" "posix" "ratio"
for _ in $(seq "$rounds"); do
  srd=$(LD_PRELOAD=$lib perf lat -x srd -d efa_emu0 -t am_lat -s 8 -n 20000)
  am_counts=$(counts am_tx)
  tcp=$(perf lat -x tcp -d lo -t am_lat -s 8 -n 20000)
  printf '%-28s %12s %12s %12s %10s %8s\n' "am_lat 8 B (us)" "$srd" "$tcp" "" "" "$(ratio "$srd" "$tcp") tcp (goal <= 0.3x)"
  echo "$am_counts"
  srd=$(LD_PRELOAD=$lib perf bw -x srd -d efa_emu0 -t put_bw -D zcopy -s 1048576 -n 1000)
  put_counts=$(counts rma_ops)
  sysv=$(perf bw -x sysv -d memory -t put_bw -D bcopy -s 1048576 -n 1000)
  posix=$(perf bw -x posix -d memory -t put_bw -D bcopy -s 1048576 -n 1000)
  printf '%-28s %12s %12s %12s %10s %8s\n' "put_bw 1 MiB (MB/s)" "$srd" "" "$sysv" "$posix" "$(ratio "$srd" "$sysv") sysv (goal >= 0.5x)"
  echo "$put_counts"
  # The same with buffers outside the MD's allocation: the emulator copies through the kernel.
  srd=$(LD_PRELOAD=$lib UCX_SRD_ALLOC=mmap,heap perf bw -x srd -d efa_emu0 -t put_bw -D zcopy -s 1048576 -n 1000)
  printf '%-28s %12s %12s %12s %10s %8s\n' "  buffers by mmap (MB/s)" "$srd" "" "$sysv" "$posix" "$(ratio "$srd" "$sysv") sysv"
  srd=$(LD_PRELOAD=$lib perf bw -x srd -d efa_emu0 -t get -D zcopy -s 1048576 -n 1000)
  get_counts=$(counts rma_ops)
  sysv=$(perf bw -x sysv -d memory -t get -D bcopy -s 1048576 -n 1000)
  posix=$(perf bw -x posix -d memory -t get -D bcopy -s 1048576 -n 1000)
  printf '%-28s %12s %12s %12s %10s %8s\n' "get_bw 1 MiB (MB/s)" "$srd" "" "$sysv" "$posix" "$(ratio "$srd" "$sysv") sysv"
  echo "$get_counts"
  srd=$(LD_PRELOAD=$lib UCX_TLS=srd perf lat -t tag_lat -s 8 -n 20000)
  tag_counts=$(counts core_tx_packets)
  tcp=$(UCX_TLS=tcp perf lat -t tag_lat -s 8 -n 20000)
  printf '%-28s %12s %12s %12s %10s %8s\n' "UCP tag_lat 8 B (us)" "$srd" "$tcp" "" "" "$(ratio "$srd" "$tcp") tcp (goal <= 0.3x)"
  echo "$tag_counts"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
