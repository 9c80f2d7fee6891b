#!/usr/bin/env bash
# callgrind_cost.py on small profiles written here: the instructions per round trip come from the
# totals, hot code counts each 64-byte line once, positions may be relative, a call's inclusive
# cost (the line after calls=) is not an instruction's, and the cost follows the position
# columns the profile names.
set -euo pipefail
cost=$1
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/callgrind_cost.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# N1 N2 N3 N4 TOTAL: a profile whose object a.so ran 0x1000 N1 times, 0x1004 N2 (the same
# line), 0x1040 N3 (the next line), and b.so 0x5000 N4 times; 0x1080 calls into b.so with an
# inclusive cost of N1 * 1000, which counts as no instruction of its own.
profile() {
  cat <<PROFILE
version: 1
positions: instr line
events: Ir
ob=(1) /lib/a.so
fl=(1) a.c
fn=(1) f
0x1000 3 $1
+4 3 $2
* 4 0
cob=(2) /lib/b.so
cfn=(2) g
calls=1 0x5000 9
+124 5 $(($1 * 1000))
-64 6 $3
ob=(2)
fn=(2)
0x5000 9 $4
totals: $5
PROFILE
}

# Ten round trips apart: 0x1000 and 0x1004 ran 10 more times (one hot line), 0x1040 4 more
# (under every other round trip), 0x5000 5 more (every other one: hot, in b.so).
profile 10 10 1 0 1000 >"$tmp/fewer.out"
profile 20 20 5 5 1250 >"$tmp/more.out"
got=$(python3 "$cost" "$tmp/more.out" "$tmp/fewer.out" 10)
want="ir 25 lines 2 kib 0.1"
if [[ $got != "$want" ]]; then
  echo "got '$got', want '$want'" >&2
  exit 1
fi
# A profile of addresses only ("positions: instr"): the cost is the second column.
printf 'positions: instr\nevents: Ir\nob=(1) /lib/a.so\nfn=(1) f\n0x2000 %s\ntotals: %s\n' 4 100 >"$tmp/fewer1.out"
printf 'positions: instr\nevents: Ir\nob=(1) /lib/a.so\nfn=(1) f\n0x2000 %s\ntotals: %s\n' 24 300 >"$tmp/more1.out"
got=$(python3 "$cost" "$tmp/more1.out" "$tmp/fewer1.out" 20)
if [[ $got != "ir 10 lines 1 kib 0.1" ]]; then
  echo "addresses only: got '$got'" >&2
  exit 1
fi
# A profile without instruction addresses (callgrind without --dump-instr=yes), a file that is
# not a profile, and a round-trip count that is not positive, are refused.
sed 's/^positions: instr line$/positions: line/' "$tmp/more.out" >"$tmp/lines.out"
if python3 "$cost" "$tmp/lines.out" "$tmp/fewer.out" 10 2>/dev/null; then
  echo "accepted a profile without instruction addresses" >&2
  exit 1
fi
echo "not a profile" >"$tmp/bad.out"
if python3 "$cost" "$tmp/bad.out" "$tmp/fewer.out" 10 2>/dev/null; then
  echo "accepted a file without totals" >&2
  exit 1
fi
if python3 "$cost" "$tmp/more.out" "$tmp/fewer.out" 0 2>/dev/null; then
  echo "accepted 0 round trips apart" >&2
  exit 1
fi
echo PASS
