// Host setup for device-API tests: XPU endpoints on the emulated EFA device, each with its own
// XPU CQ and counters, exported, with raw peer addresses and MR descriptors for kernels.
#ifndef XPUFAB_TESTING_XPU_XPU_FIXTURE_H_
#define XPUFAB_TESTING_XPU_XPU_FIXTURE_H_

#include <rdma/fi_xpu_device.h>

#include <string>
#include <vector>

#include "testing/conformance_util.h"

namespace xpufab::testing {

struct XpuEpSetup {
  fi_cq_format format = FI_CQ_FORMAT_DATA;
  size_t tx_size = 0;  // 0: provider default
  size_t rx_size = 0;
  size_t cq_size = 0;
};

// One exported XPU endpoint with its CQ and counters (tx: FI_SEND|FI_WRITE|FI_READ,
// rx: FI_RECV|FI_REMOTE_WRITE).
struct XpuEp {
  fid_ep* ep = nullptr;
  fid_cq* cq = nullptr;
  fid_cntr* tx_cntr = nullptr;
  fid_cntr* rx_cntr = nullptr;
  fi_addr_t addr = FI_ADDR_NOTAVAIL;  // in the shared AV
  efa_xpu_peer peer{};                // fi_av_lookup2(FI_XPU) of addr
  fid_xpu_ep xep{};
  fid_xpu_cq xcq{};
  fid_xpu_cntr xtx{};
  fid_xpu_cntr xrx{};
};

// A registered buffer with its device descriptor.
struct XpuBuf {
  std::vector<uint8_t> bytes;
  fid_mr* mr = nullptr;
  efa_xpu_desc desc{};
  uint64_t key = 0;
  uint8_t* data() { return bytes.data(); }
  uint64_t addr() { return reinterpret_cast<uintptr_t>(bytes.data()); }
};

// Fabric, domain, XPU context (host-memory defaults) and AV on the emulated device.
class XpuWorld {
 public:
  // Returns an empty string or what failed.
  // `xa` replaces the default context attributes (FI_HMEM_SYSTEM, provider callbacks).
  std::string open(const fi_xpu_attr* xa_in = nullptr) {
    select_backend("emu");
    fi_info* hints = make_hints(true);
    int rc = fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, hints, &info_);
    fi_freeinfo(hints);
    if (rc) return "fi_getinfo " + std::to_string(rc);
    if ((rc = fi_fabric(info_->fabric_attr, &fabric_, nullptr))) return "fi_fabric";
    if ((rc = fi_domain(fabric_, info_, &domain_, nullptr))) return "fi_domain";
    fi_av_attr aa{};
    aa.type = FI_AV_TABLE;
    if ((rc = fi_av_open(domain_, &aa, &av_, nullptr))) return "fi_av_open";
    fi_xpu_attr xa{};
    xa.iface = FI_HMEM_SYSTEM;
    if (xa_in) xa = *xa_in;
    if ((rc = fi_xpu_ctx(domain_, &xa, &ctx_, nullptr))) return "fi_xpu_ctx " + std::to_string(rc);
    return "";
  }

  // Creates, binds, enables and inserts one XPU EP (not yet exported).
  std::string add_ep(XpuEp* x, const XpuEpSetup& s = XpuEpSetup()) {
    fi_cq_attr ca{};
    ca.format = s.format;
    ca.flags = FI_XPU;
    ca.xpu_ctx = ctx_;
    ca.size = s.cq_size;
    if (fi_cq_open(domain_, &ca, &x->cq, nullptr)) return "fi_cq_open";
    owned_.push_back(&x->cq->fid);
    fi_cntr_attr na{};
    na.events = FI_CNTR_EVENTS_COMP;
    na.flags = FI_XPU;
    na.xpu_ctx = ctx_;
    if (fi_cntr_open(domain_, &na, &x->tx_cntr, nullptr)) return "fi_cntr_open tx";
    owned_.push_back(&x->tx_cntr->fid);
    if (fi_cntr_open(domain_, &na, &x->rx_cntr, nullptr)) return "fi_cntr_open rx";
    owned_.push_back(&x->rx_cntr->fid);
    fi_info* i = fi_dupinfo(info_);
    i->ep_attr->xpu_ctx = ctx_;
    if (s.tx_size) i->tx_attr->size = s.tx_size;
    if (s.rx_size) i->rx_attr->size = s.rx_size;
    int rc = fi_endpoint2(domain_, i, &x->ep, FI_XPU, nullptr);
    fi_freeinfo(i);
    if (rc) return "fi_endpoint2 " + std::to_string(rc);
    owned_.push_back(&x->ep->fid);
    if (fi_ep_bind(x->ep, &av_->fid, 0)) return "bind av";
    if (fi_ep_bind(x->ep, &x->cq->fid, FI_TRANSMIT | FI_RECV)) return "bind cq";
    if (fi_ep_bind(x->ep, &x->tx_cntr->fid, FI_SEND | FI_WRITE | FI_READ)) return "bind tx cntr";
    if (fi_ep_bind(x->ep, &x->rx_cntr->fid, FI_RECV | FI_REMOTE_WRITE)) return "bind rx cntr";
    if ((rc = fi_enable(x->ep))) return "fi_enable " + std::to_string(rc);
    return insert(&x->ep->fid, &x->addr);
  }

