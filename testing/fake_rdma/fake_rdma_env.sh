# Sourced by the fake_rdma tests: what `./xpufab exec` sets up, inside the test's sandbox.
# $1: the preload library, $2: make_sysfs.sh (runfiles paths).
set -euo pipefail
FAKE_RDMA_SHIM=$(readlink -f "$1")
tmp=${TEST_TMPDIR:-$(mktemp -d)}
"$2" "$tmp/sysfs"
mkdir -p "$tmp/shm"
export SYSFS_PATH=$tmp/sysfs
export FI_EFA_EMU_FABRIC=shm
export FI_EFA_EMU_SHM_DIR=$tmp/shm
export FI_EFA_EMU_FABRIC_KEY=fake_rdma_$$
export FI_EFA_ENABLE_SHM_TRANSFER=0
export XPUFAB_EMU_STATS=$tmp/stats.txt
rm -f "$XPUFAB_EMU_STATS"
# A sanitizer build of the library needs its runtimes loaded first (the programs it is preloaded
# into are not instrumented); leaks of those programs are not ours to report.
FAKE_RDMA_PRELOAD=$FAKE_RDMA_SHIM
runtimes=$(ldd "$FAKE_RDMA_SHIM" | awk '/lib(asan|ubsan|tsan)\.so/ {print $3}' | tr '\n' ':')
if [ -n "$runtimes" ]; then
  FAKE_RDMA_PRELOAD=$runtimes$FAKE_RDMA_SHIM
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
# Runs a command with the preload library in place.
with_shim() { LD_PRELOAD="$FAKE_RDMA_PRELOAD" "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
