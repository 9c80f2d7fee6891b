// An XPU endpoint of the protocol fabric "efa" made and exported through the public API
// (fi_endpoint2(FI_XPU), fi_ep_export_xpu) against a host endpoint of the same domain: kernels
// on the host XPU at every scope send and receive tagged and untagged messages (eager and
// rendezvous), write, read and run atomics on the host peer's memory, their completions read with
// fi_xpu_cq_read and counted by the XPU counters, while a host thread reads the host endpoint's
// CQ; a peer inserted after the export is reachable at once. The context query advertises the
// calls.
#include <rdma/fi_cm.h>
#include <rdma/fi_xpu_device.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "testing/xpu/xpu_test_util.h"

namespace xpufab::testing {
namespace {

using runtime::launch;
using runtime::WorkItem;

void fill(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed * 131 + i * 7 + (i >> 8));
}
bool has_pattern(const uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != static_cast<uint8_t>(seed * 131 + i * 7 + (i >> 8))) return false;
  return true;
}

void* ctx_of(uint32_t i) { return reinterpret_cast<void*>(uintptr_t{0x1000} + i); }
uint32_t ctx_index(void* c) { return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(c) - 0x1000); }

struct Mr {
  std::vector<uint8_t> bytes;
  fid_mr* mr = nullptr;
  efa_xpu_desc desc{};
  uint8_t* data() { return bytes.data(); }
  uint64_t addr() { return reinterpret_cast<uintptr_t>(bytes.data()); }
};

