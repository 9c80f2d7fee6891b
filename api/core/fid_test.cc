#include "api/core/fid.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace xpufab::core {
namespace {

TEST(FidRefsTest, BusyWhileDependentsLive) {
  FidRefs refs;
  ASSERT_EQ(refs.acquire(), 0);
  ASSERT_EQ(refs.acquire(), 0);
  EXPECT_EQ(refs.count(), 2);
  EXPECT_EQ(refs.try_close(), -FI_EBUSY);
  refs.release();
  EXPECT_EQ(refs.try_close(), -FI_EBUSY);
  refs.release();
  EXPECT_EQ(refs.try_close(), 0);
  EXPECT_EQ(refs.try_close(), -FI_EOPBADSTATE);
  EXPECT_EQ(refs.acquire(), -FI_EOPBADSTATE);
  refs.release();  // unbalanced: ignored
  EXPECT_EQ(refs.count(), 0);
}

TEST(FidRefsTest, ConcurrentAcquireAndCloseAgree) {
  for (int round = 0; round < 50; ++round) {
    FidRefs refs;
    std::atomic<int> acquired{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&] {
        if (refs.acquire() == 0) acquired++;
      });
    int closed = refs.try_close();
    for (auto& th : threads) th.join();
    if (closed == 0) {
      EXPECT_EQ(refs.acquire(), -FI_EOPBADSTATE);
    } else {
      EXPECT_EQ(closed, -FI_EBUSY);
      EXPECT_EQ(refs.count(), acquired.load());
    }
  }
}

}  // namespace
}  // namespace xpufab::core
