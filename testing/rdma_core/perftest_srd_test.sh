#!/usr/bin/env bash
# perftest's SRD latency tests between two processes on the first two generations (the ones with
# the smallest feature sets): ib_send_lat (a 1-entry send queue) on both, ib_read_lat where the
# generation has RDMA read; gen1 has none and perftest must refuse it itself, as on hardware.
# -x 0: EFA addresses are GIDs; without it perftest builds AHs for the all-zero GID.
source "$(dirname "$0")/rdma_core_env.sh" "$1" "$2"
command -v ib_send_lat >/dev/null || fail "ib_send_lat missing (perftest)"
out=$tmp/perftest
mkdir -p "$out"

# run_pair GEN TEST: server and client; the client's report is in $out/client.txt.
run_pair() { perftest_pair "$out" "$1" "$2" -c SRD -x 0 -n 100; }

for gen in gen1 gen2; do
  run_pair "$gen" ib_send_lat || fail "$gen ib_send_lat: $(cat "$out/server.txt")"
  grep -Eq '^ *2 +100 ' "$out/client.txt" || fail "$gen ib_send_lat: no result line"
  grep -q 'TX depth *: 1' "$out/client.txt" || fail "$gen ib_send_lat: not a 1-entry send queue"
done
run_pair gen2 ib_read_lat || fail "gen2 ib_read_lat: $(cat "$out/server.txt")"
grep -Eq '^ *2 +100 ' "$out/client.txt" || fail "gen2 ib_read_lat: no result line"
if run_pair gen1 ib_read_lat; then fail "gen1 ib_read_lat ran without RDMA read"; fi
grep -q 'Read verb is not supported' "$out/client.txt" || fail "gen1 ib_read_lat: $(cat "$out/client.txt")"
echo "PASS"
