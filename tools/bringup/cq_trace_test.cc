// FI_EFA_CQ_TRACE on the emulated device: one line per polled CQE with the domain/QP numbering of
// cq_trace.h, written when the domain closes. The variable is read when the provider loads, so
// the test re-executes itself with it set.
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "testing/conformance_util.h"

namespace xpufab::testing {
namespace {

std::string trace_path() { return std::getenv("FI_EFA_CQ_TRACE"); }

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Endpoint {
  fid_ep* ep = nullptr;
  fid_cq* cq = nullptr;
  fi_addr_t addr = 0;
};

class Trace : public ::testing::Test {
 protected:
  void SetUp() override {
    select_backend("emu");
    fi_info* hints = make_hints(false);
    ASSERT_EQ(fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, hints, &info_), 0);
    fi_freeinfo(hints);
    ASSERT_EQ(fi_fabric(info_->fabric_attr, &fabric_, nullptr), 0);
  }
  void TearDown() override {
    if (fabric_) {
      EXPECT_EQ(fi_close(&fabric_->fid), 0);
    }
    fi_freeinfo(info_);
  }

  // One domain with two EPs (own CQs); EP 0 sends `n` messages with immediate data i+1 to EP 1.
  void run_domain(int n, size_t len) {
    fid_domain* dom = nullptr;
    ASSERT_EQ(fi_domain(fabric_, info_, &dom, nullptr), 0);
    fid_av* av = nullptr;
    fi_av_attr aa{};
    aa.type = FI_AV_TABLE;
    ASSERT_EQ(fi_av_open(dom, &aa, &av, nullptr), 0);
    Endpoint e[2];
    for (auto& x : e) {
      fi_cq_attr ca{};
      ca.format = FI_CQ_FORMAT_DATA;
      ASSERT_EQ(fi_cq_open(dom, &ca, &x.cq, nullptr), 0);
      ASSERT_EQ(fi_endpoint(dom, info_, &x.ep, nullptr), 0);
      ASSERT_EQ(fi_ep_bind(x.ep, &av->fid, 0), 0);
      ASSERT_EQ(fi_ep_bind(x.ep, &x.cq->fid, FI_TRANSMIT | FI_RECV), 0);
      ASSERT_EQ(fi_enable(x.ep), 0);
      char name[64];
      size_t nlen = sizeof(name);
      ASSERT_EQ(fi_getname(&x.ep->fid, name, &nlen), 0);
      ASSERT_EQ(fi_av_insert(av, name, 1, &x.addr, 0, nullptr), 1);
    }
    std::vector<char> src(len, 'x'), dst(len * n);
    fid_mr* ms = nullptr;
    fid_mr* md = nullptr;
    ASSERT_EQ(fi_mr_reg(dom, src.data(), src.size(), FI_SEND, 0, 0, 0, &ms, nullptr), 0);
    ASSERT_EQ(fi_mr_reg(dom, dst.data(), dst.size(), FI_RECV, 0, 0, 0, &md, nullptr), 0);
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(fi_recv(e[1].ep, dst.data() + i * len, len, fi_mr_desc(md), e[0].addr, nullptr), 0);
    }
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(fi_senddata(e[0].ep, src.data(), len, fi_mr_desc(ms), i + 1, e[1].addr, nullptr), 0);
    }
    fi_cq_data_entry c{};
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(wait_cq(e[0].cq, &c), 1);
      ASSERT_EQ(wait_cq(e[1].cq, &c), 1);
    }
    EXPECT_EQ(fi_close(&ms->fid), 0);
    EXPECT_EQ(fi_close(&md->fid), 0);
    for (auto& x : e) {
      EXPECT_EQ(fi_close(&x.ep->fid), 0);
      EXPECT_EQ(fi_close(&x.cq->fid), 0);
    }
    EXPECT_EQ(fi_close(&av->fid), 0);
    // Nothing is written before the domain closes; everything is after.
    EXPECT_EQ(read_file(trace_path()).find("d" + std::to_string(domains_) + "."), std::string::npos);
    EXPECT_EQ(fi_close(&dom->fid), 0);
    ++domains_;
  }

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  int domains_ = 0;
};

TEST_F(Trace, OneLinePerCqeNumberedByDomainAndQp) {
  run_domain(2, 100);
  run_domain(1, 7);
  std::vector<std::string> lines;
  std::stringstream ss(read_file(trace_path()));
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  std::sort(lines.begin(), lines.end());
  const std::vector<std::string> want = {
      "d0.q0 sq send status=0:OK len=0 imm=-",
      "d0.q0 sq send status=0:OK len=0 imm=-",
      "d0.q1 rq send status=0:OK len=100 imm=0x1",
      "d0.q1 rq send status=0:OK len=100 imm=0x2",
      "d1.q0 sq send status=0:OK len=0 imm=-",
      "d1.q1 rq send status=0:OK len=7 imm=0x1",
  };
  EXPECT_EQ(lines, want);
}

}  // namespace
}  // namespace xpufab::testing

int main(int argc, char** argv) {
  if (!std::getenv("FI_EFA_CQ_TRACE")) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string path = std::string(tmp ? tmp : "/tmp") + "/cq_trace_test." + std::to_string(getpid());
    unlink(path.c_str());
    setenv("FI_EFA_CQ_TRACE", path.c_str(), 1);
    execv("/proc/self/exe", argv);
    perror("execv");
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
