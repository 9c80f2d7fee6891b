#!/usr/bin/env bash
# Debian's unmodified UCX tools over the srd transport on the emulated EFA: ucx_info lists it
# (and the component's connection manager) and answers its configuration and endpoint queries,
# ucx_perftest runs UCT tests between two processes, and UCP runs over it alone (UCX_TLS=srd).
# Usage: uct_tools_test.sh LIBUCT_XPUFAB
set -euo pipefail
lib=$(readlink -f "$1")
export FI_EFA_BACKEND=emu FI_EFA_EMU_FABRIC=shm FI_EFA_EMU_FABRIC_KEY="uct-tools-$$"
# A sanitizer build of the library needs its runtime loaded first in these uninstrumented tools.
asan=$(ldd "$lib" | awk '/libasan/ { print $3 }')
if [ -n "$asan" ]; then
  export LD_PRELOAD="$asan:$lib" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
else
  export LD_PRELOAD="$lib"
fi
fail=0

info=$(ucx_info -d -t srd)
for want in "Component: xpufab" "Transport: srd" "Device: efa_emu0" "put_zcopy" "get_bcopy" "am_bcopy" \
            "connection: to ep, to iface" "peer failure, ep_check" "Connection manager: xpufab" \
            "max_conn_priv: 1024 bytes"; do
  if ! grep -q "$want" <<<"$info"; then echo "FAIL: ucx_info -d lacks '$want'"; fail=1; fi
done

# Configuration, feature and endpoint queries over srd exit cleanly and complain of nothing.
for q in "-c" "-f" "-b" "-e -u t" "-e -u tram" "-e -u t -D net -n 4"; do
  # shellcheck disable=SC2086
  if ! out=$(UCX_TLS=srd ucx_info $q 2>&1) || grep -Eq 'UCX +(ERROR|WARN)|Segmentation|Assertion' <<<"$out"; then
    echo "FAIL: ucx_info $q"; tail -n 5 <<<"$out"; fail=1
  fi
done
# Interface buffers come from the MD first (peers on the emulator copy out of them by mapping).
# (Captured first: grep -q leaving early would fail the pipeline with SIGPIPE under pipefail.)
config=$(ucx_info -c)
if ! grep -q '^UCX_SRD_ALLOC=md,' <<<"$config"; then echo "FAIL: srd's ALLOC does not start with md"; fail=1; fi
lanes=$(UCX_TLS=srd ucx_info -e -u t)
if ! grep -q 'lane\[0\]:.*srd/efa_emu0.*tag_offload' <<<"$lanes"; then
  echo "FAIL: ucx_info -e -u t shows no srd tag lane"; fail=1
fi

# A port nothing listens on now, asked for each run: consecutive ports from one start collided
# with ports other sockets of the machine had taken meanwhile.
source testing/support/free_port.sh
# One server/client pair; prints the client's Final: line, fails on anything else.
run() {
  local name=$1; shift
  port=$(free_port)
  timeout 60 ucx_perftest -p "$port" "${server_args[@]}" >"$TEST_TMPDIR/$name.srv" 2>&1 &
  local spid=$!
  for _ in $(seq 100); do
    grep -q ":$port " <<<"$(ss -ltn)" && break
    sleep 0.05
  done
  if timeout 60 ucx_perftest 127.0.0.1 -p "$port" "$@" >"$TEST_TMPDIR/$name.cli" 2>&1 && wait "$spid" &&
     final=$(grep '^Final:' "$TEST_TMPDIR/$name.cli"); then
    echo "ok   $name: $final"
  else
    wait "$spid" || true
    echo "FAIL: $name"; tail -n 5 "$TEST_TMPDIR/$name.cli" "$TEST_TMPDIR/$name.srv"; fail=1
  fi
}

server_args=(-x srd -d efa_emu0)
uct=(-x srd -d efa_emu0)
run put_lat "${uct[@]}" -t put_lat -n 2000
run put_bw_bcopy "${uct[@]}" -t put_bw -D bcopy -s 8192 -n 2000
run put_bw_zcopy_1M "${uct[@]}" -t put_bw -D zcopy -s 1048576 -n 200
run get_bcopy "${uct[@]}" -t get -D bcopy -s 4096 -n 2000
run get_zcopy "${uct[@]}" -t get -D zcopy -s 65536 -n 500
run am_lat "${uct[@]}" -t am_lat -n 2000
run am_bw_bcopy "${uct[@]}" -t am_bw -D bcopy -s 4096 -n 2000
run add_lat "${uct[@]}" -t add_lat -n 1000
run fadd "${uct[@]}" -t fadd -n 1000
run cswap "${uct[@]}" -t cswap -n 1000
# Zcopy RMA with several iov entries (-s 8,4096), and with a stride between them (-i).
run put_bw_zcopy_iov "${uct[@]}" -t put_bw -D zcopy -s 8,4096 -n 500
run put_lat_zcopy_iov "${uct[@]}" -t put_lat -D zcopy -s 8,4096,1000 -i 8192 -n 200
run get_zcopy_iov "${uct[@]}" -t get -D zcopy -s 4096,4096 -i 5000 -n 200

# A counter line each process prints when its interface closes: the evidence that UCP took the
# tag offload path (a tag lane on srd), not its own matching over AMs.
expect() {
  if ! grep -Eq "$2" "$TEST_TMPDIR/$1"; then echo "FAIL: $1 lacks /$2/"; grep 'tag offload' "$TEST_TMPDIR/$1"; fail=1; fi
}

export UCX_TLS=srd XPUFAB_UCT_TAG_STATS=1
server_args=()
run tag_lat -t tag_lat -n 2000
# Small messages go out as tag eager sends and reach UCP through the unexpected-eager callback.
expect tag_lat.cli 'tag offload: enabled 1 eager_tx [1-9]'
expect tag_lat.srv 'unexp_eager [1-9]'
run tag_bw -t tag_bw -s 65536 -n 200
# Large ones are rendezvous requests matched here against receives UCP posted to the transport,
# and fetched by RDMA read.
expect tag_bw.cli 'rndv_tx [1-9]'
expect tag_bw.srv 'posted [1-9][0-9]* matched_eager [0-9]+ matched_rndv [1-9]'
expect tag_bw.srv 'rdma_reads [1-9]'
unset XPUFAB_UCT_TAG_STATS
run ucp_put_bw -t ucp_put_bw -s 65536 -n 200
run ucp_get -t ucp_get -s 65536 -n 200
run ucp_fadd -t ucp_fadd -n 1000
# The other UCP tests, a thread per endpoint (-T 2 -M multi), rendezvous from the first byte.
run ucp_put_bw_iov -t ucp_put_bw -D iov -s 8,4096 -n 200
run tag_sync_lat -t tag_sync_lat -n 500
run stream_bw -t stream_bw -s 65536 -n 100
run ucp_am_bw -t ucp_am_bw -s 1048576 -n 20
run tag_bw_threads -t tag_bw -T 2 -M multi -s 65536 -n 100
UCX_RNDV_THRESH=0 run tag_lat_rndv -t tag_lat -s 8 -n 200

exit $fail
