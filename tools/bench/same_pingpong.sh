#!/usr/bin/env bash
# One 64 B ping-pong program (same_pingpong.c, built here against Debian's libfabric) on Debian's
# shm provider and on the installed library's efa provider over the emulated EFA's shm fabric,
# alternated ROUNDS times; prints every run (with the lowest and highest p50 of its slices: on a
# shared host the emulated EFA's compute-bound path changes level within a run where shm's does
# not), each run's line-ns (one cache line's one-way time between the two processes: the host's
# state, which moves under a virtual machine and is drawn anew for each process pair) and the
# median over rounds of the efa/shm ratios of the median and of the mean. Then, per host state
# (runs grouped by line-ns: a group ends where the next run's is over 1.5 times the last), the
# median p50 of each provider's runs in it and their ratio. This machine shows three: its two
# CPUs on one core (about 25 ns a line: transfers are quick and the core's compute is shared,
# the worst case for a path that computes more), on two cores near each other (about 55 ns) and
# far apart (about 250 ns, when both providers wait on transfers and ratios come near 1). A
# round's own ratio compares its two runs in whatever states each drew. A benchmark, not a
# test.
#   bazel run -c opt //tools/bench:same_pingpong [-- ROUNDS [ROUND_TRIPS]]
# With --count it times nothing: it runs the program's first side under callgrind (the second
# natively), 2,000 and 12,000 round trips on each provider, and prints the instructions and the
# hot code (callgrind_cost.py) of one round trip, efa against shm, counted in the program's loop
# (its function round_trips) and what that calls. Those do not move with the host as times do;
# they move by about 2 % from run to run with the polls the counted side makes while it waits,
# more when the machine is busy (a slow peer makes it wait longer).
#   bazel run -c opt //tools/bench:same_pingpong -- --count
# Needs cc and Debian's libfabric-dev; --count also valgrind and python3.
set -euo pipefail
src=$(readlink -f "$1")
cost=$(readlink -f "$2")
shift 2
count=0
if [[ ${1:-} == --count ]]; then
  count=1
  shift
fi
rounds=${1:-10}
trips=${2:-20000}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/same_pingpong.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tools/install.sh "$tmp/prefix" >/dev/null
cc -O2 -o "$tmp/same_pingpong" "$src" -lfabric
efa_env=(LD_LIBRARY_PATH="$tmp/prefix/lib" FI_EFA_BACKEND=emu FI_EFA_EMU_FABRIC=shm FI_EFA_EMU_SHM_DIR="$tmp")

# PROVIDER ROUND_TRIPS [VAR=VALUE...]: the callgrind profile of the first side, in $tmp; tried
# three times at most, as run() below.
profile() {
  local prov=$1 n=$2 attempt second
  shift 2
  for attempt in 1 2 3; do
    rm -f "$tmp/a" "$tmp/b"
    mkfifo "$tmp/a" "$tmp/b"
    env "$@" timeout 300 "$tmp/same_pingpong" "$prov" "$n" second "$tmp/a" "$tmp/b" &
    second=$!
    if env "$@" timeout 300 valgrind --tool=callgrind --dump-instr=yes --toggle-collect=round_trips \
        --callgrind-out-file="$tmp/$prov.$n.out" \
        "$tmp/same_pingpong" "$prov" "$n" first "$tmp/b" "$tmp/a" >/dev/null 2>"$tmp/valgrind.log" &&
        wait "$second"; then
      return 0
    fi
    kill "$second" 2>/dev/null || true
    wait "$second" || true
    cat "$tmp/valgrind.log" >&2
    echo "same_pingpong: a $prov profile failed (attempt $attempt of 3)" >&2
  done
  exit 1
}

if ((count)); then
  command -v valgrind >/dev/null || { echo "--count needs valgrind" >&2; exit 1; }
  for prov in shm efa; do
    env_args=()
    [[ $prov == efa ]] && env_args=("${efa_env[@]}")
    profile "$prov" 2000 "${env_args[@]}"
    profile "$prov" 12000 "${env_args[@]}"
    read -r _ ir _ lines _ kib < <(python3 "$cost" "$tmp/$prov.12000.out" "$tmp/$prov.2000.out" 10000)
    printf '%s %s %s %s\n' "$prov" "$ir" "$lines" "$kib" >>"$tmp/counts"
  done
  echo "same_pingpong --count: one 64 B round trip of the first side (callgrind, its loop and all it calls, in every object)"
  awk '{ ir[NR] = $2; l[NR] = $3
         printf "%-4s %6d instructions, hot code %4d lines (%5.1f KiB)\n", $1, $2, $3, $4 }
       END { printf "efa/shm: %.2fx the instructions, %.2fx the hot code\n", ir[2] / ir[1], l[2] / l[1] }' "$tmp/counts"
  exit 0
