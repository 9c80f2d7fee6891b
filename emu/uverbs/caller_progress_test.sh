#!/usr/bin/env bash
# Runs the caller-progress test ($3) under the preload library ($1) with a fresh sysfs tree ($2)
# and neither the engine thread nor the service thread: only the application's verbs calls can
# move the emulated NIC. With $4 = "threads" both threads run too, so the callers' passes race
# the service thread's and the engine thread's (the case the sanitizer builds look at); $4 =
# "callers" is the default. Further arguments go to the test binary.
set -euo pipefail
shim=$(readlink -f "$1")
tmp=${TEST_TMPDIR:-$(mktemp -d)}
"$2" "$tmp/sysfs"
preload=$shim
# A sanitizer build of the library needs its runtime loaded first (the test is not instrumented).
runtimes=$(ldd "$shim" | awk '/lib(asan|ubsan|tsan)\.so/ {print $3}' | tr '\n' ':')
if [ -n "$runtimes" ]; then
  preload=$runtimes$shim
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  supp=$(dirname "$(readlink -f "$0")")/tsan_suppressions.txt
  [ -f "$supp" ] || supp=$(dirname "$0")/tsan_suppressions.txt
  # One test calls exit() from a SIGTERM handler on purpose (what libinfinipath does to programs
  # that load it); that it is signal-unsafe is the point, not a finding.
  export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$supp:report_signal_unsafe=0"
fi
threads=0
[ "${4:-}" = threads ] && threads=1
bin=$3
shift 4
SYSFS_PATH=$tmp/sysfs FI_EFA_EMU_FABRIC=inproc FI_EFA_EMU_ENGINE_THREAD=$threads \
  FI_EFA_EMU_SERVICE_THREAD=$threads LD_PRELOAD=$preload "$bin" "$@"
