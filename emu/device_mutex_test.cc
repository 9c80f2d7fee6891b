#include "emu/device_mutex.h"

#include <thread>

#include <gtest/gtest.h>

namespace xpufab {
namespace emu {
namespace {

// The lock itself is base::FutexLock (base/futex_lock_test.cc); this is what the device adds.
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

}  // namespace
}  // namespace emu
}  // namespace xpufab
