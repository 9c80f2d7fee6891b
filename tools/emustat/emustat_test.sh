#!/bin/bash
# Runs a small faulty workload with FI_EFA_EMU_STATS set, then checks what emustat prints.
set -euo pipefail
emustat="$1"
soak="$2"
dir="${TEST_TMPDIR:-$(mktemp -d)}"
FI_EFA_EMU_STATS="$dir/run" "$soak" 400 "seed=2;drop=0.2" > "$dir/soak.out"
ls "$dir"/run.fa.stats "$dir"/run.fb.stats > /dev/null
trap 'echo "emustat_test: the check on line $LINENO failed"' ERR
out="$("$emustat" "$dir/run.fa.stats")"
# Checks read captured output: under pipefail, grep -q leaving a pipe early would fail it.
grep -q '^fa:$' <<<"$out"
grep -Eq '^ +wqes: 400$' <<<"$out"
grep -Eq '^ +retransmits: [1-9]' <<<"$out"
grep -q '^  qp 1:$' <<<"$out"
qp="$("$emustat" -z -q 1 "$dir/run.fa.stats")"
grep -Eq '^ +tx_cqes: 400$' <<<"$qp"
if grep -q 'steps' <<<"$qp"; then echo "device counters leaked into -q output"; exit 1; fi
grep -q 'delta' <<<"$("$emustat" -z -d "$dir/run.fa.stats" "$dir/run.fa.stats")"
if "$emustat" /nonexistent 2> /dev/null; then echo "missing file accepted"; exit 1; fi
echo "1 passed, 0 failed"
