#!/usr/bin/env bash
# Debian's ibv_devinfo (ibverbs-utils) sees the emulated EFA through the preload library.
source "$(dirname "$0")/fake_rdma_env.sh" "$1" "$2"
command -v ibv_devinfo >/dev/null || fail "ibv_devinfo missing (ibverbs-utils)"
out=$(with_shim timeout 20 ibv_devinfo -v 2>&1) || fail "ibv_devinfo: $out"
grep -q 'hca_id:.*efa_0' <<<"$out" || fail "no efa_0: $out"
grep -q 'vendor_id:.*0x1d0f' <<<"$out" || fail "wrong vendor: $out"
grep -q 'state:.*PORT_ACTIVE' <<<"$out" || fail "port not active: $out"
gid=$(echo "$out" | sed -n 's/.*GID\[  0\]:[[:space:]]*//p')
[ -n "$gid" ] && [ "$gid" != "fe80:0000:0000:0000:0000:0000:0000:0000" ] || fail "GID not served live: $gid"
# Without the preload library the same program finds nothing.
bare=$(LD_PRELOAD= timeout 20 ibv_devinfo 2>/dev/null || true)
if grep -q efa_0 <<<"$bare"; then fail "efa_0 without the shim"; fi
echo "PASS"
