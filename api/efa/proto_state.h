// The internal state of a protocol-fabric endpoint, shared by its set-up (proto_setup.cc) and
// its data path (proto_ep.cc): the SRD QP and the CQ the protocol core (api/proto/) owns, its
// pools and bounce buffers, the peer table kept in step with the AV, the key table kept in step
// with the domain's MRs, and the requests a fence holds back (per peer, issued by progress in
// posting order).
//
// Locking: ProtoState::lock serializes the host's calls into the core (it allows one caller at
// a time), and once an XPU endpoint is exported the host also takes the device's spin lock
// (efa_xpu_ep.proto_lock) that every device call holds (CoreLock). Progress runs under the
// domain lock and takes them after; posts take them alone, and drop them before they drive the
// domain's progress. A domain opened with FI_THREAD_DOMAIN is the application's to serialize:
// its host calls take no lock of their own (the device's lock stays).
#ifndef XPUFAB_API_EFA_PROTO_STATE_H_
#define XPUFAB_API_EFA_PROTO_STATE_H_

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "api/efa/efa.h"
#include "api/efa/proto_ep.h"
#include "api/proto/grow_bounce.h"
#include "api/proto/proto.h"

namespace xpufab::efa {

// One transmit request (send, RMA or atomic) as the core takes it: what a post hands the core at
// once, or what waits behind a fence until progress issues it.
struct TxReq {
  enum Kind : uint8_t { kSend, kRma, kAtomic };
  Kind kind = kSend;
  bool fenced = false;
  bool silent = false;  // FI_SELECTIVE_COMPLETION without FI_COMPLETION: counted, not reported
  bool write = false;   // RMA
  bool inject = false;  // FI_INJECT or an inject call: the buffer is the caller's on return
  uint32_t peer = PROTO_NONE;
  uint32_t nbuf = 0;
  proto_buf b[kProtoIovLimit]{};
  uint64_t tag = 0;
  uint64_t data = 0;
  uint64_t flags = 0;  // the core's flags
  uint64_t ctx = 0;
  uint64_t addr = 0;  // RMA and atomics: the peer's address and key
  uint32_t key = 0;
  int akind = 0, op = 0, datatype = 0;
  size_t count = 0;
  const void* operand = nullptr;
  const void* compare = nullptr;
  void* result = nullptr;
  // Bytes the caller may reuse once the post returned (inject data, atomic operands), copied
  // while the request waits.
  std::vector<uint8_t> copy;
};

struct ProtoState {
  Lock lock;
  bool host_serialized = false;  // FI_THREAD_DOMAIN: the application serializes every call
  backend::Cq* bcq = nullptr;  // the QP's one CQ, polled by the core alone
  // The packets' buffers for up to peer_limit peers, registered as the table grows.
  proto::GrowBounce bounce;
  std::vector<uint64_t> mem;  // the core's pools
  // The core's peer table grows on demand up to this many peers; a host endpoint keeps each
  // grown table here (an XPU endpoint's are mapped blocks in xmem).
  uint32_t peer_limit = 0;
  std::vector<std::vector<uint64_t>> peer_tables;
  proto_config cfg{};
  proto_dev dev{};
  proto_ep own_pep{};
  // The core endpoint: own_pep, or for an XPU endpoint the start of a block the XPU context
  // maps, where device code reaches it.
  proto_ep* pep = &own_pep;
  std::vector<XpuMem> xmem;  // an XPU endpoint's imports: the core's block, bounce, rings
  // The exported efa_xpu_ep's proto_lock once device code may call into the core.
  uint32_t* dev_lock = nullptr;
  // Peers by AV index and AV indices by peer, for the AV entries seen so far.
  std::vector<uint32_t> peer_of_av;
  std::vector<fi_addr_t> av_of_peer;
  // Contexts of successful operations that report no completion (FI_SELECTIVE_COMPLETION
  // without FI_COMPLETION): their success entries are dropped, their errors still reported.
  std::unordered_multiset<uint64_t> silent;
  // Requests waiting behind a fence, per peer, in posting order; `deferred` counts them all.
  std::vector<std::deque<TxReq>> waiting;
  size_t deferred = 0;
  // The context the inject calls run under: no application context can be this endpoint's
  // own state, so their completions are told apart (counted, never reported on success).
  uint64_t inject_ctx() const { return reinterpret_cast<uintptr_t>(this); }
  // Set as the host lock is released (without FI_THREAD_DOMAIN): true when nothing but a new CQE
  // or a new AV entry can give progress work (nothing deferred, nothing pending in the core),
  // and how many AV entries the peers then covered. A poller that finds both still so, and no
  // valid CQE, skips the lock; one that races a holder sees the state just before it.
  std::atomic<bool> quiet{false};
  std::atomic<size_t> av_seen{0};
};

// The host's hold on the core: the host-side mutex, then the device's lock if it has one.
class CoreLock {
 public:
  explicit CoreLock(ProtoState* ps) : host_(ps->lock, ps->host_serialized), ps_(ps) {
    if (!ps_->dev_lock) return;
    for (;;) {
      uint32_t unlocked = 0;
      if (__atomic_compare_exchange_n(ps_->dev_lock, &unlocked, 1u, false, __ATOMIC_ACQUIRE,
                                      __ATOMIC_RELAXED))
        return;
      sched_yield();
    }
  }
  ~CoreLock() {
    // (An XPU endpoint's core is device code's too, and its host side never polls it.)
    if (!ps_->host_serialized && !ps_->dev_lock) {
      ps_->av_seen.store(ps_->peer_of_av.size(), std::memory_order_relaxed);
      ps_->quiet.store(ps_->deferred == 0 && !proto_progress_pending(ps_->pep), std::memory_order_release);
    }
    if (ps_->dev_lock) __atomic_store_n(ps_->dev_lock, 0u, __ATOMIC_RELEASE);
  }  // then host_ lets go of the host-side mutex
  CoreLock(const CoreLock&) = delete;
  CoreLock& operator=(const CoreLock&) = delete;

 private:
  SerialLock host_;  // first in, last out: the host-side mutex encloses the device's lock
  ProtoState* ps_;
};

// Peers for the AV entries added since the last call (lock held; proto_setup.cc).
void sync_new_peers(EfaEp* ep, ProtoState* ps);

// Every post and progress call asks; almost always nothing was appended.
inline void sync_peers(EfaEp* ep, ProtoState* ps) {
  if (ep->av->count.load(std::memory_order_acquire) != ps->peer_of_av.size())
    sync_new_peers(ep, ps);
}

// Whether progress has anything to do: new AV entries to make peers of (they may adopt waiting
// packets), requests behind a fence, or work in the core.
inline bool progress_due(EfaEp* ep, ProtoState* ps) {
  return ps->deferred || ep->av->count.load(std::memory_order_acquire) != ps->peer_of_av.size() ||
         proto_progress_due(ps->pep);
}

inline uint32_t peer_of(ProtoState* ps, fi_addr_t a) {
  return a < ps->peer_of_av.size() ? ps->peer_of_av[a] : PROTO_NONE;
}

}  // namespace xpufab::efa

#endif  // XPUFAB_API_EFA_PROTO_STATE_H_
