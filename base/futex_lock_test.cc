#include "base/futex_lock.h"

#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace xpufab {
namespace base {
namespace {

// Threads that block in lock() and threads that poll with try_lock() (as callers that must not
// block do) share one plain counter: no increment may be lost, and the sleepers
// must all be woken for the threads to finish.
TEST(FutexLock, LockersAndPollersExcludeEachOther) {
  FutexLock mu;
  uint64_t counter = 0;
  constexpr int kThreads = 4, kEach = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        if (t % 2 == 0) {
          std::lock_guard<FutexLock> lock(mu);
          ++counter;
        } else {
          while (!mu.try_lock()) std::this_thread::yield();
          ++counter;
          mu.unlock();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(counter, uint64_t{kThreads} * kEach);
}

TEST(FutexLock, TryLockFailsWhileHeldAndSucceedsOnceReleased) {
  FutexLock mu;
  ASSERT_TRUE(mu.try_lock());
  bool other = true;
  std::thread([&] { other = mu.try_lock(); }).join();
  EXPECT_FALSE(other);
  mu.unlock();
  std::thread([&] {
    other = mu.try_lock();
    if (other) mu.unlock();
  }).join();
  EXPECT_TRUE(other);
}

// A holder that keeps the lock past the spin makes the waiter sleep on the futex; the unlock
// must wake it.
TEST(FutexLock, ASleepingWaiterIsWoken) {
  FutexLock mu;
  mu.lock();
  bool got = false;
  std::thread waiter([&] {
    std::lock_guard<FutexLock> lock(mu);
    got = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  mu.unlock();
  waiter.join();
  EXPECT_TRUE(got);
}

}  // namespace
}  // namespace base
}  // namespace xpufab
