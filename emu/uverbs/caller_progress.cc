// Wrapping libefa's poll and post entries so that the calling thread drives the emulated NIC
// (caller_progress.h). One provider serves our contexts, so each wrapped entry keeps a single
// original: the first one seen is adopted, and an object whose entry differs keeps its own.
#include "emu/uverbs/caller_progress.h"

#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <thread>

#include "emu/uverbs/server_state.h"
#include "emu/uverbs/uverbs_server.h"

namespace xpufab {
namespace uverbs {
namespace {

using PollCqFn = int (*)(ibv_cq*, int, ibv_wc*);
using PostSendFn = int (*)(ibv_qp*, ibv_send_wr*, ibv_send_wr**);
using PostRecvFn = int (*)(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**);
using CreateCqExFn = ibv_cq_ex* (*)(ibv_context*, ibv_cq_init_attr_ex*);
using CreateQpExFn = ibv_qp* (*)(ibv_context*, ibv_qp_init_attr_ex*);
using StartPollFn = int (*)(ibv_cq_ex*, ibv_poll_cq_attr*);
using WrCompleteFn = int (*)(ibv_qp_ex*);
using ReqNotifyCqFn = int (*)(ibv_cq*, int);

std::atomic<PollCqFn> g_poll_cq{nullptr};
std::atomic<PostSendFn> g_post_send{nullptr};
std::atomic<PostRecvFn> g_post_recv{nullptr};
std::atomic<CreateCqExFn> g_create_cq_ex{nullptr};
std::atomic<CreateQpExFn> g_create_qp_ex{nullptr};
std::atomic<StartPollFn> g_start_poll{nullptr};
std::atomic<WrCompleteFn> g_wr_complete{nullptr};
std::atomic<ReqNotifyCqFn> g_req_notify_cq{nullptr};

// Callers inside a pass (at exit the device is freed only once they are out) and when one last
// drove (the service thread parks meanwhile).
std::atomic<int> g_inside{0};
std::atomic<uint64_t> g_drives{0};

// A caller that keeps finding nothing is waiting for a peer; on a host with fewer cores than
// spinning threads that peer may be the one waiting for this core. Every kYieldEvery empty
// passes in a row the caller offers the core once.
constexpr uint32_t kYieldEvery = 32;
thread_local uint32_t t_empty = 0;

int drive_or_yield() {
  int work = caller_drive();
  if (work != 0) {
    t_empty = 0;
  } else if (++t_empty % kYieldEvery == 0) {
    sched_yield();
  }
  return work;
}

// True when `current` is the original this wrapper stands for (adopting it if none was yet).
template <class F>
bool adopt(std::atomic<F>& saved, F current, F wrapper) {
  if (current == nullptr || current == wrapper) return false;
  F expected = nullptr;
  if (saved.compare_exchange_strong(expected, current, std::memory_order_acq_rel)) return true;
  return expected == current;
}

// Before libefa rings a doorbell: what this thread wrote (the buffers it posts) happens before
// the pass that serves the doorbell, for ThreadSanitizer too (EmuDevice::publish_writes).
// Counted inside, as a pass is, so that exit frees the device only after it. Only
// ThreadSanitizer needs this: on the CPU, libefa's barrier before its doorbell store already
// orders the writes, so other builds leave these atomics off every post.
void publish_writes() {
#if defined(__SANITIZE_THREAD__)
  if (in_server_now()) return;
  InServer in;
  g_inside.fetch_add(1, std::memory_order_seq_cst);
  if (emu::EmuDevice* d = st().driven_emu.load(std::memory_order_seq_cst)) d->publish_writes();
  g_inside.fetch_sub(1, std::memory_order_release);
#endif
}

int poll_cq_wrapped(ibv_cq* cq, int n, ibv_wc* wc) {
  PollCqFn orig = g_poll_cq.load(std::memory_order_acquire);
  int rc = orig(cq, n, wc);
  if (rc != 0 || n <= 0) return rc;
  if (drive_or_yield() == 0) return 0;
  return orig(cq, n, wc);
}

int post_send_wrapped(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  publish_writes();
  int rc = g_post_send.load(std::memory_order_acquire)(qp, wr, bad);
  if (rc == 0) caller_drive();
  return rc;
}

int post_recv_wrapped(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  publish_writes();
  int rc = g_post_recv.load(std::memory_order_acquire)(qp, wr, bad);
  if (rc == 0) caller_drive();
  return rc;
}

// An empty CQ is found by start_poll (which then holds no lock, as ENOENT ends the batch).
// next_poll is left alone: it runs inside a batch the caller is already draining.
int start_poll_wrapped(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
  StartPollFn orig = g_start_poll.load(std::memory_order_acquire);
  int rc = orig(cq, attr);
  if (rc != ENOENT) return rc;
  if (drive_or_yield() == 0) return rc;
  return orig(cq, attr);
}

int wr_complete_wrapped(ibv_qp_ex* qp) {
  publish_writes();
  int rc = g_wr_complete.load(std::memory_order_acquire)(qp);
  if (rc == 0) caller_drive();
  return rc;
}

// libefa arms by writing the CQ doorbell, which the NIC only samples: its next consumer-index
// update may overwrite the arm before any pass reads the word. The emulated CQ is therefore armed
// exactly as well, so that the next completion raises the event whichever thread drives the NIC.
int req_notify_cq_wrapped(ibv_cq* cq, int solicited_only) {
  int rc = g_req_notify_cq.load(std::memory_order_acquire)(cq, solicited_only);
  if (rc == 0) arm_cq_exactly(cq->context->cmd_fd, cq->handle);
  return rc;
}

ibv_cq_ex* create_cq_ex_wrapped(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
  ibv_cq_ex* cq = g_create_cq_ex.load(std::memory_order_acquire)(ctx, attr);
  wrap_cq_ex(cq);
  return cq;
}

ibv_qp* create_qp_ex_wrapped(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
  ibv_qp* qp = g_create_qp_ex.load(std::memory_order_acquire)(ctx, attr);
  wrap_qp(qp);
  return qp;
}

}  // namespace

void wrap_context(ibv_context* ctx) {
  if (ctx == nullptr || !is_context(ctx->cmd_fd)) return;
  ibv_context_ops& ops = ctx->ops;
  if (adopt(g_poll_cq, ops.poll_cq, &poll_cq_wrapped)) ops.poll_cq = &poll_cq_wrapped;
  if (adopt(g_post_send, ops.post_send, &post_send_wrapped)) ops.post_send = &post_send_wrapped;
  if (adopt(g_post_recv, ops.post_recv, &post_recv_wrapped)) ops.post_recv = &post_recv_wrapped;
  if (adopt(g_req_notify_cq, ops.req_notify_cq, &req_notify_cq_wrapped))
    ops.req_notify_cq = &req_notify_cq_wrapped;
  if (verbs_context* v = verbs_get_ctx_op(ctx, create_cq_ex)) {
    if (adopt(g_create_cq_ex, v->create_cq_ex, &create_cq_ex_wrapped))
      v->create_cq_ex = &create_cq_ex_wrapped;
  }
  if (verbs_context* v = verbs_get_ctx_op(ctx, create_qp_ex)) {
    if (adopt(g_create_qp_ex, v->create_qp_ex, &create_qp_ex_wrapped))
      v->create_qp_ex = &create_qp_ex_wrapped;
  }
}

void wrap_cq_ex(ibv_cq_ex* cq) {
  if (cq == nullptr || !is_context(cq->context->cmd_fd)) return;
  if (adopt(g_start_poll, cq->start_poll, &start_poll_wrapped)) cq->start_poll = &start_poll_wrapped;
}

void wrap_qp(ibv_qp* qp) {
  if (qp == nullptr || !is_context(qp->context->cmd_fd)) return;
  // libibverbs' own accessor, looked up at run time: this library does not link rdma-core.
  using ToQpEx = ibv_qp_ex* (*)(ibv_qp*);
  static ToQpEx to_qp_ex = reinterpret_cast<ToQpEx>(dlsym(RTLD_DEFAULT, "ibv_qp_to_qp_ex"));
  ibv_qp_ex* qx = to_qp_ex != nullptr ? to_qp_ex(qp) : nullptr;
  if (qx == nullptr) return;
  if (adopt(g_wr_complete, qx->wr_complete, &wr_complete_wrapped))
    qx->wr_complete = &wr_complete_wrapped;
}

int caller_drive() {
  State& s = st();
  if (in_server_now()) return 0;  // called again from a signal handler: the pass is not ours
  // Counted as inside the server first: whenever g_inside counts this thread, an exit() from a
  // signal handler here knows not to wait for it.
  InServer in;
  // Pairs with at_exit's unpublishing store and quiesce_callers (both sequentially consistent):
  // either exit sees this caller inside, or this caller sees no device.
  g_inside.fetch_add(1, std::memory_order_seq_cst);
  int work = 0;
  if (s.driven.load(std::memory_order_seq_cst) != nullptr) work = service_pass(s, false);
  g_inside.fetch_sub(1, std::memory_order_release);
  g_drives.fetch_add(1, std::memory_order_relaxed);
  return work;
}

uint64_t caller_drives() { return g_drives.load(std::memory_order_relaxed); }

void quiesce_callers() {
  while (g_inside.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
}

void callers_after_fork() {
  g_inside.store(0);
  g_drives.store(0);
}

}  // namespace uverbs
}  // namespace xpufab
