// group_barrier.h - the barrier behind every host XPU scope.
// Internal to device/runtime.
#ifndef XPUFAB_DEVICE_RUNTIME_GROUP_BARRIER_H_
#define XPUFAB_DEVICE_RUNTIME_GROUP_BARRIER_H_

#include <cstdint>
#include <mutex>

#include "device/runtime/fiber_scheduler.h"

namespace xpufab::runtime {

// Appends the running fiber to the waiter queue [*head, *tail] and blocks it
// until the phase completes; returns the value the completing member handed
// it. For barriers whose members are fibers of one scheduler.
inline uint64_t wait_in_queue(FiberTask** head, FiberTask** tail) {
  FiberTask* self = FiberScheduler::current();
  self->next = nullptr;
  if (*tail != nullptr) {
    (*tail)->next = self;
  } else {
    *head = self;
  }
  *tail = self;
  FiberScheduler::block();
  return self->wake_value;
}

// The barrier of a scope whose members are all fibers of one scheduler (a
// subgroup, a work-group, the device of a one-work-group launch), with the
// same contract as GroupBarrier below. Its members take turns on one
// thread, so it needs no lock: arriving is a count and a hand-off to the
// next runnable member, and the last to arrive moves every waiter to the
// ready queue at once. The fiber switches order every member's accesses,
// for ThreadSanitizer too (its fiber switches synchronize).
class LocalBarrier {
 public:
  explicit LocalBarrier(uint32_t members) : expected_(members) {}
  LocalBarrier(const LocalBarrier&) = delete;
  LocalBarrier& operator=(const LocalBarrier&) = delete;

  // As GroupBarrier::arrive_and_wait; only from a fiber of the members'
  // scheduler.
  uint64_t arrive_and_wait(bool is_source, uint64_t value) {
    if (is_source) value_ = value;
    if (++arrived_ == expected_) return complete_phase();
    return wait_in_queue(&head_, &tail_);
  }

  // As GroupBarrier::arrive_and_drop.
  void arrive_and_drop() {
    --expected_;
    if (arrived_ > 0 && arrived_ == expected_) complete_phase();
  }

  // Gives the barrier `members` members again, for the next launch; only
  // once every member of the last one has left.
  void rearm(uint32_t members) { expected_ = members; }

 private:
  uint64_t complete_phase() {
    const uint64_t result = value_;
    FiberTask* head = head_;
    FiberTask* tail = tail_;
    for (FiberTask* w = head; w != nullptr; w = w->next) w->wake_value = result;
    arrived_ = 0;
    value_ = 0;
    head_ = tail_ = nullptr;
    if (head != nullptr) head->scheduler->wake_local(head, tail);
    return result;
  }

  uint32_t expected_;         // members that have not left
  uint32_t arrived_ = 0;      // arrivals in the current phase
  uint64_t value_ = 0;        // the current phase's broadcast value
  FiberTask* head_ = nullptr; // blocked in the current phase, in arrival order
  FiberTask* tail_ = nullptr;
};

// A reusable barrier for a fixed set of work-item fibers that can also
// carry one value from a chosen member to all (a broadcast), and that
// members may leave for good. A member that must wait blocks its fiber, so
// its thread runs the other work-items of its group meanwhile; members may
// belong to different schedulers (device scope). The lock makes completing
// a phase a release by every member and leaving it an acquire, for other
// threads and for ThreadSanitizer alike.
class GroupBarrier {
 public:
  explicit GroupBarrier(uint32_t members) : expected_(members) {}
  GroupBarrier(const GroupBarrier&) = delete;
  GroupBarrier& operator=(const GroupBarrier&) = delete;

  // Waits until every remaining member has arrived at this phase. Returns
  // the value passed by the member that arrived with is_source set, or 0 if
  // none did (the source had left). At most one member per phase may set
  // is_source. Must be called on a fiber.
  uint64_t arrive_and_wait(bool is_source, uint64_t value) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t phase = phase_;
    if (is_source) value_[phase & 1] = value;
    if (++arrived_ == expected_) {
      FiberTask* waiters = complete_phase_locked();
      const uint64_t result = value_[phase & 1];
      lock.unlock();
      wake_all(waiters);
      return result;
    }
    FiberTask* self = FiberScheduler::current();
    self->next = waiters_;
    waiters_ = self;
    lock.unlock();
    // Only the completion of this phase wakes it; a wake that comes before
    // the block is kept by the scheduler until the fiber has switched out.
    FiberScheduler::block();
    lock.lock();
    // The slot of `phase` is cleared only when phase + 1 completes, which
    // needs this member to arrive again, so it still holds this value.
    return value_[phase & 1];
  }

