#!/usr/bin/env bash
# The installed library carries libfabric's symbol versions: the SONAME, the
# version nodes and their inheritance, every version Debian's libfabric.so.1
# defines for a function xpufab exports, and upstream's default versions.
source testing/dropin/install_prefix.sh

fail() { echo "symbol_versions_test: $*"; exit 1; }
lib="$prefix/lib/libfabric.so.1"
debian=/usr/lib/x86_64-linux-gnu/libfabric.so.1
[ -f "$debian" ] || fail "$debian (Debian's libfabric1) is not installed"

grep -qF 'Library soname: [libfabric.so.1]' <<<"$(readelf -d "$lib")" || fail "SONAME is not libfabric.so.1"
[ "$(readlink "$prefix/lib/libxpufab.so")" = libfabric.so.1 ] || fail "libxpufab.so is not a link to libfabric.so.1"

# "NODE PARENT" per version definition (the base entry, the file name, skipped).
nodes() {
  readelf -V -W "$1" | awk '
    /^Version definition section/ {d = 1; next}
    /^Version needs section/ {d = 0}
    d && / Name: / && $0 !~ /Flags: BASE/ {if (n) print n, "-"; n = $NF; next}
    d && /Parent 1:/ {print n, $NF; n = ""}
    END {if (n) print n, "-"}'
}
# "NAME@VERSION" (non-default) or "NAME@@VERSION" (default) per defined function.
defs() {
  readelf --dyn-syms -W "$1" | awk '$4 == "FUNC" && $7 != "UND" {print $8}' | sort -u
}

ours_nodes=$(nodes "$lib")
ours_defs=$(defs "$lib")
echo "== version nodes"; echo "$ours_nodes"

# Debian's nodes, with the same parents.
while read -r node parent; do
  grep -qxF "$node $parent" <<<"$ours_nodes" || fail "node $node (parent $parent) missing or different"
done < <(nodes "$debian")
# Upstream's later nodes, and the one for xpufab's own entry points.
for np in "FABRIC_1.7 FABRIC_1.6" "FABRIC_1.8 FABRIC_1.7" "FABRIC_1.9 FABRIC_1.8" \
          "FABRIC_1.10 FABRIC_1.9" "XPUFAB_2.7 FABRIC_1.10"; do
  grep -qxF "$np" <<<"$ours_nodes" || fail "node ${np% *} (parent ${np#* }) missing"
done

# Every version Debian defines for a function we export resolves in ours.
checked=0
while read -r def; do
  name=${def%%@*} ver=${def##*@}
  grep -qE "^${name}@@?${ver}\$" <<<"$ours_defs" || {
    grep -qE "^${name}@" <<<"$ours_defs" && fail "$name@$ver (defined by Debian's library) is missing"
    continue
  }
  checked=$((checked + 1))
done < <(defs "$debian")
echo "$checked of Debian's versioned definitions present"
[ "$checked" -ge 21 ] || fail "only $checked of Debian's definitions matched"

# Upstream's default version for each, and every older one of the info calls.
for d in fi_getinfo@@FABRIC_1.10 fi_freeinfo@@FABRIC_1.10 fi_dupinfo@@FABRIC_1.10 \
         fi_fabric@@FABRIC_1.1 fi_fabric@FABRIC_1.0 fi_fabric2@@FABRIC_1.8 \
         fi_tostr@@FABRIC_1.0 fi_tostr_r@@FABRIC_1.4 fi_strerror@@FABRIC_1.0 \
         fi_version@@FABRIC_1.0 fi_open@@FABRIC_1.5 fi_getparams@@FABRIC_1.0 \
         fi_freeparams@@FABRIC_1.0 fi_import@@XPUFAB_2.7 xpu_host_launch@@XPUFAB_2.7; do
  grep -qxF "$d" <<<"$ours_defs" || fail "$d not defined"
done
for f in fi_getinfo fi_freeinfo fi_dupinfo; do
  for v in 1.0 1.1 1.2 1.3 1.7 1.8 1.9; do
    grep -qxF "$f@FABRIC_$v" <<<"$ours_defs" || fail "$f@FABRIC_$v not defined"
  done
done
# Nothing but the C API and the host XPU runtime, all versioned.
stray=$(grep -vE '^(fi_|xpu_host_)[a-z0-9_]+@@?(FABRIC_1\.[0-9]+|XPUFAB_2\.7)$' <<<"$ours_defs" || true)
[ -z "$stray" ] || fail "unexpected exports: $stray"

# Each versioned function Debian's tools need is defined.
for tool in fi_info fi_pingpong; do
  objdump -T "$(command -v "$tool")" | awk '$NF ~ /^fi_/ && $(NF-1) ~ /^\(FABRIC_/ {
      v = $(NF-1); gsub(/[()]/, "", v); print $NF "@" v}' | while read -r need; do
    grep -qE "^${need%@*}@@?${need#*@}\$" <<<"$ours_defs" || fail "$tool needs $need"
  done
done
echo "symbol_versions_test: OK"
