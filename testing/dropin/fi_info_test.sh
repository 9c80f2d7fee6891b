#!/usr/bin/env bash
# Debian's unmodified fi_info, linked against libfabric.so.1, runs on the
# installed xpufab library and lists the emulated EFA through xpufab's provider.
source testing/dropin/install_prefix.sh

fail() { echo "fi_info_test: $*"; exit 1; }

# The loader picks the installed library, not Debian's.
loaded=$(LD_TRACE_LOADED_OBJECTS=1 fi_info | awk '$1 == "libfabric.so.1" {print $3}')
[ "$loaded" = "$prefix/lib/libfabric.so.1" ] || fail "libfabric.so.1 resolves to '$loaded'"

out=$(debian_tool timeout 30 fi_info -p efa) || fail "fi_info -p efa failed: $out"
echo "$out"
grep -qx 'provider: efa' <<<"$out" || fail "no efa provider listed"
grep -qx '    fabric: efa-direct' <<<"$out" || fail "no efa-direct fabric listed"
grep -qx '    type: FI_EP_RDM' <<<"$out" || fail "no RDM endpoint listed"
# The provider version of xpufab's efa, not Debian's 1.17 one.
grep -qx '    version: 2.7' <<<"$out" || fail "not xpufab's efa provider"

# The verbose listing prints every attribute through fi_tostr_r@FABRIC_1.4, from
# structures Debian's binary reads at its own (FABRIC_1.3) layout.
verbose=$(debian_tool timeout 30 fi_info -p efa -t FI_EP_RDM -v) || fail "fi_info -v failed: $verbose"
for line in 'fi_info:' 'fi_domain_attr:' 'fi_ep_attr:' 'fi_fabric_attr:' \
            'name: efa-direct' 'prov_name: efa'; do
  grep -qF "$line" <<<"$verbose" || fail "verbose listing lacks '$line'"
done

# Hints the provider cannot meet find nothing (-FI_ENODATA), not Debian's providers.
if none=$(debian_tool timeout 30 fi_info -p efa -t FI_EP_MSG 2>&1); then
  fail "an MSG endpoint was offered: $none"
fi
grep -qxF "fi_getinfo: -61" <<<"$none" || fail "unexpected error for FI_EP_MSG: $none"
echo "fi_info_test: OK"
