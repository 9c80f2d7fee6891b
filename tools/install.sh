#!/usr/bin/env bash
# Lays out an xpufab installation:
#   PREFIX/include/rdma/*.h  PREFIX/lib/pkgconfig/xpufab.pc
#   PREFIX/lib/libfabric.so.1: the library, optimized (//tools:install builds it with -c opt and
#     link-time optimization),
#     a drop-in for libfabric.so.1 (LD_LIBRARY_PATH=PREFIX/lib runs libfabric programs on it);
#     PREFIX/lib/libxpufab.so links to it, and -lxpufab records libfabric.so.1 as needed
#   PREFIX/lib/libuct_xpufab.so: the UCT transport "srd" for UCX 1.13 (LD_PRELOAD it into any
#     UCX program)
#   PREFIX/lib/.debug/libfabric.so.1.debug, libuct_xpufab.so.debug: their debug info, found by
#     gdb through each library's debug link
#   PREFIX/include/xpufab/efa_xpu/*.h: the efa device calls rdma/fi_xpu_device_efa.h
#     includes as <xpufab/efa_xpu/...> (their presence turns them on in rdma/fi_xpu_device.h)
#   PREFIX/include/xpufab/{device,device/runtime,api/proto}/*.h: the data path and the protocol
#     core they build on, included as "device/..." and "api/proto/..." (xpufab.pc puts include
#     and include/xpufab on the path)
# Usage: bazel run //tools:install -- PREFIX
# A relative PREFIX is taken relative to the directory bazel was run from.
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: bazel run //tools:install -- PREFIX" >&2
  exit 2
fi
prefix="$1"
case "$prefix" in
  /*) ;;
  *) prefix="${BUILD_WORKING_DIRECTORY:-$PWD}/$prefix" ;;
esac

# The files come from this target's runfiles (the current directory under
# `bazel run` and in tests).
lib=api/lib/libxpufab.so
uct_lib=api/lib/libuct_xpufab.so
pc_in=api/lib/xpufab.pc.in
headers=api/include/rdma
for f in "$lib" "$uct_lib" "$pc_in" "$headers/fabric.h"; do
  [ -e "$f" ] || { echo "install: $f not found in $(pwd)" >&2; exit 1; }
done

ver() { sed -n "s/^#define $1 \\([0-9]*\\).*/\\1/p" "$headers/fabric.h"; }
version="$(ver FI_MAJOR_VERSION).$(ver FI_MINOR_VERSION).$(ver FI_REVISION_VERSION)"

mkdir -p "$prefix/include/rdma" "$prefix/lib/pkgconfig"
(cd "$headers" && find . -name '*.h' -print0) | while IFS= read -r -d '' h; do
  mkdir -p "$prefix/include/rdma/$(dirname "$h")"
  install -m 0644 "$headers/$h" "$prefix/include/rdma/$h"
done
for d in device device/runtime efa_xpu api/proto; do
  mkdir -p "$prefix/include/xpufab/$d"
done
for h in device/efa_completion.h device/efa_cq.h device/efa_dp.h device/efa_dp_ring.h \
         device/efa_io_defs.h device/efa_io_status.h device/efa_rq.h device/efa_sq.h \
         device/efa_wr.h device/xpu_func.h device/xpu_prims.h device/xpu_prims_cuda.h \
         device/xpu_prims_host.h device/runtime/xpu_host_abi.h device/runtime/xpu_scope.h \
         device/runtime/xpu_scope_cuda.h device/runtime/xpu_scope_host.h \
         api/proto/amo.h api/proto/atomic.h api/proto/core.h api/proto/ep.h api/proto/match.h \
         api/proto/msg.h api/proto/proto.h api/proto/rma.h api/proto/tables.h api/proto/wire.h; do
  [ -e "$h" ] || { echo "install: $h not found in $(pwd)" >&2; exit 1; }
  install -m 0644 "$h" "$prefix/include/xpufab/$h"
done
for h in atomics.h check.h cntr.h cq.h efa_xpu.h handles.h post.h proto_ep.h tagged.h; do
  [ -e "device/efa_xpu/$h" ] || { echo "install: device/efa_xpu/$h not found in $(pwd)" >&2; exit 1; }
  install -m 0644 "device/efa_xpu/$h" "$prefix/include/xpufab/efa_xpu/$h"
done
# Installs library $1 as PREFIX/lib/$2, its debug info (where it has any and objcopy is there)
# split into PREFIX/lib/.debug/$2.debug, beside it, where gdb looks for a debug link's target.
install_library() {
  local src="$1" name="$2"
  rm -f "$prefix/lib/$name" "$prefix/lib/.debug/$name.debug"
  if command -v objcopy >/dev/null && grep -q '\.debug_info' <<<"$(readelf -S "$src")"; then
    mkdir -p "$prefix/lib/.debug"
    objcopy --only-keep-debug "$src" "$prefix/lib/.debug/$name.debug"
    chmod 0644 "$prefix/lib/.debug/$name.debug"
    objcopy --strip-debug --add-gnu-debuglink="$prefix/lib/.debug/$name.debug" \
      "$src" "$prefix/lib/$name"
    chmod 0755 "$prefix/lib/$name"
  else
    install -m 0755 "$src" "$prefix/lib/$name"
  fi
}
soname=libfabric.so.1
rm -f "$prefix/lib/libxpufab.so"
install_library "$lib" "$soname"
ln -s "$soname" "$prefix/lib/libxpufab.so"
install_library "$uct_lib" libuct_xpufab.so
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" "$pc_in" \
  > "$prefix/lib/pkgconfig/xpufab.pc"
chmod 0644 "$prefix/lib/pkgconfig/xpufab.pc"
echo "installed xpufab $version into $prefix"
