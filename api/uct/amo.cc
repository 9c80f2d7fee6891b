// UCT atomics executed at the target by the protocol core (api/proto/amo.h): the request goes
// to the peer's core, which applies it with CPU atomics on memory the peer registered (its MR
// table mirrors this device's registrations) and answers with the prior value. Hence
// UCT_IFACE_FLAG_ATOMIC_CPU: consistent with the target CPU's own atomics.
#include <algorithm>
#include <mutex>
#include <vector>

#include "api/uct/srd.h"

namespace xpufab {
namespace uct {
namespace {

int fi_op_of(unsigned opcode) {
  switch (opcode) {
    case UCT_ATOMIC_OP_ADD:
      return FI_SUM;
    case UCT_ATOMIC_OP_AND:
      return FI_BAND;
    case UCT_ATOMIC_OP_OR:
      return FI_BOR;
    case UCT_ATOMIC_OP_XOR:
      return FI_BXOR;
    case UCT_ATOMIC_OP_SWAP:
      return FI_ATOMIC_WRITE;  // with the fetch kind: the prior value comes back
    default:
      return -1;
  }
}

ucs_status_t start(uct_ep_h tl, int kind, unsigned opcode, int datatype, const void* value, const void* compare,
                   uint64_t raddr, uct_rkey_t rkey, void* result, uct_completion_t* comp) {
  SrdEp* ep = ep_of(tl);
  if (ep->failed) return ep->fail_status;
  if (!ep->connected) return not_connected_status(ep);
  if (!ep->pending.empty() && !ep->dispatching) return UCS_ERR_NO_RESOURCE;
  if (ep->req_due && ep_core_connect(ep) != UCS_OK) return UCS_ERR_NO_RESOURCE;
  const int op = kind == PROTO_ATOMIC_COMPARE ? FI_CSWAP : fi_op_of(opcode);
  if (op < 0 || (kind == PROTO_ATOMIC_PLAIN && opcode == UCT_ATOMIC_OP_SWAP)) return UCS_ERR_UNSUPPORTED;
  const uint64_t flags = kind == PROTO_ATOMIC_PLAIN ? FI_INJECT : 0;
  int rc = proto_atomic(ep->iface->core, ep->peer_idx, kind, op, datatype, value, compare, 1, raddr,
                        static_cast<uint32_t>(rkey), result, flags, reinterpret_cast<uintptr_t>(comp));
  if (rc == -FI_EAGAIN) {
    ep->core_wait = true;
    return UCS_ERR_NO_RESOURCE;
  }
  if (rc == -FI_EOPNOTSUPP) return UCS_ERR_UNSUPPORTED;
  if (rc) return UCS_ERR_INVALID_PARAM;
  if (kind == PROTO_ATOMIC_PLAIN) return UCS_OK;
  ep->iface->amo_outstanding++;
  return UCS_INPROGRESS;
}

ucs_status_t post32(uct_ep_h ep, unsigned opcode, uint32_t value, uint64_t raddr, uct_rkey_t rkey) {
  return start(ep, PROTO_ATOMIC_PLAIN, opcode, FI_UINT32, &value, nullptr, raddr, rkey, nullptr, nullptr);
}
ucs_status_t post64(uct_ep_h ep, unsigned opcode, uint64_t value, uint64_t raddr, uct_rkey_t rkey) {
  return start(ep, PROTO_ATOMIC_PLAIN, opcode, FI_UINT64, &value, nullptr, raddr, rkey, nullptr, nullptr);
}
ucs_status_t fetch32(uct_ep_h ep, unsigned opcode, uint32_t value, uint32_t* result, uint64_t raddr,
                     uct_rkey_t rkey, uct_completion_t* comp) {
  return start(ep, PROTO_ATOMIC_FETCH, opcode, FI_UINT32, &value, nullptr, raddr, rkey, result, comp);
}
ucs_status_t fetch64(uct_ep_h ep, unsigned opcode, uint64_t value, uint64_t* result, uint64_t raddr,
                     uct_rkey_t rkey, uct_completion_t* comp) {
  return start(ep, PROTO_ATOMIC_FETCH, opcode, FI_UINT64, &value, nullptr, raddr, rkey, result, comp);
}
ucs_status_t cswap32(uct_ep_h ep, uint32_t compare, uint32_t swap, uint64_t raddr, uct_rkey_t rkey,
                     uint32_t* result, uct_completion_t* comp) {
  return start(ep, PROTO_ATOMIC_COMPARE, UCT_ATOMIC_OP_CSWAP, FI_UINT32, &swap, &compare, raddr, rkey, result, comp);
}
ucs_status_t cswap64(uct_ep_h ep, uint64_t compare, uint64_t swap, uint64_t raddr, uct_rkey_t rkey,
                     uint64_t* result, uct_completion_t* comp) {
  return start(ep, PROTO_ATOMIC_COMPARE, UCT_ATOMIC_OP_CSWAP, FI_UINT64, &swap, &compare, raddr, rkey, result, comp);
}

// Adds a registration to an interface's core, growing its table when full: the core's own table
// holds PROTO_MAX_MR entries, UCP may keep far more registrations alive (one per rendezvous
// buffer it has not released yet), and the core reads the table only through ep->mrs/max_mr.
void core_mr_add(SrdIface* i, uint64_t addr, uint64_t len, uint32_t key) {
  proto_ep* core = i->core;
  if (core->nmr == core->max_mr) {
    std::vector<proto_mr> bigger(std::max<size_t>(2 * core->max_mr, 256));
    std::copy(core->mrs, core->mrs + core->nmr, bigger.begin());
    i->core_mrs.swap(bigger);
    core->mrs = i->core_mrs.data();
    core->max_mr = static_cast<uint32_t>(i->core_mrs.size());
  }
  proto_mr_add(core, addr, len, key, FI_REMOTE_READ | FI_REMOTE_WRITE);
}

}  // namespace

void fill_amo_ops(uct_iface_ops_t* o) {
  o->ep_atomic32_post = post32;
  o->ep_atomic64_post = post64;
  o->ep_atomic32_fetch = fetch32;
  o->ep_atomic64_fetch = fetch64;
  o->ep_atomic_cswap32 = cswap32;
  o->ep_atomic_cswap64 = cswap64;
}

void amo_complete(const proto_comp& c) {
  auto* comp = reinterpret_cast<uct_completion_t*>(static_cast<uintptr_t>(c.op_context));
  if (comp == nullptr) return;
  ucs_status_t st = UCS_OK;
  if (c.err) st = c.prov_errno == EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS ? UCS_ERR_INVALID_ADDR : UCS_ERR_IO_ERROR;
  invoke_completion(comp, st);
}

// Registrations of the device, mirrored into every interface's core so that peers' atomics may
// target them.
void mr_publish(SharedDevice* dev, uint64_t addr, uint64_t len, uint32_t key) {
  std::lock_guard<std::mutex> g(dev->mr_lock);
  dev->mrs.push_back({addr, len, key});
  for (SrdIface* i : dev->ifaces) core_mr_add(i, addr, len, key);
}

void mr_withdraw(SharedDevice* dev, uint32_t key) {
  std::lock_guard<std::mutex> g(dev->mr_lock);
  for (size_t k = 0; k < dev->mrs.size(); ++k) {
    if (dev->mrs[k].key != key) continue;
    dev->mrs.erase(dev->mrs.begin() + static_cast<long>(k));
    break;
  }
  for (SrdIface* i : dev->ifaces) proto_mr_remove(i->core, key);
}

void iface_attach(SharedDevice* dev, SrdIface* iface) {
  std::lock_guard<std::mutex> g(dev->mr_lock);
  dev->ifaces.push_back(iface);
  for (const auto& m : dev->mrs) core_mr_add(iface, m.addr, m.len, m.key);
}

void iface_detach(SharedDevice* dev, SrdIface* iface) {
  std::lock_guard<std::mutex> g(dev->mr_lock);
  for (size_t k = 0; k < dev->ifaces.size(); ++k)
    if (dev->ifaces[k] == iface) {
      dev->ifaces.erase(dev->ifaces.begin() + static_cast<long>(k));
      break;
    }
}

}  // namespace uct
}  // namespace xpufab