fi

# PROVIDER [VAR=VALUE...]: the program's "mean M p10 A p50 B ... slice-p50 LO-HI line-ns L" as
# "M B LO-HI L". A failed run is tried again, twice at most: Debian's shm names its region after
# the process id, and a region left in /dev/shm by a process that was killed makes a later
# process with the same id fail fi_enable (EBUSY).
run() {
  local prov=$1 out attempt
  shift
  for attempt in 1 2 3; do
    if out=$(env "$@" timeout 120 "$tmp/same_pingpong" "$prov" "$trips"); then
      awk '{ print $5, $9, $15, $17 }' <<<"$out"
      return 0
    fi
    echo "same_pingpong: a $prov run failed (attempt $attempt of 3)" >&2
  done
  return 1
}

echo "same_pingpong: 64 B one-way us (fi_send, send and receive completions awaited on both sides), load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %10s %10s %10s %10s %12s %12s %14s %16s\n' round "shm mean" "shm p50" "efa mean" "efa p50" \
    "mean ratio" "p50 ratio" "efa slice p50" "line-ns shm/efa"
for r in $(seq "$rounds"); do
  read -r shm_mean shm_p50 _ shm_line < <(run shm)
  read -r efa_mean efa_p50 efa_slices efa_line < <(run efa "${efa_env[@]}")
  awk -v r="$r" -v a="$shm_mean" -v b="$shm_p50" -v c="$efa_mean" -v d="$efa_p50" -v e="$efa_slices" \
    -v f="$shm_line" -v g="$efa_line" \
    'BEGIN { printf "%-6s %10.3f %10.3f %10.3f %10.3f %11.2fx %11.2fx %14s %7.1f/%-8.1f\n", r, a, b, c, d, c / a, d / b, e, f, g }'
done | tee "$tmp/rows"
# An awk function: the median of a[1..n] (sorts a in place).
awk_median='function median(a, n,    i, j, t) {
  for (i = 2; i <= n; ++i) for (j = i; j > 1 && a[j - 1] > a[j]; --j) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
  return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}'
# FILE COLUMN: the median over rounds of that column of the rows in FILE.
median_of() {
  awk -v c="$2" "$awk_median"' { m[NR] = $c + 0 } END { printf "%.2f", median(m, NR) }' "$1"
}
echo "median of the rounds: mean ratio $(median_of "$tmp/rows" 6)x, p50 ratio $(median_of "$tmp/rows" 7)x (goal: at most 1.5x)"
# Every run as "LINE_NS PROVIDER P50" (columns 9, 3 and 5 of a round), in order of line-ns.
awk '{ split($9, l, "/"); print l[1], "shm", $3; print l[2], "efa", $5 }' "$tmp/rows" | sort -n -k1,1 >"$tmp/runs"
# The host states: runs grouped by line-ns, a group ending where the next run's is over 1.5 times
# the last; per group, each provider's median p50 and their ratio.
awk "$awk_median"'
     function flush(    ms, me) {
       if (ns + ne == 0) return
       ++g
       printf "host state %d (line-ns %.1f-%.1f): shm %d runs", g, lo, hi, ns
       if (ns) { ms = median(s, ns); printf ", median p50 %.3f", ms }
       printf "; efa %d runs", ne
       if (ne) { me = median(e, ne); printf ", median p50 %.3f", me }
       if (ns && ne) printf "; ratio %.2fx", me / ms
       printf "\n"
       ns = ne = 0
     }
     { if (NR > 1 && $1 > 1.5 * hi) flush()
       if (ns + ne == 0) lo = $1
       hi = $1
       if ($2 == "shm") s[++ns] = $3; else e[++ne] = $3 }
     END { flush() }' "$tmp/runs"
