#!/usr/bin/env bash
# Debian's ibverbs-utils on every generation: the device listing and attributes, the UD
# ping-pong between two processes (EFA addresses are GIDs: -g 0), and the ping-pongs of transports
# EFA does not have (RC, UC, SRQ), which must fail at once with libefa's refusal, not hang.
source "$(dirname "$0")/rdma_core_env.sh" "$1" "$2"
command -v ibv_ud_pingpong >/dev/null || fail "ibv_ud_pingpong missing (ibverbs-utils)"
out=$tmp/ibverbs_utils
mkdir -p "$out"

part=61344  # 0xefa0, one more per generation
for gen in "${GENERATIONS[@]}"; do
  devices=$(FI_EFA_EMU_PROFILE=$gen with_shim timeout 30 ibv_devices) || fail "$gen ibv_devices"
  grep -Eq '^[[:space:]]+efa_0[[:space:]]+[0-9a-f]{16}$' <<<"$devices" || fail "$gen ibv_devices: $devices"
  if grep -Eq 'efa_0[[:space:]]+0000000000000001$' <<<"$devices"; then fail "$gen: placeholder node GUID"; fi
  info=$(FI_EFA_EMU_PROFILE=$gen with_shim timeout 30 ibv_devinfo -v) || fail "$gen ibv_devinfo -v"
  for line in "vendor_part_id:.*$part" 'state:.*PORT_ACTIVE' 'max_msg_sz:.*0x22e0' \
              'GID\[  0\]:.*fe80:'; do
    grep -q "$line" <<<"$info" || fail "$gen ibv_devinfo -v lacks '$line': $info"
  done
  part=$((part + 1))

  perftest_pair "$out" "$gen" ibv_ud_pingpong -g 0 -n 50 -s 1024 || fail "$gen ibv_ud_pingpong"
  grep -q '^50 iters in' "$out/client.txt" || fail "$gen ibv_ud_pingpong: no result"
done

# refused TOOL PATTERN: the server alone fails before it listens.
refused() {
  local rc=0
  FI_EFA_EMU_PROFILE=gen2 with_shim timeout 30 "$1" -g 0 -n 10 >"$out/refused.txt" 2>&1 || rc=$?
  echo "$1: rc=$rc"
  cat "$out/refused.txt"
  [ $rc != 0 ] && [ $rc != 124 ] || fail "$1: rc=$rc"
  grep -q "$2" "$out/refused.txt" || fail "$1: $(cat "$out/refused.txt")"
}
refused ibv_rc_pingpong "Couldn't create QP"
refused ibv_uc_pingpong "Couldn't create QP"
refused ibv_srq_pingpong "Couldn't create SRQ"
echo "PASS"
