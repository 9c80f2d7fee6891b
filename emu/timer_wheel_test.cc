#include "emu/timer_wheel.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace xpufab {
namespace emu {
namespace {

using Fired = std::vector<std::pair<uint64_t, uint64_t>>;

Fired fire(TimerWheel* w, uint64_t now) {
  Fired out;
  w->fire(now, [](uint64_t, uint64_t) { return true; },
          [&](uint64_t when, uint64_t token) { out.emplace_back(when, token); });
  return out;
}

TEST(TimerWheel, FiresWhatIsDueInTimeThenArmingOrder) {
  TimerWheel w;
  const uint64_t t0 = 1000000000;
  w.add(t0 + 500, 1);
  w.add(t0 + 100, 2);
  w.add(t0 + 100, 3);
  w.add(t0 + 40000, 4);  // a later tick
  EXPECT_EQ(w.size(), 4u);
  EXPECT_TRUE(fire(&w, t0 + 99).empty());
  EXPECT_EQ(fire(&w, t0 + 100), (Fired{{t0 + 100, 2}, {t0 + 100, 3}}));
  EXPECT_EQ(fire(&w, t0 + 39999), (Fired{{t0 + 500, 1}}));
  EXPECT_EQ(fire(&w, t0 + 40000), (Fired{{t0 + 40000, 4}}));
  EXPECT_TRUE(w.empty());
}

TEST(TimerWheel, TimersBeyondTheSpanAndClockJumps) {
  TimerWheel w;
  const uint64_t t0 = 5000000000;
  fire(&w, t0);
  const uint64_t span = uint64_t{TimerWheel::kSlots} << TimerWheel::kTickShift;
  w.add(t0 + 3 * span, 1);  // beyond the wheel
  w.add(t0 + 10, 2);
  w.add(t0 + span - 1, 3);
  EXPECT_EQ(fire(&w, t0 + span), (Fired{{t0 + 10, 2}, {t0 + span - 1, 3}}));
  EXPECT_TRUE(fire(&w, t0 + 2 * span).empty());
  // A jump far past everything: each due timer once, in order.
  w.add(t0 + 2 * span + 7, 4);
  EXPECT_EQ(fire(&w, t0 + 100 * span), (Fired{{t0 + 2 * span + 7, 4}, {t0 + 3 * span, 1}}));
  EXPECT_TRUE(w.empty());
}

TEST(TimerWheel, ATimerArmedInThePastFiresAtTheNextCall) {
  TimerWheel w;
  const uint64_t t0 = 1u << 30;
  fire(&w, t0);
  w.add(t0 - 5000, 1);
  EXPECT_EQ(fire(&w, t0), (Fired{{t0 - 5000, 1}}));
}

TEST(TimerWheel, CallbacksMayArmTimers) {
  TimerWheel w;
  const uint64_t t0 = 1u << 30;
  w.add(t0, 1);
  Fired got;
  w.fire(t0, [](uint64_t, uint64_t) { return true; }, [&](uint64_t when, uint64_t token) {
    got.emplace_back(when, token);
    w.add(when + 20000, token + 1);
  });
  EXPECT_EQ(got, (Fired{{t0, 1}}));
  EXPECT_EQ(fire(&w, t0 + 20000), (Fired{{t0 + 20000, 2}}));
}

TEST(TimerWheel, DeadTimersAreDroppedUnfired) {
  TimerWheel w;
  const uint64_t t0 = 1u << 30;
  for (uint64_t k = 1; k <= 6; ++k) w.add(t0 + k, k);
  Fired got;
  w.fire(t0 + 10, [](uint64_t, uint64_t token) { return token % 2 == 0; },
         [&](uint64_t when, uint64_t token) { got.emplace_back(when, token); });
  EXPECT_EQ(got, (Fired{{t0 + 2, 2}, {t0 + 4, 4}, {t0 + 6, 6}}));
  EXPECT_TRUE(w.empty());
}

TEST(TimerWheel, KeepsTheEarliestTimeItHolds) {
  TimerWheel w;
  const uint64_t t0 = 1u << 30;
  EXPECT_EQ(w.earliest(), UINT64_MAX);
  w.add(t0 + 500000, 1);
  w.add(t0 + 90000, 2);
  EXPECT_EQ(w.earliest(), t0 + 90000);
  EXPECT_TRUE(fire(&w, t0 + 80000).empty());  // nothing due: the bound stays
  EXPECT_EQ(w.earliest(), t0 + 90000);
  EXPECT_EQ(fire(&w, t0 + 90000), (Fired{{t0 + 90000, 2}}));
  EXPECT_EQ(w.earliest(), t0 + 500000);
  EXPECT_EQ(fire(&w, t0 + 500000), (Fired{{t0 + 500000, 1}}));
  EXPECT_EQ(w.earliest(), UINT64_MAX);
}

TEST(TimerWheel, ATimerArmedBeforeTheEarliestStillFires) {
  TimerWheel w;
  const uint64_t t0 = 1u << 30;
  const uint64_t tick = uint64_t{1} << TimerWheel::kTickShift;
  w.add(t0 + 200 * tick, 1);
  fire(&w, t0);
  w.add(t0 + 100, 2);
  EXPECT_EQ(w.earliest(), t0 + 100);
  EXPECT_EQ(fire(&w, t0 + 100), (Fired{{t0 + 100, 2}}));
  EXPECT_EQ(w.earliest(), t0 + 200 * tick);
  // Passes up to the later timer fire nothing early.
  for (uint64_t t = t0 + tick; t < t0 + 200 * tick; t += 7 * tick) EXPECT_TRUE(fire(&w, t).empty());
  w.add(t0 + 150 * tick, 3);
  EXPECT_EQ(fire(&w, t0 + 200 * tick), (Fired{{t0 + 150 * tick, 3}, {t0 + 200 * tick, 1}}));
  EXPECT_TRUE(w.empty());
}

// Against a sorted reference: random timers, random fire times, nothing lost or early.
TEST(TimerWheel, MatchesAReferenceQueue) {
  std::mt19937_64 rng(7);
  TimerWheel w;
  std::vector<std::pair<uint64_t, uint64_t>> ref;
  uint64_t now = 1ull << 32;
  uint64_t token = 0;
  for (int round = 0; round < 2000; ++round) {
    for (int k = static_cast<int>(rng() % 4); k > 0; --k) {
      uint64_t d = rng() % 4 == 0 ? rng() % (uint64_t{100} << 20) : rng() % 200000;
      w.add(now + d, ++token);
      ref.emplace_back(now + d, token);
    }
    now += rng() % 30000;
    Fired got = fire(&w, now);
    Fired want;
    std::vector<std::pair<uint64_t, uint64_t>> left;
    for (const auto& r : ref) (r.first <= now ? want : left).push_back(r);
    std::stable_sort(want.begin(), want.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    ASSERT_EQ(got, want) << "round " << round;
    ref.swap(left);
    ASSERT_EQ(w.size(), ref.size());
  }
}

}  // namespace
}  // namespace emu
}  // namespace xpufab
