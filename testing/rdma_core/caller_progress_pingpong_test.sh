#!/usr/bin/env bash
# Two-process ping-pongs of programs nobody here wrote, with the emulated NIC moved by nothing but
# their own verbs calls: no engine thread, no service thread (FI_EFA_EMU_ENGINE_THREAD=0,
# FI_EFA_EMU_SERVICE_THREAD=0). perftest's ib_send_lat -c SRD, then libfabric's fi_pingpong -p efa
# -e rdm, whose first message often reaches a peer still filling its packet pools: the RNR NAKs,
# the retries after them and any retransmission are moved by the callers' polls too. Each process's statistics line
# (XPUFAB_EMU_STATS) must show the traffic crossed its NIC, no service pass, and for
# ib_send_lat (receives posted before the first send) no RNR NAK and a bounded number of
# engine steps per message.
source "$(dirname "$0")/rdma_core_env.sh" "$1" "$2"
command -v ib_send_lat >/dev/null || fail "ib_send_lat missing (perftest)"
command -v fi_pingpong >/dev/null || fail "fi_pingpong missing (libfabric-bin)"
export FI_EFA_EMU_ENGINE_THREAD=0 FI_EFA_EMU_SERVICE_THREAD=0
out=$tmp/caller_pingpong
mkdir -p "$out"
iters=200

# run_pair NAME SERVER_ARGS... -- CLIENT_ARGS...: both sides under the shim; the client retries
# while the server is not listening yet.
run_pair() {
  local name=$1
  shift
  local server_args=() client_args=()
  while [ "$1" != -- ]; do server_args+=("$1"); shift; done
  shift
  client_args=("$@")
  export XPUFAB_EMU_STATS=$out/$name.stats
  : >"$XPUFAB_EMU_STATS"
  with_shim timeout 60 "${server_args[@]}" >"$out/$name.server.txt" 2>&1 &
  local server=$! rc=1
  for _ in $(seq 1 50); do
    sleep 0.2
    rc=0
    with_shim timeout 60 "${client_args[@]}" >"$out/$name.client.txt" 2>&1 || rc=$?
    [ $rc = 0 ] && break
    kill -0 "$server" 2>/dev/null || break
  done
  local src=0
  wait "$server" || src=$?
  cat "$out/$name.client.txt" "$XPUFAB_EMU_STATS"
  [ $rc = 0 ] || fail "$name client rc=$rc: $(cat "$out/$name.client.txt")"
  [ $src = 0 ] || fail "$name server rc=$src: $(cat "$out/$name.server.txt")"
  [ "$(wc -l <"$XPUFAB_EMU_STATS")" -eq 2 ] || fail "$name: expected statistics from two processes"
}

# field LINE NAME: the value of NAME=... in a statistics line.
field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

port=$(free_port)
ib_args=(ib_send_lat -c SRD -x 0 -s 64 -n "$iters" -p "$port")
run_pair ib "${ib_args[@]}" -- "${ib_args[@]}" 127.0.0.1
grep -Eq "^ *64 +$iters " "$out/ib.client.txt" || fail "ib_send_lat: no result line"
while read -r line; do
  [ "$(field "$line" service_passes)" = 0 ] || fail "ib_send_lat: the service thread ran: $line"
  [ "$(field "$line" packets_tx)" -ge "$iters" ] || fail "ib_send_lat: too few packets: $line"
  [ "$(field "$line" rnr_naks)" = 0 ] || fail "ib_send_lat: RNR NAKs with receives posted: $line"
  # A message takes a few tens of passes here; a NIC that needs thousands is not being moved by
  # the calls that wait on it.
  steps=$(field "$line" steps)
  [ "$steps" -le $((iters * 2000)) ] || fail "ib_send_lat: $steps engine steps for $iters messages: $line"
done <"$out/ib.stats"

port=$(free_port)
fi_args=(fi_pingpong -p efa -e rdm -S 64 -I "$iters")
run_pair fi "${fi_args[@]}" -B "$port" -- "${fi_args[@]}" -P "$port" 127.0.0.1
grep -Eq "^64 +$iters +=$iters " "$out/fi.client.txt" || fail "fi_pingpong: no 64-byte result line"
while read -r line; do
  [ "$(field "$line" service_passes)" = 0 ] || fail "fi_pingpong: the service thread ran: $line"
  [ "$(field "$line" packets_tx)" -ge "$iters" ] || fail "fi_pingpong: too few packets: $line"
done <"$out/fi.stats"
echo "PASS"
