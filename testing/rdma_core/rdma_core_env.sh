# Sourced by this package's tests: what `./xpufab exec` sets up, inside the test's sandbox.
# $1: the preload library, $2: make_sysfs.sh. Standalone (outside Bazel) it works the same with
# any two such paths.
set -euo pipefail
RDMA_CORE_SHIM=$(readlink -f "$1")
source "$(dirname "${BASH_SOURCE[0]}")/../support/free_port.sh"
if [ -n "${TEST_TMPDIR:-}" ]; then
  tmp=$TEST_TMPDIR
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
fi
rm -rf "$tmp/sysfs"
"$2" "$tmp/sysfs"
mkdir -p "$tmp/shm"
export SYSFS_PATH=$tmp/sysfs
export FI_EFA_EMU_FABRIC=shm
export FI_EFA_EMU_SHM_DIR=$tmp/shm
export FI_EFA_EMU_FABRIC_KEY=rdma_core_$$
export FI_EFA_ENABLE_SHM_TRANSFER=0
# A sanitizer build of the library needs its runtimes loaded first (the programs it is preloaded
# into are not instrumented); leaks of those programs are not ours to report.
RDMA_CORE_PRELOAD=$RDMA_CORE_SHIM
runtimes=$(ldd "$RDMA_CORE_SHIM" | awk '/lib(asan|ubsan|tsan)\.so/ {print $3}' | tr '\n' ':')
if [ -n "$runtimes" ]; then
  RDMA_CORE_PRELOAD=$runtimes$RDMA_CORE_SHIM
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
# The emulated generations, oldest first.
GENERATIONS=(gen1 gen2 gen3 gen4)
with_shim() { LD_PRELOAD="$RDMA_CORE_PRELOAD" "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# perftest_pair OUT GEN TOOL ARGS...: a server and client (127.0.0.1) of a tool that takes -p PORT
# and the server's address, as perftest and the ibv_*_pingpong programs do, on generation GEN,
# each under a timeout; their reports are OUT/server.txt and OUT/client.txt. The client retries
# while the server is not listening yet. True when both succeed.
perftest_pair() {
  local out=$1 gen=$2 t=$3
  shift 3
  local port
  port=$(free_port)
  mkdir -p "$out"
  FI_EFA_EMU_PROFILE=$gen with_shim timeout 60 "$t" "$@" -p "$port" >"$out/server.txt" 2>&1 &
  local server=$! rc=1
  for _ in $(seq 1 50); do
    sleep 0.2
    rc=0
    FI_EFA_EMU_PROFILE=$gen with_shim timeout 60 "$t" "$@" -p "$port" 127.0.0.1 \
      >"$out/client.txt" 2>&1 || rc=$?
    [ $rc = 0 ] && break
    grep -q "Couldn't connect" "$out/client.txt" || break
  done
  local src=0
  wait "$server" || src=$?
  echo "$gen $t $*: client rc=$rc server rc=$src"
  cat "$out/client.txt"
  [ $rc = 0 ] && [ $src = 0 ]
}
