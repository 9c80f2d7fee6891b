#include "emu/faults/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "device/efa_io_defs.h"

namespace xpufab {
namespace emu {
namespace faults {
namespace {

TEST(PlanParse, AllKeys) {
  PlanSpec s;
  std::string err;
  ASSERT_EQ(parse_plan("seed=42; stream=9; drop=0.1; dup=5%; corrupt=0.01; reorder=0.2; window=4;"
                       "delay_us=10; jitter_us=5; delay_p=0.5; stall_us=100; stall_p=0.25;"
                       "cq_delay_us=7; cq_delay_p=1;"
                       "fail=op:write+read,qp:3,size:64-4096,nth:2,status:BAD_LKEY;"
                       "fail=op:send,every:3,status:RNR;"
                       "kill_peer=fe80::1@100; partition=fe80::1,fe80::2@10-20",
                       &s, &err),
            0)
      << err;
  EXPECT_EQ(s.seed, 42u);
  EXPECT_TRUE(s.has_stream);
  EXPECT_EQ(s.stream, 9u);
  EXPECT_DOUBLE_EQ(s.drop, 0.1);
  EXPECT_DOUBLE_EQ(s.dup, 0.05);
  EXPECT_EQ(s.window, 4u);
  EXPECT_EQ(s.jitter_us, 5u);
  EXPECT_EQ(s.stall_us, 100u);
  ASSERT_EQ(s.fails.size(), 2u);
  EXPECT_EQ(s.fails[0].ops, kOpWrite | kOpRead);
  EXPECT_EQ(s.fails[0].qpn, 3u);
  EXPECT_EQ(s.fails[0].min_size, 64u);
  EXPECT_EQ(s.fails[0].max_size, 4096u);
  EXPECT_EQ(s.fails[0].nth, 2u);
  EXPECT_EQ(s.fails[0].status, EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY);
  EXPECT_EQ(s.fails[1].every, 3u);
  EXPECT_EQ(s.fails[1].status, EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR);
  ASSERT_EQ(s.peers.size(), 2u);
  EXPECT_FALSE(s.peers[0].pair);
  EXPECT_EQ(s.peers[0].from_ms, 100u);
  EXPECT_TRUE(s.peers[1].pair);
  EXPECT_EQ(s.peers[1].to_ms, 20u);
  EXPECT_EQ(s.peers[1].b[15], 2);
  EXPECT_TRUE(s.lossy());
}

TEST(PlanParse, FileSyntaxCommentsAndNewlines) {
  PlanSpec s;
  std::string err;
  ASSERT_EQ(parse_plan("# a plan\nseed=3\n\ndrop=10%  # lose some\n", &s, &err), 0) << err;
  EXPECT_EQ(s.seed, 3u);
  EXPECT_DOUBLE_EQ(s.drop, 0.1);
}

struct Bad {
  const char* text;
  const char* names;  // must appear in the error
};

TEST(PlanParse, RejectsBadInputNamingTheItem) {
  const Bad bad[] = {
      {"bogus=1", "bogus"},
      {"drop=1.5", "drop=1.5"},
      {"drop=-0.1", "drop"},
      {"drop=abc", "drop"},
      {"drop=0.1;drop=0.2", "given twice"},
      {"seed=12x", "seed"},
      {"stream=-1", "stream"},
      {"window=4", "needs 'reorder'"},
      {"jitter_us=4", "needs 'delay_us'"},
      {"reorder=0.1;window=0", "window"},
      {"fail=op:write", "status"},
      {"fail=op:fly,status:RNR", "op"},
      {"fail=status:NOPE", "status"},
      {"fail=status:OK", "status"},
      {"fail=qp:0,status:RNR", "qp"},
      {"fail=nth:2,every:3,status:RNR", "every"},
      {"fail=size:9-3,status:RNR", "size"},
      {"fail=colour:red,status:RNR", "colour"},
      {"kill_peer=fe80::1", "kill_peer"},
      {"kill_peer=notagid@5", "GID"},
      {"partition=fe80::1@1-2", "two GIDs"},
      {"partition=fe80::1,fe80::2@5-1", "FROM"},
      {"drop", "key=value"},
  };
  for (const Bad& b : bad) {
    PlanSpec s;
    std::string err;
    EXPECT_EQ(parse_plan(b.text, &s, &err), -EINVAL) << b.text;
    EXPECT_NE(err.find(b.names), std::string::npos) << b.text << " -> " << err;
  }
}

TEST(PlanParse, StatusNames) {
  EXPECT_EQ(parse_status("RNR"), EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR);
  EXPECT_EQ(parse_status("remote_error_rnr"), EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR);
  EXPECT_EQ(parse_status("UNRESP_REMOTE"), EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE);
  EXPECT_EQ(parse_status("UNREACH_REMOTE"), EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE);
  EXPECT_EQ(parse_status("EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY"), EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY);
  EXPECT_EQ(parse_status("BAD_LENGTH"), EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH);
  EXPECT_EQ(parse_status("REMOTE_ERROR_BAD_LENGTH"), EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_LENGTH);
  EXPECT_EQ(parse_status("ABORT"), EFA_IO_COMP_STATUS_REMOTE_ERROR_ABORT);
  EXPECT_EQ(parse_status("18"), EFA_IO_COMP_STATUS_REMOTE_ERROR_FEATURE_MISMATCH);
  EXPECT_EQ(parse_status("17"), -1);
  EXPECT_EQ(parse_status("SOMETHING"), -1);
  EXPECT_STREQ(status_name(EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY), "BAD_LKEY");
}

TEST(PlanParse, Gids) {
  GidBytes g;
  ASSERT_TRUE(parse_gid("fe80::2:6500:1", &g));
  EXPECT_EQ(g[0], 0xfe);
  EXPECT_EQ(g[15], 1);
  EXPECT_EQ(gid_text(g), "fe80::2:6500:1");
  ASSERT_TRUE(parse_gid("fe800000000000000000000000000001", &g));
  EXPECT_EQ(g[15], 1);
  EXPECT_FALSE(parse_gid("fe80::zz", &g));
  EXPECT_FALSE(parse_gid("fe80000000000000000000000000000g", &g));
}

TEST(PlanEnv, ReadsVariableAndFile) {
  PlanSpec s;
  bool present = true;
  std::string err;
  unsetenv("FI_EFA_EMU_FAULTS");
  ASSERT_EQ(plan_from_env(&s, &present, &err), 0);
  EXPECT_FALSE(present);
  setenv("FI_EFA_EMU_FAULTS", "seed=9;dup=0.5", 1);
  ASSERT_EQ(plan_from_env(&s, &present, &err), 0) << err;
  EXPECT_TRUE(present);
  EXPECT_EQ(s.seed, 9u);
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/plan.txt";
  {
    std::ofstream f(path);
    f << "seed=11\ndrop=0.25\n";
  }
  setenv("FI_EFA_EMU_FAULTS", ("@" + path).c_str(), 1);
  ASSERT_EQ(plan_from_env(&s, &present, &err), 0) << err;
  EXPECT_EQ(s.seed, 11u);
  EXPECT_DOUBLE_EQ(s.drop, 0.25);
  setenv("FI_EFA_EMU_FAULTS", "@/nonexistent/plan", 1);
  EXPECT_EQ(plan_from_env(&s, &present, &err), -EINVAL);
  EXPECT_NE(err.find("/nonexistent/plan"), std::string::npos);
  unsetenv("FI_EFA_EMU_FAULTS");
}

FaultContext wqe_ctx(uint8_t op, uint32_t qpn, uint32_t size) {
  FaultContext c{FaultPoint::kWqeFetch, qpn, 0, op, false, 1};
  c.size = size;
  return c;
}

TEST(PlanDecide, FailRulesCountMatches) {
  std::unique_ptr<FaultPlan> p;
  std::string err;
  ASSERT_EQ(make_plan("fail=op:write,qp:3,size:>=100,nth:2,status:BAD_LKEY;fail=op:send,every:3,status:RNR",
                      &p, &err),
            0)
      << err;
  // Non-matching WQEs do not advance the count.
  EXPECT_EQ(p->at(wqe_ctx(EFA_IO_RDMA_WRITE, 4, 200)).action, FaultAction::kPass);
  EXPECT_EQ(p->at(wqe_ctx(EFA_IO_RDMA_WRITE, 3, 50)).action, FaultAction::kPass);
  EXPECT_EQ(p->at(wqe_ctx(EFA_IO_RDMA_READ, 3, 200)).action, FaultAction::kPass);
  EXPECT_EQ(p->at(wqe_ctx(EFA_IO_RDMA_WRITE, 3, 200)).action, FaultAction::kPass);  // 1st
  FaultDecision d = p->at(wqe_ctx(EFA_IO_RDMA_WRITE, 3, 200));                       // 2nd
  EXPECT_EQ(d.action, FaultAction::kFail);
  EXPECT_EQ(d.status, EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY);
  EXPECT_EQ(p->at(wqe_ctx(EFA_IO_RDMA_WRITE, 3, 200)).action, FaultAction::kPass);  // 3rd
  int fails = 0;
  for (int i = 0; i < 9; ++i) fails += p->at(wqe_ctx(EFA_IO_SEND, 1, 8)).action == FaultAction::kFail;
  EXPECT_EQ(fails, 3);
  EXPECT_EQ(p->injected(), 4u);
}

TEST(PlanDecide, SameSeedSameDecisions) {
  auto run = [](const char* text) {
    std::unique_ptr<FaultPlan> p;
    std::string err;
    EXPECT_EQ(make_plan(text, &p, &err), 0) << err;
    std::string out;
    FaultContext c{FaultPoint::kPacketIn, 1, 0, 0, false, 0};
    for (int i = 0; i < 2000; ++i) {
      FaultDecision d = p->at(c);
      out += static_cast<char>('0' + static_cast<int>(d.action));
    }
    return out;
  };
  const char* plan = "seed=5;drop=0.1;dup=0.1;corrupt=0.05;reorder=0.1";
  std::string a = run(plan), b = run(plan);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, run("seed=6;drop=0.1;dup=0.1;corrupt=0.05;reorder=0.1"));
  // Roughly the asked rates (2000 draws; drop 10% -> 200 +- 60).
  size_t drops = std::count(a.begin(), a.end(), '0' + static_cast<int>(FaultAction::kDrop));
  EXPECT_GT(drops, 140u);
  EXPECT_LT(drops, 260u);
}

// The stream stands in for the process id: with it, two devices of one name draw the same faults
// whatever their processes; without it, their processes tell them apart.
TEST(PlanDecide, StreamStandsForTheProcess) {
  auto draws = [](const char* text, uint64_t process) {
    std::unique_ptr<FaultPlan> p;
    std::string err;
    EXPECT_EQ(make_plan(text, &p, &err), 0) << err;
    p->personalize("efa_emu0", process);
    std::string out;
    FaultContext c{FaultPoint::kPacketIn, 1, 0, 0, false, 0};
    for (int i = 0; i < 200; ++i) out += static_cast<char>('0' + static_cast<int>(p->at(c).action));
    return out;
  };
  const char* by_process = "seed=5;drop=0.2;dup=0.2";
  EXPECT_NE(draws(by_process, 100), draws(by_process, 200));
  const char* streamed = "seed=5;stream=7;drop=0.2;dup=0.2";
  EXPECT_EQ(draws(streamed, 100), draws(streamed, 200));
  EXPECT_EQ(draws(streamed, 100), draws(by_process, 7));  // the stream is what the PID would be
  EXPECT_NE(draws(streamed, 100), draws("seed=5;stream=8;drop=0.2;dup=0.2", 100));
}

TEST(PlanDecide, KillAndPartitionWindows) {
  std::unique_ptr<FaultPlan> p;
  std::string err;
  ASSERT_EQ(make_plan("kill_peer=fe80::9@10;partition=fe80::1,fe80::2@5-8", &p, &err), 0) << err;
  auto pkt = [](const char* local, const char* peer, uint64_t ms) {
    FaultContext c{FaultPoint::kPacketOut, 1, 0, 0, false, 0};
    c.has_peer = true;
    parse_gid(local, &c.local);
    parse_gid(peer, &c.peer);
    c.now_ns = 1000000000ull + ms * 1000000;
    return c;
  };
  EXPECT_EQ(p->at(pkt("fe80::1", "fe80::9", 0)).action, FaultAction::kPass);  // starts the clock
  EXPECT_EQ(p->at(pkt("fe80::1", "fe80::9", 9)).action, FaultAction::kPass);
  EXPECT_EQ(p->at(pkt("fe80::1", "fe80::9", 10)).action, FaultAction::kDrop);
  EXPECT_EQ(p->at(pkt("fe80::9", "fe80::3", 50)).action, FaultAction::kDrop);  // the dead one itself
  EXPECT_EQ(p->at(pkt("fe80::1", "fe80::2", 4)).action, FaultAction::kPass);
  EXPECT_EQ(p->at(pkt("fe80::2", "fe80::1", 5)).action, FaultAction::kDrop);
  EXPECT_EQ(p->at(pkt("fe80::1", "fe80::3", 6)).action, FaultAction::kPass);
  EXPECT_EQ(p->at(pkt("fe80::1", "fe80::2", 8)).action, FaultAction::kPass);
}

TEST(PlanDecide, StallHoldsADoorbellForItsDuration) {
  std::unique_ptr<FaultPlan> p;
  std::string err;
  ASSERT_EQ(make_plan("stall_us=100", &p, &err), 0) << err;
  FaultContext c{FaultPoint::kDoorbellRead, 1, 7, 0, false, 1};
  c.now_ns = 1000;
  FaultDecision d = p->at(c);
  EXPECT_EQ(d.action, FaultAction::kDrop);
  EXPECT_FALSE(d.repeat);
  c.now_ns = 50000;
  d = p->at(c);
  EXPECT_EQ(d.action, FaultAction::kDrop);
  EXPECT_TRUE(d.repeat);
  c.now_ns = 101000;
  EXPECT_EQ(p->at(c).action, FaultAction::kPass);
  EXPECT_EQ(p->injected(), 1u);
}

}  // namespace
}  // namespace faults
}  // namespace emu
}  // namespace xpufab