  // Removes the calling member for good; a phase that was waiting only for
  // it completes.
  void arrive_and_drop() {
    std::unique_lock<std::mutex> lock(mu_);
    --expected_;
    FiberTask* waiters = nullptr;
    if (arrived_ > 0 && arrived_ == expected_) waiters = complete_phase_locked();
    lock.unlock();
    wake_all(waiters);
  }

  // As LocalBarrier::rearm.
  void rearm(uint32_t members) {
    std::lock_guard<std::mutex> lock(mu_);
    expected_ = members;
  }

 private:
  FiberTask* complete_phase_locked() {
    arrived_ = 0;
    ++phase_;
    value_[phase_ & 1] = 0;
    FiberTask* waiters = waiters_;
    waiters_ = nullptr;
    return waiters;
  }

  static void wake_all(FiberTask* waiters) {
    while (waiters != nullptr) {
      // A woken fiber may run (and arrive again) at once on its own thread.
      FiberTask* next = waiters->next;
      FiberScheduler::wake(waiters);
      waiters = next;
    }
  }

  std::mutex mu_;
  uint32_t expected_;             // guarded by mu_: members that have not left
  uint32_t arrived_ = 0;          // guarded by mu_: arrivals in the current phase
  uint64_t phase_ = 0;            // guarded by mu_: completed phases
  uint64_t value_[2] = {};        // guarded by mu_: broadcast value per phase parity
  FiberTask* waiters_ = nullptr;  // guarded by mu_: blocked in the current phase
};

// One thread's share of a barrier whose members are fibers of several
// threads (the device of a launch of several work-groups), with the
// contract of GroupBarrier. The members of each thread meet as in a
// LocalBarrier; the last of them to arrive then meets, in `across` (one
// member per thread), the last arrivals of the other threads, carrying the
// broadcast value if its thread's source arrived, and hands the outcome to
// its thread's waiters. Only one fiber per thread crosses threads, instead
// of every member taking a lock and being woken from another thread.
class ThreadShareBarrier {
 public:
  ThreadShareBarrier(uint32_t members, GroupBarrier* across) : expected_(members), across_(across) {}
  ThreadShareBarrier(const ThreadShareBarrier&) = delete;
  ThreadShareBarrier& operator=(const ThreadShareBarrier&) = delete;

  uint64_t arrive_and_wait(bool is_source, uint64_t value) {
    if (is_source) {
      has_source_ = true;
      value_ = value;
    }
    if (++arrived_ == expected_) return complete_phase();
    return wait_in_queue(&head_, &tail_);
  }

  // The last member of this thread to leave takes the thread out of
  // `across`; one whose leaving completes a phase meets the other threads
  // for the waiters first (it may block then).
  void arrive_and_drop() {
    if (--expected_ == 0) {
      across_->arrive_and_drop();
    } else if (arrived_ > 0 && arrived_ == expected_) {
      complete_phase();
    }
  }

  // As LocalBarrier::rearm; `across` is rearmed by its owner.
  void rearm(uint32_t members) { expected_ = members; }

 private:
  uint64_t complete_phase() {
    // This thread's other members all wait here, so the phase's state can
    // be taken before meeting the other threads.
    FiberTask* head = head_;
    FiberTask* tail = tail_;
    const bool has_source = has_source_;
    const uint64_t value = value_;
    arrived_ = 0;
    has_source_ = false;
    value_ = 0;
    head_ = tail_ = nullptr;
    const uint64_t result = across_->arrive_and_wait(has_source, value);
    for (FiberTask* w = head; w != nullptr; w = w->next) w->wake_value = result;
    if (head != nullptr) head->scheduler->wake_local(head, tail);
    return result;
  }

  uint32_t expected_;  // members of this thread that have not left
  uint32_t arrived_ = 0;
  bool has_source_ = false;  // the current phase's source is of this thread
  uint64_t value_ = 0;
  FiberTask* head_ = nullptr;  // blocked in the current phase, in arrival order
  FiberTask* tail_ = nullptr;
  GroupBarrier* across_;
};

}  // namespace xpufab::runtime

#endif  // XPUFAB_DEVICE_RUNTIME_GROUP_BARRIER_H_
