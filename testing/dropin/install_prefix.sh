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
