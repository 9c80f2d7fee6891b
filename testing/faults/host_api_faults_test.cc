// Fault plans seen through the public libfabric API of the efa provider on the emulated device:
// targeted WQE failures arrive as fi_cq_readerr entries of exactly the targeted operation with
// err / prov_errno per device/efa_io_status.h; stalls and delayed CQEs cost latency, never
// errors; and a seeded plan gives the same trace twice through the provider path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "device/efa_io_defs.h"
#include "device/efa_io_status.h"
#include "testing/faults/host_api_fixture.h"

namespace xpufab::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string tmpdir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// "name: value" of the device-level block of a FI_EFA_EMU_STATS file; -1 when missing.
long long stat_of(const std::string& stats, const std::string& name) {
  size_t at = stats.find("\n" + name + ": ");
  if (at == std::string::npos) return -1;
  return std::atoll(stats.c_str() + at + name.size() + 3);
}

void* ctx(int kind, int i) { return reinterpret_cast<void*>(uintptr_t{0x10000} * kind + i + 1); }
enum { kW = 1, kS = 2, kR = 3, kRecv = 4 };

class HostApiFaults : public ::testing::Test {
 protected:
  void TearDown() override { EXPECT_EQ(p_.close(), 0); }
  HostPair p_;
};

// Several writes, sends and reads in flight at once; one of each kind is targeted.
TEST_F(HostApiFaults, TargetedStatusesReachFiCqReaderrOfExactlyTheTargetedOp) {
  ASSERT_EQ(p_.open("fail=op:write,nth:2,status:BAD_LKEY;fail=op:send,nth:3,status:RNR;"
                    "fail=op:read,nth:1,status:UNRESP_REMOTE"),
            "");
  const size_t kLen = 200;
  for (int i = 0; i < 4; ++i) {
    pattern(p_.slot(HostPair::kWriteSrc, i), kLen, 10 + i);
    pattern(p_.slot(HostPair::kSendSrc, i), kLen, 20 + i);
    pattern(p_.slot(HostPair::kReadSrc, i), kLen, 30 + i);
    ASSERT_EQ(p_.recv(i, HostPair::kSlot, ctx(kRecv, i)), 0);
  }
  for (int i = 0; i < 4; ++i) ASSERT_EQ(p_.write(i, kLen, ctx(kW, i)), 0);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(p_.send(i, kLen, ctx(kS, i)), 0);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(p_.read(i, kLen, ctx(kR, i)), 0);

  // Every operation completes exactly once; the three targeted ones with their status.
  const std::map<void*, uint8_t> want_fail = {
      {ctx(kW, 1), EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY},
      {ctx(kS, 2), EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR},
      {ctx(kR, 0), EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE}};
  std::map<void*, int> seen;
  for (int n = 0; n < 10; ++n) {
    Completion c;
    ASSERT_TRUE(p_.next(0, &c)) << "completion " << n << " never came";
    void* op = c.ok ? c.entry.op_context : c.err.op_context;
    seen[op]++;
    auto it = want_fail.find(op);
    if (it == want_fail.end()) {
      EXPECT_TRUE(c.ok) << "untargeted op " << op << " failed: err " << c.err.err << " prov_errno "
                        << c.err.prov_errno;
      continue;
    }
    ASSERT_FALSE(c.ok) << "targeted op " << op << " succeeded";
    EXPECT_EQ(c.err.prov_errno, it->second);
    EXPECT_EQ(c.err.err, efa_io_status_to_fi_errno(it->second));
    EXPECT_EQ(c.err.len, 0u);
  }
  EXPECT_EQ(seen.size(), 10u);
  for (const auto& s : seen) EXPECT_EQ(s.second, 1) << s.first;
  Completion extra;
  EXPECT_FALSE(p_.next(0, &extra, 50));

  // The table's values, spelled out for the three statuses the issue names.
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY), FI_EINVAL);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR), FI_ENORX);
  EXPECT_EQ(efa_io_status_to_fi_errno(EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE), FI_ECONNABORTED);

  // Data moved for exactly the operations that succeeded.
  for (int i = 0; i < 4; ++i) {
    const bool failed = i == 1;
    EXPECT_EQ(has_pattern(p_.slot(HostPair::kWriteDst, i), kLen, 10 + i), !failed) << "write " << i;
    if (failed) {
      EXPECT_EQ(p_.slot(HostPair::kWriteDst, i)[5], 0);
    }
  }
  EXPECT_EQ(p_.slot(HostPair::kReadDst, 0)[5], 0);
  EXPECT_TRUE(has_pattern(p_.slot(HostPair::kReadDst, 1), kLen, 31));
  // B received sends 0, 1 and 3 (in any order), never send 2.
  std::map<int, int> got;
  for (int n = 0; n < 3; ++n) {
    Completion c;
    ASSERT_TRUE(p_.next(1, &c)) << "receive " << n;
    ASSERT_TRUE(c.ok) << "receive failed: prov_errno " << c.err.prov_errno;
    ASSERT_EQ(c.entry.len, kLen);
    const uint8_t* b = static_cast<const uint8_t*>(c.entry.buf);
    int which = -1;
    for (int s = 0; s < 4; ++s)
      if (has_pattern(b, kLen, 20 + s)) which = s;
    ASSERT_NE(which, -1) << "received bytes match no send";
    got[which]++;
  }
  EXPECT_EQ(got, (std::map<int, int>{{0, 1}, {1, 1}, {3, 1}}));
  EXPECT_FALSE(p_.next(1, &extra, 50));
}

