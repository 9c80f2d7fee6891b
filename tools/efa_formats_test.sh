#!/bin/sh
# Runs efa_formats and checks a few facts it must print.
set -eu
out=$("$1")
fail=0
expect() {
  if ! printf '%s\n' "$out" | grep -qxF -- "$1"; then
    echo "missing line: $1"
    fail=1
  fi
}
expect_re() {
  if ! printf '%s\n' "$out" | grep -qE -- "$1"; then
    echo "no line matches: $1"
    fail=1
  fi
}
expect "efa_io_tx_wqe 64"
expect "efa_io_tx_wqe_128 128"
expect "efa_io_tx_meta_desc 32"
expect "efa_io_rx_desc 16"
expect "efa_io_rx_cdesc_ex 32"
expect "  efa_io_tx_wqe_128.data.rdma_req_128.inline_data @48"
expect "  efa_io_rx_cdesc.imm @12"
expect_re '^status  1 EFA_IO_COMP_STATUS_FLUSHED +FI_ECANCELED\([0-9]+\) IBV_WC_WR_FLUSH_ERR\(5\) '
expect_re '^status 10 EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR +FI_ENORX\(269\) IBV_WC_RNR_RETRY_EXC_ERR\(13\) '
expect_re '^status 18 EFA_IO_COMP_STATUS_REMOTE_ERROR_FEATURE_MISMATCH +FI_EOTHER\(256\) IBV_WC_GENERAL_ERR\(21\) '
expect_re '^status other EFA_IO_COMP_STATUS_UNKNOWN +FI_EOTHER\(256\) IBV_WC_GENERAL_ERR\(21\) '
n=$(printf '%s\n' "$out" | grep -c '^status [ 0-9]')
if [ "$n" -ne 17 ]; then
  echo "expected 17 status rows, got $n"
  fail=1
fi
if [ "$fail" -ne 0 ]; then
  printf '%s\n' "$out"
  exit 1
fi
echo "efa_formats output OK"
