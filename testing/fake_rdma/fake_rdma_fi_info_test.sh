#!/usr/bin/env bash
# Debian's fi_info (libfabric 1.17) lists the emulated EFA under its own efa provider.
source "$(dirname "$0")/fake_rdma_env.sh" "$1" "$2"
command -v fi_info >/dev/null || fail "fi_info missing (libfabric-bin)"
out=$(with_shim timeout 20 fi_info -p efa 2>&1) || fail "fi_info: $out"
grep -q 'domain: efa_0-rdm' <<<"$out" || fail "no efa_0-rdm: $out"
grep -q 'type: FI_EP_RDM' <<<"$out" || fail "no RDM endpoint: $out"
echo "PASS"