// Every status the table lists (but OK) injected on its own write: fi_cq_readerr reports the
// table's libfabric error with the raw status as prov_errno, and the endpoint goes on working.
TEST_F(HostApiFaults, EveryStatusMapsAsTheTableSays) {
  std::string plan;
  std::vector<uint8_t> statuses;
  for (size_t r = 0; r < efa_io_status_table_len; ++r) {
    const uint8_t st = efa_io_status_table[r].status;
    if (st == EFA_IO_COMP_STATUS_OK) continue;
    statuses.push_back(st);
    // Write 2k fails with the k-th status; the odd writes in between must succeed.
    plan += "fail=op:write,nth:" + std::to_string(2 * statuses.size()) + ",status:" + std::to_string(st) + ";";
  }
  ASSERT_EQ(p_.open(plan), "");
  const size_t kLen = 64;
  for (size_t k = 0; k < 2 * statuses.size() + 1; ++k) {
    const int i = static_cast<int>(k % HostPair::kSlots);
    pattern(p_.slot(HostPair::kWriteSrc, i), kLen, static_cast<uint32_t>(k));
    ASSERT_EQ(p_.write(i, kLen, ctx(kW, static_cast<int>(k))), 0);
    Completion c;
    ASSERT_TRUE(p_.next(0, &c)) << "write " << k;
    if (k % 2 == 0) {
      ASSERT_TRUE(c.ok) << "write " << k << " failed: prov_errno " << c.err.prov_errno;
      EXPECT_EQ(c.entry.op_context, ctx(kW, static_cast<int>(k)));
      EXPECT_TRUE(has_pattern(p_.slot(HostPair::kWriteDst, i), kLen, static_cast<uint32_t>(k)));
      continue;
    }
    const uint8_t st = statuses[k / 2];
    ASSERT_FALSE(c.ok) << "write " << k << " should fail with status " << int(st);
    EXPECT_EQ(c.err.op_context, ctx(kW, static_cast<int>(k)));
    EXPECT_EQ(c.err.prov_errno, st);
    EXPECT_EQ(c.err.err, efa_io_status_to_fi_errno(st)) << "status " << int(st);
    char buf[128];
    EXPECT_NE(fi_cq_strerror(p_.cq(0), c.err.prov_errno, nullptr, buf, sizeof(buf)), nullptr);
  }
}

// A doorbell stall and delayed CQEs cost time, not correctness: every write succeeds, each
// takes at least the stall, and the device counted its stalls and no error CQE.
TEST_F(HostApiFaults, StallsAndDelayedCqesAreLatencyNotErrors) {
  const std::string stats = tmpdir() + "/stall_stats_" + std::to_string(getpid());
  ASSERT_EQ(p_.open("stall_us=20000;cq_delay_us=5000;cq_delay_p=0.5;seed=3", {{"FI_EFA_EMU_STATS", stats}}),
            "");
  const size_t kLen = 128;
  for (int i = 0; i < 8; ++i) {
    pattern(p_.slot(HostPair::kWriteSrc, i), kLen, 40 + i);
    const auto t0 = Clock::now();
    ASSERT_EQ(p_.write(i, kLen, ctx(kW, i)), 0);
    Completion c;
    ASSERT_TRUE(p_.next(0, &c)) << "write " << i;
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
    ASSERT_TRUE(c.ok) << "prov_errno " << c.err.prov_errno;
    EXPECT_EQ(c.entry.op_context, ctx(kW, i));
    EXPECT_TRUE(has_pattern(p_.slot(HostPair::kWriteDst, i), kLen, 40 + i));
    EXPECT_GE(us, 20000) << "write " << i << " was not held by the stall";
  }
  ASSERT_EQ(p_.close(), 0);
  const std::string s = slurp(stats + ".efa_emu0.stats");
  ASSERT_NE(s, "") << "no statistics written";
  EXPECT_GE(stat_of(s, "stalls"), 8);
  EXPECT_GT(stat_of(s, "delayed_cqes"), 0);
  EXPECT_EQ(stat_of(s, "error_cqes"), 0);
  EXPECT_EQ(stat_of(s, "timeouts"), 0);
}

