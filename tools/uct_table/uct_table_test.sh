#!/usr/bin/env bash
# Checks rows of the printed table against what each emulated profile offers.
set -euo pipefail
out=$("$1" "$2")
echo "$out"
cell() {  # row, column index (1 = emu gen1)
  awk -F'|' -v r="$1" -v c="$2" '{ gsub(/ /, "", $2) } $2 == r { v = $(c + 2); gsub(/ /, "", v); print v }' <<<"$out"
}
fail=0
expect() { local got; got=$(cell "$1" "$2"); [ "$got" = "$3" ] || { echo "FAIL: $1 col $2: '$got', want '$3'"; fail=1; }; }
for c in 1 2 3 4; do expect am_bcopy $c Y; expect ep_flush $c Y; expect iface_is_reachable $c Y; done
expect put_zcopy 1 off; expect put_zcopy 2 off; expect put_zcopy 3 Y; expect put_zcopy 4 Y
expect get_zcopy 1 off; expect get_zcopy 2 Y; expect ep_check 1 off; expect ep_check 4 Y
expect iface_accept 4 -; expect iface_reject 4 -
# The server side of a sockaddr connection is the connection manager's, on every profile.
for c in 1 2 3 4; do
  for r in cm_open listener_create listener_query conn_request_cb listener_reject "ep_create(conn_req)" \
           "ep_connect(cm)" cm_ep_conn_notify "ep_disconnect(cm)"; do expect "$r" $c Y; done
done
expect atomic64_fetch 1 Y; expect atomic_cswap32 4 Y
# Tag offload needs RDMA read (rendezvous): not on gen1.
expect tag_eager_bcopy 1 off; expect tag_rndv_zcopy 1 off
for c in 2 3 4; do expect tag_eager_bcopy $c Y; expect tag_rndv_zcopy $c Y; expect iface_tag_recv_zcopy $c Y; done
exit $fail
