// A fabric/domain/AV fixture for the conformance suites that exercise the data path: host EPs
// with their own CQs, registered buffers, and teardown in reverse order of creation.
#ifndef XPUFAB_TESTING_CONFORMANCE_FIXTURE_H_
#define XPUFAB_TESTING_CONFORMANCE_FIXTURE_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "testing/conformance_util.h"

namespace xpufab::testing {

// Fabric, domain and AV from one fi_getinfo, as every suite opens them; closed in reverse order
// after what the test listed in `closing_` (newest first).
template <class TestBase>
class OpenDomain : public TestBase {
 protected:
  // Opens fabric, domain and AV for `hints_edit`-adjusted hints (host or XPU). Returns the
  // getinfo code.
  int open_domain(bool xpu, const std::function<void(fi_info*)>& hints_edit = nullptr) {
    fi_info* hints = make_hints(xpu);
    if (hints_edit) hints_edit(hints);
    int rc = fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, hints, &info_);
    fi_freeinfo(hints);
    if (rc) return rc;
    EXPECT_EQ(fi_fabric(info_->fabric_attr, &fabric_, nullptr), 0);
    EXPECT_EQ(fi_domain(fabric_, info_, &domain_, nullptr), 0);
    fi_av_attr aa{};
    aa.type = FI_AV_TABLE;
    EXPECT_EQ(fi_av_open(domain_, &aa, &av_, nullptr), 0);
    return 0;
  }

  // A set-up or a test may stop half-way: only what exists is closed. `before_av` (an XPU
  // context) closes after the listed objects and before the AV.
  void close_domain(fid* before_av = nullptr) {
    for (auto it = closing_.rbegin(); it != closing_.rend(); ++it) {
      if (*it) {
        EXPECT_EQ(fi_close(*it), 0);
      }
    }
    closing_.clear();
    for (fid* f : {before_av, av_ ? &av_->fid : nullptr, domain_ ? &domain_->fid : nullptr,
                   fabric_ ? &fabric_->fid : nullptr}) {
      if (f) {
        EXPECT_EQ(fi_close(f), 0);
      }
    }
    av_ = nullptr;
    domain_ = nullptr;
    fabric_ = nullptr;
    fi_freeinfo(info_);
    info_ = nullptr;
  }

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  std::vector<fid*> closing_;  // closed in reverse order before the AV and domain
};

class DataPathFixture : public OpenDomain<::testing::TestWithParam<const char*>> {
 protected:
  // Opens fabric, domain and AV for `hints_edit`-adjusted host hints. Returns the getinfo code.
  int open(const std::function<void(fi_info*)>& hints_edit = nullptr) { return open_domain(false, hints_edit); }

  void TearDown() override { close_domain(); }

  fid_cq* cq(fi_cq_format fmt = FI_CQ_FORMAT_DATA, fi_wait_obj wait = FI_WAIT_NONE) {
    fi_cq_attr ca{};
    ca.format = fmt;
    ca.wait_obj = wait;
    fid_cq* c = nullptr;
    EXPECT_EQ(fi_cq_open(domain_, &ca, &c, nullptr), 0);
    if (c) closing_.push_back(&c->fid);
    return c;
  }

  // An enabled EP bound to `c` for both directions (with `bind_flags` added) and the AV; its
  // address is inserted into the AV.
  fid_ep* ep(fid_cq* c, fi_addr_t* addr, uint64_t bind_flags = 0, fi_info* info = nullptr) {
    fid_ep* e = nullptr;
    EXPECT_EQ(fi_endpoint(domain_, info ? info : info_, &e, nullptr), 0);
    if (!e) return nullptr;
    closing_.push_back(&e->fid);
    EXPECT_EQ(fi_ep_bind(e, &av_->fid, 0), 0);
    EXPECT_EQ(fi_ep_bind(e, &c->fid, FI_TRANSMIT | FI_RECV | bind_flags), 0);
    EXPECT_EQ(fi_enable(e), 0);
    char name[64];
    size_t len = sizeof(name);
    EXPECT_EQ(fi_getname(&e->fid, name, &len), 0);
    EXPECT_EQ(fi_av_insert(av_, name, 1, addr, 0, nullptr), 1);
    return e;
  }

  fid_mr* reg(void* buf, size_t len, uint64_t access) {
    fid_mr* mr = nullptr;
    EXPECT_EQ(fi_mr_reg(domain_, buf, len, access, 0, 0, 0, &mr, nullptr), 0);
    if (mr) closing_.push_back(&mr->fid);
    return mr;
  }

  // Reads exactly `n` completions from `c` (FI_CQ_FORMAT_DATA) within `ms`.
  std::vector<fi_cq_data_entry> take(fid_cq* c, size_t n, int ms = 5000) {
    std::vector<fi_cq_data_entry> out;
    while (out.size() < n) {
      fi_cq_data_entry e{};
      ssize_t rc = wait_cq(c, &e, ms);
      EXPECT_EQ(rc, 1);
      if (rc != 1) break;
      out.push_back(e);
    }
    return out;
  }

  // True when `c` stays empty while progress is driven for `ms` milliseconds.
  bool stays_empty(fid_cq* c, int ms) {
    fi_cq_data_entry e{};
    return wait_cq(c, &e, ms) == -FI_EAGAIN;
  }

  static const fi_cq_data_entry* find(const std::vector<fi_cq_data_entry>& v, const void* ctx) {
    for (const auto& e : v)
      if (e.op_context == ctx) return &e;
    return nullptr;
  }

};

}  // namespace xpufab::testing

#endif  // XPUFAB_TESTING_CONFORMANCE_FIXTURE_H_
