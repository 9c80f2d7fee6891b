// Device and per-QP statistics, and their text form (read back by tools/emustat).
#include <mutex>
#include <string>
#include <vector>

#include "emu/device_impl.h"

namespace xpufab {
namespace emu {

using namespace ::xpufab::backend;

Stats DeviceImpl::stats() const {
  Stats s;
  uint64_t* out[] = {&s.steps, &s.doorbells, &s.wqes, &s.cqes, &s.error_cqes, &s.packets_tx,
                     &s.packets_rx, &s.bytes_tx, &s.bytes_rx, &s.retransmits, &s.rnr_naks,
                     &s.rnr_retries, &s.dropped_packets, &s.faults_injected, &s.idle_sleeps,
                     &s.corrupt_dropped, &s.duplicates, &s.reordered, &s.delayed_packets,
                     &s.delayed_cqes, &s.stalls, &s.timeouts};
  static_assert(sizeof(out) / sizeof(out[0]) == kDiag0, "every counter has a field");
  for (int i = 0; i < kDiag0; ++i) *out[i] = stats_.v[i].load(std::memory_order_relaxed);
  for (int i = 0; i < 6; ++i) s.diag[i] = stats_.v[kDiag0 + i].load(std::memory_order_relaxed);
  s.one_copy_bytes = stats_.v[kOneCopyBytes].load(std::memory_order_relaxed);
  s.one_copy_refused = stats_.v[kOneCopyRefused].load(std::memory_order_relaxed);
  s.stalled_waits = stats_.v[kStalledWaits].load(std::memory_order_relaxed);
  s.backlog_waits = stats_.v[kBacklogWaits].load(std::memory_order_relaxed);
  s.unserved_waits = stats_.v[kUnservedWaits].load(std::memory_order_relaxed);
  s.position_answers = stats_.v[kPositionAnswers].load(std::memory_order_relaxed);
  s.answered_by_position = stats_.v[kAnsweredByPosition].load(std::memory_order_relaxed);
  s.longest_sleep_us = stats_.v[kLongestSleepUs].load(std::memory_order_relaxed);
  s.longest_park_us = stats_.v[kLongestParkUs].load(std::memory_order_relaxed);
  s.parks = stats_.v[kParks].load(std::memory_order_relaxed);
  s.park_kicks = stats_.v[kParkKicks].load(std::memory_order_relaxed);
  s.takeovers = stats_.v[kTakeovers].load(std::memory_order_relaxed);
  s.idle_polls = stats_.v[kIdlePolls].load(std::memory_order_relaxed);
  return s;
}

std::vector<QpStats> DeviceImpl::qp_stats() const {
  std::vector<QpStats> out;
  std::lock_guard<DeviceMutex> lock(mu_);
  for (const EmuQp* qp : qps_) {
    if (qp == nullptr) continue;
    QpStats q = qp->qs;
    q.qpn = qp->qpn_;
    q.outstanding = qp->outstanding;
    out.push_back(q);
  }
  return out;
}

std::atomic<uint32_t> g_device_seq{0};

std::string format_stats(const std::string& device, const Stats& s, const std::vector<QpStats>& qps) {
  std::string out = "device " + device + "\n";
  auto line = [&](const std::string& prefix, const char* name, uint64_t v) {
    out += prefix + name + ": " + std::to_string(v) + "\n";
  };
  const std::pair<const char*, uint64_t> dev[] = {
      {"steps", s.steps}, {"doorbells", s.doorbells}, {"wqes", s.wqes}, {"cqes", s.cqes},
      {"error_cqes", s.error_cqes}, {"packets_tx", s.packets_tx}, {"packets_rx", s.packets_rx},
      {"bytes_tx", s.bytes_tx}, {"bytes_rx", s.bytes_rx}, {"retransmits", s.retransmits},
      {"rnr_naks", s.rnr_naks}, {"rnr_retries", s.rnr_retries}, {"dropped_packets", s.dropped_packets},
      {"faults_injected", s.faults_injected}, {"idle_sleeps", s.idle_sleeps},
      {"corrupt_dropped", s.corrupt_dropped}, {"duplicates", s.duplicates}, {"reordered", s.reordered},
      {"delayed_packets", s.delayed_packets}, {"delayed_cqes", s.delayed_cqes}, {"stalls", s.stalls},
      {"timeouts", s.timeouts}, {"diag_stale_wqe", s.diag[0]}, {"diag_batch_exceeded", s.diag[1]},
      {"diag_sq_overrun", s.diag[2]}, {"diag_rq_overrun", s.diag[3]}, {"diag_cq_overrun", s.diag[4]},
      {"diag_rq_malformed", s.diag[5]}, {"one_copy_bytes", s.one_copy_bytes},
      {"one_copy_refused", s.one_copy_refused}, {"stalled_waits", s.stalled_waits},
      {"backlog_waits", s.backlog_waits}, {"unserved_waits", s.unserved_waits},
      {"position_answers", s.position_answers}, {"answered_by_position", s.answered_by_position},
      {"longest_sleep_us", s.longest_sleep_us}, {"longest_park_us", s.longest_park_us},
      {"parks", s.parks}, {"park_kicks", s.park_kicks}, {"takeovers", s.takeovers}, {"idle_polls", s.idle_polls}};
  for (const auto& d : dev) line("", d.first, d.second);
  for (const QpStats& q : qps) {
    std::string p = "qp " + std::to_string(q.qpn) + " ";
    const std::pair<const char*, uint64_t> f[] = {
        {"wqes", q.wqes}, {"tx_cqes", q.tx_cqes}, {"rx_cqes", q.rx_cqes}, {"error_cqes", q.error_cqes},
        {"packets_tx", q.packets_tx}, {"packets_rx", q.packets_rx}, {"bytes_tx", q.bytes_tx},
        {"bytes_rx", q.bytes_rx}, {"retransmits", q.retransmits}, {"rnr_naks_rx", q.rnr_naks_rx},
        {"rnr_naks_tx", q.rnr_naks_tx}, {"dropped_packets", q.dropped_packets},
        {"faults_injected", q.faults_injected}, {"timeouts", q.timeouts}, {"outstanding", q.outstanding}};
    for (const auto& x : f) line(p, x.first, x.second);
  }
  return out;
}

}  // namespace emu
}  // namespace xpufab
