#include "device/runtime/fiber.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define XPUFAB_FIBER_ASAN_ 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define XPUFAB_FIBER_TSAN_ 1
#endif

#if !defined(XPUFAB_FIBER_UCONTEXT_)
// The x86-64 switch: push the callee-saved registers (System V ABI: rbx,
// rbp, r12-r15, and the MXCSR / x87 control words) on the running stack,
// store the stack pointer through the first argument, load the second and
// pop the same set from it. A new fiber's stack is laid out by prepare() so
// that the pops start the trampoline, which calls entry(arg) with entry in
// r12 and arg in r13 on a 16-byte aligned stack.
extern "C" void xpufab_fiber_switch(void** save_sp, void* next_sp);
extern "C" void xpufab_fiber_trampoline();
asm(R"(
  .text
  .p2align 4
  .globl xpufab_fiber_switch
  .hidden xpufab_fiber_switch
  .type xpufab_fiber_switch, @function
xpufab_fiber_switch:
  .cfi_startproc
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size xpufab_fiber_switch, .-xpufab_fiber_switch

  .p2align 4
  .globl xpufab_fiber_trampoline
  .hidden xpufab_fiber_trampoline
  .type xpufab_fiber_trampoline, @function
xpufab_fiber_trampoline:
  .cfi_startproc
  .cfi_undefined rip
  movq %r13, %rdi
  callq *%r12
  ud2
  .cfi_endproc
  .size xpufab_fiber_trampoline, .-xpufab_fiber_trampoline
)");
#endif

namespace xpufab::runtime {
namespace {

size_t page_size() {
  static const size_t page = [] {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : size_t{4096};
  }();
  return page;
}

// Stacks of finished launches, by usable size. Bounded so a one-off huge
// launch does not pin its address space for the life of the process.
class StackCache {
 public:
  static StackCache& get() {
    // Leaked: pooled worker threads may still return stacks at exit.
    static StackCache* cache = new StackCache;
    return *cache;
  }

  char* take(size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(size);
    if (it == free_.end() || it->second.empty()) return nullptr;
    char* base = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= size;
    return base;
  }

  bool put(char* base, size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_bytes_ + size > kMaxCachedBytes) return false;
    try {
      free_[size].push_back(base);
    } catch (const std::bad_alloc&) {
      return false;
    }
    cached_bytes_ += size;
    return true;
  }

 private:
  StackCache() {
    // A child forked while another thread held the lock would otherwise
    // never get it; the child's copy of the cached stacks stays usable.
    pthread_atfork(nullptr, nullptr, [] { new (&get().mu_) std::mutex; });
  }

  static constexpr size_t kMaxCachedBytes = size_t{256} << 20;
  std::mutex mu_;
  std::map<size_t, std::vector<char*>> free_;  // guarded by mu_
  size_t cached_bytes_ = 0;                    // guarded by mu_
};

}  // namespace

bool FiberStack::acquire(size_t bytes) {
  release();
  const size_t page = page_size();
  const size_t size = (bytes + page - 1) / page * page;
  char* base = StackCache::get().take(size);
  if (base == nullptr) {
    void* p = mmap(nullptr, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) return false;
    if (mprotect(p, page, PROT_NONE) != 0) {
      munmap(p, size + page);
      return false;
    }
    base = static_cast<char*>(p) + page;
  }
#if defined(XPUFAB_FIBER_ASAN_)
  // Frames of the stack's last fiber never returned: their redzones are
  // still poisoned.
  ASAN_UNPOISON_MEMORY_REGION(base, size);
#endif
  base_ = base;
  size_ = size;
  return true;
}

void FiberStack::recycle() {
#if defined(XPUFAB_FIBER_ASAN_)
  // Frames of the last fiber never returned: their redzones are still
  // poisoned.
  if (base_ != nullptr) ASAN_UNPOISON_MEMORY_REGION(base_, size_);
#endif
}

void FiberStack::release() {
  if (base_ == nullptr) return;
  if (!StackCache::get().put(base_, size_)) munmap(base_ - page_size(), size_ + page_size());
  base_ = nullptr;
  size_ = 0;
}

FiberContext::~FiberContext() {
#if defined(XPUFAB_FIBER_TSAN_)
  if (owns_tsan_fiber_) __tsan_destroy_fiber(tsan_fiber_);
#endif
}

void FiberContext::adopt_current() {
#if defined(XPUFAB_FIBER_TSAN_)
  tsan_fiber_ = __tsan_get_current_fiber();
#endif
}

