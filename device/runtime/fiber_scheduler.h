// fiber_scheduler.h - runs a set of fibers to completion on one thread.
// Internal to device/runtime.
//
// The host XPU gives each work-group one scheduler: its work-items are
// fibers that run one at a time, each until it blocks (a barrier it must
// wait at) or yields (a spin wait: xpu_relax). A fiber that stops hands the
// CPU straight to the next runnable fiber (one context switch, not two via
// the scheduler's loop), which is what a collective of a whole work-group
// costs per member. A fiber blocked here can be woken from any thread (a
// device-scope barrier spans work-groups); the scheduler's thread sleeps
// when none of its fibers can run.
#ifndef XPUFAB_DEVICE_RUNTIME_FIBER_SCHEDULER_H_
#define XPUFAB_DEVICE_RUNTIME_FIBER_SCHEDULER_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "device/runtime/fiber.h"

namespace xpufab::runtime {

class FiberScheduler;

// One spin-loop hint to the CPU.
inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// One fiber: what it runs and its place in the queues.
struct FiberTask {
  FiberContext context;
  FiberStack stack;
  void (*body)(FiberTask* task) = nullptr;
  void* user = nullptr;  // the work-item
  FiberScheduler* scheduler = nullptr;
  FiberTask* next = nullptr;  // link in exactly one ready queue or wait list
  uint64_t wake_value = 0;    // what the barrier that woke it hands it
};

class FiberScheduler {
 public:
  FiberScheduler() = default;
  FiberScheduler(const FiberScheduler&) = delete;
  FiberScheduler& operator=(const FiberScheduler&) = delete;

  // Makes `task` (prepared with a stack and a body) one of this scheduler's
  // fibers. Before run() only.
  void add(FiberTask* task);
  // Runs every added fiber until all have returned from their bodies, on
  // the calling thread (which may itself be a fiber of another scheduler).
  void run();

  // The fiber running on the calling thread, or nullptr.
  static FiberTask* current();
  // On a fiber: suspends it until some thread calls wake() for it.
  static void block();
  // On a fiber: runs the other fibers of its scheduler that can run, then
  // comes back. Returns false, having done nothing, when there are none.
  static bool yield();
  // Makes a fiber suspended in block() (or about to call it) runnable.
  // Callable from any thread; exactly once per block().
  static void wake(FiberTask* task);
  // Makes the list head..tail (linked by `next`) of fibers blocked on this
  // scheduler runnable, in list order. Only from a fiber of this scheduler.
  void wake_local(FiberTask* head, FiberTask* tail);

 private:
  static void fiber_main(void* arg);
  // Leaves the fiber `from` (running, already queued or parked wherever it
  // waits) for the next runnable one, or for the loop when none is.
  void switch_away(FiberTask* from);
  void push_ready(FiberTask* task);
  FiberTask* pop_ready();
  void take_woken(bool wait);

  FiberContext context_;  // the thread's own, while a fiber runs
  FiberTask* ready_head_ = nullptr;  // touched only by the running thread
  FiberTask* ready_tail_ = nullptr;
  size_t live_ = 0;          // fibers that have not returned
  size_t yield_streak_ = 0;  // yields since a fiber last blocked or returned

  std::mutex woken_mu_;
  std::condition_variable woken_cv_;
  FiberTask* woken_ = nullptr;  // guarded by woken_mu_: woken from elsewhere
  std::atomic<bool> woken_pending_{false};
};

}  // namespace xpufab::runtime

#endif  // XPUFAB_DEVICE_RUNTIME_FIBER_SCHEDULER_H_
