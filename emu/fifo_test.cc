#include "emu/fifo.h"

#include <deque>
#include <random>

#include <gtest/gtest.h>

namespace xpufab {
namespace emu {
namespace {

TEST(Fifo, KeepsOrderAcrossWrapsAndGrowth) {
  Fifo<int> f;
  std::deque<int> model;
  std::mt19937 rng(7);
  int next = 0;
  // Queue lengths that rise past several capacities and fall to empty, so that the ring wraps
  // at every size and grows with its head in the middle of the slots.
  for (int round = 0; round < 20000; ++round) {
    const bool push = model.empty() || rng() % 100 < (round % 4000 < 2000 ? 60u : 40u);
    if (push) {
      f.push_back(next);
      model.push_back(next++);
    } else {
      ASSERT_EQ(f.front(), model.front());
      f.pop_front();
      model.pop_front();
    }
    ASSERT_EQ(f.size(), model.size());
    ASSERT_EQ(f.empty(), model.empty());
    if (round % 97 == 0) {
      for (size_t i = 0; i < model.size(); ++i) ASSERT_EQ(f[i], model[i]) << i;
    }
  }
  EXPECT_GT(next, 1000);
}

TEST(Fifo, ClearEmptiesAndStaysUsable) {
  Fifo<std::pair<int, int>> f;
  for (int i = 0; i < 40; ++i) f.push_back({i, -i});
  f.pop_front();
  f.clear();
  EXPECT_TRUE(f.empty());
  f.push_back({5, 6});
  EXPECT_EQ(f.front().first, 5);
  EXPECT_EQ(f[0].second, 6);
  EXPECT_EQ(f.size(), 1u);
}

}  // namespace
}  // namespace emu
}  // namespace xpufab
