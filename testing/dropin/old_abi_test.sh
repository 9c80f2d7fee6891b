#!/usr/bin/env bash
# Builds a program against Debian's libfabric 1.17 (its headers and
# libfabric.so.1), checks it bound the FABRIC_1.3 versions, and runs it on
# the installed xpufab library.
source testing/dropin/install_prefix.sh

fail() { echo "old_abi_test: $*"; exit 1; }
work="${TEST_TMPDIR:-$(mktemp -d)}/old_abi"
mkdir -p "$work"
# A sanitizer build of the library needs its runtime loaded first.
san=()
dyn=$(readelf -d "$prefix/lib/libfabric.so.1")
if grep -q libasan <<<"$dyn"; then
  san=(-fsanitize=address,undefined)
elif grep -q libtsan <<<"$dyn"; then
  san=(-fsanitize=thread)
fi
# Debian's headers and library only: no xpufab include or library path.
gcc -std=c11 -Wall -Wextra -Werror "${san[@]}" -o "$work/app" testing/dropin/old_abi_app.c \
  -L/usr/lib/x86_64-linux-gnu -lfabric
dynsyms=$(objdump -T "$work/app")
for need in fi_getinfo fi_dupinfo fi_freeinfo; do
  grep -qE "\\(FABRIC_1\\.3\\) +$need\$" <<<"$dynsyms" || fail "$need did not bind FABRIC_1.3"
done
out=$(timeout 30 "$work/app") || fail "the program failed: $out"
echo "$out"
grep -qx 'old_abi_app: OK' <<<"$out" || fail "unexpected output"
echo "old_abi_test: OK"
