// Completion trace for hardware bring-up: with FI_EFA_CQ_TRACE=PATH set when the process starts,
// every CQE the host provider polls is recorded with backend-independent fields only, so a run on
// the hardware backend and one on the emulator can be compared line by line.
//
// Line format (one per CQE):  d<domain>.q<qp> <sq|rq> <send|read|write> status=<n>:<NAME> len=<n> imm=<hex|->
//   domain: open order of domains in the process (0, 1, ...);
//   qp:     enable order of endpoints within their domain (raw QPNs differ between backends);
//   NAME:   EFA_IO_COMP_STATUS_<NAME>;
//   len:    the CQE's byte_len (0 on TX CQEs, as on hardware); imm: only when the CQE carries one.
// Records are appended to PATH when their domain closes and at process exit. Off, the cost on the
// polling path is one predictable branch.
#ifndef XPUFAB_API_EFA_CQ_TRACE_H_
#define XPUFAB_API_EFA_CQ_TRACE_H_

#include <cstdint>

#include "device/efa_cq.h"

namespace xpufab::efa {

// True when FI_EFA_CQ_TRACE named a file at load time.
extern const bool g_cq_trace_on;

// Next domain number (only called when tracing).
uint32_t cq_trace_next_domain();
void cq_trace_record(uint32_t domain, uint32_t qp, const efa_dp_cqe& c);
// Appends the records collected so far to the trace file.
void cq_trace_flush();

}  // namespace xpufab::efa

#endif  // XPUFAB_API_EFA_CQ_TRACE_H_
