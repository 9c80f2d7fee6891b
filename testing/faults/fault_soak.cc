// The suite's mixed-op workload at full size (default 10^5 operations), for CI jobs with time to
// spare and for trying plans: fault_soak [OPS [PLAN]]. Exit status 0 when every check held.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "testing/faults/fault_suite.h"

int main(int argc, char** argv) {
  using namespace xpufab::emu::faults_suite;
  Workload w;
  w.ops = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 100000;
  w.plan_a = w.plan_b = argc > 2 ? argv[2] : "seed=7;drop=0.1;dup=0.05;reorder=0.2;window=8;corrupt=0.02";
  auto t0 = std::chrono::steady_clock::now();
  Result r = run_workload(w);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%llu ops in %.2f s; A: %llu packets dropped (%llu by checksum), %llu duplicates, %llu reordered, "
              "%llu retransmits; SENDs %llu, immediates %llu\n",
              static_cast<unsigned long long>(r.completed), s, static_cast<unsigned long long>(r.a.dropped_packets),
              static_cast<unsigned long long>(r.a.corrupt_dropped), static_cast<unsigned long long>(r.a.duplicates),
              static_cast<unsigned long long>(r.a.reordered), static_cast<unsigned long long>(r.a.retransmits),
              static_cast<unsigned long long>(r.sends_received), static_cast<unsigned long long>(r.imms_received));
  if (!r.error.empty()) {
    std::printf("FAILED: %s\n", r.error.c_str());
    return 1;
  }
  std::printf("1 passed, 0 failed\n");
  return 0;
}
