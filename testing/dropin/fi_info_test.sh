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
# The provider version of xpufab's efa (2.7.0, numbered as libfabric numbers its providers'),
# not Debian's 1.17 one (117.0).
grep -qx '    version: 207.0' <<<"$out" || fail "not xpufab's efa provider"

# The verbose listing prints every attribute through fi_tostr_r@FABRIC_1.4, from
# structures Debian's binary reads at its own (FABRIC_1.3) layout.
verbose=$(debian_tool timeout 30 fi_info -p efa -t FI_EP_RDM -v) || fail "fi_info -v failed: $verbose"
for line in 'fi_info:' 'fi_domain_attr:' 'fi_ep_attr:' 'fi_fabric_attr:' \
            'name: efa-direct' 'prov_name: efa'; do
  grep -qF "$line" <<<"$verbose" || fail "verbose listing lacks '$line'"
done

# -v prints each entry once: as many "fi_info:" sections as entries ("---" lines).
entries=$(grep -c '^---$' <<<"$verbose")
sections=$(grep -c '^fi_info:$' <<<"$verbose")
[ "$entries" -ge 1 ] && [ "$entries" -eq "$sections" ] ||
  fail "fi_info -v printed $sections sections for $entries entries"
all=$(debian_tool timeout 30 fi_info -p efa -v) || fail "fi_info -p efa -v failed: $all"
[ "$(grep -c '^---$' <<<"$all")" -eq "$(grep -c '^fi_info:$' <<<"$all")" ] ||
  fail "fi_info -p efa -v repeats entries"

# -e lists the provider's variables with their values, -g those matching a word.
env_list=$(FI_EFA_BACKEND=emu debian_tool timeout 30 fi_info -e) || fail "fi_info -e failed"
grep -qx '# FI_EFA_BACKEND: String' <<<"$env_list" || fail "fi_info -e lacks FI_EFA_BACKEND: $env_list"
grep -qE '^FI_EFA_BACKEND= *emu *$' <<<"$env_list" || fail "fi_info -e shows no value for FI_EFA_BACKEND"
grep -qx '# FI_EFA_CQ_TRACE: String' <<<"$env_list" || fail "fi_info -e lacks FI_EFA_CQ_TRACE"
grep -qx '# FI_EFA_MAX_PEERS: Integer' <<<"$env_list" || fail "fi_info -e lacks FI_EFA_MAX_PEERS"
grep -qx '# FI_PROVIDER: String' <<<"$env_list" || fail "fi_info -e lacks FI_PROVIDER"
# The backend's own variables too, declared by the provider from what the backend registers.
emu_list=$(FI_EFA_EMU_PROFILE=gen2 debian_tool timeout 30 fi_info -e) || fail "fi_info -e failed"
grep -qx '# FI_EFA_EMU_PROFILE: String' <<<"$emu_list" || fail "fi_info -e lacks FI_EFA_EMU_PROFILE"
grep -qE '^FI_EFA_EMU_PROFILE= *gen2 *$' <<<"$emu_list" || fail "fi_info -e shows no FI_EFA_EMU_PROFILE value"
grep -qx '# FI_EFA_EMU_DEVICES: Integer' <<<"$emu_list" || fail "fi_info -e lacks FI_EFA_EMU_DEVICES"
grep -qx '# FI_EFA_EMU_ONE_COPY: Boolean (0/1, on/off, true/false, yes/no)' <<<"$emu_list" ||
  fail "fi_info -e lacks FI_EFA_EMU_ONE_COPY: $(grep ONE_COPY <<<"$emu_list")"
[ "$(grep -c '^# FI_EFA_EMU_PROFILE:' <<<"$emu_list")" = 1 ] || fail "fi_info -e repeats FI_EFA_EMU_PROFILE"
some=$(debian_tool timeout 30 fi_info -g CQ_TRACE) || fail "fi_info -g failed"
grep -qx '# FI_EFA_CQ_TRACE: String' <<<"$some" || fail "fi_info -g CQ_TRACE: $some"
if grep -q FI_EFA_BACKEND <<<"$some"; then fail "fi_info -g CQ_TRACE lists FI_EFA_BACKEND"; fi

# fi_strerror answers past libfabric's codes as libfabric does.
[ "$(debian_tool fi_strerror 5000)" = "Unspecified error" ] ||
  fail "fi_strerror 5000: $(debian_tool fi_strerror 5000)"
[ "$(debian_tool fi_strerror -265)" = "Truncation error" ] ||
  fail "fi_strerror -265: $(debian_tool fi_strerror -265)"

# Hints the provider cannot meet find nothing (-FI_ENODATA), not Debian's providers.
if none=$(debian_tool timeout 30 fi_info -p efa -t FI_EP_MSG 2>&1); then
  fail "an MSG endpoint was offered: $none"
fi
grep -qxF "fi_getinfo: -61" <<<"$none" || fail "unexpected error for FI_EP_MSG: $none"
echo "fi_info_test: OK"
