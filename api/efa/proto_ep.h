// Endpoints of the protocol fabric "efa": the requests the ops tables (proto_ops.cc) hand to an
// endpoint's protocol state (proto_state.h; set up in proto_setup.cc), which runs them on the
// protocol core (api/proto/) over the endpoint's SRD QP (proto_ep.cc), and the progress that
// turns the core's completions into the application's CQ entries and counter updates.
#ifndef XPUFAB_API_EFA_PROTO_EP_H_
#define XPUFAB_API_EFA_PROTO_EP_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "api/efa/efa.h"

struct proto_ep;

namespace xpufab::efa {

// Buffers one protocol request takes (fi_info iov_limit of the protocol fabric): the core
// gathers and scatters up to PROTO_IOV_MAX (api/proto/ep.h).
inline constexpr size_t kProtoIovLimit = 4;

// A send: untagged (FI_MSG) or tagged; `flags` are the operation's (FI_INJECT,
// FI_REMOTE_CQ_DATA, FI_COMPLETION, ...).
struct ProtoSend {
  const iovec* iov = nullptr;
  void** desc = nullptr;
  size_t count = 0;
  fi_addr_t dest = FI_ADDR_UNSPEC;
  bool tagged = false;
  uint64_t tag = 0;
  uint64_t data = 0;
  void* context = nullptr;
  uint64_t flags = 0;
  bool no_completion = false;  // fi_inject / fi_tinject / *injectdata: nothing is reported
};

// A receive: `src` FI_ADDR_UNSPEC for any source; FI_PEEK / FI_CLAIM / FI_DISCARD in `flags`
// for tagged ones.
struct ProtoRecv {
  const iovec* iov = nullptr;
  void** desc = nullptr;
  size_t count = 0;
  fi_addr_t src = FI_ADDR_UNSPEC;
  bool tagged = false;
  uint64_t tag = 0;
  uint64_t ignore = 0;
  void* context = nullptr;
  uint64_t flags = 0;
};

// An atomic of `kind` (enum proto_atomic_kind) on `count` elements at the peer's `addr`/`key`:
// operands in `buf` (none for FI_ATOMIC_READ), compare values in `compare`, prior values to
// `result`. Already checked against the validity table.
struct ProtoAtomic {
  int kind = 0;
  int op = 0;
  int datatype = 0;
  size_t count = 0;
  const void* buf = nullptr;
  const void* compare = nullptr;
  void* result = nullptr;
  void* result_desc = nullptr;
  fi_addr_t dest = FI_ADDR_UNSPEC;
  uint64_t addr = 0;
  uint64_t key = 0;
  void* context = nullptr;
  uint64_t flags = 0;
  bool no_completion = false;  // fi_inject_atomic: counted, not reported
};

// The most operand bytes one atomic request carries (fi_atomicvalid's count derives from it).
size_t proto_atomic_max_bytes(const EfaDomain* dom);
// What FI_INJECT copies at most (fi_info inject_size of the protocol fabric).
size_t proto_inject_size(const backend::DeviceAttr& a);

// Creates the endpoint's protocol state on enable (its QP, private CQ and the core's pools).
int proto_ep_enable(EfaEp* ep);
// Drains what the core still reports and releases the state; before the QP is destroyed.
void proto_ep_close(EfaEp* ep);
ssize_t proto_send(EfaEp* ep, const ProtoSend& s);
ssize_t proto_recv(EfaEp* ep, const ProtoRecv& r);
ssize_t proto_atomic(EfaEp* ep, const ProtoAtomic& a);
// RMA through the protocol core (api/proto/rma.h): writes of more than one packet by RDMA write
// and reads by RDMA read where the device has them, packets otherwise. FI_INJECT, FI_REMOTE_CQ_DATA and FI_FENCE in `flags`.
// `inject_call`: fi_inject_write / fi_inject_writedata, which report nothing and count in the
// FI_WRITE counter.
//
// FI_FENCE (sends, RMA, atomics): the fenced operation and every later one to the same peer
// wait in the endpoint's queue for that peer until all earlier operations to it completed; the
// post succeeds, and -FI_EAGAIN comes only when tx_size operations already wait.
ssize_t proto_rma(EfaEp* ep, bool write, const iovec* iov, void** desc, size_t count,
                  fi_addr_t peer, uint64_t addr, uint64_t key, void* context, uint64_t data,
                  uint64_t flags, bool inject_call = false);
// Operations the endpoint can still take (fi_tx_size_left / fi_rx_size_left: a lower bound).
ssize_t proto_ops_left(EfaEp* ep);
// FI_OPT_MIN_MULTI_RECV: kept on the endpoint, and in its core once enabled.
void proto_set_min_multi_recv(EfaEp* ep, size_t v);
// fi_cancel of a posted receive: 0 (its FI_ECANCELED completion follows) or -FI_ENOENT.
ssize_t proto_cancel(EfaEp* ep, void* context);
// Runs each of a domain's protocol endpoints' core progress, in one pass (domain lock held),
// and puts their completions on the endpoints' CQs (those of the CQ `d` reads straight into its
// buffer) and counters.
void proto_progress_all(const std::vector<EfaEp*>& eps, DirectRead* d = nullptr);
// The event fd of the endpoint's private CQ, armed (domain lock held), or -1 when it has none:
// what a blocking read of the endpoint's CQs and counters sleeps on.
int proto_event_fd(EfaEp* ep);

// The core endpoint of a protocol-fabric EP (in XPU-visible memory for an XPU EP).
proto_ep* proto_core_of(EfaEp* ep);
// fi_ep_export_xpu of an XPU EP: from now on the host takes `dev_lock` (the exported
// efa_xpu_ep's proto_lock) around its core calls; the core gets a peer for every AV entry.
void proto_export_sync(EfaEp* ep, uint32_t* dev_lock);

// A protocol domain's MRs are what peers' atomics may target: every endpoint's key table
// follows registrations and closes.
void proto_mr_added(EfaMr* mr);
void proto_mr_removed(EfaMr* mr);

// The protocol fabric's op tables (proto_ops.cc).
fi_ops_msg* proto_msg_ops();
fi_ops_tagged* proto_tagged_ops();
fi_ops_rma* proto_rma_ops();
fi_ops_atomic* proto_atomic_ops();
// fi_query_atomic of a protocol domain.
int proto_query_atomic(EfaDomain* dom, fi_datatype datatype, fi_op op, fi_atomic_attr* attr,
                       uint64_t flags);

}  // namespace xpufab::efa

#endif  // XPUFAB_API_EFA_PROTO_EP_H_
