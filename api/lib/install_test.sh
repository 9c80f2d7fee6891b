#!/usr/bin/env bash
# Installs xpufab into a temporary prefix and builds a C program against it
# with pkg-config alone, as a user outside this repository would.
set -euo pipefail

prefix="${TEST_TMPDIR:-$(mktemp -d)}/prefix"
tools/install.sh "$prefix"

for f in include/rdma/fabric.h include/rdma/fi_errno.h include/rdma/fi_xpu.h \
         lib/libfabric.so.1 lib/libxpufab.so lib/pkgconfig/xpufab.pc; do
  [ -f "$prefix/$f" ] || { echo "missing $prefix/$f"; exit 1; }
done
[ "$(readlink "$prefix/lib/libxpufab.so")" = libfabric.so.1 ] ||
  { echo "lib/libxpufab.so is not a link to libfabric.so.1"; exit 1; }

# The installed libraries are optimized builds whatever -c the tests run with;
# their debug info sits apart, behind a debug link, and records how each unit
# was compiled.
# Checks read captured output: under pipefail, grep -q leaving a pipe early fails the pipe.
for name in libfabric.so.1 libuct_xpufab.so; do
  debug="$prefix/lib/.debug/$name.debug"
  [ -f "$debug" ] || { echo "missing $debug"; exit 1; }
  grep -q '\.debug_info' <<<"$(readelf -S "$prefix/lib/$name")" &&
    { echo "lib/$name still carries its debug info"; exit 1; }
  grep -qF "$name.debug" <<<"$(readelf --string-dump=.gnu_debuglink "$prefix/lib/$name")" ||
    { echo "lib/$name has no debug link"; exit 1; }
done
debug="$prefix/lib/.debug/libfabric.so.1.debug"
producers=$(readelf --debug-dump=info "$debug" 2>/dev/null | grep 'DW_AT_producer' | grep -F ' -g ' || true)
[ -n "$producers" ] || { echo "no compilation units in $debug"; exit 1; }
unoptimized=$(grep -vE -- ' -O[123s]( |$)' <<<"$producers" | grep -F -e '/api/' -e '/emu/' -e '/device/' || true)
[ -z "$unoptimized" ] || { echo "units built without optimization:"; echo "$unoptimized" | head -3; exit 1; }
# Optimized across its files at link time (tools/opt.bzl): those units are GIMPLE's.
grep -qF 'GNU GIMPLE' <<<"$producers" || { echo "libfabric.so.1 was linked without link-time optimization"; exit 1; }

# Public headers name no repository path; the device calls come from the prefixed layout.
if grep -rnE '#[[:space:]]*include[[:space:]]*[<"](api|device|testing)/' "$prefix/include/rdma"; then
  echo "a public header includes a repository path"; exit 1
fi
[ -f "$prefix/include/xpufab/efa_xpu/efa_xpu.h" ] || { echo "missing include/xpufab/efa_xpu/efa_xpu.h"; exit 1; }

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[ "$(pkg-config --modversion xpufab)" = "2.7.0" ] || {
  echo "unexpected version: $(pkg-config --modversion xpufab)"; exit 1; }

# Only the C API and the host XPU runtime may be exported.
exports=$(nm -D --defined-only "$prefix/lib/libxpufab.so")
extra=$(awk '$2 ~ /^[TDBRVW]$/ {print $3}' <<<"$exports" |
        grep -v -e '^fi_' -e '^xpu_host_' || true)
[ -z "$extra" ] || { echo "unexpected exports:"; echo "$extra"; exit 1; }
grep -q ' T fi_getinfo@@FABRIC_1.10' <<<"$exports" ||
  { echo "fi_getinfo not exported"; exit 1; }

work="${TEST_TMPDIR:-$(mktemp -d)}/app"
mkdir -p "$work"
# A sanitizer build of the library needs its runtime loaded first.
san=()
dyn=$(readelf -d "$prefix/lib/libfabric.so.1")
if grep -q 'libasan' <<<"$dyn"; then
  san=(-fsanitize=address,undefined)
elif grep -q 'libtsan' <<<"$dyn"; then
  san=(-fsanitize=thread)
fi
# shellcheck disable=SC2046
gcc -std=c11 -Wall -Wextra -Werror "${san[@]}" -o "$work/app" api/lib/external_app.c \
  $(pkg-config --cflags --libs xpufab)
out=$("$work/app")
echo "$out"

expect() {
  grep -qxF "$1" <<<"$out" || { echo "expected line: $1"; exit 1; }
}
expect "version 2.7"
expect "newer Function not implemented"
expect "strerror No data available"
expect "tostr [ FI_MSG, FI_XPU ]"
grep -qE '^getinfo ok$' <<<"$out" || { echo "getinfo failed"; exit 1; }
grep -qE '^provider efa efa-direct xpu_ctx_cnt [1-9]' <<<"$out" || { echo "no efa-direct offer with FI_XPU"; exit 1; }
# Device code for the host XPU from the installed headers, launched through the library.
# shellcheck disable=SC2046
gcc -std=c11 -Wall -Wextra -Werror "${san[@]}" -o "$work/kernel" api/lib/external_xpu_kernel.c \
  $(pkg-config --cflags --libs xpufab)
kout=$("$work/kernel")
echo "$kout"
grep -qxF "launch 0" <<<"$kout" || { echo "host XPU launch failed"; exit 1; }
grep -qxF "work-items 64" <<<"$kout" || { echo "host XPU kernel results wrong"; exit 1; }
echo "install_test: OK"
