// The emulated NIC progresses inside the application's verbs calls. libefa polls CQ memory and
// rings doorbells without entering the kernel, so by itself the emulated device moves only when
// its own threads run. Once libefa has installed its ops on a context of ours, the shim wraps the
// entries a program spins on or posts through: ibv_context_ops poll_cq / post_send / post_recv,
// ibv_cq_ex start_poll and ibv_qp_ex wr_complete of the CQs and QPs it creates. A poll that finds
// nothing, and every successful post, runs one pass of the service thread's work (engine step,
// 16-byte CQE mirrors, channel events) on the calling thread; a poll then looks again. libefa's
// own functions still do all the queue work: the wrappers only call them. req_notify_cq is wrapped
// too: after libefa's doorbell arm, the emulated CQ is armed exactly (the doorbell alone is only
// sampled, so an index update written right after the arm could hide it).
#ifndef XPUFAB_EMU_UVERBS_CALLER_PROGRESS_H_
#define XPUFAB_EMU_UVERBS_CALLER_PROGRESS_H_

#include <cstdint>

struct ibv_context;
struct ibv_cq_ex;
struct ibv_qp;

namespace xpufab {
namespace uverbs {

struct State;

// Wraps the ops of a context whose command fd is one of ours (others are left as they are).
// Idempotent; an entry whose provider function differs from the one already adopted is left
// unwrapped rather than guessed at.
void wrap_context(ibv_context* ctx);
// Objects made by efadv entry points, which bypass the context's create ops.
void wrap_cq_ex(ibv_cq_ex* cq);
void wrap_qp(ibv_qp* qp);

// One pass of the service work from a calling thread; never blocks on the server lock (if the
// service thread holds it, that thread is doing the same work). Returns the work done.
int caller_drive();
// How many caller passes ran so far: the service thread parks while this moves. A counter, not a
// clock, so a caller's pass reads no time of its own.
uint64_t caller_drives();
// At exit, once the device is no longer published: waits until no caller is inside it.
void quiesce_callers();
// In a forked child: callers that were inside in the parent are not threads here.
void callers_after_fork();

// The service pass (service_thread.cc). `wait_lock` false: skip the CQ work when the server lock
// is taken.
int service_pass(State& s, bool wait_lock);

}  // namespace uverbs
}  // namespace xpufab

#endif  // XPUFAB_EMU_UVERBS_CALLER_PROGRESS_H_
