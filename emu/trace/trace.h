// The event trace of one emulated device: what the NIC engine saw and did (doorbells, WQE
// fetches, packets, retransmissions, CQEs, injected faults, diagnostics), in order.
//
// Two renderings: Chrome/Perfetto trace JSON (a traceEvents array of instant events, one track
// per QP; opens in ui.perfetto.dev or chrome://tracing) and compact text, one event a line
// without timestamps, so that two runs with the same seed diff clean.
//
// The device records only when tracing is on (FI_EFA_EMU_TRACE=path-prefix, or
// DeviceOptions::trace); off, each trace point costs one null-pointer test. The buffer keeps the
// first `capacity` events and counts the rest.
#ifndef XPUFAB_EMU_TRACE_TRACE_H_
#define XPUFAB_EMU_TRACE_TRACE_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace xpufab {
namespace emu {

enum class TraceKind : uint8_t {
  kDoorbell,    // slot = doorbell index, arg = value, a = queue type (1 SQ, 2 RQ, 0 CQ)
  kWqeFetch,    // slot = SQ slot, a = op
  kPacketTx,    // a = op, b = 1 for a response, status, len = payload bytes, arg = token
  kPacketRx,    // same fields
  kRetransmit,  // a = op, arg = token, slot = attempt
  kPacketDrop,  // a = op, b = response, arg = token, status = why (TraceDropWhy)
  kRnrRetry,    // a = op, arg = token
  kCqe,         // slot = CQ slot, a = queue type, b = op, status, len
  kFault,       // a = FaultPoint, b = FaultAction, status (kFail), slot, arg = token or value
  kDiag,        // a = DiagKind, slot
  kTimeout,     // a = op, status = completion status, arg = token
};
const char* trace_kind_name(TraceKind k);

enum TraceDropWhy : uint8_t { kDropFault = 0, kDropChecksum = 1, kDropPeer = 2 };

struct TraceEvent {
  uint64_t t_ns = 0;
  TraceKind kind = TraceKind::kDoorbell;
  uint8_t a = 0, b = 0, status = 0;
  uint32_t qpn = 0;
  uint32_t slot = 0;
  uint32_t len = 0;
  uint64_t arg = 0;
};

class Trace {
 public:
  explicit Trace(std::string device, size_t capacity = size_t{1} << 20);
  void add(const TraceEvent& e);
  std::vector<TraceEvent> events() const;
  size_t lost() const;  // events past capacity
  const std::string& device() const { return device_; }
  // One line per event: "kind qp=N slot=N ..." (fields that apply to the kind).
  std::string text() const;
  // {"traceEvents":[...]} with times in microseconds since the first event.
  std::string json() const;
  // Writes <prefix>.<device>.json and <prefix>.<device>.txt. 0 or -errno.
  int write_files(const std::string& prefix) const;

  static std::string format(const TraceEvent& e);

 private:
  std::string device_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::vector<TraceEvent> ev_;
  size_t lost_ = 0;
};

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_TRACE_TRACE_H_
