#include "emu/trace/trace.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <utility>

#include "emu/fault.h"
#include "emu/faults/plan.h"

namespace xpufab {
namespace emu {
namespace {

const char* op_name(uint8_t op) {
  switch (op) {
    case 0: return "send";
    case 1: return "read";
    case 2: return "write";
    default: return "op?";
  }
}

// In DiagKind order (emu/device.h).
const char* diag_short(uint8_t k) {
  static const char* const kNames[] = {"stale_wqe", "batch_exceeded", "sq_overrun",
                                       "rq_overrun", "cq_overrun", "rq_malformed"};
  return k < 6 ? kNames[k] : "diag?";
}

const char* drop_why(uint8_t w) {
  switch (w) {
    case kDropFault: return "fault";
    case kDropChecksum: return "checksum";
    case kDropPeer: return "peer";
    default: return "?";
  }
}

const char* queue_name(uint8_t q) { return q == 1 ? "sq" : q == 2 ? "rq" : "cq"; }

}  // namespace

const char* trace_kind_name(TraceKind k) {
  switch (k) {
    case TraceKind::kDoorbell: return "doorbell";
    case TraceKind::kWqeFetch: return "wqe";
    case TraceKind::kPacketTx: return "pkt_tx";
    case TraceKind::kPacketRx: return "pkt_rx";
    case TraceKind::kRetransmit: return "retransmit";
    case TraceKind::kPacketDrop: return "pkt_drop";
    case TraceKind::kRnrRetry: return "rnr_retry";
    case TraceKind::kCqe: return "cqe";
    case TraceKind::kFault: return "fault";
    case TraceKind::kDiag: return "diag";
    case TraceKind::kTimeout: return "timeout";
  }
  return "?";
}

Trace::Trace(std::string device, size_t capacity) : device_(std::move(device)), capacity_(capacity) {
  ev_.reserve(std::min<size_t>(capacity_, 4096));
}

void Trace::add(const TraceEvent& e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ev_.size() >= capacity_) {
    ++lost_;
    return;
  }
  ev_.push_back(e);
}

std::vector<TraceEvent> Trace::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ev_;
}

size_t Trace::lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

std::string Trace::format(const TraceEvent& e) {
  char b[192];
  const char* k = trace_kind_name(e.kind);
  const char* kind_s = e.b ? "resp" : "req";
  switch (e.kind) {
    case TraceKind::kDoorbell:
      std::snprintf(b, sizeof(b), "%s %s qp=%u db=%u value=%" PRIu64, k, queue_name(e.a), e.qpn, e.slot, e.arg);
      break;
    case TraceKind::kWqeFetch:
      std::snprintf(b, sizeof(b), "%s qp=%u slot=%u op=%s len=%u", k, e.qpn, e.slot, op_name(e.a), e.len);
      break;
    case TraceKind::kPacketTx:
    case TraceKind::kPacketRx:
      std::snprintf(b, sizeof(b), "%s %s qp=%u op=%s status=%s len=%u token=%" PRIx64, k, kind_s, e.qpn,
                    op_name(e.a), faults::status_name(e.status), e.len, e.arg);
      break;
    case TraceKind::kRetransmit:
    case TraceKind::kRnrRetry:
      std::snprintf(b, sizeof(b), "%s qp=%u op=%s attempt=%u token=%" PRIx64, k, e.qpn, op_name(e.a), e.slot,
                    e.arg);
      break;
    case TraceKind::kPacketDrop:
      std::snprintf(b, sizeof(b), "%s %s qp=%u op=%s why=%s token=%" PRIx64, k, kind_s, e.qpn, op_name(e.a),
                    drop_why(e.status), e.arg);
      break;
    case TraceKind::kCqe:
      std::snprintf(b, sizeof(b), "%s %s qp=%u slot=%u op=%s status=%s len=%u", k, queue_name(e.a), e.qpn, e.slot,
                    op_name(e.b), faults::status_name(e.status), e.len);
      break;
    case TraceKind::kFault:
      std::snprintf(b, sizeof(b), "%s %s %s qp=%u slot=%u status=%s arg=%" PRIx64, k,
                    fault_point_name(static_cast<FaultPoint>(e.a)),
                    fault_action_name(static_cast<FaultAction>(e.b)), e.qpn, e.slot,
                    faults::status_name(e.status), e.arg);
      break;
    case TraceKind::kDiag:
      std::snprintf(b, sizeof(b), "%s %s qp=%u slot=%u", k, diag_short(e.a), e.qpn, e.slot);
      break;
    case TraceKind::kTimeout:
      std::snprintf(b, sizeof(b), "%s qp=%u op=%s status=%s token=%" PRIx64, k, e.qpn, op_name(e.a),
                    faults::status_name(e.status), e.arg);
      break;
  }
  return b;
}

std::string Trace::text() const {
  std::vector<TraceEvent> ev = events();
  std::string out;
  out.reserve(ev.size() * 48);
  for (const TraceEvent& e : ev) {
    out += format(e);
    out += '\n';
  }
  size_t n = lost();
  if (n != 0) out += "lost " + std::to_string(n) + " events past the trace capacity\n";
  return out;
}

std::string Trace::json() const {
  std::vector<TraceEvent> ev = events();
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  char b[320];
  std::snprintf(b, sizeof(b),
                "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"%s\"}}",
                device_.c_str());
  out += b;
  uint64_t t0 = ev.empty() ? 0 : ev.front().t_ns;
  for (const TraceEvent& e : ev) {
    // The text rendering doubles as the event's args; it contains no quotes or backslashes.
    std::string line = format(e);
    uint64_t dt = e.t_ns >= t0 ? e.t_ns - t0 : 0;
    std::snprintf(b, sizeof(b),
                  ",\n{\"name\":\"%s\",\"cat\":\"emu\",\"ph\":\"i\",\"s\":\"t\",\"ts\":%" PRIu64
                  ".%03u,\"pid\":1,\"tid\":%u,\"args\":{\"event\":\"%s\"}}",
                  trace_kind_name(e.kind), dt / 1000, static_cast<unsigned>(dt % 1000), e.qpn,
                  line.c_str());
    out += b;
  }
  out += "\n]}\n";
  return out;
}

int Trace::write_files(const std::string& prefix) const {
  for (int json = 0; json < 2; ++json) {
    std::string path = prefix + "." + device_ + (json ? ".json" : ".txt");
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) return -errno;
    std::string body = json ? this->json() : text();
    size_t n = std::fwrite(body.data(), 1, body.size(), f);
    int rc = std::fclose(f);
    if (n != body.size() || rc != 0) return -EIO;
  }
  return 0;
}

}  // namespace emu
}  // namespace xpufab
