// The engine's timers: (when, token) pairs in a hashed wheel of 1,024 ticks of 16.384 us (a
// span of 16.7 ms, which covers every retransmission timeout a shared-memory path measures),
// with a heap for timers beyond the span. Arming costs an append and firing looks only at the
// ticks that have passed, where a heap paid a logarithmic push and pop per transmission (most
// timers are stale by the time they are due: their op was answered). Due timers fire in order
// of their time, then of arming. The wheel keeps the earliest time it holds, so a pass with
// nothing due (nearly every pass) costs one compare, and a bit per slot, so firing and finding
// the next earliest time skip empty ticks 64 at a time.
//
// Internal to emu/ (device_impl.h); not thread-safe (the device's mu_).
#ifndef XPUFAB_EMU_TIMER_WHEEL_H_
#define XPUFAB_EMU_TIMER_WHEEL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
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
      const uint32_t i = static_cast<uint32_t>(tick & (kSlots - 1));
      slots_[i].push_back(Entry{when, seq_++, token});
      busy_[i >> 6] |= uint64_t{1} << (i & 63);
    }
    ++size_;
    if (when < earliest_) earliest_ = when;
  }

  // The earliest time of the timers held (stale ones count until they fall due).
  uint64_t earliest() const { return earliest_; }

  // Calls fire(when, token) for each timer due at `now` for which live(when, token) holds,
  // removing every due one first (dead ones silently: most are timers of answered ops); timers
  // armed by the callback are never due at the same `now` unless armed in the past (then at the
  // next call).
  template <class L, class F>
  void fire(uint64_t now, L&& live, F&& fire_one) {
    if (now < earliest_) return;
    due_.clear();
    uint64_t now_tick = now >> kTickShift;
    // Every slot between the cursor and the earliest time's tick is empty.
    uint64_t first = std::max(cursor_, earliest_ >> kTickShift);
    // A clock that jumped past the whole wheel visits each slot once.
    if (now_tick >= first + kSlots) first = now_tick - kSlots + 1;
    for (uint64_t t = next_busy(first, now_tick + 1); t <= now_tick; t = next_busy(t + 1, now_tick + 1)) {
      const uint32_t slot = static_cast<uint32_t>(t & (kSlots - 1));
      std::vector<Entry>& s = slots_[slot];
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
      if (keep == 0) busy_[slot >> 6] &= ~(uint64_t{1} << (slot & 63));
    }
    cursor_ = std::max(cursor_, now_tick);
    while (!far_.empty() && far_.top().first <= now) {
      --size_;
      if (live(far_.top().first, far_.top().second)) {
        due_.push_back(Entry{far_.top().first, seq_++, far_.top().second});
      }
      far_.pop();
    }
    find_earliest();
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
  // The first tick in [from, to) whose slot holds timers, else `to`; to - from <= kSlots.
  uint64_t next_busy(uint64_t from, uint64_t to) const {
    while (from < to) {
      const uint32_t i = static_cast<uint32_t>(from & (kSlots - 1));
      const uint64_t w = busy_[i >> 6] >> (i & 63);
      if (w != 0) return std::min(from + static_cast<uint64_t>(__builtin_ctzll(w)), to);
      from += 64 - (i & 63);
    }
    return to;
  }

  // After the due timers left: the earliest time held. A slot holds timers of one tick only
  // (those of [cursor_, cursor_ + kSlots)), so the first busy slot from the cursor has it.
  void find_earliest() {
    earliest_ = std::numeric_limits<uint64_t>::max();
    if (size_ == 0) return;
    if (!far_.empty()) earliest_ = far_.top().first;
    const uint64_t t = next_busy(cursor_, cursor_ + kSlots);
    if (t == cursor_ + kSlots) return;
    for (const Entry& e : slots_[t & (kSlots - 1)]) earliest_ = std::min(earliest_, e.when);
  }

  using Far = std::pair<uint64_t, uint64_t>;
  std::vector<std::vector<Entry>> slots_;
  std::priority_queue<Far, std::vector<Far>, std::greater<Far>> far_;
  std::vector<Entry> due_, firing_;
  uint64_t cursor_ = 0;  // the tick fire() last reached
  uint64_t seq_ = 0;
  size_t size_ = 0;
  uint64_t earliest_ = std::numeric_limits<uint64_t>::max();
  uint64_t busy_[kSlots / 64] = {};  // a bit per slot that holds timers
};

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_TIMER_WHEEL_H_
