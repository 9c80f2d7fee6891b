#!/usr/bin/env bash
# Lays out an xpufab installation:
#   PREFIX/include/rdma/*.h  PREFIX/lib/libxpufab.so  PREFIX/lib/pkgconfig/xpufab.pc
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
pc_in=api/lib/xpufab.pc.in
headers=api/include/rdma
for f in "$lib" "$pc_in" "$headers/fabric.h"; do
  [ -e "$f" ] || { echo "install: $f not found in $(pwd)" >&2; exit 1; }
done

ver() { sed -n "s/^#define $1 \\([0-9]*\\).*/\\1/p" "$headers/fabric.h"; }
version="$(ver FI_MAJOR_VERSION).$(ver FI_MINOR_VERSION).$(ver FI_REVISION_VERSION)"

mkdir -p "$prefix/include/rdma" "$prefix/lib/pkgconfig"
(cd "$headers" && find . -name '*.h' -print0) | while IFS= read -r -d '' h; do
  mkdir -p "$prefix/include/rdma/$(dirname "$h")"
  install -m 0644 "$headers/$h" "$prefix/include/rdma/$h"
done
install -m 0755 "$lib" "$prefix/lib/libxpufab.so"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" "$pc_in" \
  > "$prefix/lib/pkgconfig/xpufab.pc"
chmod 0644 "$prefix/lib/pkgconfig/xpufab.pc"
echo "installed xpufab $version into $prefix"
