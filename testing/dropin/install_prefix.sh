# Sourced by the drop-in tests: installs xpufab into a fresh prefix (the layout
# users get from `bazel run //tools:install -- PREFIX`) and points the dynamic
# loader and the efa provider at it.
set -euo pipefail

prefix="${TEST_TMPDIR:-$(mktemp -d)}/prefix"
rm -rf "$prefix"
tools/install.sh "$prefix" >/dev/null
export LD_LIBRARY_PATH="$prefix/lib"
export FI_EFA_BACKEND=emu
# Processes reach each other through the emulated fabric in shared memory.
export FI_EFA_EMU_FABRIC=shm

# A sanitizer build of the library needs its runtime loaded ahead of Debian's
# programs, which are not built with it; their own leaks are not reported.
san_env=()
dyn=$(readelf -d "$prefix/lib/libfabric.so.1")
if grep -q libasan <<<"$dyn"; then
  san_env=("LD_PRELOAD=$(gcc -print-file-name=libasan.so)"
           "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")
elif grep -q libtsan <<<"$dyn"; then
  san_env=("LD_PRELOAD=$(gcc -print-file-name=libtsan.so)")
fi
# Runs one of Debian's libfabric programs on the installed library.
debian_tool() { env "${san_env[@]}" "$@"; }
