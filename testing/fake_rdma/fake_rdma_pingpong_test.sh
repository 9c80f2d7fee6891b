#!/usr/bin/env bash
# fi_pingpong -p efa -e EP_TYPE (rdm: SRD QPs; dgram: UD QPs) between two processes: libfabric
# 1.17's efa provider over Debian's rdma-core over the emulated NIC. Both sides must see every
# message (nothing drops them here) and the emulator's statistics show the bytes crossed it.
# Arguments: SHIM MAKE_SYSFS EP_TYPE.
ep_type=$3
source "$(dirname "$0")/fake_rdma_env.sh" "$1" "$2"
command -v fi_pingpong >/dev/null || fail "fi_pingpong missing (libfabric-bin)"
source "$(dirname "$0")/../support/free_port.sh"
port=$(free_port)
args=(-p efa -e "$ep_type" -I 20 -S 64)
with_shim timeout 60 fi_pingpong "${args[@]}" -B "$port" >"$TEST_TMPDIR/server.txt" 2>&1 &
server=$!
ok=0
for _ in $(seq 1 50); do
  if with_shim timeout 60 fi_pingpong "${args[@]}" -P "$port" 127.0.0.1 >"$TEST_TMPDIR/client.txt" 2>&1; then ok=1; break; fi
  grep -q 'Connection refused\|failed to connect' "$TEST_TMPDIR/client.txt" || break
  sleep 0.2
done
wait "$server" || fail "server: $(cat "$TEST_TMPDIR/server.txt")"
[ $ok = 1 ] || fail "client: $(cat "$TEST_TMPDIR/client.txt")"
cat "$TEST_TMPDIR/client.txt"
grep -Eq '^64 +20 +=20 ' "$TEST_TMPDIR/client.txt" || fail "no 64-byte result line"
cat "$XPUFAB_EMU_STATS"
[ "$(wc -l <"$XPUFAB_EMU_STATS")" -eq 2 ] || fail "expected statistics from two processes"
# Each side sent at least the 20 payloads of 64 bytes through its emulated NIC.
while read -r line; do
  tx=$(echo "$line" | sed -n 's/.* bytes_tx=\([0-9]*\).*/\1/p')
  rx=$(echo "$line" | sed -n 's/.* bytes_rx=\([0-9]*\).*/\1/p')
  [ "${tx:-0}" -ge 1280 ] && [ "${rx:-0}" -ge 1280 ] || fail "too few bytes crossed the NIC: $line"
done <"$XPUFAB_EMU_STATS"
echo "PASS"
