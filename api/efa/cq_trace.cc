#include "api/efa/cq_trace.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "api/efa/efa.h"
#include "device/efa_io_defs.h"
#include "device/efa_io_status.h"

namespace xpufab::efa {
namespace {

// Never destroyed: CQEs may still be polled while static destructors run.
struct TraceState {
  std::string path;
  std::mutex lock;
  std::string pending;
  std::atomic<uint32_t> domains{0};
};

TraceState* state() {
  static TraceState* s = new TraceState();
  return s;
}

void flush_at_exit() { cq_trace_flush(); }

bool init_from_env() {
  const char* p = std::getenv("FI_EFA_CQ_TRACE");
  if (!p || !*p) return false;
  state()->path = p;
  std::atexit(flush_at_exit);
  return true;
}

// Status names without the common "EFA_IO_COMP_STATUS_" prefix.
constexpr size_t kStatusPrefix = sizeof("EFA_IO_COMP_STATUS_") - 1;

const char* op_name(const efa_dp_cqe& c) {
  switch (c.op_type) {
    case EFA_IO_SEND: return "send";
    case EFA_IO_RDMA_READ: return "read";
    case EFA_IO_RDMA_WRITE: return "write";
    default: return "op?";
  }
}

}  // namespace

const bool g_cq_trace_on = init_from_env();

uint32_t cq_trace_next_domain() { return state()->domains.fetch_add(1); }

void cq_trace_record(uint32_t domain, uint32_t qp, const efa_dp_cqe& c) {
  char imm[16] = "-";
  if (c.has_imm) std::snprintf(imm, sizeof(imm), "0x%x", c.imm);
  char line[160];
  int n = std::snprintf(line, sizeof(line), "d%u.q%u %s %s status=%u:%s len=%u imm=%s\n", domain,
                        qp, c.q_type == EFA_IO_SEND_QUEUE ? "sq" : "rq", op_name(c), c.status,
                        efa_io_status_name(c.status) + kStatusPrefix, c.byte_len, imm);
  if (n <= 0) return;
  TraceState* s = state();
  std::lock_guard<std::mutex> g(s->lock);
  s->pending.append(line, static_cast<size_t>(n) < sizeof(line) ? n : sizeof(line) - 1);
}

void cq_trace_flush() {
  if (!g_cq_trace_on) return;
  TraceState* s = state();
  std::lock_guard<std::mutex> g(s->lock);
  if (s->pending.empty()) return;
  FILE* f = std::fopen(s->path.c_str(), "a");
  if (!f) {
    EFA_WARN(kCq, "FI_EFA_CQ_TRACE: cannot open %s", s->path.c_str());
    return;
  }
  std::fwrite(s->pending.data(), 1, s->pending.size(), f);
  std::fclose(f);
  s->pending.clear();
}

}  // namespace xpufab::efa