class ProtoExport : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("FI_EFA_BACKEND", "emu", 1);
    fi_info* h = fi_allocinfo();
    h->caps = FI_MSG | FI_TAGGED | FI_ATOMIC | FI_RMA | FI_XPU;
    h->ep_attr->type = FI_EP_RDM;
    h->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_XPU_DESC;
    h->fabric_attr->prov_name = strdup("efa");
    h->fabric_attr->name = strdup("efa");
    const int rc = fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, h, &info_);
    fi_freeinfo(h);
    ASSERT_EQ(rc, 0);
    ASSERT_STREQ(info_->fabric_attr->name, "efa");
    ASSERT_TRUE(info_->caps & FI_XPU);
    ASSERT_GT(info_->domain_attr->max_xpu_ctx_cnt, 0u);
    ASSERT_EQ(fi_fabric(info_->fabric_attr, &fabric_, nullptr), 0);
    ASSERT_EQ(fi_domain(fabric_, info_, &domain_, nullptr), 0);
    fi_av_attr aa{};
    aa.type = FI_AV_TABLE;
    ASSERT_EQ(fi_av_open(domain_, &aa, &av_, nullptr), 0);
    fi_xpu_attr xa{};
    xa.iface = FI_HMEM_SYSTEM;
    ASSERT_EQ(fi_xpu_ctx(domain_, &xa, &ctx_, nullptr), 0);
    // The XPU endpoint: XPU CQ and counters, made with FI_XPU and the context.
    fi_cq_attr ca{};
    ca.format = FI_CQ_FORMAT_TAGGED;
    ca.flags = FI_XPU;
    ca.xpu_ctx = ctx_;
    ASSERT_EQ(fi_cq_open(domain_, &ca, &xcq_, nullptr), 0);
    fi_cntr_attr na{};
    na.events = FI_CNTR_EVENTS_COMP;
    na.flags = FI_XPU;
    na.xpu_ctx = ctx_;
    ASSERT_EQ(fi_cntr_open(domain_, &na, &xtx_, nullptr), 0);
    ASSERT_EQ(fi_cntr_open(domain_, &na, &xrx_, nullptr), 0);
    fi_info* i = fi_dupinfo(info_);
    i->ep_attr->xpu_ctx = ctx_;
    ASSERT_EQ(fi_endpoint2(domain_, i, &xep_, FI_XPU, nullptr), 0);
    fi_freeinfo(i);
    ASSERT_EQ(fi_ep_bind(xep_, &av_->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(xep_, &xcq_->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(fi_ep_bind(xep_, &xtx_->fid, FI_SEND | FI_WRITE | FI_READ), 0);
    ASSERT_EQ(fi_ep_bind(xep_, &xrx_->fid, FI_RECV), 0);
    ASSERT_EQ(fi_enable(xep_), 0);
    // The host peer.
    fi_cq_attr hca{};
    hca.format = FI_CQ_FORMAT_TAGGED;
    ASSERT_EQ(fi_cq_open(domain_, &hca, &hcq_, nullptr), 0);
    ASSERT_EQ(fi_endpoint(domain_, info_, &hep_, nullptr), 0);
    ASSERT_EQ(fi_ep_bind(hep_, &av_->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(hep_, &hcq_->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(fi_enable(hep_), 0);
    insert(&xep_->fid, &x_addr_);
    insert(&hep_->fid, &h_addr_);
    ASSERT_EQ(fi_ep_export_xpu(xep_, 0, &dxep_), 0);
    ASSERT_EQ(fi_cq_export_xpu(xcq_, 0, &dxcq_), 0);
    ASSERT_EQ(fi_cntr_export_xpu(xtx_, 0, &dxtx_), 0);
    ASSERT_EQ(fi_cntr_export_xpu(xrx_, 0, &dxrx_), 0);
    size_t len = sizeof(peer_h_);
    ASSERT_EQ(fi_av_lookup2(av_, h_addr_, &peer_h_, &len, FI_XPU, ctx_), 0);
    // The host peer progresses on its own thread, as a host application would.
    host_ = std::thread([this] { host_loop(); });
  }

  void TearDown() override {
    stop_ = true;
    if (host_.joinable()) host_.join();
    for (auto& m : mrs_) {
      if (m->mr) {
        EXPECT_EQ(fi_close(&m->mr->fid), 0);
      }
    }
    for (fid* f : {&xep_->fid, &hep_->fid, &xcq_->fid, &hcq_->fid, &xtx_->fid, &xrx_->fid,
                   &ctx_->fid, &av_->fid, &domain_->fid, &fabric_->fid}) {
      if (f) {
        EXPECT_EQ(fi_close(f), 0);
      }
    }
    fi_freeinfo(info_);
  }

  void insert(fid* ep, fi_addr_t* a) {
    char name[64];
    size_t len = sizeof(name);
    ASSERT_EQ(fi_getname(ep, name, &len), 0);
    ASSERT_EQ(fi_av_insert(av_, name, 1, a, 0, nullptr), 1);
  }

  // A registered buffer the fixture owns (closed in TearDown, after the host thread stopped).
  Mr& reg(size_t n) {
    mrs_.push_back(std::make_unique<Mr>());
    Mr* m = mrs_.back().get();
    m->bytes.assign(n, 0);
    EXPECT_EQ(fi_mr_reg(domain_, m->data(), n,
                        FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
                        0, 0, 0, &m->mr, nullptr),
              0);
    size_t len = sizeof(m->desc);
    EXPECT_EQ(fi_mr_get_xpu_desc(m->mr, &m->desc, &len, FI_XPU, ctx_), 0);
    return *m;
  }

  void host_loop() {
    while (!stop_) {
      fi_cq_tagged_entry e[8];
      const ssize_t k = fi_cq_read(hcq_, e, 8);
      if (k > 0) {
        std::lock_guard<std::mutex> g(mu_);
        host_done_.insert(host_done_.end(), e, e + k);
      } else if (k == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        fi_cq_readerr(hcq_, &err, 0);
        host_errors_++;
      }
    }
  }

  // Waits until the host endpoint has `n` completions and takes them.
  std::vector<fi_cq_tagged_entry> host_take(size_t n) {
    for (long spins = 0; spins < 200000000; ++spins) {
      std::lock_guard<std::mutex> g(mu_);
      if (host_done_.size() >= n) {
        std::vector<fi_cq_tagged_entry> v(host_done_.begin(), host_done_.begin() + n);
        host_done_.erase(host_done_.begin(), host_done_.begin() + n);
        return v;
      }
    }
    return {};
  }

  // Host-side posts race the host thread's CQ reads for the endpoint: retry while it is busy.
  template <typename Post>
  static ssize_t retry(Post post) {
    for (;;) {
      const ssize_t rc = post();
      if (rc != -FI_EAGAIN) return rc;
      std::this_thread::yield();
    }
  }

  // A kernel at `scope` reading `want` entries of the XPU CQ collectively; the leader keeps them.
  std::vector<fi_cq_tagged_entry> device_take(int scope, size_t want, int* error) {
    std::vector<fi_cq_tagged_entry> got;
    std::mutex mu;
    std::atomic<int> err{0};
    const int launched = launch(one_group(scope), [&](const WorkItem&) {
      fi_cq_tagged_entry e[4];
      size_t n = 0;
      for (long spins = 0; n < want && spins < 20000000; ++spins) {
        const size_t room = std::min<size_t>(4, want - n);
        const int64_t k = fi_xpu_cq_read(&dxcq_, e, room, scope);
        if (k == -FI_EAGAIN) continue;
        if (k < 0) {
          err = static_cast<int>(k);
          break;
        }
        if (xpu_scope_is_leader(scope)) {
          std::lock_guard<std::mutex> l(mu);
          got.insert(got.end(), e, e + k);
        }
        n += static_cast<size_t>(k);
        xpu_scope_barrier(scope);
      }
    });
    *error = launched ? launched : err.load();
    return got;
  }

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_xpu_ctx* ctx_ = nullptr;
  fid_cq* xcq_ = nullptr;
  fid_cq* hcq_ = nullptr;
  fid_cntr* xtx_ = nullptr;
  fid_cntr* xrx_ = nullptr;
  fid_ep* xep_ = nullptr;
  fid_ep* hep_ = nullptr;
  fi_addr_t x_addr_ = FI_ADDR_NOTAVAIL, h_addr_ = FI_ADDR_NOTAVAIL;
  fid_xpu_ep dxep_{};
  fid_xpu_cq dxcq_{};
  fid_xpu_cntr dxtx_{}, dxrx_{};
  efa_xpu_peer peer_h_{};
  std::vector<std::unique_ptr<Mr>> mrs_;
  std::thread host_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<fi_cq_tagged_entry> host_done_;
  std::atomic<int> host_errors_{0};
};

TEST_F(ProtoExport, TheContextAdvertisesTaggedAndAtomicCalls) {
  fi_xpu_ctx_attr a{};
  ASSERT_EQ(fi_xpu_ctx_query(ctx_, &a), 0);
  EXPECT_TRUE(a.caps & FI_XPU_CAP_EP);
  EXPECT_TRUE(a.caps & FI_XPU_CAP_TAGGED);
  EXPECT_TRUE(a.caps & FI_XPU_CAP_ATOMIC);
  // The host data path belongs to device code on an XPU endpoint.
  uint64_t v = 0;
  EXPECT_EQ(fi_tsend(xep_, &v, 8, nullptr, h_addr_, 1, nullptr), -FI_EOPNOTSUPP);
}

// Every work-item of every scope sends the host its own tag (every fourth far above the MTU),
// then receives one from it; the host checks what came and sends back.
TEST_F(ProtoExport, TaggedMessagesBothWaysAtEveryScope) {
  const size_t mtu = 8928;
  uint64_t sent = 0, received = 0;
  for (int scope : kAllScopes) {
    SCOPED_TRACE(scope_name(scope));
    const runtime::LaunchConfig cfg = one_group(scope);
    const uint32_t n = cfg.grid * cfg.workgroup_size;
    auto len_of = [&](uint32_t g) -> size_t { return g % 4 == 0 ? 3 * mtu + 17 * g : 16 + 5 * g; };
    const size_t slot = 3 * mtu + 17 * n;
    Mr& dsrc = reg(slot * n);
    Mr& ddst = reg(slot * n);
    Mr& hbuf = reg(slot * n);
    const uint64_t tag = 0x7700000ull + (static_cast<uint64_t>(scope) << 8);
    for (uint32_t g = 0; g < n; ++g) {
      fill(dsrc.data() + g * slot, len_of(g), g + 10 * scope);
      ASSERT_EQ(retry([&] {
                  return fi_trecv(hep_, hbuf.data() + g * slot, slot, fi_mr_desc(hbuf.mr),
                                  FI_ADDR_UNSPEC, tag + g, 0, ctx_of(g));
                }),
                0);
    }
    std::atomic<int> bad{0};
    ASSERT_EQ(launch(cfg,
                     [&](const WorkItem& it) {
                       const uint32_t g = it.global_id;
                       if (fi_xpu_tsend(&dxep_, dsrc.data() + g * slot, len_of(g), &dsrc.desc, 0,
                                        &peer_h_, tag + g, ctx_of(100 + g), 0, scope) != 0)
                         bad++;
                     }),
              0);
    ASSERT_EQ(bad.load(), 0);
    int err = 0;
    std::vector<fi_cq_tagged_entry> tx = device_take(scope, n, &err);
    ASSERT_EQ(err, 0);
    ASSERT_EQ(tx.size(), n);
    for (const auto& e : tx) {
      EXPECT_EQ(e.flags, FI_TAGGED | FI_SEND);
      EXPECT_GE(ctx_index(e.op_context), 100u);
    }
    std::vector<fi_cq_tagged_entry> rx = host_take(n);
    ASSERT_EQ(rx.size(), n);
    for (const auto& e : rx) {
      const uint32_t g = ctx_index(e.op_context);
      ASSERT_LT(g, n);
      EXPECT_EQ(e.tag, tag + g);
      EXPECT_EQ(e.len, len_of(g));
      EXPECT_TRUE(has_pattern(hbuf.data() + g * slot, len_of(g), g + 10 * scope)) << g;
    }
    // Back: the device posts its receives, the host sends.
    ASSERT_EQ(launch(cfg,
                     [&](const WorkItem& it) {
                       const uint32_t g = it.global_id;
                       if (fi_xpu_trecv(&dxep_, ddst.data() + g * slot, slot, &ddst.desc, nullptr,
                                        tag + 0x80 + g, 0, ctx_of(200 + g), 0, scope) != 0)
                         bad++;
                     }),
              0);
    ASSERT_EQ(bad.load(), 0);
    for (uint32_t g = 0; g < n; ++g)
      ASSERT_EQ(retry([&] {
                  return fi_tsend(hep_, hbuf.data() + g * slot, len_of(g), fi_mr_desc(hbuf.mr),
                                  x_addr_, tag + 0x80 + g, ctx_of(300 + g));
                }),
                0);
    std::vector<fi_cq_tagged_entry> drx = device_take(scope, n, &err);
    ASSERT_EQ(err, 0);
    ASSERT_EQ(drx.size(), n);
    for (const auto& e : drx) {
      const uint32_t g = ctx_index(e.op_context) - 200;
      ASSERT_LT(g, n);
      EXPECT_EQ(e.flags, FI_TAGGED | FI_RECV);
      EXPECT_EQ(e.tag, tag + 0x80 + g);
      EXPECT_EQ(e.len, len_of(g));
      EXPECT_TRUE(has_pattern(ddst.data() + g * slot, len_of(g), g + 10 * scope)) << g;
    }
    EXPECT_EQ(host_take(n).size(), n);  // the host's sends
    sent += n;
    received += n;
  }
  EXPECT_EQ(fi_xpu_cntr_read(&dxtx_, FI_XPU_WORK_ITEM), sent);
  EXPECT_EQ(fi_xpu_cntr_read(&dxrx_, FI_XPU_WORK_ITEM), received);
  EXPECT_EQ(host_errors_.load(), 0);
}

// fi_xpu_write and fi_xpu_read from every work-item of every scope on the host peer's memory
// (every fourth far above the MTU: RDMA write where the device has it), through the core, their
// completions read from the XPU CQ and counted; a write with remote CQ data reports it on the
// host peer's CQ.
TEST_F(ProtoExport, WritesAndReadsFromEveryScopeOnTheHostPeer) {
  const size_t mtu = 8928;
  uint64_t done_ops = 0;
  for (int scope : kAllScopes) {
    SCOPED_TRACE(scope_name(scope));
    const runtime::LaunchConfig cfg = one_group(scope);
    const uint32_t n = cfg.grid * cfg.workgroup_size;
    auto len_of = [&](uint32_t g) -> size_t { return g % 4 == 0 ? 3 * mtu + 17 * g : 16 + 5 * g; };
    const size_t slot = 3 * mtu + 17 * n;
    Mr& src = reg(slot * n);
    Mr& back = reg(slot * n);
    Mr& target = reg(slot * n);
    const uint64_t key = fi_mr_key(target.mr);
    for (uint32_t g = 0; g < n; ++g) fill(src.data() + g * slot, len_of(g), g + 20 * scope);
    std::atomic<int> bad{0};
    ASSERT_EQ(launch(cfg,
                     [&](const WorkItem& it) {
                       const uint32_t g = it.global_id;
                       if (fi_xpu_write(&dxep_, src.data() + g * slot, len_of(g), &src.desc, 0,
                                        &peer_h_, target.addr() + g * slot, key, ctx_of(g), 0,
                                        scope) != 0)
                         bad++;
                     }),
              0);
    ASSERT_EQ(bad.load(), 0);
    int err = 0;
    std::vector<fi_cq_tagged_entry> w = device_take(scope, n, &err);
    ASSERT_EQ(err, 0);
    ASSERT_EQ(w.size(), n);
    for (const auto& e : w) {
      EXPECT_EQ(e.flags, FI_RMA | FI_WRITE);
      EXPECT_LT(ctx_index(e.op_context), n);
    }
    for (uint32_t g = 0; g < n; ++g)
      EXPECT_TRUE(has_pattern(target.data() + g * slot, len_of(g), g + 20 * scope)) << g;
    ASSERT_EQ(launch(cfg,
                     [&](const WorkItem& it) {
                       const uint32_t g = it.global_id;
                       if (fi_xpu_read(&dxep_, back.data() + g * slot, len_of(g), &back.desc,
                                       &peer_h_, target.addr() + g * slot, key, ctx_of(100 + g), 0,
                                       scope) != 0)
                         bad++;
                     }),
              0);
    ASSERT_EQ(bad.load(), 0);
    std::vector<fi_cq_tagged_entry> r = device_take(scope, n, &err);
    ASSERT_EQ(err, 0);
    ASSERT_EQ(r.size(), n);
    for (const auto& e : r) EXPECT_EQ(e.flags, FI_RMA | FI_READ);
    for (uint32_t g = 0; g < n; ++g)
      EXPECT_TRUE(has_pattern(back.data() + g * slot, len_of(g), g + 20 * scope)) << g;
    done_ops += 2 * n;
  }
  // Remote CQ data, and bad input refused before anything is sent.
  Mr& one = reg(4 * mtu);
  fill(one.data(), 2 * mtu, 99);
  Mr& target = reg(4 * mtu);
  const uint64_t key = fi_mr_key(target.mr);
  ASSERT_EQ(launch(one_group(FI_XPU_WORK_ITEM),
                   [&](const WorkItem&) {
                     EXPECT_EQ(fi_xpu_write(&dxep_, one.data(), 2 * mtu, &one.desc, 0xda7a,
                                            &peer_h_, target.addr(), key, ctx_of(7),
                                            FI_REMOTE_CQ_DATA, FI_XPU_WORK_ITEM),
                               0);
                     EXPECT_EQ(fi_xpu_read(&dxep_, one.data(), 8, &one.desc, &peer_h_,
                                           target.addr(), key, nullptr, FI_REMOTE_CQ_DATA,
                                           FI_XPU_WORK_ITEM),
                               -FI_EINVAL);
                     EXPECT_EQ(fi_xpu_write(&dxep_, one.data(), 8, &one.desc, 0, &peer_h_,
                                            target.addr(), key << 32, nullptr, 0,
                                            FI_XPU_WORK_ITEM),
                               -FI_EINVAL);
                     EXPECT_EQ(fi_xpu_write(&dxep_, one.data(), 8, nullptr, 0, &peer_h_,
                                            target.addr(), key, nullptr, 0, FI_XPU_WORK_ITEM),
                               -FI_EINVAL);
                   }),
            0);
  int err = 0;
  std::vector<fi_cq_tagged_entry> w = device_take(FI_XPU_WORK_ITEM, 1, &err);
  ASSERT_EQ(err, 0);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].op_context, ctx_of(7));
  std::vector<fi_cq_tagged_entry> remote = host_take(1);
  ASSERT_EQ(remote.size(), 1u);
  EXPECT_EQ(remote[0].flags & (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA),
            FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
  EXPECT_EQ(remote[0].data, 0xda7au);
  EXPECT_EQ(remote[0].len, 2 * mtu);
  EXPECT_TRUE(has_pattern(target.data(), 2 * mtu, 99));
  EXPECT_EQ(fi_xpu_cntr_read(&dxtx_, FI_XPU_WORK_ITEM), done_ops + 1);
  EXPECT_EQ(host_errors_.load(), 0);
}

// Untagged fi_xpu_send / fi_xpu_recv on the protocol fabric go through the core as well, eager
// and rendezvous, both ways.
TEST_F(ProtoExport, UntaggedMessagesBothWays) {
  const size_t lens[2] = {100, 5 * 8928 + 3};
  Mr& dbuf = reg(2 * 65536);
  Mr& hbuf = reg(2 * 65536);
  for (int k = 0; k < 2; ++k) {
    fill(dbuf.data() + k * 65536, lens[k], 30 + k);
    ASSERT_EQ(retry([&] {
                return fi_recv(hep_, hbuf.data() + k * 65536, 65536, fi_mr_desc(hbuf.mr),
                               FI_ADDR_UNSPEC, ctx_of(k));
              }),
              0);
  }
  ASSERT_EQ(launch(one_group(FI_XPU_WORK_ITEM),
                   [&](const WorkItem&) {
                     for (int k = 0; k < 2; ++k)
                       EXPECT_EQ(fi_xpu_send(&dxep_, dbuf.data() + k * 65536, lens[k], &dbuf.desc,
                                             0, &peer_h_, ctx_of(10 + k), 0, FI_XPU_WORK_ITEM),
                                 0);
                   }),
            0);
  int err = 0;
  std::vector<fi_cq_tagged_entry> tx = device_take(FI_XPU_WORK_ITEM, 2, &err);
  ASSERT_EQ(err, 0);
  ASSERT_EQ(tx.size(), 2u);
  for (const auto& e : tx) EXPECT_EQ(e.flags, FI_MSG | FI_SEND);
  std::vector<fi_cq_tagged_entry> rx = host_take(2);
  ASSERT_EQ(rx.size(), 2u);
  for (const auto& e : rx) {
    const uint32_t k = ctx_index(e.op_context);
    ASSERT_LT(k, 2u);
    EXPECT_EQ(e.flags, FI_MSG | FI_RECV);
    EXPECT_EQ(e.len, lens[k]);
    EXPECT_TRUE(has_pattern(hbuf.data() + k * 65536, lens[k], 30 + k));
  }
  ASSERT_EQ(launch(one_group(FI_XPU_WORK_ITEM),
                   [&](const WorkItem&) {
                     for (int k = 0; k < 2; ++k)
                       EXPECT_EQ(fi_xpu_recv(&dxep_, dbuf.data() + k * 65536, 65536, &dbuf.desc,
                                             nullptr, ctx_of(20 + k), 0, FI_XPU_WORK_ITEM),
                                 0);
                   }),
            0);
  for (int k = 0; k < 2; ++k) {
    fill(hbuf.data() + k * 65536, lens[k], 40 + k);
    ASSERT_EQ(retry([&] {
                return fi_send(hep_, hbuf.data() + k * 65536, lens[k], fi_mr_desc(hbuf.mr),
                               x_addr_, ctx_of(30 + k));
              }),
              0);
  }
  std::vector<fi_cq_tagged_entry> drx = device_take(FI_XPU_WORK_ITEM, 2, &err);
  ASSERT_EQ(err, 0);
  ASSERT_EQ(drx.size(), 2u);
  for (const auto& e : drx) {
    const uint32_t k = ctx_index(e.op_context) - 20;
    ASSERT_LT(k, 2u);
    EXPECT_EQ(e.flags, FI_MSG | FI_RECV);
    EXPECT_EQ(e.len, lens[k]);
    EXPECT_TRUE(has_pattern(dbuf.data() + k * 65536, lens[k], 40 + k));
  }
  EXPECT_EQ(host_take(2).size(), 2u);
}

// A peer inserted into the AV after the export is reachable from device code at once: a kernel
// sends to a host endpoint that did not exist at export time and receives from it, the source
// resolved to its new AV index, with no second fi_ep_export_xpu.
TEST_F(ProtoExport, APeerInsertedAfterTheExportIsReachableWithoutAnotherExport) {
  fid_cq* cq2 = nullptr;
  fid_ep* ep2 = nullptr;
  fi_cq_attr ca{};
  ca.format = FI_CQ_FORMAT_TAGGED;
  ASSERT_EQ(fi_cq_open(domain_, &ca, &cq2, nullptr), 0);
  ASSERT_EQ(fi_endpoint(domain_, info_, &ep2, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(ep2, &av_->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(ep2, &cq2->fid, FI_TRANSMIT | FI_RECV), 0);
  ASSERT_EQ(fi_enable(ep2), 0);
  fi_addr_t a2 = FI_ADDR_NOTAVAIL;
  insert(&ep2->fid, &a2);
  efa_xpu_peer peer2{};
  size_t len = sizeof(peer2);
  ASSERT_EQ(fi_av_lookup2(av_, a2, &peer2, &len, FI_XPU, ctx_), 0);
  Mr& dbuf = reg(4096);
  Mr& hbuf = reg(4096);
  fill(dbuf.data(), 100, 7);
  auto read_cq2 = [&](fi_cq_tagged_entry* e) {
    for (long spins = 0; spins < 200000000; ++spins) {
      const ssize_t k = fi_cq_read(cq2, e, 1);
      if (k == 1) return true;
      if (k != -FI_EAGAIN) return false;
    }
    return false;
  };
  ASSERT_EQ(fi_trecv(ep2, hbuf.data(), 4096, fi_mr_desc(hbuf.mr), FI_ADDR_UNSPEC, 0x42, 0,
                     ctx_of(1)),
            0);
  ASSERT_EQ(launch(one_group(FI_XPU_WORK_ITEM),
                   [&](const WorkItem&) {
                     EXPECT_EQ(fi_xpu_tsend(&dxep_, dbuf.data(), 100, &dbuf.desc, 0, &peer2, 0x42,
                                            ctx_of(2), 0, FI_XPU_WORK_ITEM),
                               0);
                   }),
            0);
  int err = 0;
  std::vector<fi_cq_tagged_entry> tx = device_take(FI_XPU_WORK_ITEM, 1, &err);
  ASSERT_EQ(err, 0);
  ASSERT_EQ(tx.size(), 1u);
  EXPECT_EQ(tx[0].op_context, ctx_of(2));
  fi_cq_tagged_entry e{};
  ASSERT_TRUE(read_cq2(&e));
  EXPECT_EQ(e.op_context, ctx_of(1));
  EXPECT_EQ(e.len, 100u);
  EXPECT_TRUE(has_pattern(hbuf.data(), 100, 7));
  // Back: the new peer sends, the kernel's receive names it as the source.
  ASSERT_EQ(launch(one_group(FI_XPU_WORK_ITEM),
                   [&](const WorkItem&) {
                     EXPECT_EQ(fi_xpu_trecv(&dxep_, dbuf.data() + 2048, 2048, &dbuf.desc, nullptr,
                                            0x43, 0, ctx_of(3), 0, FI_XPU_WORK_ITEM),
                               0);
                   }),
            0);
  fill(hbuf.data() + 2048, 64, 8);
  ASSERT_EQ(fi_tsend(ep2, hbuf.data() + 2048, 64, fi_mr_desc(hbuf.mr), x_addr_, 0x43, ctx_of(4)),
            0);
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  fi_cq_tagged_entry de{};
  std::atomic<int64_t> got{0};
  ASSERT_EQ(launch(one_group(FI_XPU_WORK_ITEM),
                   [&](const WorkItem&) {
                     for (long spins = 0; spins < 20000000; ++spins) {
                       const int64_t k = fi_xpu_cq_readfrom(&dxcq_, &de, 1, &src, FI_XPU_WORK_ITEM);
                       if (k == -FI_EAGAIN) continue;
                       got = k;
                       break;
                     }
                   }),
            0);
  ASSERT_EQ(got.load(), 1);
  EXPECT_EQ(de.op_context, ctx_of(3));
  EXPECT_EQ(src, a2);
  EXPECT_TRUE(has_pattern(dbuf.data() + 2048, 64, 8));
  ASSERT_TRUE(read_cq2(&e));
  EXPECT_EQ(e.op_context, ctx_of(4));
  EXPECT_EQ(fi_close(&ep2->fid), 0);
  EXPECT_EQ(fi_close(&cq2->fid), 0);
}

// Peers inserted after the export beyond the core's first peer table (16): the table grows in
// memory the XPU context maps, and device code sends to and receives from every one of them.
TEST_F(ProtoExport, ThePeerTableGrowsPastItsFirstSixteenForDeviceCode) {
  constexpr int kPeers = 20;  // with the host peer and the XPU endpoint itself: 22 AV entries
  fid_cq* cq2 = nullptr;
  fi_cq_attr ca{};
  ca.format = FI_CQ_FORMAT_TAGGED;
  ASSERT_EQ(fi_cq_open(domain_, &ca, &cq2, nullptr), 0);
  std::vector<fid_ep*> eps(kPeers, nullptr);
  std::vector<fi_addr_t> addrs(kPeers, FI_ADDR_NOTAVAIL);
  std::vector<efa_xpu_peer> peers(kPeers);
  for (int i = 0; i < kPeers; ++i) {
    ASSERT_EQ(fi_endpoint(domain_, info_, &eps[i], nullptr), 0);
    ASSERT_EQ(fi_ep_bind(eps[i], &av_->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(eps[i], &cq2->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(fi_enable(eps[i]), 0);
    insert(&eps[i]->fid, &addrs[i]);
    size_t len = sizeof(peers[i]);
    ASSERT_EQ(fi_av_lookup2(av_, addrs[i], &peers[i], &len, FI_XPU, ctx_), 0);
  }
  Mr& dbuf = reg(kPeers * 128);
  Mr& hbuf = reg(kPeers * 128);
  auto read_cq2 = [&](size_t want) {
    std::vector<fi_cq_tagged_entry> got;
    fi_cq_tagged_entry e[8];
    for (long spins = 0; got.size() < want && spins < 200000000; ++spins) {
      const ssize_t k = fi_cq_read(cq2, e, 8);
      if (k > 0) got.insert(got.end(), e, e + k);
      else if (k != -FI_EAGAIN) break;
    }
    return got;
  };
  // Device code to every new peer: each receives its own tag and bytes.
  for (int i = 0; i < kPeers; ++i) {
    fill(dbuf.data() + i * 128, 100, 50 + i);
    ASSERT_EQ(fi_trecv(eps[i], hbuf.data() + i * 128, 128, fi_mr_desc(hbuf.mr), FI_ADDR_UNSPEC,
                       0x500 + i, 0, ctx_of(i)),
              0);
  }
  ASSERT_EQ(launch(one_group(FI_XPU_WORK_ITEM),
                   [&](const WorkItem&) {
                     for (int i = 0; i < kPeers; ++i)
                       EXPECT_EQ(fi_xpu_tsend(&dxep_, dbuf.data() + i * 128, 100, &dbuf.desc, 0,
                                              &peers[i], 0x500 + i, ctx_of(100 + i), 0,
                                              FI_XPU_WORK_ITEM),
                                 0) << i;
                   }),
            0);
  int err = 0;
  EXPECT_EQ(device_take(FI_XPU_WORK_ITEM, kPeers, &err).size(), static_cast<size_t>(kPeers));
  EXPECT_EQ(err, 0);
  std::vector<fi_cq_tagged_entry> got = read_cq2(kPeers);
  ASSERT_EQ(got.size(), static_cast<size_t>(kPeers));
  for (const fi_cq_tagged_entry& e : got) {
    const uint32_t i = ctx_index(e.op_context);
    ASSERT_LT(i, static_cast<uint32_t>(kPeers));
    EXPECT_EQ(e.tag, 0x500u + i);
    EXPECT_TRUE(has_pattern(hbuf.data() + i * 128, 100, 50 + i)) << i;
  }
  // Every new peer to device code: the receives name each sender, resolved to its AV index.
  ASSERT_EQ(launch(one_group(FI_XPU_WORK_ITEM),
                   [&](const WorkItem&) {
                     for (int i = 0; i < kPeers; ++i)
                       EXPECT_EQ(fi_xpu_trecv(&dxep_, dbuf.data() + i * 128, 128, &dbuf.desc,
                                              &peers[i], 0x600 + i, 0, ctx_of(200 + i), 0,
                                              FI_XPU_WORK_ITEM),
                                 0) << i;
                   }),
            0);
  for (int i = 0; i < kPeers; ++i) {
    fill(hbuf.data() + i * 128, 64, 80 + i);
    ASSERT_EQ(fi_tsend(eps[i], hbuf.data() + i * 128, 64, fi_mr_desc(hbuf.mr), x_addr_, 0x600 + i,
                       ctx_of(300 + i)),
              0);
  }
  std::vector<fi_cq_tagged_entry> de(kPeers);
  std::vector<fi_addr_t> src(kPeers, FI_ADDR_NOTAVAIL);
  std::atomic<int64_t> n{0};
  ASSERT_EQ(launch(one_group(FI_XPU_WORK_ITEM),
                   [&](const WorkItem&) {
                     for (long spins = 0; n < kPeers && spins < 20000000; ++spins) {
                       const int64_t k = fi_xpu_cq_readfrom(&dxcq_, &de[n], 1, &src[n], FI_XPU_WORK_ITEM);
                       if (k == -FI_EAGAIN) continue;
                       if (k != 1) break;
                       ++n;
                     }
                   }),
            0);
  ASSERT_EQ(n.load(), kPeers);
  for (int k = 0; k < kPeers; ++k) {
    const uint32_t i = ctx_index(de[k].op_context) - 200;
    ASSERT_LT(i, static_cast<uint32_t>(kPeers));
    EXPECT_EQ(src[k], addrs[i]) << i;
    EXPECT_TRUE(has_pattern(dbuf.data() + i * 128, 64, 80 + i)) << i;
  }
  EXPECT_EQ(read_cq2(kPeers).size(), static_cast<size_t>(kPeers));
  for (fid_ep* ep : eps) EXPECT_EQ(fi_close(&ep->fid), 0);
  EXPECT_EQ(fi_close(&cq2->fid), 0);
}

// Fetching adds from every work-item of every scope on one host word, a compare-and-swap race
// and a plain atomic: executed by the host peer's core, completed through the XPU CQ.
TEST_F(ProtoExport, AtomicsFromEveryScopeOnTheHostPeer) {
  Mr& word = reg(64);
  Mr& results = reg(64 * 8);
  const uint64_t key = fi_mr_key(word.mr);
  std::vector<uint64_t> fetched;
  uint32_t total = 0;
  for (int scope : kAllScopes) {
    SCOPED_TRACE(scope_name(scope));
    const runtime::LaunchConfig cfg = one_group(scope);
    const uint32_t n = cfg.grid * cfg.workgroup_size;
    std::atomic<int> bad{0};
    const uint64_t three = 3;
    ASSERT_EQ(launch(cfg,
                     [&](const WorkItem& it) {
                       const uint32_t g = it.global_id;
                       if (fi_xpu_fetch_atomic(&dxep_, &three, 1, nullptr, results.data() + 8 * g,
                                               &results.desc, &peer_h_, word.addr(), key, FI_UINT64,
                                               FI_SUM, ctx_of(g), 0, scope) != 0)
                         bad++;
                     }),
              0);
    ASSERT_EQ(bad.load(), 0);
    int err = 0;
    std::vector<fi_cq_tagged_entry> done = device_take(scope, n, &err);
    ASSERT_EQ(err, 0);
    ASSERT_EQ(done.size(), n);
    for (const auto& e : done) EXPECT_EQ(e.flags, FI_ATOMIC | FI_READ);
    for (uint32_t g = 0; g < n; ++g) {
      uint64_t v;
      memcpy(&v, results.data() + 8 * g, 8);
      fetched.push_back(v);
    }
    total += n;
  }
  uint64_t final_value;
  memcpy(&final_value, word.data(), 8);
  EXPECT_EQ(final_value, 3u * total);
  std::sort(fetched.begin(), fetched.end());
  for (uint32_t i = 0; i < total; ++i) EXPECT_EQ(fetched[i], 3u * i);
  // One winner of a compare-and-swap race in a work-group, then a plain FI_MAX.
  const runtime::LaunchConfig cfg = one_group(FI_XPU_WORK_GROUP);
  const uint32_t n = cfg.grid * cfg.workgroup_size;
  std::vector<uint32_t> mine(n);
  const uint32_t zero = 0;
  std::atomic<int> bad{0};
  ASSERT_EQ(launch(cfg,
                   [&](const WorkItem& it) {
                     const uint32_t g = it.global_id;
                     mine[g] = g + 1;
                     if (fi_xpu_compare_atomic(&dxep_, &mine[g], 1, nullptr, &zero, nullptr,
                                               results.data() + 4 * g, &results.desc, &peer_h_,
                                               word.addr() + 16, key, FI_UINT32, FI_CSWAP,
                                               ctx_of(g), 0, FI_XPU_WORK_GROUP) != 0)
                       bad++;
                   }),
            0);
  const uint64_t big = 1234;
  ASSERT_EQ(fi_xpu_atomic(&dxep_, &big, 1, nullptr, &peer_h_, word.addr() + 32, key, FI_UINT64,
                          FI_MAX, ctx_of(99), 0, FI_XPU_WORK_ITEM),
            0);
  ASSERT_EQ(bad.load(), 0);
  int err = 0;
  std::vector<fi_cq_tagged_entry> done = device_take(FI_XPU_WORK_ITEM, n + 1, &err);
  ASSERT_EQ(err, 0);
  ASSERT_EQ(done.size(), n + 1);
  uint32_t winners = 0, winner = 0;
  for (uint32_t g = 0; g < n; ++g) {
    uint32_t old;
    memcpy(&old, results.data() + 4 * g, 4);
    if (old == 0) {
      winners++;
      winner = g + 1;
    }
  }
  EXPECT_EQ(winners, 1u);
  uint32_t swapped;
  memcpy(&swapped, word.data() + 16, 4);
  EXPECT_EQ(swapped, winner);
  uint64_t maxed;
  memcpy(&maxed, word.data() + 32, 8);
  EXPECT_EQ(maxed, 1234u);
  // Fetching and compare atomics count as reads, plain ones as writes.
  EXPECT_EQ(fi_xpu_cntr_read(&dxtx_, FI_XPU_WORK_ITEM), total + n + 1);
}

}  // namespace
}  // namespace xpufab::testing
