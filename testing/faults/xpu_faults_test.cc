// Targeted fault-plan statuses seen by device code: kernels on the host XPU post through
// fi_xpu_* to an emulated device whose FI_EFA_EMU_FAULTS fails chosen WQEs; the error entries
// come out of fi_xpu_cq_readerr (read collectively by a work-group) with the targeted op's
// context, err per device/efa_io_status.h and the raw status as prov_errno.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "device/efa_io_defs.h"
#include "device/efa_io_status.h"
#include "testing/faults/host_api_fixture.h"
#include "testing/xpu/xpu_fixture.h"
#include "testing/xpu/xpu_test_util.h"

namespace xpufab::testing {
namespace {

using runtime::launch;
using runtime::WorkItem;

void* ctx(int kind, int i) { return reinterpret_cast<void*>(uintptr_t{0x10000} * kind + i + 1); }
enum { kW = 1, kS = 2, kR = 3, kRecv = 4 };

class XpuFaults : public ::testing::Test {
 protected:
  void open(const char* plan) {
    setenv("FI_EFA_EMU_FAULTS", plan, 1);
    std::string rc = w_.open();
    unsetenv("FI_EFA_EMU_FAULTS");
    ASSERT_EQ(rc, "");
    ASSERT_EQ(w_.add_ep(&a_), "");
    ASSERT_EQ(w_.add_ep(&b_), "");
    ASSERT_EQ(w_.export_ep(&a_), "");
    ASSERT_EQ(w_.export_ep(&b_), "");
    ASSERT_EQ(w_.reg(&src_, 4096), "");
    ASSERT_EQ(w_.reg(&dst_, 4096), "");
  }
  void TearDown() override { EXPECT_EQ(w_.close(), 0); }

