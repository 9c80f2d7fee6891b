#include "device/runtime/fiber_scheduler.h"

#include <sched.h>

namespace xpufab::runtime {
namespace {

// What the calling thread is running: the scheduler whose loop it is in and
// the fiber of that scheduler now on the CPU (nullptr in the loop itself).
thread_local FiberScheduler* t_scheduler = nullptr;
thread_local FiberTask* t_task = nullptr;

}  // namespace

void FiberScheduler::add(FiberTask* task) {
  task->scheduler = this;
  task->context.prepare(task->stack, &FiberScheduler::fiber_main, task);
  ++live_;
  push_ready(task);
}

void FiberScheduler::fiber_main(void* arg) {
  auto* task = static_cast<FiberTask*>(arg);
  task->context.on_first_entry();
  task->body(task);
  FiberScheduler* s = task->scheduler;
  --s->live_;
  s->yield_streak_ = 0;
  if (s->woken_pending_.load(std::memory_order_acquire)) s->take_woken(false);
  FiberTask* next = s->pop_ready();
  t_task = next;
  task->context.exit_to(next != nullptr ? next->context : s->context_);
}

void FiberScheduler::switch_away(FiberTask* from) {
  if (woken_pending_.load(std::memory_order_acquire)) take_woken(false);
  FiberTask* next = pop_ready();
  // `from` may be the one popped: a yield with nobody else ready, or a wake
  // that came before the block. It then simply goes on.
  if (next == from) {
    t_task = from;
    return;
  }
  t_task = next;
  from->context.switch_to(next != nullptr ? next->context : context_);
  // Whoever switched back here set t_task to this fiber.
}

void FiberScheduler::run() {
  // A launch from a work-item nests: its fiber's thread runs this loop and
  // then goes back to being that fiber.
  FiberScheduler* const outer_scheduler = t_scheduler;
  FiberTask* const outer_task = t_task;
  context_.adopt_current();
  t_scheduler = this;
  while (live_ > 0) {
    if (woken_pending_.load(std::memory_order_acquire)) take_woken(false);
    FiberTask* task = pop_ready();
    if (task == nullptr) {
      take_woken(true);
      continue;
    }
    t_task = task;
    context_.switch_to(task->context);
    t_task = nullptr;
  }
  t_scheduler = outer_scheduler;
  t_task = outer_task;
}

FiberTask* FiberScheduler::current() { return t_task; }

void FiberScheduler::block() {
  FiberTask* task = t_task;
  FiberScheduler* s = task->scheduler;
  s->yield_streak_ = 0;
  s->switch_away(task);
}

bool FiberScheduler::yield() {
  FiberTask* task = t_task;
  if (task == nullptr) return false;
  FiberScheduler* s = task->scheduler;
  if (s->woken_pending_.load(std::memory_order_acquire)) s->take_woken(false);
  if (s->ready_head_ == nullptr) return false;
  // Fibers that only spin on each other would keep the core from whatever
  // they wait for (the NIC engine, another work-group): once per round of
  // them the thread gives the core away.
  if (++s->yield_streak_ >= s->live_) {
    s->yield_streak_ = 0;
    sched_yield();
  }
  s->push_ready(task);
  s->switch_away(task);
  return true;
}

void FiberScheduler::wake(FiberTask* task) {
  FiberScheduler* s = task->scheduler;
  if (t_scheduler == s) {
    s->push_ready(task);
    return;
  }
  std::lock_guard<std::mutex> lock(s->woken_mu_);
  task->next = s->woken_;
  s->woken_ = task;
  s->woken_pending_.store(true, std::memory_order_release);
  s->woken_cv_.notify_one();
}

void FiberScheduler::wake_local(FiberTask* head, FiberTask* tail) {
  if (head == nullptr) return;
  tail->next = nullptr;
  if (ready_tail_ != nullptr) {
    ready_tail_->next = head;
  } else {
    ready_head_ = head;
  }
  ready_tail_ = tail;
}

void FiberScheduler::push_ready(FiberTask* task) {
  task->next = nullptr;
  if (ready_tail_ != nullptr) {
    ready_tail_->next = task;
  } else {
    ready_head_ = task;
  }
  ready_tail_ = task;
}

FiberTask* FiberScheduler::pop_ready() {
  FiberTask* task = ready_head_;
  if (task == nullptr) return nullptr;
  ready_head_ = task->next;
  if (ready_head_ == nullptr) ready_tail_ = nullptr;
  return task;
}

void FiberScheduler::take_woken(bool wait) {
  FiberTask* list;
  {
    std::unique_lock<std::mutex> lock(woken_mu_);
    if (wait) woken_cv_.wait(lock, [this] { return woken_ != nullptr; });
    list = woken_;
    woken_ = nullptr;
    woken_pending_.store(false, std::memory_order_relaxed);
  }
  // The list is newest first; reversing it keeps wake order.
  FiberTask* ordered = nullptr;
  while (list != nullptr) {
    FiberTask* next = list->next;
    list->next = ordered;
    ordered = list;
    list = next;
  }
  while (ordered != nullptr) {
    FiberTask* next = ordered->next;
    push_ready(ordered);
    ordered = next;
  }
}

}  // namespace xpufab::runtime
