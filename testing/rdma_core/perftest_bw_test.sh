#!/usr/bin/env bash
# perftest's bandwidth tests and the options users sweep, between two processes: several QPs,
# bidirectional traffic, every message size (-a), a deep send queue, UD, the old ibv_post_send
# path with inline data; and what perftest refuses on EFA, with its own messages. The generation
# of each run is the one it exercises most: RDMA read on gen2 (Debian's perftest drives gen3 and
# gen4, whose part numbers it does not know, through ibv_post_send, where libefa has no read),
# the newest on gen4, UD on gen1.
source "$(dirname "$0")/rdma_core_env.sh" "$1" "$2"
command -v ib_send_bw >/dev/null || fail "ib_send_bw missing (perftest)"
out=$tmp/perftest_bw

# expect_row RUN SIZE ITERS: the client reported a result row for SIZE bytes, ITERS iterations.
expect_row() {
  grep -Eq "^ *$2 +$3 " "$out/client.txt" || fail "$1: no result row for $2 bytes x $3"
}
run() {
  local name=$1
  shift
  perftest_pair "$out" "$@" || fail "$name: $(cat "$out/server.txt")"
}
srd=(-c SRD -x 0)

run "4 QPs" gen2 ib_send_bw "${srd[@]}" -q 4 -n 100
expect_row "4 QPs" 8928 400
run "bidirectional" gen4 ib_send_bw "${srd[@]}" -b -q 2 -n 100
expect_row "bidirectional" 8928 200
run "read, all sizes" gen2 ib_read_bw "${srd[@]}" -a -n 5
for size in 2 4096 65536 8388608; do expect_row "read, all sizes" $size 5; done
run "read, deep queue" gen2 ib_read_bw "${srd[@]}" -q 2 -t 128 -n 200 --report_gbits
expect_row "read, deep queue" 65536 400
grep -q 'Gb/sec' "$out/client.txt" || fail "read, deep queue: not reported in Gb/s"
# UD sends must all be signaled: libefa refuses an unsignaled one, perftest's default -Q here.
run "UD" gen1 ib_send_bw -c UD -x 0 -Q 1 -s 1024 -n 100
expect_row "UD" 1024 100
run "old post_send, inline" gen4 ib_send_lat "${srd[@]}" --use_old_post_send -I 32 -s 16 -n 100
expect_row "old post_send, inline" 16 100
grep -q 'ibv_wr\* API *: OFF' "$out/client.txt" || fail "old post_send: the ibv_wr API was used"

# refused RUN PATTERN GEN TOOL ARGS...: both sides fail at once, the client saying PATTERN.
refused() {
  local name=$1 pattern=$2
  shift 2
  if perftest_pair "$out" "$@"; then fail "$name ran"; fi
  grep -q "$pattern" "$out/client.txt" || fail "$name: $(cat "$out/client.txt")"
}
# The port's max_msg_sz, as the device reports it.
refused "SRD above the port's message size" "cannot be greater than 8928" \
  gen2 ib_send_lat "${srd[@]}" -s 8929 -n 10
refused "RDMA write over SRD" "SRD connection only possible in SEND/READ verbs" \
  gen4 ib_write_bw "${srd[@]}" -n 10
# EFA has no RC QPs: libefa refuses to create one.
refused "RC" "Unable to create QP" gen2 ib_send_bw -x 0 -n 10
echo "PASS"