  XpuWorld w_;
  XpuEp a_, b_;
  XpuBuf src_, dst_;
};

struct Entry {
  bool ok;
  fi_cq_data_entry e;
  fi_cq_err_entry err;
};

// Reads `want` completions of `cq` in one work-group, fi_xpu_cq_readerr at work-group scope
// whenever fi_xpu_cq_read says -FI_EAVAIL. False when they did not all come.
bool drain_with_errors(fid_xpu_cq* cq, size_t want, std::vector<Entry>* out) {
  std::atomic<bool> failed{false};
  std::mutex mu;
  fi_cq_data_entry e;
  fi_cq_err_entry err;
  const int scope = FI_XPU_WORK_GROUP;
  auto body = [&](const WorkItem&) {
    size_t got = 0;
    long empty = 0;
    while (got < want && empty < 4000000) {
      int64_t n = fi_xpu_cq_read(cq, &e, 1, scope);
      if (n == -FI_EAGAIN) {
        ++empty;
        xpu_relax();
        continue;
      }
      Entry x{};
      if (n == -FI_EAVAIL) {
        n = fi_xpu_cq_readerr(cq, &err, 0, scope);
        x.err = err;
      } else {
        x.ok = true;
        x.e = e;
      }
      if (n != 1) {
        if (xpu_scope_is_leader(scope)) failed = true;
        break;
      }
      if (xpu_scope_is_leader(scope)) {
        std::lock_guard<std::mutex> g(mu);
        out->push_back(x);
      }
      ++got;
      xpu_scope_barrier(scope);  // e / err are reused by the next collective read
    }
  };
  if (launch(one_group(scope), body) != 0) return false;
  return !failed && out->size() == want;
}

TEST_F(XpuFaults, TargetedStatusesReachFiXpuCqReaderrOfTheTargetedOp) {
  open("fail=op:write,nth:2,status:BAD_LKEY;fail=op:send,nth:3,status:RNR;"
       "fail=op:read,nth:1,status:UNRESP_REMOTE");
  const size_t kLen = 100, kSlot = 256;
  for (int i = 0; i < 4; ++i) {
    pattern(src_.data() + i * kSlot, kLen, 10 + i);              // write sources
    pattern(src_.data() + (4 + i) * kSlot, kLen, 20 + i);        // send sources
    pattern(dst_.data() + (8 + i) * kSlot, kLen, 30 + i);        // read sources (remote side)
  }
  std::atomic<int> bad{0};
  // One work-item posts everything, so the SQ order (which nth counts) is the program order.
  ASSERT_EQ(launch(shape(1, 1, 1),
                   [&](const WorkItem&) {
                     for (int i = 0; i < 4; ++i)
                       bad += fi_xpu_recv(&b_.xep, dst_.data() + (4 + i) * kSlot, kSlot, &dst_.desc, nullptr,
                                          ctx(kRecv, i), 0, FI_XPU_WORK_ITEM) != 0;
                     for (int i = 0; i < 4; ++i)
                       bad += fi_xpu_write(&a_.xep, src_.data() + i * kSlot, kLen, &src_.desc, 0, &b_.peer,
                                           dst_.addr() + i * kSlot, dst_.key, ctx(kW, i), 0,
                                           FI_XPU_WORK_ITEM) != 0;
                     for (int i = 0; i < 4; ++i)
                       bad += fi_xpu_send(&a_.xep, src_.data() + (4 + i) * kSlot, kLen, &src_.desc, 0,
                                          &b_.peer, ctx(kS, i), 0, FI_XPU_WORK_ITEM) != 0;
                     for (int i = 0; i < 2; ++i)
                       bad += fi_xpu_read(&a_.xep, src_.data() + (8 + i) * kSlot, kLen, &src_.desc, &b_.peer,
                                          dst_.addr() + (8 + i) * kSlot, dst_.key, ctx(kR, i), 0,
                                          FI_XPU_WORK_ITEM) != 0;
                   }),
            0);
  ASSERT_EQ(bad.load(), 0);

  std::vector<Entry> tx;
  ASSERT_TRUE(drain_with_errors(&a_.xcq, 10, &tx)) << "got " << tx.size() << " of 10 completions";
  const std::map<void*, uint8_t> want_fail = {
      {ctx(kW, 1), EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY},
      {ctx(kS, 2), EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR},
      {ctx(kR, 0), EFA_IO_COMP_STATUS_LOCAL_ERROR_UNRESP_REMOTE}};
  std::map<void*, int> seen;
  for (const Entry& x : tx) {
    void* op = x.ok ? x.e.op_context : x.err.op_context;
    seen[op]++;
    auto it = want_fail.find(op);
    if (it == want_fail.end()) {
      EXPECT_TRUE(x.ok) << "untargeted op " << op << " failed: prov_errno " << x.err.prov_errno;
      continue;
    }
    ASSERT_FALSE(x.ok) << "targeted op " << op << " succeeded";
    EXPECT_EQ(x.err.prov_errno, it->second);
    EXPECT_EQ(x.err.err, efa_io_status_to_fi_errno(it->second));
  }
  EXPECT_EQ(seen.size(), 10u);
  for (const auto& s : seen) EXPECT_EQ(s.second, 1) << s.first;
  fi_cq_err_entry none;
  EXPECT_EQ(fi_xpu_cq_readerr(&a_.xcq, &none, 0, FI_XPU_WORK_ITEM), -FI_EAGAIN);
  // Counters agree: 7 successes, 3 errors.
  EXPECT_EQ(fi_xpu_cntr_read(&a_.xtx, FI_XPU_WORK_ITEM), 7u);
  EXPECT_EQ(fi_xpu_cntr_readerr(&a_.xtx, FI_XPU_WORK_ITEM), 3u);

  // Data: writes 0, 2, 3 and read 1 moved their bytes; the failed ones moved none.
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(has_pattern(dst_.data() + i * kSlot, kLen, 10 + i), i != 1) << "write " << i;
  EXPECT_EQ(dst_.data()[1 * kSlot + 5], 0);
  EXPECT_EQ(src_.data()[8 * kSlot + 5], 0);
  EXPECT_TRUE(has_pattern(src_.data() + 9 * kSlot, kLen, 31));
  // B got sends 0, 1 and 3.
  std::vector<Entry> rx;
  ASSERT_TRUE(drain_with_errors(&b_.xcq, 3, &rx));
  std::map<int, int> got;
  for (const Entry& x : rx) {
    ASSERT_TRUE(x.ok);
    ASSERT_EQ(x.e.len, kLen);
    for (int s = 0; s < 4; ++s)
      if (has_pattern(static_cast<const uint8_t*>(x.e.buf), kLen, 20 + s)) got[s]++;
  }
  EXPECT_EQ(got, (std::map<int, int>{{0, 1}, {1, 1}, {3, 1}}));
}

// An every:K rule: exactly every third send of the kernel fails, with UNREACH_REMOTE's mapping,
// and the TX counter counts the errors.
TEST_F(XpuFaults, EveryThirdSendFails) {
  open("fail=op:send,every:3,status:UNREACH_REMOTE");
  const size_t kLen = 32, kSlot = 64;
  const int kSends = 12;
  std::atomic<int> bad{0};
  ASSERT_EQ(launch(shape(1, 1, 1),
                   [&](const WorkItem&) {
                     for (int i = 0; i < kSends; ++i)
                       bad += fi_xpu_recv(&b_.xep, dst_.data() + i * kSlot, kSlot, &dst_.desc, nullptr,
                                          ctx(kRecv, i), 0, FI_XPU_WORK_ITEM) != 0;
                     for (int i = 0; i < kSends; ++i)
                       bad += fi_xpu_send(&a_.xep, src_.data() + i * kSlot, kLen, &src_.desc, 0, &b_.peer,
                                          ctx(kS, i), 0, FI_XPU_WORK_ITEM) != 0;
                   }),
            0);
  ASSERT_EQ(bad.load(), 0);
  std::vector<Entry> tx;
  ASSERT_TRUE(drain_with_errors(&a_.xcq, kSends, &tx));
  int errors = 0;
  for (const Entry& x : tx) {
    if (x.ok) continue;
    ++errors;
    const uintptr_t i = reinterpret_cast<uintptr_t>(x.err.op_context) - uintptr_t{0x10000} * kS - 1;
    EXPECT_EQ(i % 3, 2u) << "send " << i << " failed but is not a 3rd";
    EXPECT_EQ(x.err.prov_errno, EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE);
    EXPECT_EQ(x.err.err, FI_EHOSTUNREACH);
  }
  EXPECT_EQ(errors, kSends / 3);
  EXPECT_EQ(fi_xpu_cntr_readerr(&a_.xtx, FI_XPU_WORK_ITEM), uint64_t(kSends / 3));
}

}  // namespace
}  // namespace xpufab::testing
