#include "emu/device_mutex.h"

#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace xpufab {
namespace emu {
namespace {

// Threads that block in lock() and threads that poll with try_lock() (as the engine thread and
// the progress callers do) share one plain counter: no increment may be lost, and the sleepers
// must all be woken for the threads to finish.
TEST(DeviceMutex, LockersAndPollersExcludeEachOther) {
  DeviceMutex mu;
  uint64_t counter = 0;
  constexpr int kThreads = 4, kEach = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        if (t % 2 == 0) {
          std::lock_guard<DeviceMutex> lock(mu);
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

TEST(DeviceMutex, TryLockFailsWhileHeldAndEveryAcquisitionClearsTheQuietMark) {
  DeviceMutex mu;
  mu.quiet_until_ns.store(123);
  ASSERT_TRUE(mu.try_lock());
  EXPECT_EQ(mu.quiet_until_ns.load(), 0u);
  bool other = true;
  std::thread([&] { other = mu.try_lock(); }).join();
  EXPECT_FALSE(other);
  mu.quiet_until_ns.store(456);
  mu.unlock();
  mu.lock();
  EXPECT_EQ(mu.quiet_until_ns.load(), 0u);
  mu.unlock();
}

// A holder that keeps the lock past the spin makes the waiter sleep on the futex; the unlock
// must wake it.
TEST(DeviceMutex, ASleepingWaiterIsWoken) {
  DeviceMutex mu;
  mu.lock();
  bool got = false;
  std::thread waiter([&] {
    std::lock_guard<DeviceMutex> lock(mu);
    got = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  mu.unlock();
  waiter.join();
  EXPECT_TRUE(got);
}

}  // namespace
}  // namespace emu
}  // namespace xpufab
