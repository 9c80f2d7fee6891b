#!/usr/bin/env bash
# Debian's unmodified fi_pingpong, server and client in two processes on this
# host, over xpufab's efa provider on the emulated EFA (endpoint type $1: rdm,
# the default, or dgram; message transfers with data checks).  $2 "protocol"
# runs the RDM exchange on the protocol fabric "efa" (its "<device>-rdm"
# domain), "tagged" runs it with tagged messages, which only that fabric has,
# "plain" (or nothing) runs it on the fabric fi_getinfo lists first.
# $3 "all" sends every size fi_pingpong has up to the endpoint's largest
# message (-S all), each size checked, instead of 64 bytes.
# Every process runs under a timeout, so a stalled exchange fails the test
# instead of hanging it.
source testing/dropin/install_prefix.sh

fail() { echo "fi_pingpong_test: $*"; exit 1; }

source testing/support/free_port.sh
port=$(free_port)
work="${TEST_TMPDIR:-$(mktemp -d)}"
size=${3:-64}
iters=20
[ "$size" = all ] && iters=5
args=(-p efa -e "${1:-rdm}" -I "$iters" -S "$size" -c)
case "${2:-}" in
  protocol)
    dom=$(debian_tool timeout 30 fi_info -p efa -f efa -t FI_EP_RDM | awk '$1 == "domain:" && !d {d = $2} END {print d}')
    [[ "$dom" == *-rdm ]] || fail "no <device>-rdm domain of fabric efa: '$dom'"
    args+=(-d "$dom") ;;
  tagged) args+=(-m tagged) ;;
  ""|plain) ;;
  *) fail "unknown variant '$2'" ;;
esac

debian_tool timeout 30 fi_pingpong "${args[@]}" -B "$port" >"$work/server.out" 2>&1 &
server=$!
# The client retries until the server listens.
client_rc=1
for _ in $(seq 50); do
  if debian_tool timeout 30 fi_pingpong "${args[@]}" -P "$port" 127.0.0.1 >"$work/client.out" 2>&1; then
    client_rc=0; break
  fi
  grep -q 'Connection refused' "$work/client.out" || break
  sleep 0.1
done
server_rc=0
wait "$server" || server_rc=$?

echo "== server (rc $server_rc)"; cat "$work/server.out"
echo "== client (rc $client_rc)"; cat "$work/client.out"
[ "$server_rc" -eq 0 ] || fail "server failed"
[ "$client_rc" -eq 0 ] || fail "client failed"
# The result rows: size, iterations, then the totals ("64   20   ...").
for side in server client; do
  if [ "$size" = all ]; then
    # Sizes 0, 1, 2, 3, 4, 6, 8, ... up to the largest message: 27 rows reach 8k.
    rows=$(grep -cE "^[0-9.]+[km]? +$iters +=$iters " "$work/$side.out" || true)
    grep -qE "^0 +$iters +" "$work/$side.out" || fail "no 0-byte row from the $side"
    [ "$rows" -ge 27 ] || fail "$rows sizes from the $side, expected every size up to 8k"
  else
    grep -qE "^$size +$iters +" "$work/$side.out" || fail "no result row from the $side"
  fi
done
echo "fi_pingpong_test: OK"
