# Sourced by the MPI tests: what each MPI program prints when it passed, and the UCT transport's
# statistics (a line per UCT interface) that show srd carried a job's traffic. Each takes the
# job's output file and reports through the sourcing test's `fail`.
check_pingpong() {
  grep -q '^allreduce 3$' "$1" || fail "$1: no allreduce result"
  [ "$(grep -c '^size .* one-way' "$1")" -eq 7 ] || fail "$1: not every size was exchanged"
}
check_matching() {  # FILE [NP, default 3]
  grep -q "^matching: all checks passed on ${2:-3} ranks\$" "$1" ||
    fail "$1: matching checks did not pass"
}
check_onesided() {
  grep -q '^onesided: all checks passed$' "$1" || fail "$1: one-sided checks did not pass"
}
# FILE NP: at least NP UCT interfaces sent packets over srd.
check_srd_traffic() {
  [ "$(grep -Ec '^xpufab srd stats: .* core_tx_packets [1-9]' "$1")" -ge "$2" ] ||
    fail "$1: fewer srd interfaces than ranks carried traffic"
}
