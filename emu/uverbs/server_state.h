// The state the uverbs server shares between its command families: what each context (open
// uverbs fd) created, the completion channels, the ranges handed out by mmap and the one
// emulated device of the process. Everything is guarded by State::mu except the atomics; a
// function named *_locked expects it held.
#ifndef XPUFAB_EMU_UVERBS_SERVER_STATE_H_
#define XPUFAB_EMU_UVERBS_SERVER_STATE_H_

#include <signal.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "api/backend/backend.h"
#include "emu/device.h"

namespace xpufab {
namespace uverbs {

constexpr size_t kPage = 4096;
inline size_t page_align(size_t n) { return (n + kPage - 1) & ~(kPage - 1); }

// Raw system calls: the public names are interposed by this same library.
inline int sys_close(int fd) { return static_cast<int>(syscall(SYS_close, fd)); }
inline ssize_t sys_read(int fd, void* b, size_t n) { return syscall(SYS_read, fd, b, n); }
inline ssize_t sys_write(int fd, const void* b, size_t n) { return syscall(SYS_write, fd, b, n); }

struct CqObj {
  uint32_t handle = 0;
  backend::Cq* cq = nullptr;
  uint64_t user_handle = 0;
  uint32_t entries = 0;
  uint32_t log2_entries = 0;
  uint32_t entry_size = 32;
  uint8_t* emu_ring = nullptr;
  uint8_t* ring16 = nullptr;  // owned (mmap) when entry_size is 16
  uint32_t mirrored = 0;
  uint32_t* db = nullptr;
  int channel = -1;
  int efd = -1;
  uint32_t comp_reported = 0;
  uint32_t users = 0;
};

struct QpObj {
  uint32_t handle = 0;
  backend::Qp* qp = nullptr;
  uint32_t send_cq = 0, recv_cq = 0, pd = 0;
  backend::WqAttr sq{}, rq{};
  uint32_t max_send_wr = 0, max_recv_wr = 0, max_send_sge = 0, max_recv_sge = 0, max_inline = 0;
  uint32_t sq_psn = 0;
  uint8_t rnr_retry = 7;
  uint8_t sq_sig_all = 0;
  std::vector<uint64_t> keys;
};

struct Mapping {
  uint8_t* addr;
  size_t len;
};

struct Ctx {
  int fd = -1;
  bool has_context = false;
  int async_r = -1, async_w = -1;
  uint32_t next_handle = 0;
  uint64_t next_key = 1;  // in pages
  std::map<uint32_t, backend::Pd*> pds;
  std::map<uint32_t, backend::Mr*> mrs;
  std::map<uint32_t, backend::Ah*> ahs;
  std::map<uint32_t, std::unique_ptr<CqObj>> cqs;
  std::map<uint32_t, std::unique_ptr<QpObj>> qps;
  std::map<uint64_t, Mapping> keys;
  std::map<uint32_t, std::vector<uint64_t>> cq_keys;
};

struct Channel {
  std::deque<uint64_t> records;  // cq user_handles
  std::map<uint64_t, CqObj*> cqs;
};

// A range handed out by mmap (possibly to several contexts): refcount, and whether this library
// owns (and frees) it.
struct Handed {
  size_t len;
  int refs;
  bool owned;
  bool orphan;  // owner object gone; free when the last mapping goes
};

// What the shim's own progress did, for the statistics line written at exit (XPUFAB_EMU_STATS):
// load-independent evidence of how the NIC was moved (passes per message, sleeps, lock misses).
struct ShimCounters {
  std::atomic<uint64_t> caller_passes{0};     // passes run from verbs calls
  std::atomic<uint64_t> caller_lock_busy{0};  // ... that found the server lock taken
  std::atomic<uint64_t> service_passes{0};    // passes the service thread ran
  std::atomic<uint64_t> service_sleeps{0};    // its sleeps (parked or idle)
  std::atomic<uint64_t> mirrored{0};          // 16-byte CQEs copied
};

struct State {
  std::mutex mu;
  ShimCounters counters;
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<backend::Device> dev;
  emu::EmuDevice* emu = nullptr;
  backend::DeviceAttr attr{};
  std::vector<backend::DeviceInfo> infos;
  std::map<int, std::unique_ptr<Ctx>> ctxs;
  std::map<int, Channel> channels;
  std::map<uintptr_t, Handed> handed;
  std::vector<CqObj*> served;  // CQs the service thread mirrors or forwards events for
  std::thread service;
  std::atomic<bool> stop{false};
  std::atomic<bool> shut_down{false};
  // What the service thread drives (dev), read without the lock.
  std::atomic<backend::Device*> driven{nullptr};
  // The same device where it is the emulator (emu), for publish_writes() before libefa's posts.
  std::atomic<emu::EmuDevice*> driven_emu{nullptr};
};

State& st();

// How deep the calling thread is inside the server's locks (the server lock, a caller's pass
// over the device). A signal handler that calls exit() (libinfinipath's does, for SIGTERM) may
// interrupt such a thread; the exit handler then must not wait for locks that thread holds.
extern thread_local int t_in_server;
struct InServer {
  InServer() { ++t_in_server; }
  ~InServer() { --t_in_server; }
  InServer(const InServer&) = delete;
  InServer& operator=(const InServer&) = delete;
};
// The server lock, counted in t_in_server from before it is taken until after it is released.
class ServerLock {
 public:
  explicit ServerLock(State& s) : lock_(s.mu) {}

