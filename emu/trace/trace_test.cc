#include "emu/trace/trace.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace xpufab {
namespace emu {
namespace {

TraceEvent ev(TraceKind k, uint64_t t, uint32_t qpn) {
  TraceEvent e;
  e.kind = k;
  e.t_ns = t;
  e.qpn = qpn;
  return e;
}

TEST(Trace, TextIsOneLinePerEventWithoutTimes) {
  Trace t("dev0");
  TraceEvent w = ev(TraceKind::kWqeFetch, 100, 3);
  w.a = 2;
  w.slot = 5;
  w.len = 64;
  t.add(w);
  TraceEvent c = ev(TraceKind::kCqe, 5000, 3);
  c.a = 1;
  c.b = 2;
  c.status = 5;
  t.add(c);
  EXPECT_EQ(t.text(), "wqe qp=3 slot=5 op=write len=64\ncqe sq qp=3 slot=0 op=write status=BAD_LKEY len=0\n");
}

TEST(Trace, CapacityKeepsTheFirstEventsAndCountsTheRest) {
  Trace t("d", 2);
  for (int i = 0; i < 5; ++i) t.add(ev(TraceKind::kDoorbell, static_cast<uint64_t>(i), 1));
  EXPECT_EQ(t.events().size(), 2u);
  EXPECT_EQ(t.lost(), 3u);
  EXPECT_NE(t.text().find("lost 3 events"), std::string::npos);
}

TEST(Trace, JsonHasTraceEventsWithMicrosecondTimes) {
  Trace t("efa_emu0");
  t.add(ev(TraceKind::kPacketTx, 1000, 1));
  t.add(ev(TraceKind::kPacketRx, 3500, 2));
  std::string j = t.json();
  EXPECT_EQ(j.find("{\"displayTimeUnit\":\"ns\",\"traceEvents\":["), 0u);
  EXPECT_NE(j.find("\"name\":\"efa_emu0\""), std::string::npos);
  EXPECT_NE(j.find("\"name\":\"pkt_rx\",\"cat\":\"emu\",\"ph\":\"i\",\"s\":\"t\",\"ts\":2.500,\"pid\":1,\"tid\":2"),
            std::string::npos);
  EXPECT_EQ(j.substr(j.size() - 4), "\n]}\n");
  // Balanced braces/brackets: a cheap well-formedness check.
  int depth = 0;
  for (char ch : j) {
    if (ch == '{' || ch == '[') ++depth;
    if (ch == '}' || ch == ']') --depth;
    ASSERT_GE(depth, 0);
  }
  EXPECT_EQ(depth, 0);
}

TEST(Trace, WritesBothFiles) {
  Trace t("devx");
  t.add(ev(TraceKind::kDiag, 1, 4));
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string prefix = std::string(dir ? dir : "/tmp") + "/tr";
  ASSERT_EQ(t.write_files(prefix), 0);
  std::ifstream txt(prefix + ".devx.txt");
  std::stringstream ss;
  ss << txt.rdbuf();
  EXPECT_EQ(ss.str(), "diag stale_wqe qp=4 slot=0\n");
  EXPECT_TRUE(std::ifstream(prefix + ".devx.json").good());
  EXPECT_EQ(t.write_files("/nonexistent/dir/p"), -ENOENT);
}

}  // namespace
}  // namespace emu
}  // namespace xpufab