  // Exports everything and looks up raw peer addresses (after all EPs are inserted).
  std::string export_ep(XpuEp* x) {
    if (fi_ep_export_xpu(x->ep, 0, &x->xep)) return "fi_ep_export_xpu";
    if (fi_cq_export_xpu(x->cq, 0, &x->xcq)) return "fi_cq_export_xpu";
    if (fi_cntr_export_xpu(x->tx_cntr, 0, &x->xtx)) return "fi_cntr_export_xpu tx";
    if (fi_cntr_export_xpu(x->rx_cntr, 0, &x->xrx)) return "fi_cntr_export_xpu rx";
    size_t len = sizeof(x->peer);
    if (fi_av_lookup2(av_, x->addr, &x->peer, &len, FI_XPU, ctx_)) return "fi_av_lookup2";
    return "";
  }

  std::string insert(fid* ep, fi_addr_t* addr) {
    char name[64];
    size_t len = sizeof(name);
    if (fi_getname(ep, name, &len)) return "fi_getname";
    if (fi_av_insert(av_, name, 1, addr, 0, nullptr) != 1) return "fi_av_insert";
    return "";
  }

  std::string reg(XpuBuf* b, size_t n) {
    b->bytes.assign(n ? n : 1, 0);
    int rc = fi_mr_reg(domain_, b->bytes.data(), b->bytes.size(),
                       FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0,
                       0, &b->mr, nullptr);
    if (rc) return "fi_mr_reg " + std::to_string(rc);
    owned_mr_.push_back(&b->mr->fid);
    size_t len = sizeof(b->desc);
    if (fi_mr_get_xpu_desc(b->mr, &b->desc, &len, FI_XPU, ctx_)) return "fi_mr_get_xpu_desc";
    b->key = fi_mr_key(b->mr);
    return "";
  }

  // Closes in reverse order; returns the number of failed closes.
  int close() {
    int bad = 0;
    for (auto it = owned_mr_.rbegin(); it != owned_mr_.rend(); ++it) bad += fi_close(*it) != 0;
    owned_mr_.clear();
    // EPs before the CQs and counters they hold.
    for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) {
      if ((*it)->fclass != FI_CLASS_EP) continue;
      bad += fi_close(*it) != 0;
      *it = nullptr;
    }
    for (auto it = owned_.rbegin(); it != owned_.rend(); ++it)
      if (*it) bad += fi_close(*it) != 0;
    owned_.clear();
    if (ctx_) bad += fi_close(&ctx_->fid) != 0;
    if (av_) bad += fi_close(&av_->fid) != 0;
    if (domain_) bad += fi_close(&domain_->fid) != 0;
    if (fabric_) bad += fi_close(&fabric_->fid) != 0;
    ctx_ = nullptr;
    av_ = nullptr;
    domain_ = nullptr;
    fabric_ = nullptr;
    if (info_) fi_freeinfo(info_);
    info_ = nullptr;
    return bad;
  }

  // Host objects in the same domain (for host <-> device traffic); closed by close().
  void own(fid* f) { owned_.push_back(f); }

  fi_info* info() { return info_; }
  fid_domain* domain() { return domain_; }
  fid_av* av() { return av_; }
  fid_xpu_ctx* ctx() { return ctx_; }

 private:
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_xpu_ctx* ctx_ = nullptr;
  std::vector<fid*> owned_;
  std::vector<fid*> owned_mr_;
};

}  // namespace xpufab::testing

#endif  // XPUFAB_TESTING_XPU_XPU_FIXTURE_H_