// One operation in flight at a time, progress made only by this thread (no engine thread): the
// questions the plan is asked come in the same order every run, so the traces are identical. The
// plan names its stream, so that its draws do not depend on the test's process id (which would
// leave some runs without a drop or a duplicate to show).
// The one wall-clock input left is the retransmission timer (the provider path has no virtual
// clock): a generous timeout floor keeps a descheduled test thread from firing it spuriously.
std::string traced_run(const std::string& plan, const std::string& prefix, std::string* error) {
  HostPair p;
  std::string rc = p.open(plan, {{"FI_EFA_EMU_ENGINE_THREAD", "0"},
                                 {"FI_EFA_EMU_TRACE", prefix},
                                 {"FI_EFA_EMU_TIMEOUT_MS", "4000"},
                                 {"FI_EFA_EMU_MIN_RTO_US", "100000"}});
  if (!rc.empty()) {
    *error = rc;
    p.close();
    return "";
  }
  const int kOps = 30;
  for (int i = 0; i < kOps / 3; ++i) p.recv(i % HostPair::kSlots, HostPair::kSlot, ctx(kRecv, i));
  int failed = 0;
  for (int i = 0; i < kOps && error->empty(); ++i) {
    const int s = i % HostPair::kSlots;
    const size_t len = 16 + (i * 37) % 200;
    ssize_t r = i % 3 == 0 ? p.write(s, len, ctx(kW, i)) : i % 3 == 1 ? p.send(s, len, ctx(kS, i)) : p.read(s, len, ctx(kR, i));
    Completion c;
    if (r != 0 || !p.next(0, &c)) *error = "op " + std::to_string(i) + " did not complete";
    failed += !c.ok;
    // The receive side's completion (or none, when the send was failed) before the next op.
    if (i % 3 == 1 && c.ok && (!p.next(1, &c) || !c.ok)) *error = "receive of op " + std::to_string(i);
  }
  if (error->empty() && failed != kOps / 3 / 5) *error = "failed ops: " + std::to_string(failed);
  if (p.close() != 0 && error->empty()) *error = "close";
  return slurp(prefix + ".efa_emu0.txt");
}

TEST(HostApiTrace, SameSeedSameTraceThroughTheProvider) {
  const std::string base = tmpdir() + "/det_" + std::to_string(getpid());
  const std::string plan = "seed=11;stream=1;drop=0.05;dup=0.1;reorder=0.3;window=4;corrupt=0.03;"
                           "fail=op:send,every:5,status:RNR";
  std::string e1, e2, e3;
  const std::string t1 = traced_run(plan, base + "_1", &e1);
  const std::string t2 = traced_run(plan, base + "_2", &e2);
  ASSERT_EQ(e1, "");
  ASSERT_EQ(e2, "");
  ASSERT_NE(t1, "");
  for (const char* ev : {"fault pkt_in drop", "fault pkt_in dup", "fault pkt_in reorder", "fault wqe fail",
                         "retransmit"})
    EXPECT_NE(t1.find(ev), std::string::npos) << "trace lacks '" << ev << "'";
  EXPECT_TRUE(t1 == t2) << "traces of identical runs differ (" << t1.size() << " vs " << t2.size()
                        << " bytes): " << base << "_1/_2.efa_emu0.txt";
  const std::string t3 = traced_run("seed=12" + plan.substr(plan.find(';')), base + "_3", &e3);
  ASSERT_EQ(e3, "");
  EXPECT_FALSE(t1 == t3) << "a different seed gave the same trace";
}

}  // namespace
}  // namespace xpufab::testing
