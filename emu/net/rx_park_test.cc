#include "emu/net/rx_park.h"

#include <gtest/gtest.h>

namespace xpufab {
namespace emu {
namespace net {
namespace {

constexpr uint64_t kUs = 1000;
constexpr uint64_t kT0 = 1000000000;  // a clock reading far from zero

TEST(RxPark, ParksOnlyAfterARecentPoll) {
  RxPark p(200 * kUs, 4000 * kUs);
  EXPECT_EQ(p.next(kT0, 0, false), 0u);                    // nobody polls
  EXPECT_EQ(p.next(kT0, kT0 - 300 * kUs, false), 0u);      // not within park_ns
  EXPECT_EQ(p.next(kT0, kT0 - 100 * kUs, false), 200 * kUs);
  EXPECT_EQ(p.next(kT0, kT0 + 500, false), 200 * kUs);     // a stamp a little ahead is now
}

// Timed-out parks double up to the maximum while the latest poll came within it, even after a
// pause longer than park_ns; a later pause longer than the maximum ends the renewal.
TEST(RxPark, TimedOutParksDoubleWhilePollsComeWithinTheMaximum) {
  RxPark p(200 * kUs, 1000 * kUs);
  uint64_t now = kT0;
  ASSERT_EQ(p.next(now, now, false), 200 * kUs);
  const uint64_t expect[] = {400 * kUs, 800 * kUs, 1000 * kUs, 1000 * kUs};
  for (uint64_t want : expect) {
    p.ended(false, 0);
    now += 2 * 1000 * kUs;
    EXPECT_EQ(p.next(now, now - 900 * kUs, false), want);  // paused longer than park_ns
  }
  p.ended(false, 0);
  now += 5 * 1000 * kUs;
  EXPECT_EQ(p.next(now, now - 1500 * kUs, false), 0u);
  // The next poll starts short again.
  EXPECT_EQ(p.next(now, now, false), 200 * kUs);
}

// Packets waiting while nobody polled within park_ns end a renewal at once: the thread hands
// them on. With a recent poll it parks still (the poller takes them).
TEST(RxPark, WaitingPacketsWithoutARecentPollEndTheRenewal) {
  RxPark p(200 * kUs, 4000 * kUs);
  ASSERT_EQ(p.next(kT0, kT0, false), 200 * kUs);
  p.ended(false, 0);
  EXPECT_EQ(p.next(kT0 + 1000 * kUs, kT0 + 500 * kUs, true), 0u);
  ASSERT_EQ(p.next(kT0 + 2000 * kUs, kT0 + 2000 * kUs, true), 200 * kUs);
}

// A park woken early (the poller said it stopped) starts the next one short; a larger bound
// (an engine thread that always says so) lets timed-out parks grow past the thread's own.
TEST(RxPark, WokenParksStartShortAndALargerBoundGrowsFurther) {
  RxPark p(200 * kUs, 400 * kUs);
  uint64_t now = kT0;
  ASSERT_EQ(p.next(now, now, false), 200 * kUs);
  p.ended(false, 0);
  ASSERT_EQ(p.next(now, now, false), 400 * kUs);
  p.ended(true, 0);
  EXPECT_EQ(p.next(now, now, false), 200 * kUs);
  for (uint64_t want : {400 * kUs, 800 * kUs, 1600 * kUs, 1600 * kUs}) {
    p.ended(false, 1600 * kUs);
    EXPECT_EQ(p.next(now, now, false), want);
  }
}

// Where an engine thread covers the wire (set_first), a run of parks starts long: at the start,
// after a woken park and after a lapse. The recent-poll window stays park_ns.
TEST(RxPark, ASetFirstParkStartsEachRunLong) {
  RxPark p(200 * kUs, 4000 * kUs);
  p.set_first(4000 * kUs);
  uint64_t now = kT0;
  EXPECT_EQ(p.next(now, now - 300 * kUs, false), 0u);  // not within park_ns
  EXPECT_EQ(p.next(now, now, false), 4000 * kUs);
  p.ended(false, 256000 * kUs);
  EXPECT_EQ(p.next(now, now, false), 8000 * kUs);
  p.ended(true, 256000 * kUs);
  EXPECT_EQ(p.next(now, now, false), 4000 * kUs);
  p.ended(false, 256000 * kUs);
  now += 10000 * kUs;
  EXPECT_EQ(p.next(now, now - 9000 * kUs, false), 0u);  // polls lapsed: the run ends
  EXPECT_EQ(p.next(now, now, false), 4000 * kUs);
  // Shorter than park_ns means park_ns; 0 goes back to it.
  p.set_first(100 * kUs);
  p.ended(true, 0);
  EXPECT_EQ(p.next(now, now, false), 200 * kUs);
}

}  // namespace
}  // namespace net
}  // namespace emu
}  // namespace xpufab
