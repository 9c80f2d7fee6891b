// fiber.h - stacks and context switches for the host XPU's work-item fibers.
// Internal to device/runtime.
//
// A fiber runs one function on a stack of its own and gives the CPU back
// only when it switches explicitly, so the switch is a handful of register
// moves (x86-64 assembly; ucontext, which also makes a system call per
// switch, elsewhere or when XPUFAB_HOST_XPU_UCONTEXT is defined for all of
// device/runtime). Fibers never move between threads:
// thread-locals read on a fiber are those of the thread that runs it.
//
// The sanitizers are told about every switch: AddressSanitizer about the
// stack now in use (__sanitizer_start/finish_switch_fiber), ThreadSanitizer
// about the logical thread now running (__tsan_switch_to_fiber, which also
// orders everything before a switch before everything after it).
#ifndef XPUFAB_DEVICE_RUNTIME_FIBER_H_
#define XPUFAB_DEVICE_RUNTIME_FIBER_H_

#include <cstddef>

#if defined(XPUFAB_HOST_XPU_UCONTEXT) || !defined(__x86_64__)
#define XPUFAB_FIBER_UCONTEXT_ 1
#include <ucontext.h>
#endif

namespace xpufab::runtime {

// An mmap'd stack with an inaccessible guard page below it, so an overflow
// faults instead of corrupting a neighbour. Stacks are recycled through a
// process-wide cache: a launch costs no system call per work-item.
class FiberStack {
 public:
  FiberStack() = default;
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  ~FiberStack() { release(); }

  // Gets a usable stack of at least `bytes`; false if the memory could not be
  // had.
  bool acquire(size_t bytes);
  // Hands the stack back to the cache (or the system).
  void release();
  // Makes the stack of a fiber that has ended usable by the next one
  // prepared on it.
  void recycle();

  char* base() const { return base_; }  // lowest usable byte
  size_t size() const { return size_; }

 private:
  char* base_ = nullptr;
  size_t size_ = 0;
};

// One execution context: a fiber, or the thread (or fiber) that schedules
// fibers. A context that has not been started is the caller's own.
class FiberContext {
 public:
  using Entry = void (*)(void* arg);

  FiberContext() = default;
  FiberContext(const FiberContext&) = delete;
  FiberContext& operator=(const FiberContext&) = delete;
  ~FiberContext();

  // Takes the calling context as this one (the scheduler side).
  void adopt_current();
  // Prepares a fiber that will call entry(arg) on `stack` when first
  // switched to. entry must never return: it ends with exit_to().
  void prepare(const FiberStack& stack, Entry entry, void* arg);

  // Saves the running context in *this and resumes `to`.
  void switch_to(FiberContext& to);
  // Resumes `to` for good: this context never runs again.
  void exit_to(FiberContext& to);
  // The first thing a fiber's entry function must call.
  void on_first_entry();

 private:
  void before_switch(FiberContext& to, bool exiting);
  void after_switch();

#if defined(XPUFAB_FIBER_UCONTEXT_)
  ucontext_t uc_{};
#else
  void* sp_ = nullptr;  // saved stack pointer while switched out
#endif
  // Stack bounds for AddressSanitizer (unknown, null, for an adopted context
  // until the first fiber it ran reported them).
  const void* stack_bottom_ = nullptr;
  size_t stack_size_ = 0;
  void* asan_fake_stack_ = nullptr;
  FiberContext* switched_from_ = nullptr;
  void* tsan_fiber_ = nullptr;
  bool owns_tsan_fiber_ = false;
};

}  // namespace xpufab::runtime

#endif  // XPUFAB_DEVICE_RUNTIME_FIBER_H_