#if defined(XPUFAB_FIBER_UCONTEXT_)
namespace {
// makecontext passes int arguments only: the pointers travel in halves.
void ucontext_entry(unsigned entry_hi, unsigned entry_lo, unsigned arg_hi, unsigned arg_lo) {
  auto entry = reinterpret_cast<FiberContext::Entry>((uintptr_t{entry_hi} << 32) | entry_lo);
  void* arg = reinterpret_cast<void*>((uintptr_t{arg_hi} << 32) | arg_lo);
  entry(arg);
  std::abort();  // entry ends with exit_to()
}
}  // namespace
#endif

void FiberContext::prepare(const FiberStack& stack, Entry entry, void* arg) {
  stack_bottom_ = stack.base();
  stack_size_ = stack.size();
#if defined(XPUFAB_FIBER_UCONTEXT_)
  if (getcontext(&uc_) != 0) std::abort();
  uc_.uc_stack.ss_sp = stack.base();
  uc_.uc_stack.ss_size = stack.size();
  uc_.uc_link = nullptr;
  const auto e = reinterpret_cast<uintptr_t>(entry);
  const auto a = reinterpret_cast<uintptr_t>(arg);
  makecontext(&uc_, reinterpret_cast<void (*)()>(ucontext_entry), 4, static_cast<unsigned>(e >> 32),
              static_cast<unsigned>(e), static_cast<unsigned>(a >> 32), static_cast<unsigned>(a));
#else
  auto top = reinterpret_cast<uintptr_t>(stack.base() + stack.size()) & ~uintptr_t{15};
  auto* frame = reinterpret_cast<uint64_t*>(top - 64);
  uint32_t mxcsr;
  uint16_t fpucw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  frame[0] = mxcsr | (uint64_t{fpucw} << 32);
  frame[1] = 0;                                   // r15
  frame[2] = 0;                                   // r14
  frame[3] = reinterpret_cast<uintptr_t>(arg);    // r13
  frame[4] = reinterpret_cast<uintptr_t>(entry);  // r12
  frame[5] = 0;                                   // rbx
  frame[6] = 0;                                   // rbp: ends frame-pointer walks
  frame[7] = reinterpret_cast<uintptr_t>(&xpufab_fiber_trampoline);
  sp_ = frame;
#endif
#if defined(XPUFAB_FIBER_TSAN_)
  // A context prepared again (a reused launch) keeps its fiber: creating one
  // costs ThreadSanitizer a large zeroed allocation, and the runs of one
  // context are ordered anyway (each ended before the next was prepared).
  if (!owns_tsan_fiber_) {
    tsan_fiber_ = __tsan_create_fiber(0);
    owns_tsan_fiber_ = true;
  }
#endif
}

void FiberContext::before_switch(FiberContext& to, bool exiting) {
  to.switched_from_ = this;
#if defined(XPUFAB_FIBER_ASAN_)
  __sanitizer_start_switch_fiber(exiting ? nullptr : &asan_fake_stack_, to.stack_bottom_, to.stack_size_);
#else
  (void)exiting;
#endif
#if defined(XPUFAB_FIBER_TSAN_)
  __tsan_switch_to_fiber(to.tsan_fiber_, 0);
#endif
}

void FiberContext::after_switch() {
#if defined(XPUFAB_FIBER_ASAN_)
  FiberContext* from = switched_from_;
  __sanitizer_finish_switch_fiber(asan_fake_stack_, &from->stack_bottom_, &from->stack_size_);
#endif
}

void FiberContext::on_first_entry() {
#if defined(XPUFAB_FIBER_ASAN_)
  // Learns the bounds of the context that started this fiber (a thread
  // stack the runtime did not allocate).
  FiberContext* from = switched_from_;
  __sanitizer_finish_switch_fiber(nullptr, &from->stack_bottom_, &from->stack_size_);
#endif
}

void FiberContext::switch_to(FiberContext& to) {
  before_switch(to, false);
#if defined(XPUFAB_FIBER_UCONTEXT_)
  if (swapcontext(&uc_, &to.uc_) != 0) std::abort();
#else
  xpufab_fiber_switch(&sp_, to.sp_);
#endif
  after_switch();
}

void FiberContext::exit_to(FiberContext& to) {
  before_switch(to, true);
#if defined(XPUFAB_FIBER_UCONTEXT_)
  setcontext(&to.uc_);
#else
  void* discarded;
  xpufab_fiber_switch(&discarded, to.sp_);
#endif
  std::abort();
}

}  // namespace xpufab::runtime
