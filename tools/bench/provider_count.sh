#!/usr/bin/env bash
# Instructions per 64 B round trip (two hops, each send's and receive's completion read) and per
# idle fi_cq_read through the public API, for both fabrics and both threading levels: the
# provider and the emulated NIC on one thread (provider_count.cc), under callgrind, as the
# difference of a run of N and one of 3N rounds over 2N. Deterministic, unlike the clock on a
# shared virtual machine; what a change to the data path costs or saves.
#   bazel run -c opt //tools/bench:provider_count [-- ROUNDS]      (default 1000)
# Needs valgrind.
set -euo pipefail
bin="$1"
rounds="${2:-1000}"
command -v valgrind >/dev/null || { echo "provider_count: valgrind not installed" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() {  # FABRIC THREADING WORK ROUNDS -> instructions of the whole run
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" "$bin" "$@" 2>"$tmp/err" ||
    { cat "$tmp/err" >&2; exit 1; }
  awk '/refs:/ { gsub(",", "", $NF); print $NF }' "$tmp/err"
}
printf '%-11s %-9s %22s %22s\n' fabric threading "instructions / round trip" "/ idle fi_cq_read"
for fabric in efa-direct efa; do
  for threading in domain safe; do
    a=$(count "$fabric" "$threading" pingpong "$rounds")
    b=$(count "$fabric" "$threading" pingpong $((3 * rounds)))
    c=$(count "$fabric" "$threading" idle "$rounds")
    d=$(count "$fabric" "$threading" idle $((3 * rounds)))
    awk -v f="$fabric" -v t="$threading" -v a="$a" -v b="$b" -v c="$c" -v d="$d" -v n="$rounds" \
      'BEGIN { printf "%-11s %-9s %22.0f %22.0f\n", f, t, (b - a) / (2 * n), (d - c) / (20 * n) }'
  done
done
