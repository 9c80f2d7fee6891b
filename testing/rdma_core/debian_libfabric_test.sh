#!/usr/bin/env bash
# Debian's libfabric (1.17) with its own efa provider, on the emulated EFA as a kernel device, on
# every generation: fi_pingpong's RDM exchange with data checks (small messages, and 1 MiB ones:
# through RDMA read where the generation has it, the provider's read-free protocol on gen1), and
# a DGRAM exchange. The provider asks the device for features by its capability bits (an RNR
# retry count when RNR_RETRY is reported), so a capability reported but refused fails here.
source "$(dirname "$0")/rdma_core_env.sh" "$1" "$2"
command -v fi_pingpong >/dev/null || fail "fi_pingpong missing (libfabric-bin)"
out=$tmp/debian_libfabric
mkdir -p "$out"

# pingpong GEN ARGS...: server and client (127.0.0.1); the client retries while the server is not
# listening yet. True when both succeed and both print the result row.
pingpong() {
  local gen=$1
  shift
  local port
  port=$(free_port)
  FI_EFA_EMU_PROFILE=$gen with_shim timeout 60 fi_pingpong "$@" -B "$port" >"$out/server.txt" 2>&1 &
  local server=$! rc=1
  for _ in $(seq 1 50); do
    rc=0
    FI_EFA_EMU_PROFILE=$gen with_shim timeout 60 fi_pingpong "$@" -P "$port" 127.0.0.1 \
      >"$out/client.txt" 2>&1 || rc=$?
    [ $rc = 0 ] && break
    grep -q 'Connection refused' "$out/client.txt" || break
    sleep 0.1
  done
  local src=0
  wait "$server" || src=$?
  echo "$gen fi_pingpong $*: client rc=$rc server rc=$src"
  cat "$out/client.txt"
  [ $rc = 0 ] && [ $src = 0 ] || { cat "$out/server.txt"; return 1; }
}

# row SIZE ITERS: both sides printed the result row.
row() {
  for side in server client; do
    grep -Eq "^$1 +$2 +=$2 " "$out/$side.txt" || fail "no row '$1 x $2' from the $side"
  done
}

for gen in "${GENERATIONS[@]}"; do
  pingpong "$gen" -p efa -e rdm -I 10 -S 64 -c || fail "$gen rdm"
  row 64 10
done
for gen in gen1 gen2; do
  pingpong "$gen" -p efa -e rdm -I 3 -S 1048576 -c || fail "$gen rdm 1 MiB"
  row 1m 3
done
pingpong gen1 -p efa -e dgram -I 10 -S 1024 -c || fail "gen1 dgram"
row 1k 10
echo "PASS"
