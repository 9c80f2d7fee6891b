// The engine's timers: (when, token) pairs in a hashed wheel of 1,024 ticks of 16.384 us (a
// span of 16.7 ms, which covers every retransmission timeout a shared-memory path measures),
// with a heap for timers beyond the span. Arming costs an append and firing looks only at the
// ticks that have passed, where a heap paid a logarithmic push and pop per transmission (most
// timers are stale by the time they are due: their op was answered). Due timers fire in order
// of their time, then of arming.
//
// Internal to emu/ (device_impl.h); not thread-safe (the device's mu_).
#ifndef XPUFAB_EMU_TIMER_WHEEL_H_
#define XPUFAB_EMU_TIMER_WHEEL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

namespace xpufab {
namespace emu {

class TimerWheel {
 public:
  static constexpr int kTickShift = 14;  // ns per tick: 16,384
  static constexpr uint32_t kSlots = 1024;

  // Room for a few timers per tick up front, so that arming does not allocate during the first
  // lap of the wheel.
  TimerWheel() : slots_(kSlots) {
    for (std::vector<Entry>& s : slots_) s.reserve(4);
  }

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

  void add(uint64_t when, uint64_t token) {
    uint64_t tick = when >> kTickShift;
    if (tick < cursor_) tick = cursor_;  // already due: seen at the next fire()
    if (tick - cursor_ >= kSlots) {
      far_.emplace(when, token);
    } else {
      slots_[tick & (kSlots - 1)].push_back(Entry{when, seq_++, token});
    }
    ++size_;
  }

  // Calls fire(when, token) for each timer due at `now` for which live(when, token) holds,
  // removing every due one first (dead ones silently: most are timers of answered ops); timers
  // armed by the callback are never due at the same `now` unless armed in the past (then at the
  // next call).
  template <class L, class F>
  void fire(uint64_t now, L&& live, F&& fire_one) {
    if (size_ == 0) return;
    due_.clear();
    uint64_t now_tick = now >> kTickShift;
    uint64_t first = cursor_;
    // A clock that jumped past the whole wheel visits each slot once.
    if (now_tick >= first + kSlots) first = now_tick - kSlots + 1;
    for (uint64_t t = first; t <= now_tick; ++t) {
      std::vector<Entry>& s = slots_[t & (kSlots - 1)];
      if (s.empty()) continue;
      size_t keep = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i].when <= now) {
          --size_;
          if (live(s[i].when, s[i].token)) due_.push_back(s[i]);
        } else {
          s[keep++] = s[i];
        }
      }
      s.resize(keep);
    }
    cursor_ = std::max(cursor_, now_tick);
    while (!far_.empty() && far_.top().first <= now) {
      --size_;
      if (live(far_.top().first, far_.top().second)) {
        due_.push_back(Entry{far_.top().first, seq_++, far_.top().second});
      }
      far_.pop();
    }
    if (due_.size() > 1) {
      std::sort(due_.begin(), due_.end(), [](const Entry& a, const Entry& b) {
        return a.when != b.when ? a.when < b.when : a.seq < b.seq;
      });
    }
    // The callback may arm timers (never into due_), so iterate a stable copy.
    firing_.swap(due_);
    for (const Entry& e : firing_) fire_one(e.when, e.token);
    firing_.clear();
  }

 private:
  struct Entry {
    uint64_t when;
    uint64_t seq;  // arming order, for ties
    uint64_t token;
  };
  using Far = std::pair<uint64_t, uint64_t>;
  std::vector<std::vector<Entry>> slots_;
  std::priority_queue<Far, std::vector<Far>, std::greater<Far>> far_;
  std::vector<Entry> due_, firing_;
  uint64_t cursor_ = 0;  // the tick fire() last reached
  uint64_t seq_ = 0;
  size_t size_ = 0;
};

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_TIMER_WHEEL_H_
