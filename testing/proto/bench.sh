#!/bin/bash
# Two processes of the protocol core on the emulated EFA (shm fabric unless FI_EFA_EMU_FABRIC
# says otherwise): 64 B active-message and tagged ping-pong latency, 1 MiB tagged bandwidth and
# the 8-byte fetching FI_SUM round trip, printed by the client. With WITH_SHM=1, Debian's
# fi_pingpong over libfabric's shm provider runs the 64 B and 1 MiB ping-pongs beside it.
set -euo pipefail
peer="${PROTO_PEER:-testing/proto/proto_peer}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
export FI_EFA_EMU_SHM_DIR="$dir" FI_EFA_EMU_FABRIC_KEY="proto-bench-$$"
port=$((20000 + $$ % 20000))
"$peer" server "$port" 2 bench &
server=$!
"$peer" client "$port" 2 bench
wait "$server"
if [ "${WITH_SHM:-0}" = 1 ] && command -v fi_pingpong >/dev/null; then
  for size in 64 1048576; do
    iters=$([ "$size" = 64 ] && echo 2000 || echo 200)
    fi_pingpong -p shm -e rdm -I "$iters" -S "$size" >/dev/null &
    sleep 0.5
    echo "shm fi_pingpong -S $size:"
    fi_pingpong -p shm -e rdm -I "$iters" -S "$size" 127.0.0.1 | tail -1
    wait
  done
fi