 private:
  InServer in_;
  std::lock_guard<std::mutex> lock_;
};

// Application threads alone take process-directed signals: the threads the shim and the device
// start run with them blocked, so no handler ever runs on a thread that holds the device lock
// in the middle of a pass. Blocks them on the calling thread until destroyed (threads started
// meanwhile inherit the mask).
class SignalsBlocked {
 public:
  SignalsBlocked();
  ~SignalsBlocked();
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t saved_;
};

// Copies to and from addresses the caller named: a bad pointer gives EFAULT, never a crash.
bool copy_in(void* dst, uint64_t src, size_t n);
bool copy_out(uint64_t dst, const void* src, size_t n);
bool all_zero(const uint8_t* p, size_t n);

// The errno the kernel gives a destroy command whose handle names no object of its type:
// EINVAL when it names an object of another type, ENOENT when it names none.
int missing_handle_errno(const Ctx& ctx, uint32_t handle);

// mmap keys of a context, in pages, and the ranges this library allocated itself.
uint64_t add_key(Ctx* ctx, uint8_t* addr, size_t len);
void free_owned(uint8_t* p, size_t len);  // what alloc_mirror_ring returned

// Destroys every object of the context, users before what they use (QPs first, PDs last).
void release_ctx_objects_locked(State& s, Ctx* ctx);

// The emulated device, opened through the backend registry on first use (cmd_device.cc).
int open_backend_locked(State& s);
int open_device_locked(State& s);

// The service thread (service_thread.cc): starts once, serves the CQs in State::served.
void ensure_service_locked(State& s);
void serve_locked(State& s, CqObj* c);
void unserve_locked(State& s, CqObj* c);

// The 16-byte CQE view of a CQ (cq_mirror.cc).
uint8_t* alloc_mirror_ring(size_t len);
// Copies the CQEs the emulator wrote since the last call; returns how many.
int mirror_cqes(CqObj* c);
// Frees the ring, or leaves it to the last munmap if it is still mapped.
void release_mirror_ring_locked(State& s, CqObj* c);

// Completion channels (comp_channel.cc).
// The events the emulator signalled on the CQ's event fd since the last call.
uint64_t take_cq_events(CqObj* c);
// Queues `events` records for the CQ on its channel and makes them readable.
void forward_cq_events_locked(State& s, CqObj* c, uint64_t events);
// Arms the emulated CQ behind (context fd, CQ handle) exactly (backend::Cq::arm), after libefa
// wrote its arm to the doorbell; a CQ without an event fd or an unknown one is left alone.
void arm_cq_exactly(int cmd_fd, uint32_t handle);
// Drops the CQ's queued records (as the kernel does on DESTROY_CQ) and its channel entry.
void detach_cq_from_channel_locked(State& s, CqObj* c);

void destroy_cq_locked(State& s, Ctx* ctx, CqObj* c);  // cmd_cq.cc
void destroy_qp_locked(State& s, Ctx* ctx, QpObj* q);  // cmd_qp.cc

}  // namespace uverbs
}  // namespace xpufab

#endif  // XPUFAB_EMU_UVERBS_SERVER_STATE_H_
