// group_barrier.h - the blocking barrier behind every host XPU scope.
// Internal to device/runtime.
#ifndef XPUFAB_DEVICE_RUNTIME_GROUP_BARRIER_H_
#define XPUFAB_DEVICE_RUNTIME_GROUP_BARRIER_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace xpufab::runtime {

// A reusable barrier for a fixed set of members that can also carry one
// value from a chosen member to all (a broadcast), and that members may
// leave for good. Built on a mutex and condition variable, so completing a
// phase is a release by every member and leaving it an acquire (visible to
// ThreadSanitizer), and waiters sleep instead of spinning: a host XPU has
// far more work-items than cores.
class GroupBarrier {
 public:
  explicit GroupBarrier(uint32_t members) : expected_(members) {}
  GroupBarrier(const GroupBarrier&) = delete;
  GroupBarrier& operator=(const GroupBarrier&) = delete;

  // Waits until every remaining member has arrived at this phase. Returns
  // the value passed by the member that arrived with is_source set, or 0 if
  // none did (the source had left). At most one member per phase may set
  // is_source.
  uint64_t arrive_and_wait(bool is_source, uint64_t value) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t phase = phase_;
    if (is_source) value_[phase & 1] = value;
    if (++arrived_ == expected_) {
      complete_phase_locked();
    } else {
      cv_.wait(lock, [&] { return phase_ != phase; });
    }
    // The slot of `phase` is cleared only when phase + 1 completes, which
    // needs this member to arrive again, so it still holds this value.
    return value_[phase & 1];
  }

  // Removes the calling member for good; a phase that was waiting only for
  // it completes.
  void arrive_and_drop() {
    std::lock_guard<std::mutex> lock(mu_);
    --expected_;
    if (arrived_ > 0 && arrived_ == expected_) complete_phase_locked();
  }

 private:
  void complete_phase_locked() {
    arrived_ = 0;
    ++phase_;
    value_[phase_ & 1] = 0;
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  uint32_t expected_;       // guarded by mu_: members that have not left
  uint32_t arrived_ = 0;    // guarded by mu_: arrivals in the current phase
  uint64_t phase_ = 0;      // guarded by mu_: completed phases
  uint64_t value_[2] = {};  // guarded by mu_: broadcast value per phase parity
};

}  // namespace xpufab::runtime

#endif  // XPUFAB_DEVICE_RUNTIME_GROUP_BARRIER_H_
