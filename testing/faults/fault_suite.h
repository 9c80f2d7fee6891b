// A two-device workload for the fault suite: devices A and B on a private in-process fabric,
// driven by step() from one thread. A keeps `window` mixed operations in flight against B (SEND,
// RDMA WRITE, RDMA READ, WRITE with immediate), each in its own slot of both buffers, and checks
// every completion: each operation completes once with OK, each SEND / immediate arrives once
// with its data, each WRITE / READ moves exactly its bytes.
#ifndef XPUFAB_TESTING_FAULTS_FAULT_SUITE_H_
#define XPUFAB_TESTING_FAULTS_FAULT_SUITE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "emu/device.h"
#include "emu/fabric.h"

namespace xpufab {
namespace emu {
namespace faults_suite {

struct Workload {
  std::string plan_a, plan_b;  // fault plans of the two devices
  uint64_t ops = 1000;
  uint32_t window = 32;
  uint64_t step_clock_ns = 0;  // nonzero: deterministic virtual clock
  bool trace = false;
  uint32_t response_timeout_us = 500;
  uint32_t max_retransmits = 40;
  uint64_t seed = 1;
};

struct Result {
  std::string error;  // empty when every check held
  uint64_t completed = 0, sends_received = 0, imms_received = 0;
  Stats a{}, b{};
  std::vector<QpStats> qa, qb;
  std::string trace_a, trace_b;  // text traces when Workload::trace
};

Result run_workload(const Workload& w);

}  // namespace faults_suite
}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_TESTING_FAULTS_FAULT_SUITE_H_
