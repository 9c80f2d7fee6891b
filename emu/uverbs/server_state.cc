// The shared state's lifetime and the helpers every command family uses: user-memory copies,
// mmap keys and releasing what a context created.
#include "emu/uverbs/server_state.h"

#include <pthread.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace xpufab {
namespace uverbs {

State& st() {
  static State* s = new State();  // never destroyed: threads and exit handlers outlive statics
  return *s;
}

thread_local int t_in_server = 0;

SignalsBlocked::SignalsBlocked() {
  sigset_t all;
  sigfillset(&all);
  // Faults raised by the thread's own code must still reach it.
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT}) sigdelset(&all, sig);
  pthread_sigmask(SIG_BLOCK, &all, &saved_);
}

SignalsBlocked::~SignalsBlocked() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }

namespace {

// Where a sandbox forbids process_vm_*, a null pointer is still refused and others are trusted.
bool vm_blocked(ssize_t rc) { return rc < 0 && (errno == EPERM || errno == ENOSYS); }

}  // namespace

bool copy_in(void* dst, uint64_t src, size_t n) {
  if (n == 0) return true;
  struct iovec l{dst, n}, r{reinterpret_cast<void*>(src), n};
  ssize_t rc = process_vm_readv(getpid(), &l, 1, &r, 1, 0);
  if (vm_blocked(rc) && src >= kPage) {
    std::memcpy(dst, reinterpret_cast<const void*>(src), n);
    return true;
  }
  return rc == static_cast<ssize_t>(n);
}

bool copy_out(uint64_t dst, const void* src, size_t n) {
  if (n == 0) return true;
  struct iovec l{const_cast<void*>(src), n}, r{reinterpret_cast<void*>(dst), n};
  ssize_t rc = process_vm_writev(getpid(), &l, 1, &r, 1, 0);
  if (vm_blocked(rc) && dst >= kPage) {
    std::memcpy(reinterpret_cast<void*>(dst), src, n);
    return true;
  }
  return rc == static_cast<ssize_t>(n);
}

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

int missing_handle_errno(const Ctx& ctx, uint32_t handle) {
  bool other = ctx.pds.count(handle) || ctx.mrs.count(handle) || ctx.ahs.count(handle) ||
               ctx.cqs.count(handle) || ctx.qps.count(handle);
  return other ? -EINVAL : -ENOENT;
}

uint64_t add_key(Ctx* ctx, uint8_t* addr, size_t len) {
  uint64_t key = ctx->next_key * kPage;
  ctx->next_key += (len + kPage - 1) / kPage;
  ctx->keys[key] = Mapping{addr, len};
  return key;
}

void free_owned(uint8_t* p, size_t) { std::free(p); }

void release_ctx_objects_locked(State& s, Ctx* ctx) {
  for (auto& kv : ctx->qps) destroy_qp_locked(s, ctx, kv.second.get());
  ctx->qps.clear();
  if (s.dev) {
    for (auto& kv : ctx->ahs) s.dev->destroy_ah(kv.second);
    for (auto& kv : ctx->mrs) s.dev->dereg_mr(kv.second);
  }
  ctx->ahs.clear();
  ctx->mrs.clear();
  for (auto& kv : ctx->cqs) destroy_cq_locked(s, ctx, kv.second.get());
  ctx->cqs.clear();
  if (s.dev)
    for (auto& kv : ctx->pds) s.dev->dealloc_pd(kv.second);
  ctx->pds.clear();
  ctx->keys.clear();
  // Handed ranges outlive the context: a mapping stays valid after its fd is closed, and the
  // device's doorbell page is handed to every context of the process. Dropping them here let a
  // later munmap of such a range reach the real munmap and unmap the emulator's own memory.
}

}  // namespace uverbs
}  // namespace xpufab
