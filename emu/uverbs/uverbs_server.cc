// The uverbs write() command ABI of an EFA device over the emulated device. Layouts come from
// the kernel uAPI headers rdma-core installs (<rdma/ib_user_verbs.h>, <rdma/efa-abi.h>); the
// fields later rdma-core releases appended are handled by length, as the kernel does
// (reference/uverbs-efa-abi.md 2.2, 2.4-2.7, 3).
//
// This file: the table of contexts, the write() header parsing and dispatch to the command
// families (cmd_*.cc, comp_channel.cc), mmap/munmap of the keys they handed out, and the
// process's fork and exit. The state they share is in server_state.h.
#include "emu/uverbs/uverbs_server.h"

#include <fcntl.h>
#include <rdma/ib_user_verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "emu/uverbs/caller_progress.h"
#include "emu/uverbs/command.h"
#include "emu/uverbs/server_state.h"

namespace xpufab {
namespace uverbs {

int legacy_split(Cmd* c, size_t core_size, size_t core_out) {
  if (c->core_len < core_size) return -EINVAL;
  c->drv = c->core + core_size;
  c->drv_len = c->core_len - core_size;
  c->core_len = core_size;
  if (core_out != 0) {
    std::memcpy(&c->response, c->core, 8);
    if (c->out_len < core_out) return -ENOSPC;
    c->drv_response = c->response + core_out;
    c->drv_out_len = c->out_len - core_out;
    c->out_len = core_out;
  }
  return 0;
}

int respond(const Cmd& c, const void* core, size_t core_size, const void* drv, size_t drv_size) {
  if (!copy_out(c.response, core, std::min(core_size, c.out_len))) return -EFAULT;
  if (drv_size != 0 && c.drv_out_len != 0 &&
      !copy_out(c.drv_response, drv, std::min(drv_size, c.drv_out_len))) {
    return -EFAULT;
  }
  return 0;
}

namespace {

// Teardown after the device is gone (process exit): answer destroys with success so rdma-core
// finishes its own cleanup.
bool is_destroy(uint32_t cmd) {
  return cmd == IB_USER_VERBS_CMD_DEALLOC_PD || cmd == IB_USER_VERBS_CMD_DESTROY_AH ||
         cmd == IB_USER_VERBS_CMD_DEREG_MR || cmd == IB_USER_VERBS_CMD_DESTROY_CQ ||
         cmd == IB_USER_VERBS_CMD_DESTROY_QP;
}

int answer_after_shutdown(Cmd& c) {
  if (!is_destroy(c.command)) return -EIO;
  uint8_t zeros[8] = {0};
  if (c.out_len != 0) {
    std::memcpy(&c.response, c.core, 8);
    copy_out(c.response, zeros, std::min(c.out_len, sizeof(zeros)));
  }
  return 0;
}

int dispatch(State& s, Ctx* ctx, Cmd& c) {
  if (c.extended) {
    if (!ctx->has_context) return -EINVAL;
    switch (c.command) {
      case IB_USER_VERBS_EX_CMD_QUERY_DEVICE: return cmd_ex_query_device(s, ctx, c);
      case IB_USER_VERBS_EX_CMD_CREATE_CQ: return cmd_ex_create_cq(s, ctx, c);
      default: return -EOPNOTSUPP;
    }
  }
  if (c.command == IB_USER_VERBS_CMD_GET_CONTEXT) return cmd_get_context(s, ctx, c);
  if (!ctx->has_context) return -EINVAL;
  if (s.shut_down.load() || !s.dev) return answer_after_shutdown(c);
  switch (c.command) {
    case IB_USER_VERBS_CMD_QUERY_DEVICE: return cmd_query_device(s, ctx, c);
    case IB_USER_VERBS_CMD_QUERY_PORT: return cmd_query_port(s, ctx, c);
    case IB_USER_VERBS_CMD_ALLOC_PD: return cmd_alloc_pd(s, ctx, c);
    case IB_USER_VERBS_CMD_DEALLOC_PD: return cmd_dealloc_pd(s, ctx, c);
    case IB_USER_VERBS_CMD_CREATE_AH: return cmd_create_ah(s, ctx, c);
    case IB_USER_VERBS_CMD_DESTROY_AH: return cmd_destroy_ah(s, ctx, c);
    case IB_USER_VERBS_CMD_REG_MR: return cmd_reg_mr(s, ctx, c);
    case IB_USER_VERBS_CMD_DEREG_MR: return cmd_dereg_mr(s, ctx, c);
    case IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL: return cmd_create_comp_channel(s, ctx, c);
    case IB_USER_VERBS_CMD_CREATE_CQ: return cmd_create_cq(s, ctx, c);
    case IB_USER_VERBS_CMD_DESTROY_CQ: return cmd_destroy_cq(s, ctx, c);
    case IB_USER_VERBS_CMD_CREATE_QP: return cmd_create_qp(s, ctx, c);
    case IB_USER_VERBS_CMD_QUERY_QP: return cmd_query_qp(s, ctx, c);
    case IB_USER_VERBS_CMD_MODIFY_QP: return cmd_modify_qp(s, ctx, c);
    case IB_USER_VERBS_CMD_DESTROY_QP: return cmd_destroy_qp(s, ctx, c);
    default: return -EOPNOTSUPP;  // a verb the EFA driver does not offer
  }
}

}  // namespace

void register_context(int fd) {
  State& s = st();
  ServerLock lock(s);
  auto ctx = std::make_unique<Ctx>();
  ctx->fd = fd;
  s.ctxs[fd] = std::move(ctx);
}

bool is_context(int fd) {
  State& s = st();
  if (in_server_now()) return false;
  ServerLock lock(s);
  return s.ctxs.count(fd) != 0;
}

bool in_server_now() { return t_in_server != 0; }

bool close_context(int fd) {
  State& s = st();
  if (in_server_now()) return true;  // the objects die with the process (see handle_write)
  ServerLock lock(s);
  auto it = s.ctxs.find(fd);
  if (it == s.ctxs.end()) return false;
  Ctx* ctx = it->second.get();
  release_ctx_objects_locked(s, ctx);
  if (ctx->async_w >= 0) sys_close(ctx->async_w);
  s.ctxs.erase(it);
  return true;
}

ssize_t handle_write(int fd, const void* buf, size_t count) {
  State& s = st();
  ib_uverbs_cmd_hdr hdr;
  if (count < sizeof(hdr)) return -EINVAL;
  std::vector<uint8_t> req(count);
  if (!copy_in(req.data(), reinterpret_cast<uint64_t>(buf), count)) return -EFAULT;
  std::memcpy(&hdr, req.data(), sizeof(hdr));
  if (hdr.command & ~uint32_t{IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_CMD_COMMAND_MASK})
    return -EINVAL;
  Cmd c{};
  c.command = hdr.command & IB_USER_VERBS_CMD_COMMAND_MASK;
  c.extended = hdr.command & IB_USER_VERBS_CMD_FLAG_EXTENDED;
  if (c.extended) {
    ib_uverbs_ex_cmd_hdr ex;
    if (count < sizeof(hdr) + sizeof(ex)) return -EINVAL;
    std::memcpy(&ex, req.data() + sizeof(hdr), sizeof(ex));
    size_t core = size_t{hdr.in_words} * 8, drv = size_t{ex.provider_in_words} * 8;
    if (sizeof(hdr) + sizeof(ex) + core + drv != count || ex.cmd_hdr_reserved != 0) return -EINVAL;
    c.core = req.data() + sizeof(hdr) + sizeof(ex);
    c.core_len = core;
    c.drv = c.core + core;
    c.drv_len = drv;
    c.response = ex.response;
    c.out_len = size_t{hdr.out_words} * 8;
    c.drv_response = ex.response + c.out_len;
    c.drv_out_len = size_t{ex.provider_out_words} * 8;
    if ((c.out_len != 0 || c.drv_out_len != 0) && ex.response == 0) return -EFAULT;
  } else {
    if (size_t{hdr.in_words} * 4 != count) return -EINVAL;
    c.core = req.data() + sizeof(hdr);
    c.core_len = count - sizeof(hdr);
    c.out_len = size_t{hdr.out_words} * 4;
  }
  if (in_server_now()) {
    // Teardown from a signal handler that interrupted this thread inside the server (exit()
    // running library destructors): the server's locks are this thread's own. The process is
    // ending: destroys succeed, anything else fails, and nothing waits.
    s.shut_down.store(true);
    return answer_after_shutdown(c) == 0 ? static_cast<ssize_t>(count) : -EIO;
  }
  ServerLock lock(s);
  auto it = s.ctxs.find(fd);
  if (it == s.ctxs.end()) return -EBADF;
  int rc = dispatch(s, it->second.get(), c);
  return rc != 0 ? rc : static_cast<ssize_t>(count);
}

namespace {

// The ranges handed out now, published under the server lock and read without it. Atomics only:
// munmap is also called from inside allocators and sanitizer runtimes (a ThreadSanitizer report
// unmaps its symbolizer's file views, on a thread that may hold the device lock), where taking
// the server lock, or reading what it guards, can deadlock. The emulator's queues are mappings
// of their own scattered among the program's, so a single span around them would cover the
// program's mappings too; the table answers for each range. Past its capacity, the span of all
// ranges ever handed out answers (conservative: a range inside it takes the locked path).
struct HandedRange {
  std::atomic<uintptr_t> lo{0};  // 0: a free slot
  std::atomic<uintptr_t> hi{0};
};
constexpr size_t kHandedRanges = 16384;
HandedRange g_ranges[kHandedRanges];
std::atomic<size_t> g_ranges_high{0};
std::atomic<bool> g_ranges_overflow{false};
std::atomic<uintptr_t> g_span_lo{UINTPTR_MAX};
std::atomic<uintptr_t> g_span_hi{0};

void publish_range(uintptr_t lo, uintptr_t hi) {
  if (lo < g_span_lo.load(std::memory_order_relaxed)) g_span_lo.store(lo, std::memory_order_release);
  if (hi > g_span_hi.load(std::memory_order_relaxed)) g_span_hi.store(hi, std::memory_order_release);
  const size_t high = g_ranges_high.load(std::memory_order_relaxed);
  size_t i = 0;
  while (i < high && g_ranges[i].lo.load(std::memory_order_relaxed) != 0) ++i;
  if (i == kHandedRanges) {
    g_ranges_overflow.store(true, std::memory_order_release);
    return;
  }
  g_ranges[i].hi.store(hi, std::memory_order_relaxed);
  g_ranges[i].lo.store(lo, std::memory_order_release);
  if (i == high) g_ranges_high.store(high + 1, std::memory_order_release);
}

}  // namespace

void retire_range(uintptr_t lo) {
  const size_t high = g_ranges_high.load(std::memory_order_relaxed);
  for (size_t i = 0; i < high; ++i)
    if (g_ranges[i].lo.load(std::memory_order_relaxed) == lo) {
      g_ranges[i].lo.store(0, std::memory_order_release);
      return;
    }
}

bool may_be_handed(const void* addr, size_t length) {
  uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  uintptr_t end = a + (length == 0 ? 1 : length);
  if (g_ranges_overflow.load(std::memory_order_acquire))
    return end > g_span_lo.load(std::memory_order_acquire) && a < g_span_hi.load(std::memory_order_acquire);
  const size_t high = g_ranges_high.load(std::memory_order_acquire);
  for (size_t i = 0; i < high; ++i) {
    const uintptr_t lo = g_ranges[i].lo.load(std::memory_order_acquire);
    if (lo != 0 && end > lo && a < g_ranges[i].hi.load(std::memory_order_relaxed)) return true;
  }
  return false;
}

void* handle_mmap(int fd, size_t length, int prot, int flags, off_t key, int* err) {
  (void)prot;
  State& s = st();
  if (in_server_now()) {
    *err = EIO;
    return nullptr;
  }
  ServerLock lock(s);
  auto it = s.ctxs.find(fd);
  if (it == s.ctxs.end()) {
    *err = EBADF;
    return nullptr;
  }
  auto m = it->second->keys.find(static_cast<uint64_t>(key));
  if (m == it->second->keys.end() || !(flags & MAP_SHARED) || length != m->second.len) {
    *err = EINVAL;
    return nullptr;
  }
  uintptr_t a = reinterpret_cast<uintptr_t>(m->second.addr);
  auto h = s.handed.find(a);
  if (h == s.handed.end()) {
    bool owned = false;
    for (const auto& kv : it->second->cqs)
      if (kv.second->ring16 == m->second.addr) owned = true;
    s.handed[a] = Handed{m->second.len, 1, owned, false};
    publish_range(a, a + m->second.len);
  } else {
    h->second.refs++;
  }
  return m->second.addr;
}

int handle_munmap(void* addr, size_t length) {
  State& s = st();
  ServerLock lock(s);
  uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  // The kernel refuses an address inside a page, and the mapping stays. libefa unmaps some
  // doorbells by their own address, not their page's: counting such a call against a range
  // (the next page's, which the length reaches into) let another queue's doorbell page reach
  // the real munmap while it was still in use.
  if ((a & (kPage - 1)) != 0) return -EINVAL;
  auto h = s.handed.find(a);
  if (h == s.handed.end()) {
    // A range that is not a handed start but overlaps one is still the emulator's memory: the
    // real munmap must never see it. Count it against the range it overlaps.
    uintptr_t end = a + (length == 0 ? 1 : length);
    h = s.handed.lower_bound(end);
    if (h == s.handed.begin()) return 1;
    --h;
    if (h->first + h->second.len <= a) return 1;
  }
  if (--h->second.refs <= 0) {
    if (h->second.owned && h->second.orphan)
      free_owned(reinterpret_cast<uint8_t*>(h->first), h->second.len);
    retire_range(h->first);
    s.handed.erase(h);
  }
  return 0;
}

void after_fork_child() {
  State& s = st();
  // The parent's threads and device state are not ours: drop them without running destructors
  // (and without detaching the parent's address from a shared fabric).
  new (&s.mu) std::mutex();
  s.driven.store(nullptr);
  s.driven_emu.store(nullptr);
  (void)s.dev.release();
  (void)s.backend.release();
  s.emu = nullptr;
  for (auto& kv : s.ctxs) (void)kv.second.release();
  s.ctxs.clear();
  s.channels.clear();
  s.handed.clear();
  s.served.clear();
  if (s.service.joinable()) {
    // A std::thread copied by fork names a thread that does not exist here.
    new (&s.service) std::thread();
  }
  s.infos.clear();
  callers_after_fork();
}

namespace {

// The statistics line XPUFAB_EMU_STATS names, appended. Reads counters only (atomics).
void write_stats_line(State& s) {
  const char* path = std::getenv("XPUFAB_EMU_STATS");
  if (s.emu == nullptr || path == nullptr || path[0] == '\0') return;
  emu::Stats t = s.emu->stats();
  const ShimCounters& k = s.counters;
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  auto a = [](const std::atomic<uint64_t>& v) {
    return static_cast<unsigned long long>(v.load(std::memory_order_relaxed));
  };
  char line[1024];
  int n = snprintf(line, sizeof(line),
                   "pid=%d device=%s packets_tx=%llu packets_rx=%llu bytes_tx=%llu "
                   "bytes_rx=%llu wqes=%llu cqes=%llu error_cqes=%llu retransmits=%llu "
                   "rnr_naks=%llu rnr_retries=%llu steps=%llu doorbells=%llu "
                   "engine_sleeps=%llu caller_passes=%llu caller_lock_busy=%llu "
                   "service_passes=%llu service_sleeps=%llu mirrored_cqes=%llu\n",
                   static_cast<int>(getpid()), s.attr.name.c_str(), u(t.packets_tx),
                   u(t.packets_rx), u(t.bytes_tx), u(t.bytes_rx), u(t.wqes), u(t.cqes),
                   u(t.error_cqes), u(t.retransmits), u(t.rnr_naks), u(t.rnr_retries), u(t.steps),
                   u(t.doorbells), u(t.idle_sleeps), a(k.caller_passes), a(k.caller_lock_busy),
                   a(k.service_passes), a(k.service_sleeps), a(k.mirrored));
  int fd = static_cast<int>(
      syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (fd >= 0) {
    if (n > 0) (void)sys_write(fd, line, static_cast<size_t>(n));
    sys_close(fd);
  }
}

}  // namespace

void at_exit() {
  State& s = st();
  if (t_in_server != 0) {
    // exit() from a signal handler that interrupted this thread inside the server: the locks it
    // holds would never be released to the teardown. The process ends without it (the kernel
    // reclaims the memory; peers see this address go silent, as after a crash).
    if (!s.shut_down.exchange(true)) write_stats_line(s);
    return;
  }
  std::unique_ptr<backend::Device> dev;
  {
    ServerLock lock(s);
    if (s.shut_down.exchange(true)) return;
    for (auto& kv : s.ctxs) release_ctx_objects_locked(s, kv.second.get());
    write_stats_line(s);
    // Sequentially consistent, as the callers' check (caller_progress.cc).
    s.driven.store(nullptr, std::memory_order_seq_cst);
    s.driven_emu.store(nullptr, std::memory_order_seq_cst);
    dev = std::move(s.dev);
    s.emu = nullptr;
  }
  s.stop.store(true, std::memory_order_release);
  if (s.service.joinable()) s.service.join();
  quiesce_callers();
  dev.reset();
}

}  // namespace uverbs
}  // namespace xpufab
