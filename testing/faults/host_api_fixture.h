// Two host endpoints on one emulated EFA device, opened through the public libfabric API after
// FI_EFA_EMU_FAULTS (and friends) were set: the device reads its fault plan when fi_domain opens
// it, and drops it when the last domain on it closes, so every open() gets the plan it names.
#ifndef XPUFAB_TESTING_FAULTS_HOST_API_FIXTURE_H_
#define XPUFAB_TESTING_FAULTS_HOST_API_FIXTURE_H_

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace xpufab::testing {

// One completion read through the public API: ok, or the error entry behind -FI_EAVAIL.
struct Completion {
  bool ok = false;
  fi_cq_data_entry entry{};
  fi_cq_err_entry err{};
};

class HostPair {
 public:
  static constexpr size_t kSlot = 256;
  static constexpr size_t kSlots = 64;
  static constexpr size_t kRegion = kSlot * kSlots;
  // Regions of the one registered buffer.
  enum Region { kWriteSrc, kWriteDst, kReadSrc, kReadDst, kSendSrc, kRecvDst, kRegions };

  // env: NAME=VALUE pairs set before fi_getinfo; the plan goes in FI_EFA_EMU_FAULTS.
  // Returns an empty string or what failed.
  std::string open(const std::string& plan, const std::vector<std::pair<std::string, std::string>>& env = {}) {
    setenv("FI_EFA_BACKEND", "emu", 1);
    setenv("FI_EFA_EMU_FAULTS", plan.c_str(), 1);
    for (const auto& kv : env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
    fi_info* hints = fi_allocinfo();
    hints->caps = FI_MSG | FI_RMA;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->fabric_attr->prov_name = strdup("efa");
    int rc = fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, hints, &info_);
    fi_freeinfo(hints);
    if (rc) return "fi_getinfo " + std::to_string(rc);
    if ((rc = fi_fabric(info_->fabric_attr, &fabric_, nullptr))) return "fi_fabric " + std::to_string(rc);
    rc = fi_domain(fabric_, info_, &domain_, nullptr);
    unsetenv("FI_EFA_EMU_FAULTS");
    for (const auto& kv : env) unsetenv(kv.first.c_str());
    if (rc) return "fi_domain " + std::to_string(rc);
    fi_av_attr aa{};
    aa.type = FI_AV_TABLE;
    if ((rc = fi_av_open(domain_, &aa, &av_, nullptr))) return "fi_av_open";
    for (int i = 0; i < 2; ++i) {
      fi_cq_attr ca{};
      ca.format = FI_CQ_FORMAT_DATA;
      ca.size = 256;
      if ((rc = fi_cq_open(domain_, &ca, &cq_[i], nullptr))) return "fi_cq_open";
      if ((rc = fi_endpoint(domain_, info_, &ep_[i], nullptr))) return "fi_endpoint";
      if (fi_ep_bind(ep_[i], &av_->fid, 0) || fi_ep_bind(ep_[i], &cq_[i]->fid, FI_TRANSMIT | FI_RECV))
        return "fi_ep_bind";
      if ((rc = fi_enable(ep_[i]))) return "fi_enable " + std::to_string(rc);
      char name[64];
      size_t len = sizeof(name);
      if (fi_getname(&ep_[i]->fid, name, &len)) return "fi_getname";
      if (fi_av_insert(av_, name, 1, &addr_[i], 0, nullptr) != 1) return "fi_av_insert";
    }
    mem_.assign(kRegion * kRegions, 0);
    rc = fi_mr_reg(domain_, mem_.data(), mem_.size(),
                   FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr_,
                   nullptr);
    if (rc) return "fi_mr_reg " + std::to_string(rc);
    return "";
  }

  // Closes everything; the number of closes that failed.
  int close() {
    int bad = 0;
    if (mr_) bad += fi_close(&mr_->fid) != 0;
    for (int i = 0; i < 2; ++i) {
      if (ep_[i]) bad += fi_close(&ep_[i]->fid) != 0;
      if (cq_[i]) bad += fi_close(&cq_[i]->fid) != 0;
      ep_[i] = nullptr;
      cq_[i] = nullptr;
    }
    if (av_) bad += fi_close(&av_->fid) != 0;
    if (domain_) bad += fi_close(&domain_->fid) != 0;
    if (fabric_) bad += fi_close(&fabric_->fid) != 0;
    if (info_) fi_freeinfo(info_);
    mr_ = nullptr;
    av_ = nullptr;
    domain_ = nullptr;
    fabric_ = nullptr;
    info_ = nullptr;
    return bad;
  }

  uint8_t* slot(Region r, size_t i) { return mem_.data() + r * kRegion + i * kSlot; }
  uint64_t vaddr(Region r, size_t i) { return reinterpret_cast<uintptr_t>(slot(r, i)); }
  void* desc() { return fi_mr_desc(mr_); }
  uint64_t key() { return fi_mr_key(mr_); }

  // A posts to B; B receives. Contexts are the caller's.
  ssize_t write(size_t i, size_t len, void* ctx) {
    return fi_write(ep_[0], slot(kWriteSrc, i), len, desc(), addr_[1], vaddr(kWriteDst, i), key(), ctx);
  }
  ssize_t read(size_t i, size_t len, void* ctx) {
    return fi_read(ep_[0], slot(kReadDst, i), len, desc(), addr_[1], vaddr(kReadSrc, i), key(), ctx);
  }
  ssize_t send(size_t i, size_t len, void* ctx) {
    return fi_send(ep_[0], slot(kSendSrc, i), len, desc(), addr_[1], ctx);
  }
  ssize_t recv(size_t i, size_t len, void* ctx) {
    return fi_recv(ep_[1], slot(kRecvDst, i), len, desc(), FI_ADDR_UNSPEC, ctx);
  }

  // One completion of endpoint `side` (0 = A, 1 = B); false after `ms` without one.
  bool next(int side, Completion* c, int ms = 30000) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
      ssize_t n = fi_cq_read(cq_[side], &c->entry, 1);
      if (n == 1) {
        c->ok = true;
        return true;
      }
      if (n == -FI_EAVAIL) {
        c->ok = false;
        return fi_cq_readerr(cq_[side], &c->err, 0) == 1;
      }
      if (n != -FI_EAGAIN || std::chrono::steady_clock::now() > end) return false;
      std::this_thread::yield();
    }
  }

  fid_cq* cq(int side) { return cq_[side]; }

 private:
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_[2] = {nullptr, nullptr};
  fid_ep* ep_[2] = {nullptr, nullptr};
  fi_addr_t addr_[2] = {FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL};
  fid_mr* mr_ = nullptr;
  std::vector<uint8_t> mem_;
};

// Bytes that name their slot and op, so misplaced or stale data is told apart.
inline void pattern(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed * 131 + i * 7 + (i >> 8));
}
inline bool has_pattern(const uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != static_cast<uint8_t>(seed * 131 + i * 7 + (i >> 8))) return false;
  return true;
}

}  // namespace xpufab::testing

#endif  // XPUFAB_TESTING_FAULTS_HOST_API_FIXTURE_H_
