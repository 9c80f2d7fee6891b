#include "tools/oob/oob.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <thread>
#include <vector>

namespace xpufab {
namespace oob {
namespace {

TEST(Oob, AllgatherAndBarrierAmongFourProcesses) {
  Options so;
  so.server = true;
  so.port = 0;
  so.size = 4;
  so.timeout_ms = 10000;
  Session server;
  ASSERT_EQ(server.open(so), 0);
  ASSERT_NE(server.port(), 0);
  std::vector<std::vector<std::string>> got(4);
  std::vector<int> ranks(4, -1), rcs(4, -1);
  std::vector<std::thread> ts;
  for (int i = 1; i < 4; ++i) {
    ts.emplace_back([&, i] {
      Options co;
      co.port = server.port();
      co.timeout_ms = 10000;
      Session c;
      int rc = c.open(co);
      if (rc == 0) rc = c.allgather("blob-" + std::to_string(c.rank()), &got[static_cast<size_t>(c.rank())]);
      if (rc == 0) rc = c.barrier();
      ranks[static_cast<size_t>(i)] = c.rank();
      rcs[static_cast<size_t>(i)] = rc;
    });
  }
  ASSERT_EQ(server.allgather("blob-0", &got[0]), 0);
  ASSERT_EQ(server.barrier(), 0);
  for (auto& t : ts) t.join();
  for (int i = 1; i < 4; ++i) EXPECT_EQ(rcs[static_cast<size_t>(i)], 0);
  for (const auto& g : got) {
    ASSERT_EQ(g.size(), 4u);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(g[static_cast<size_t>(r)], "blob-" + std::to_string(r));
  }
}

TEST(Oob, ClientGivesUpWithoutAServer) {
  Options so;
  so.server = true;
  so.port = 0;
  Session probe;
  ASSERT_EQ(probe.open(so), 0);
  uint16_t port = probe.port();
  probe.close();  // nothing listens there now
  Options co;
  co.port = port;
  co.timeout_ms = 300;
  Session c;
  EXPECT_EQ(c.open(co), -ETIMEDOUT);
  std::vector<std::string> all;
  EXPECT_EQ(c.allgather("x", &all), -EINVAL);
}

}  // namespace
}  // namespace oob
}  // namespace xpufab
