#!/usr/bin/env bash
# The include-level half of DESIGN §1's arrows (Bazel visibility checks the dependency half): the
# hardware backend never includes the emulator, the provider includes neither backend, device code
# includes neither the provider nor a backend, and the public headers name no repository path.
# Arguments: one source file of each checked directory; the directory is where it really lives.
set -euo pipefail
dir_of() { dirname "$(readlink -f "$1")"; }
hw=$(dir_of "$1") efa=$(dir_of "$2") device=$(dir_of "$3") rdma=$(dir_of "$4")
failed=0
forbid() {  # forbid WHAT DIR REGEX
  local hits
  hits=$(grep -rnE --include='*.h' --include='*.c' --include='*.cc' --include='*.cu' "$3" "$2" || true)
  if [ -n "$hits" ]; then
    echo "FAIL: $1:"; echo "$hits"; failed=1
  else
    echo "ok: $1"
  fi
}
forbid "hw/ includes the emulator" "$hw" '#[[:space:]]*include[[:space:]]*[<"]emu/'
forbid "api/efa includes a backend" "$efa" '#[[:space:]]*include[[:space:]]*[<"](emu|hw)/'
forbid "device/ includes the provider or a backend" "$device" '#[[:space:]]*include[[:space:]]*[<"](api/efa|emu|hw)/'
forbid "public headers include a repository path" "$rdma" '#[[:space:]]*include[[:space:]]*"(api|device|emu|hw|testing|tools)/'
exit $failed
