#!/usr/bin/env bash
# xpufab_bringup: compares the hardware backend with the emulator on this machine.
#
#   xpufab_bringup [--out DIR] [--filter GTEST_FILTER] [--no-example]
#
# 1. Lists EFA devices and caps (hw backend) and what fi_getinfo offers per backend; picks the
#    emulator generation whose operations match the first device (FI_EFA_EMU_PROFILE overrides)
#    and removes from it the caps that device lacks (FI_EFA_EMU_CAPS_CLEAR, which overrides too),
#    so both sides offer, and refuse, the same.
# 2. Runs every conformance test, one process per test, and the fi_xpu(3) example, first with
#    FI_EFA_BACKEND=hw and then with FI_EFA_BACKEND=emu, recording completion traces
#    (FI_EFA_CQ_TRACE, format in api/efa/cq_trace.h) and each test's outcome.
# 3. Prints the differences, per test: outcome, then the normalised trace.
#
# Normalisation: SRD is unordered, so completions of one QP may arrive in any order within what
# the test posted; and which QP of a domain sees a completion first is timing. A trace is therefore
# compared as a multiset of lines per (domain, QP): the lines are sorted. QPs are numbered by
# enable order within their domain and domains by open order within the test's process, so raw
# QPNs, addresses and timing never enter the comparison. The example's output is compared with
# timings and device names blanked.
#
# Exit status: 0 both sides ran and agree (empty difference; a test that fails alike on both sides
# is noted, not a difference); 1 a difference, or (without hardware) a failure on the emulator
# side; 3 no hardware side (the reason is printed: library-missing, rdma-core-too-old or
# no-efa-device) and the emulator side passed; 2 usage or a missing program.
set -uo pipefail

out=""
filter="*"
example=1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --filter) filter=$2; shift 2 ;;
    --no-example) example=0; shift ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "xpufab_bringup: unknown argument $1" >&2; exit 2 ;;
  esac
done

# The three programs sit next to this script in bazel-bin, or in its runfiles.
find_bin_dir() {
  local d
  for d in "${XPUFAB_BRINGUP_BIN_DIR:-}" "$0.runfiles/xpufab/tools/bringup" \
           "${RUNFILES_DIR:-/nonexistent}/xpufab/tools/bringup" \
           "${TEST_SRCDIR:-/nonexistent}/xpufab/tools/bringup" "$(dirname "$0")"; do
    [ -n "$d" ] && [ -x "$d/bringup_info" ] && [ -x "$d/bringup_conformance" ] &&
      [ -x "$d/bringup_xpu_example" ] && { echo "$d"; return 0; }
  done
  return 1
}
bin=$(find_bin_dir) || { echo "xpufab_bringup: bringup_info/bringup_conformance/bringup_xpu_example not found" >&2; exit 2; }
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/xpufab-bringup.XXXXXX")
mkdir -p "$out"
export LC_ALL=C

echo "== devices and caps =="
# The emulator is listed without the preload library of `./xpufab exec` (see run_side emu).
"$bin/bringup_info" hw >"$out/info.txt" 2>&1
info_rc=$?
env -u LD_PRELOAD -u SYSFS_PATH "$bin/bringup_info" emu >>"$out/info.txt" 2>&1
cat "$out/info.txt"
hw_line=$(grep -m 1 '^hw: ' "$out/info.txt" || true)
case "$info_rc" in
  0) have_hw=1 ;;
  3) have_hw=0 ;;
  *) echo "xpufab_bringup: bringup_info failed ($info_rc)" >&2; exit 1 ;;
esac
profile=${FI_EFA_EMU_PROFILE:-$(sed -n 's/^emu_profile: //p' "$out/info.txt")}
[ -n "$profile" ] || profile=latest
echo "emulator profile for the comparison: $profile"
caps_clear=${FI_EFA_EMU_CAPS_CLEAR:-$(sed -n 's/^emu_caps_clear: //p' "$out/info.txt")}
[ -n "$caps_clear" ] || caps_clear=none
echo "emulator caps cleared: $caps_clear"

# Test names in the order the suite runs them.
XPUFAB_CONFORMANCE_BACKEND=emu "$bin/bringup_conformance" --gtest_list_tests --gtest_filter="$filter" >"$out/list.txt" 2>&1 ||
  { cat "$out/list.txt"; exit 1; }
tests=$(awk '/^[^ ]/ {suite=$1} /^  [^ ]/ {print suite $1}' "$out/list.txt")
[ -n "$tests" ] || { echo "xpufab_bringup: no conformance test matches $filter" >&2; exit 2; }

# Runs the suite and the example on one backend; results land in $out/<side>/.
run_side() {
  local side=$1 dir="$out/$1" t safe rc
  shift
  rm -rf "$dir"
  mkdir -p "$dir/trace" "$dir/log"
  : >"$dir/results.txt"
  for t in $tests; do
    safe=$(echo "$t" | tr '/' '_')
    env "$@" FI_EFA_BACKEND="$side" XPUFAB_CONFORMANCE_BACKEND="$side" \
      FI_EFA_CQ_TRACE="$dir/trace/$safe.raw" \
      timeout 60 "$bin/bringup_conformance" --gtest_filter="$t" >"$dir/log/$safe.txt" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q '^\[  PASSED  \] 1 test' "$dir/log/$safe.txt"; then
      echo "$t passed" >>"$dir/results.txt"
    else
      echo "$t FAILED (exit $rc)" >>"$dir/results.txt"
    fi
    sort "$dir/trace/$safe.raw" 2>/dev/null >"$dir/trace/$safe.txt"
  done
  rc=0
  if [ $example = 1 ]; then
    env "$@" FI_EFA_BACKEND="$side" FI_EFA_CQ_TRACE="$dir/trace/example.raw" \
      timeout 30 "$bin/bringup_xpu_example" 4096 >"$dir/log/example.txt" 2>&1
    rc=$?
  else
    echo "(not run)" >"$dir/log/example.txt"
  fi
  {
    echo "exit $rc"
    sed -E -e 's/[0-9]+\.[0-9]+ (ms|MB\/s)/<t> \1/g' -e 's/domain [^ ,]+/domain <name>/' \
      -e '/setup took/d' "$dir/log/example.txt"
  } >"$dir/example.txt"
  sort "$dir/trace/example.raw" 2>/dev/null >"$dir/trace/example.txt"
  local failed
  failed=$(grep -c FAILED "$dir/results.txt")
  echo "$side: $(($(wc -l <"$dir/results.txt") - failed)) passed, $failed failed; example exit $rc"
}

echo
echo "== runs =="
if [ $have_hw = 1 ]; then
  run_side hw
else
  echo "hw side skipped: ${hw_line#hw: }"
fi
# The preload library and sysfs tree of `./xpufab exec` serve only the hw side; the emulator
# backend runs in-process and must not meet a second emulator behind rdma-core.
run_side emu -u LD_PRELOAD -u SYSFS_PATH FI_EFA_EMU_PROFILE="$profile" \
  FI_EFA_EMU_CAPS_CLEAR="$caps_clear"

emu_failed=$(grep -c FAILED "$out/emu/results.txt")
emu_example_rc=$(sed -n '1s/^exit //p' "$out/emu/example.txt")

if [ $have_hw = 0 ]; then
  echo
  if [ "$emu_failed" -ne 0 ] || [ "$emu_example_rc" != 0 ]; then
    echo "emulator side FAILED:"
    grep FAILED "$out/emu/results.txt"
    echo "(logs in $out/emu/log)"
    exit 1
  fi
  echo "no difference computed: no hardware side (results in $out)"
  exit 3
fi

echo
echo "== differences (hw vs emu) =="
ndiff=0
for t in $tests example; do
  safe=$(echo "$t" | tr '/' '_')
  if [ "$t" = example ]; then
    a="$out/hw/example.txt"; b="$out/emu/example.txt"
  else
    a=$(mktemp); b=$(mktemp)
    grep -F "$t " "$out/hw/results.txt" >"$a"
    grep -F "$t " "$out/emu/results.txt" >"$b"
  fi
  d=$(diff -u --label "hw $t" --label "emu $t" "$a" "$b"; \
      diff -u --label "hw $t trace" --label "emu $t trace" "$out/hw/trace/$safe.txt" "$out/emu/trace/$safe.txt")
  [ "$t" = example ] || rm -f "$a" "$b"
  if [ -n "$d" ]; then
    echo "$d"
    ndiff=$((ndiff + 1))
  fi
done
both=$(sed -n 's/ FAILED.*//p' "$out/hw/results.txt" "$out/emu/results.txt" | sort | uniq -d | wc -l)
[ "$both" -eq 0 ] || echo "note: $both conformance tests fail on both sides alike (not a difference; logs in $out/*/log)"
echo "$ndiff of $(($(echo "$tests" | wc -l) + 1)) runs differ (results in $out)"
[ $ndiff -eq 0 ] && exit 0
exit 1
