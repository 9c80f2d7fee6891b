#include "hw/hw_backend.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace xpufab {
namespace hw {
namespace {

using backend::Ah;
using backend::CompCntr;
using backend::CompCntrInitAttr;
using backend::Cq;
using backend::CqAttr;
using backend::CqInitAttr;
using backend::DeviceAttr;
using backend::DeviceInfo;
using backend::EventHandler;
using backend::Mr;
using backend::MrInitAttr;
using backend::Pd;
using backend::Qp;
using backend::QpAttr;
using backend::QpInitAttr;
using backend::QpState;
using backend::WqAttr;

constexpr uint32_t kEfaVendorId = 0x1d0f;
constexpr uint8_t kPort = 1;
constexpr uint32_t kCqeSize = 32;

uint32_t round_up_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v && p < (1u << 31)) p <<= 1;
  return p;
}

// Lane rate (Gb/s, rounded as EFA reports it) times lane count from ibv_port_attr's encodings.
uint32_t link_speed_gbps(uint8_t speed, uint8_t width) {
  uint32_t lane = 0;
  switch (speed) {
    case 1: lane = 2; break;     // SDR 2.5
    case 2: lane = 5; break;     // DDR
    case 4: case 8: lane = 10; break;  // QDR, FDR10
    case 16: lane = 14; break;   // FDR
    case 32: lane = 25; break;   // EDR
    case 64: lane = 50; break;   // HDR
    case 128: lane = 100; break; // NDR
    default: lane = 0;
  }
  uint32_t lanes = 0;
  switch (width) {
    case 1: lanes = 1; break;
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    case 16: lanes = 2; break;
    default: lanes = 0;
  }
  return lane * lanes;
}

int query_port_attr(const RdmaApi& api, ibv_context* ctx, ibv_port_attr* attr) {
  std::memset(attr, 0, sizeof(*attr));
  // Same dispatch as verbs.h's inline ibv_query_port: the extended op knows the full struct.
  verbs_context* vctx = verbs_get_ctx_op(ctx, query_port);
  if (vctx != nullptr) return rdma_error(vctx->query_port(ctx, kPort, attr, sizeof(*attr)));
  return rdma_error(api.query_port(ctx, kPort, reinterpret_cast<_compat_ibv_port_attr*>(attr)));
}

// ---- objects ----

class HwPd final : public Pd {
 public:
  explicit HwPd(ibv_pd* pd) : pd_(pd) {}
  uint32_t handle() const override { return pd_->handle; }
  ibv_pd* pd_;
  int users_ = 0;  // MRs, QPs, AHs
};

class HwMr final : public Mr {
 public:
  HwMr(ibv_mr* mr, HwPd* pd, uint64_t iova, size_t length)
      : mr_(mr), pd_(pd), iova_(iova), length_(length) {}
  uint32_t lkey() const override { return mr_->lkey; }
  uint32_t rkey() const override { return mr_->rkey; }
  uint64_t iova() const override { return iova_; }
  size_t length() const override { return length_; }
  ibv_mr* mr_;
  HwPd* pd_;
  uint64_t iova_;
  size_t length_;
};

class HwAh final : public Ah {
 public:
  HwAh(ibv_ah* ah, HwPd* pd, uint16_t ahn) : ah_(ah), pd_(pd), ahn_(ahn) {}
  uint16_t ahn() const override { return ahn_; }
  ibv_ah* ah_;
  HwPd* pd_;
  uint16_t ahn_;
};

class HwCq final : public Cq {
 public:
  HwCq(const RdmaApi* api, ibv_cq_ex* cq, ibv_comp_channel* channel, int wait_fd)
      : api_(api), cq_(cq), channel_(channel), wait_fd_(wait_fd) {}
  ~HwCq() override {
    if (wait_fd_ >= 0) close(wait_fd_);
  }

  int query(CqAttr* attr) const override {
    if (attr == nullptr) return -EINVAL;
    if (api_->efadv_query_cq == nullptr) return -EOPNOTSUPP;
    efadv_compat_cq_attr a;
    std::memset(&a, 0, sizeof(a));
    int rc = rdma_error(api_->efadv_query_cq(ibv_cq_ex_to_cq(cq_), &a, sizeof(a)));
    if (rc != 0) return rc;
    attr->buffer = a.buffer;
    attr->entry_size = a.entry_size;
    attr->num_entries = a.num_entries;
    attr->doorbell = a.doorbell;
    return 0;
  }

  int arm() override {
    if (channel_ == nullptr) return -EOPNOTSUPP;
    std::lock_guard<std::mutex> lock(mu_);
    drain_events();
    return rdma_error(ibv_req_notify_cq(ibv_cq_ex_to_cq(cq_), 0));
  }

  // Callers poll this fd and then read() it, as the backend interface allows. A read of the
  // completion channel itself would take a verbs event that rdma-core never sees acknowledged,
  // and ibv_destroy_cq would then wait for that acknowledgement forever. So the fd handed out is
  // an epoll set holding the channel: readable exactly when the channel is, while read() on it
  // fails harmlessly; the events themselves are taken and acknowledged by arm() and at destroy.
  int event_fd() const override { return wait_fd_; }

  // Consumes and acknowledges every pending event (the fd is non-blocking), so that destroying
  // the CQ never waits for an acknowledgement.
  void drain_events() {
    if (channel_ == nullptr) return;
    for (;;) {
      ibv_cq* ev_cq = nullptr;
      void* ev_ctx = nullptr;
      if (api_->get_cq_event(channel_, &ev_cq, &ev_ctx) != 0) break;
      api_->ack_cq_events(ev_cq, 1);
    }
  }

  const RdmaApi* api_;
  ibv_cq_ex* cq_;
  ibv_comp_channel* channel_;
  int wait_fd_;  // epoll set over channel_->fd, or -1
  std::mutex mu_;
  int users_ = 0;  // QPs
};

class HwCntr final : public CompCntr {
 public:
  explicit HwCntr(ibv_compat_comp_cntr* cntr) : cntr_(cntr) {}
  ibv_compat_comp_cntr* cntr_;
  int attached_ = 0;  // QPs
};

class HwDevice;

class HwQp final : public Qp {
 public:
  HwQp(HwDevice* dev, ibv_qp* qp, HwPd* pd, HwCq* scq, HwCq* rcq)
      : dev_(dev), qp_(qp), pd_(pd), send_cq_(scq), recv_cq_(rcq) {}
  uint32_t qpn() const override { return qp_->qp_num; }
  QpState state() const override;
  int modify(const QpAttr& attr, uint32_t attr_mask) override;
  int query_wqs(WqAttr* sq, WqAttr* rq) const override;
  int attach_comp_cntr(CompCntr* cntr, uint32_t cntr_ops) override;
  int detach_comp_cntr(CompCntr* cntr) override;

  HwDevice* dev_;
  ibv_qp* qp_;
  HwPd* pd_;
  HwCq* send_cq_;
  HwCq* recv_cq_;
  QpState state_ = QpState::kReset;
  uint32_t qkey_ = 0;
  std::vector<HwCntr*> cntrs_;
};

template <typename Base, typename Impl>
Impl* find(const std::map<const Base*, std::unique_ptr<Impl>>& objects, const Base* key) {
  auto it = objects.find(key);
  return it == objects.end() ? nullptr : it->second.get();
}

class HwDevice final : public backend::Device {
 public:
  HwDevice(std::shared_ptr<const RdmaApi> api, ibv_context* ctx, const DeviceAttr& attr)
      : api_(std::move(api)), ctx_(ctx), attr_(attr) {}

  ~HwDevice() override {
    std::lock_guard<std::mutex> lock(mu_);
    // Dependents first, so each destroy below finds nothing still referencing its object.
    for (auto& it : qps_) api_->destroy_qp(it.second->qp_);
    for (auto& it : ahs_) api_->destroy_ah(it.second->ah_);
    for (auto& it : mrs_) api_->dereg_mr(it.second->mr_);
    for (auto& it : cntrs_) api_->destroy_comp_cntr(it.second->cntr_);
    for (auto& it : cqs_) release_cq(it.second.get());
    for (auto& it : pds_) api_->dealloc_pd(it.second->pd_);
    api_->close_device(ctx_);
  }

  int query(DeviceAttr* attr) const override {
    if (attr == nullptr) return -EINVAL;
    *attr = attr_;
    return 0;
  }

  int alloc_pd(Pd** pd_p) override {
    if (pd_p == nullptr) return -EINVAL;
    std::lock_guard<std::mutex> lock(mu_);
    ibv_pd* pd = api_->alloc_pd(ctx_);
    if (pd == nullptr) return rdma_error(-1);
    auto obj = std::make_unique<HwPd>(pd);
    *pd_p = obj.get();
    pds_[obj.get()] = std::move(obj);
    return 0;
  }

  int dealloc_pd(Pd* pd) override {
    std::lock_guard<std::mutex> lock(mu_);
    HwPd* p = find(pds_, static_cast<const Pd*>(pd));
    if (p == nullptr) return -EINVAL;
    if (p->users_ > 0) return -EBUSY;
    int rc = rdma_error(api_->dealloc_pd(p->pd_));
    if (rc == 0) pds_.erase(pd);
    return rc;
  }

  int reg_mr(Pd* pd, const MrInitAttr& attr, Mr** mr_p) override {
    if (mr_p == nullptr || attr.length == 0) return -EINVAL;
    constexpr uint32_t kKnownAccess = backend::kAccessLocalWrite | backend::kAccessRemoteWrite |
                                      backend::kAccessRemoteRead;
    if ((attr.access & ~kKnownAccess) != 0) return -EINVAL;
    int access = 0;
    if (attr.access & backend::kAccessLocalWrite) access |= IBV_ACCESS_LOCAL_WRITE;
    if (attr.access & backend::kAccessRemoteWrite) access |= IBV_ACCESS_REMOTE_WRITE;
    if (attr.access & backend::kAccessRemoteRead) access |= IBV_ACCESS_REMOTE_READ;
    std::lock_guard<std::mutex> lock(mu_);
    HwPd* p = find(pds_, static_cast<const Pd*>(pd));
    if (p == nullptr) return -EINVAL;
    const uint64_t va = reinterpret_cast<uintptr_t>(attr.addr);
    const uint64_t iova = attr.iova != 0 ? attr.iova : va;
    ibv_mr* mr = nullptr;
    if (attr.dmabuf_fd >= 0) {
      if (api_->reg_dmabuf_mr == nullptr) return -EOPNOTSUPP;
      mr = api_->reg_dmabuf_mr(p->pd_, attr.dmabuf_offset, attr.length, iova, attr.dmabuf_fd,
                               access);
    } else if (attr.addr == nullptr) {
      return -EINVAL;
    } else if (iova != va) {
      if (api_->reg_mr_iova2 == nullptr) return -EOPNOTSUPP;
      mr = api_->reg_mr_iova2(p->pd_, attr.addr, attr.length, iova,
                              static_cast<unsigned int>(access));
    } else {
      mr = api_->reg_mr(p->pd_, attr.addr, attr.length, access);
    }
    if (mr == nullptr) return rdma_error(-1);
    auto obj = std::make_unique<HwMr>(mr, p, iova, attr.length);
    ++p->users_;
    *mr_p = obj.get();
    mrs_[obj.get()] = std::move(obj);
    return 0;
  }

  int dereg_mr(Mr* mr) override {
    std::lock_guard<std::mutex> lock(mu_);
    HwMr* m = find(mrs_, static_cast<const Mr*>(mr));
    if (m == nullptr) return -EINVAL;
    int rc = rdma_error(api_->dereg_mr(m->mr_));
    if (rc != 0) return rc;
    --m->pd_->users_;
    mrs_.erase(mr);
    return 0;
  }

  int create_cq(const CqInitAttr& attr, Cq** cq_p) override {
    if (cq_p == nullptr || attr.entries == 0) return -EINVAL;
    const bool ext = attr.ext_fd >= 0 || attr.ext_buffer != nullptr;
    if (ext && !(attr_.device_caps & backend::kCapCqWithExtMem)) return -EOPNOTSUPP;
    if (ext && attr.ext_fd < 0) return -EINVAL;  // the NIC writes through the dma-buf only
    if (ext && attr.ext_length < static_cast<size_t>(round_up_pow2(attr.entries)) * kCqeSize) {
      return -EINVAL;
    }
    if (attr.with_sgid && !(attr_.device_caps & backend::kCapCqWithSgid)) return -EOPNOTSUPP;

    std::lock_guard<std::mutex> lock(mu_);
    ibv_comp_channel* channel = nullptr;
    int wait_fd = -1;
    if (attr.with_event_fd) {
      channel = api_->create_comp_channel(ctx_);
      if (channel == nullptr) return rdma_error(-1);
      int flags = fcntl(channel->fd, F_GETFL);
      wait_fd = epoll_create1(EPOLL_CLOEXEC);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = channel->fd;
      if (flags < 0 || fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) < 0 || wait_fd < 0 ||
          epoll_ctl(wait_fd, EPOLL_CTL_ADD, channel->fd, &ev) < 0) {
        int rc = -errno;
        if (wait_fd >= 0) close(wait_fd);
        api_->destroy_comp_channel(channel);
        return rc;
      }
    }
    ibv_cq_init_attr_ex cq_attr;
    std::memset(&cq_attr, 0, sizeof(cq_attr));
    cq_attr.cqe = attr.entries;
    cq_attr.channel = channel;
    cq_attr.wc_flags = IBV_WC_STANDARD_FLAGS;
    efadv_compat_cq_init_attr efa_attr;
    std::memset(&efa_attr, 0, sizeof(efa_attr));
    if (attr.with_sgid) efa_attr.wc_flags |= EFADV_COMPAT_WC_EX_WITH_SGID;
    uint32_t inlen = EFADV_COMPAT_CQ_INIT_ATTR_INLEN_V43;
    if (ext) {
      efa_attr.flags = EFADV_COMPAT_CQ_INIT_FLAGS_EXT_MEM_DMABUF;
      efa_attr.ext_mem_dmabuf.buffer = static_cast<uint8_t*>(attr.ext_buffer);
      efa_attr.ext_mem_dmabuf.length = attr.ext_length;
      efa_attr.ext_mem_dmabuf.offset = attr.ext_offset;
      efa_attr.ext_mem_dmabuf.fd = attr.ext_fd;
      inlen = sizeof(efa_attr);
    }
    ibv_cq_ex* cq = api_->efadv_create_cq(ctx_, &cq_attr, &efa_attr, inlen);
    if (cq == nullptr) {
      int rc = rdma_error(-1);
      if (wait_fd >= 0) close(wait_fd);
      if (channel != nullptr) api_->destroy_comp_channel(channel);
      return rc;
    }
    auto obj = std::make_unique<HwCq>(api_.get(), cq, channel, wait_fd);
    *cq_p = obj.get();
    cqs_[obj.get()] = std::move(obj);
    return 0;
  }

  int destroy_cq(Cq* cq) override {
    std::lock_guard<std::mutex> lock(mu_);
    HwCq* c = find(cqs_, static_cast<const Cq*>(cq));
    if (c == nullptr) return -EINVAL;
    if (c->users_ > 0) return -EBUSY;
    int rc = release_cq(c);
    if (rc == 0) cqs_.erase(cq);
    return rc;
  }

  int create_qp(const QpInitAttr& attr, Qp** qp_p) override {
    if (qp_p == nullptr) return -EINVAL;
    constexpr uint32_t kKnownFlags = backend::kQpUnsolicitedWriteRecv | backend::kQpInlineWrite;
    if ((attr.flags & ~kKnownFlags) != 0) return -EINVAL;
    if ((attr.flags & backend::kQpUnsolicitedWriteRecv) &&
        !(attr_.device_caps & backend::kCapUnsolicitedWriteRecv)) {
      return -EOPNOTSUPP;
    }
    std::lock_guard<std::mutex> lock(mu_);
    HwPd* pd = find(pds_, static_cast<const Pd*>(attr.pd));
    HwCq* scq = find(cqs_, static_cast<const Cq*>(attr.send_cq));
    HwCq* rcq = find(cqs_, static_cast<const Cq*>(attr.recv_cq));
    if (pd == nullptr || scq == nullptr || rcq == nullptr) return -EINVAL;
    if (attr.type != backend::QpType::kSrd && attr.type != backend::QpType::kUd) return -EOPNOTSUPP;

    ibv_qp* qp = nullptr;
    if (attr.type == backend::QpType::kUd) {
      // UD is a core verbs type: no efadv attributes, so no flags and no service level.
      if (attr.flags != 0 || attr.sl != 0) return -EINVAL;
      ibv_qp_init_attr ud_attr;
      std::memset(&ud_attr, 0, sizeof(ud_attr));
      ud_attr.qp_type = IBV_QPT_UD;
      ud_attr.send_cq = ibv_cq_ex_to_cq(scq->cq_);
      ud_attr.recv_cq = ibv_cq_ex_to_cq(rcq->cq_);
      ud_attr.cap.max_send_wr = attr.max_send_wr;
      ud_attr.cap.max_recv_wr = attr.max_recv_wr;
      ud_attr.cap.max_send_sge = attr.max_send_sge;
      ud_attr.cap.max_recv_sge = attr.max_recv_sge;
      ud_attr.cap.max_inline_data = attr.max_inline_data;
      qp = api_->create_qp(pd->pd_, &ud_attr);
      if (qp == nullptr) return rdma_error(-1);
      return adopt_qp(qp, pd, scq, rcq, qp_p);
    }

    ibv_qp_init_attr_ex qp_attr;
    std::memset(&qp_attr, 0, sizeof(qp_attr));
    qp_attr.qp_type = IBV_QPT_DRIVER;
    qp_attr.send_cq = ibv_cq_ex_to_cq(scq->cq_);
    qp_attr.recv_cq = ibv_cq_ex_to_cq(rcq->cq_);
    qp_attr.cap.max_send_wr = attr.max_send_wr;
    qp_attr.cap.max_recv_wr = attr.max_recv_wr;
    qp_attr.cap.max_send_sge = attr.max_send_sge;
    qp_attr.cap.max_recv_sge = attr.max_recv_sge;
    qp_attr.cap.max_inline_data = attr.max_inline_data;
    qp_attr.comp_mask = IBV_QP_INIT_ATTR_PD;
    qp_attr.pd = pd->pd_;

    efadv_compat_qp_init_attr efa_attr;
    std::memset(&efa_attr, 0, sizeof(efa_attr));
    efa_attr.driver_qp_type = EFADV_COMPAT_QP_DRIVER_TYPE_SRD;
    if (attr.flags & backend::kQpUnsolicitedWriteRecv) {
      efa_attr.flags |= EFADV_COMPAT_QP_FLAGS_UNSOLICITED_WRITE_RECV;
    }
    if (attr.flags & backend::kQpInlineWrite) efa_attr.flags |= EFADV_COMPAT_QP_FLAGS_INLINE_WRITE;
    efa_attr.sl = attr.sl;
    qp = api_->efadv_create_qp_ex(ctx_, &qp_attr, &efa_attr, EFADV_COMPAT_QP_INIT_ATTR_INLEN_SL);
    if (qp == nullptr) return rdma_error(-1);
    return adopt_qp(qp, pd, scq, rcq, qp_p);
  }

  // Under mu_: wraps a created verbs QP and takes its references.
  int adopt_qp(ibv_qp* qp, HwPd* pd, HwCq* scq, HwCq* rcq, Qp** qp_p) {
    auto obj = std::make_unique<HwQp>(this, qp, pd, scq, rcq);
    ++pd->users_;
    ++scq->users_;
    ++rcq->users_;
    *qp_p = obj.get();
    qps_[obj.get()] = std::move(obj);
    return 0;
  }

  int destroy_qp(Qp* qp) override {
    std::lock_guard<std::mutex> lock(mu_);
    HwQp* q = find(qps_, static_cast<const Qp*>(qp));
    if (q == nullptr) return -EINVAL;
    int rc = rdma_error(api_->destroy_qp(q->qp_));
    if (rc != 0) return rc;
    --q->pd_->users_;
    --q->send_cq_->users_;
    --q->recv_cq_->users_;
    for (HwCntr* c : q->cntrs_) --c->attached_;
    qps_.erase(qp);
    return 0;
  }

  int create_ah(Pd* pd, const uint8_t gid[16], Ah** ah_p) override {
    if (gid == nullptr || ah_p == nullptr) return -EINVAL;
    std::lock_guard<std::mutex> lock(mu_);
    HwPd* p = find(pds_, static_cast<const Pd*>(pd));
    if (p == nullptr) return -EINVAL;
    ibv_ah_attr ah_attr;
    std::memset(&ah_attr, 0, sizeof(ah_attr));
    ah_attr.is_global = 1;
    ah_attr.port_num = kPort;
    std::memcpy(ah_attr.grh.dgid.raw, gid, 16);
    ibv_ah* ah = api_->create_ah(p->pd_, &ah_attr);
    if (ah == nullptr) return rdma_error(-1);
    efadv_compat_ah_attr efa_attr;
    std::memset(&efa_attr, 0, sizeof(efa_attr));
    int rc = rdma_error(api_->efadv_query_ah(ah, &efa_attr, sizeof(efa_attr)));
    if (rc != 0) {
      api_->destroy_ah(ah);
      return rc;
    }
    auto obj = std::make_unique<HwAh>(ah, p, efa_attr.ahn);
    ++p->users_;
    *ah_p = obj.get();
    ahs_[obj.get()] = std::move(obj);
    return 0;
  }

  int destroy_ah(Ah* ah) override {
    std::lock_guard<std::mutex> lock(mu_);
    HwAh* a = find(ahs_, static_cast<const Ah*>(ah));
    if (a == nullptr) return -EINVAL;
    int rc = rdma_error(api_->destroy_ah(a->ah_));
    if (rc != 0) return rc;
    --a->pd_->users_;
    ahs_.erase(ah);
    return 0;
  }

  int create_comp_cntr(const CompCntrInitAttr& attr, CompCntr** cntr_p) override {
    if (cntr_p == nullptr) return -EINVAL;
    if (api_->efadv_create_comp_cntr == nullptr || api_->destroy_comp_cntr == nullptr ||
        api_->qp_attach_comp_cntr == nullptr || !(attr_.device_caps & backend::kCapCompCntr)) {
      return -EOPNOTSUPP;
    }
    ibv_compat_comp_cntr_init_attr ibv_attr;
    std::memset(&ibv_attr, 0, sizeof(ibv_attr));
    efadv_compat_comp_cntr_init_attr efa_attr;
    std::memset(&efa_attr, 0, sizeof(efa_attr));
    if (attr.value != nullptr) {
      efa_attr.flags |= EFADV_COMPAT_COMP_CNTR_INIT_WITH_COMP_EXTERNAL_MEM;
      efa_attr.comp_cntr_ext_mem.type = EFADV_COMPAT_MEMORY_LOCATION_VA;
      efa_attr.comp_cntr_ext_mem.ptr = reinterpret_cast<uint8_t*>(attr.value);
    }
    if (attr.error != nullptr) {
      efa_attr.flags |= EFADV_COMPAT_COMP_CNTR_INIT_WITH_ERR_EXTERNAL_MEM;
      efa_attr.err_cntr_ext_mem.type = EFADV_COMPAT_MEMORY_LOCATION_VA;
      efa_attr.err_cntr_ext_mem.ptr = reinterpret_cast<uint8_t*>(attr.error);
    }
    std::lock_guard<std::mutex> lock(mu_);
    ibv_compat_comp_cntr* c =
        api_->efadv_create_comp_cntr(ctx_, &ibv_attr, &efa_attr, sizeof(efa_attr));
    if (c == nullptr) return rdma_error(-1);
    auto obj = std::make_unique<HwCntr>(c);
    *cntr_p = obj.get();
    cntrs_[obj.get()] = std::move(obj);
    return 0;
  }

  int destroy_comp_cntr(CompCntr* cntr) override {
    std::lock_guard<std::mutex> lock(mu_);
    HwCntr* c = find(cntrs_, static_cast<const CompCntr*>(cntr));
    if (c == nullptr) return -EINVAL;
    if (c->attached_ > 0) return -EBUSY;
    int rc = rdma_error(api_->destroy_comp_cntr(c->cntr_));
    if (rc == 0) cntrs_.erase(cntr);
    return rc;
  }

  int local_address(const Qp* qp, uint8_t gid[16], uint32_t* qpn, uint32_t* qkey) const override {
    if (gid == nullptr || qpn == nullptr || qkey == nullptr) return -EINVAL;
    std::lock_guard<std::mutex> lock(mu_);
    const HwQp* q = find(qps_, qp);
    if (q == nullptr) return -EINVAL;
    std::memcpy(gid, attr_.gid, 16);
    *qpn = q->qp_->qp_num;
    *qkey = q->qkey_;
    return 0;
  }

  int set_qp_failed(Qp* qp, int status) override {
    EventHandler* handler = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      HwQp* q = find(qps_, static_cast<const Qp*>(qp));
      if (q == nullptr) return -EINVAL;
      ibv_qp_attr a;
      std::memset(&a, 0, sizeof(a));
      a.qp_state = IBV_QPS_ERR;
      int rc = rdma_error(api_->modify_qp(q->qp_, &a, IBV_QP_STATE));
      if (rc != 0) return rc;
      q->state_ = QpState::kErr;
      handler = handler_;
    }
    if (handler != nullptr) handler->handle_failure(qp, status);
    return 0;
  }

  void set_event_handler(EventHandler* handler) override {
    std::lock_guard<std::mutex> lock(mu_);
    handler_ = handler;
  }

  int progress(int budget) override { return budget < 0 ? -EINVAL : 0; }

  // Called by HwQp with the QP's device lock rules.
  int modify_qp(HwQp* q, const QpAttr& attr, uint32_t mask);
  int attach(HwQp* q, CompCntr* cntr, uint32_t ops);

  const RdmaApi& api() const { return *api_; }

 private:
  int release_cq(HwCq* c) {
    c->drain_events();
    int rc = rdma_error(api_->destroy_cq(ibv_cq_ex_to_cq(c->cq_)));
    if (rc == 0 && c->channel_ != nullptr) api_->destroy_comp_channel(c->channel_);
    return rc;
  }

  std::shared_ptr<const RdmaApi> api_;
  ibv_context* ctx_;
  DeviceAttr attr_;
  mutable std::mutex mu_;
  EventHandler* handler_ = nullptr;
  std::map<const Pd*, std::unique_ptr<HwPd>> pds_;
  std::map<const Mr*, std::unique_ptr<HwMr>> mrs_;
  std::map<const Cq*, std::unique_ptr<HwCq>> cqs_;
  std::map<const Qp*, std::unique_ptr<HwQp>> qps_;
  std::map<const Ah*, std::unique_ptr<HwAh>> ahs_;
  std::map<const CompCntr*, std::unique_ptr<HwCntr>> cntrs_;
};

int HwDevice::modify_qp(HwQp* q, const QpAttr& attr, uint32_t mask) {
  using namespace backend;
  constexpr uint32_t kKnown = kQpAttrState | kQpAttrCurState | kQpAttrEnSqdAsyncNotify |
                              kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey | kQpAttrSqPsn |
                              kQpAttrRnrRetry;
  if ((mask & ~kKnown) != 0) return -EINVAL;
  if (static_cast<uint8_t>(attr.state) > static_cast<uint8_t>(QpState::kErr) ||
      static_cast<uint8_t>(attr.cur_state) > static_cast<uint8_t>(QpState::kErr)) {
    return -EINVAL;
  }
  ibv_qp_attr a;
  std::memset(&a, 0, sizeof(a));
  int ibv_mask = 0;
  // QpState keeps ibv_qp_state's numbering (RESET 0 .. ERR 6).
  if (mask & kQpAttrState) {
    a.qp_state = static_cast<ibv_qp_state>(attr.state);
    ibv_mask |= IBV_QP_STATE;
  }
  if (mask & kQpAttrCurState) {
    a.cur_qp_state = static_cast<ibv_qp_state>(attr.cur_state);
    ibv_mask |= IBV_QP_CUR_STATE;
  }
  if (mask & kQpAttrEnSqdAsyncNotify) {
    a.en_sqd_async_notify = attr.en_sqd_async_notify ? 1 : 0;
    ibv_mask |= IBV_QP_EN_SQD_ASYNC_NOTIFY;
  }
  if (mask & kQpAttrPkeyIndex) {
    a.pkey_index = attr.pkey_index;
    ibv_mask |= IBV_QP_PKEY_INDEX;
  }
  if (mask & kQpAttrPort) {
    a.port_num = attr.port;
    ibv_mask |= IBV_QP_PORT;
  }
  if (mask & kQpAttrQkey) {
    a.qkey = attr.qkey;
    ibv_mask |= IBV_QP_QKEY;
  }
  if (mask & kQpAttrSqPsn) {
    a.sq_psn = attr.sq_psn;
    ibv_mask |= IBV_QP_SQ_PSN;
  }
  if (mask & kQpAttrRnrRetry) {
    a.rnr_retry = attr.rnr_retry;
    ibv_mask |= IBV_QP_RNR_RETRY;
  }
  std::lock_guard<std::mutex> lock(mu_);
  int rc = rdma_error(api_->modify_qp(q->qp_, &a, ibv_mask));
  if (rc != 0) return rc;
  if (mask & kQpAttrState) q->state_ = attr.state;
  if (mask & kQpAttrQkey) q->qkey_ = attr.qkey;
  return 0;
}

int HwDevice::attach(HwQp* q, CompCntr* cntr, uint32_t ops) {
  using namespace backend;
  constexpr uint32_t kKnown = kCntrSend | kCntrRecv | kCntrRdmaRead | kCntrRdmaWrite |
                              kCntrRemoteRdmaRead | kCntrRemoteRdmaWrite;
  if (ops == 0 || (ops & ~kKnown) != 0) return -EINVAL;
  if (api_->qp_attach_comp_cntr == nullptr) return -EOPNOTSUPP;
  std::lock_guard<std::mutex> lock(mu_);
  HwCntr* c = find(cntrs_, static_cast<const CompCntr*>(cntr));
  if (c == nullptr) return -EINVAL;
  // The verbs op numbering differs from CntrOp's (remote read and local write are swapped).
  ibv_compat_comp_cntr_attach_attr a;
  std::memset(&a, 0, sizeof(a));
  if (ops & kCntrSend) a.op_mask |= IBV_COMPAT_COMP_CNTR_ATTACH_OP_SEND;
  if (ops & kCntrRecv) a.op_mask |= IBV_COMPAT_COMP_CNTR_ATTACH_OP_RECV;
  if (ops & kCntrRdmaRead) a.op_mask |= IBV_COMPAT_COMP_CNTR_ATTACH_OP_RDMA_READ;
  if (ops & kCntrRdmaWrite) a.op_mask |= IBV_COMPAT_COMP_CNTR_ATTACH_OP_RDMA_WRITE;
  if (ops & kCntrRemoteRdmaRead) a.op_mask |= IBV_COMPAT_COMP_CNTR_ATTACH_OP_REMOTE_RDMA_READ;
  if (ops & kCntrRemoteRdmaWrite) a.op_mask |= IBV_COMPAT_COMP_CNTR_ATTACH_OP_REMOTE_RDMA_WRITE;
  int rc = rdma_error(api_->qp_attach_comp_cntr(q->qp_, c->cntr_, &a));
  if (rc != 0) return rc;
  ++c->attached_;
  q->cntrs_.push_back(c);
  return 0;
}

QpState HwQp::state() const { return state_; }

int HwQp::modify(const QpAttr& attr, uint32_t attr_mask) {
  return dev_->modify_qp(this, attr, attr_mask);
}

int HwQp::query_wqs(WqAttr* sq, WqAttr* rq) const {
  if (sq == nullptr || rq == nullptr) return -EINVAL;
  const RdmaApi& api = dev_->api();
  if (api.efadv_query_qp_wqs == nullptr) return -EOPNOTSUPP;
  efadv_compat_wq_attr s, r;
  std::memset(&s, 0, sizeof(s));
  std::memset(&r, 0, sizeof(r));
  int rc = rdma_error(api.efadv_query_qp_wqs(qp_, &s, &r, sizeof(s)));
  if (rc != 0) return rc;
  *sq = WqAttr{s.buffer, s.entry_size, s.num_entries, s.doorbell, s.max_batch};
  *rq = WqAttr{r.buffer, r.entry_size, r.num_entries, r.doorbell, r.max_batch};
  return 0;
}

int HwQp::attach_comp_cntr(CompCntr* cntr, uint32_t cntr_ops) {
  return dev_->attach(this, cntr, cntr_ops);
}

int HwQp::detach_comp_cntr(CompCntr* cntr) {
  (void)cntr;
  return -EOPNOTSUPP;
}

// ---- discovery ----

// Opens `dev` and fills *attr when it is an EFA device; otherwise closes it and returns
// -ENODEV. efadv_query_device succeeds only on the EFA provider; the PCI vendor id backs it up.
int open_efa(const RdmaApi& api, ibv_device* dev, ibv_context** ctx_p, DeviceAttr* attr) {
  ibv_context* ctx = api.open_device(dev);
  if (ctx == nullptr) return rdma_error(-1);
  ibv_device_attr dattr;
  std::memset(&dattr, 0, sizeof(dattr));
  efadv_compat_device_attr eattr;
  std::memset(&eattr, 0, sizeof(eattr));
  int rc = rdma_error(api.query_device(ctx, &dattr));
  if (rc != 0) {
    api.close_device(ctx);
    return rc;
  }
  rc = rdma_error(api.efadv_query_device(ctx, &eattr, sizeof(eattr)));
  if (rc != 0) {
    api.close_device(ctx);
    // An EFA (by PCI vendor) whose caps cannot be read is an error worth reporting; anything
    // else is simply not ours.
    if (dattr.vendor_id == kEfaVendorId && rc != -EOPNOTSUPP) return rc;
    return -ENODEV;
  }
  ibv_port_attr pattr;
  rc = query_port_attr(api, ctx, &pattr);
  ibv_gid gid;
  std::memset(&gid, 0, sizeof(gid));
  if (rc == 0) rc = rdma_error(api.query_gid(ctx, kPort, 0, &gid));
  if (rc != 0) {
    api.close_device(ctx);
    return rc;
  }
  const char* name = api.get_device_name(dev);
  attr->name = name ? name : "";
  attr->profile.clear();
  std::memcpy(attr->gid, gid.raw, 16);
  attr->vendor_part_id = static_cast<uint16_t>(dattr.vendor_part_id);
  attr->max_qp = static_cast<uint32_t>(dattr.max_qp);
  attr->max_cq = static_cast<uint32_t>(dattr.max_cq);
  attr->max_mr = static_cast<uint32_t>(dattr.max_mr);
  attr->max_pd = static_cast<uint32_t>(dattr.max_pd);
  attr->max_ah = static_cast<uint32_t>(dattr.max_ah);
  attr->max_sq_wr = eattr.max_sq_wr;
  attr->max_rq_wr = eattr.max_rq_wr;
  attr->max_sq_sge = eattr.max_sq_sge;
  attr->max_rq_sge = eattr.max_rq_sge;
  attr->max_rdma_sge = static_cast<uint16_t>(dattr.max_sge_rd);
  attr->inline_buf_size = eattr.inline_buf_size;
  attr->inline_buf_size_ex = eattr.inline_buf_size_ex;
  // efadv bits 0..6 are DeviceCap bits 0..6 by construction.
  attr->device_caps = eattr.device_caps & 0x7fu;
  if (eattr.inline_buf_size_ex > eattr.inline_buf_size) {
    attr->device_caps |= backend::kCapInlineWrite;
  }
  attr->max_rdma_size = eattr.max_rdma_size;
  attr->mtu = pattr.max_msg_sz;
  // Only the per-QP max_batch (efadv_query_qp_wqs) and the SQ minimum inside libefa know these.
  attr->max_tx_batch = 0;
  attr->min_sq_wr = 1;
  attr->max_cq_depth = static_cast<uint32_t>(dattr.max_cqe);
  attr->link_speed_gbps = link_speed_gbps(pattr.active_speed, pattr.active_width);
  *ctx_p = ctx;
  return 0;
}

// Calls fn(dev) for every verbs device; the list is released afterwards.
template <typename Fn>
int for_each_device(const RdmaApi& api, Fn fn) {
  int num = 0;
  errno = 0;
  ibv_device** list = api.get_device_list(&num);
  if (list == nullptr) {
    // No uverbs support in the kernel reads as "no devices".
    return (errno == ENOSYS || errno == 0) ? 0 : -errno;
  }
  for (int i = 0; i < num && list[i] != nullptr; ++i) {
    if (!fn(list[i])) break;
  }
  api.free_device_list(list);
  return 0;
}

class HwBackend final : public backend::Backend {
 public:
  explicit HwBackend(std::shared_ptr<const RdmaApi> api) : api_(std::move(api)) {}
  const char* name() const override { return kBackendName; }

  int enumerate(std::vector<DeviceInfo>* devices_p) override {
    if (devices_p == nullptr) return -EINVAL;
    std::vector<DeviceInfo> found;
    int rc = for_each_device(*api_, [&](ibv_device* dev) {
      ibv_context* ctx = nullptr;
      DeviceAttr attr;
      if (open_efa(*api_, dev, &ctx, &attr) == 0) {
        DeviceInfo info;
        info.name = attr.name;
        std::memcpy(info.gid, attr.gid, 16);
        found.push_back(info);
        api_->close_device(ctx);
      }
      return true;
    });
    if (rc != 0) return rc;
    *devices_p = std::move(found);
    return 0;
  }

  int open_device(const std::string& name,
                  std::unique_ptr<backend::Device>* device_p) override {
    if (device_p == nullptr) return -EINVAL;
    int result = -ENODEV;
    int rc = for_each_device(*api_, [&](ibv_device* dev) {
      const char* dev_name = api_->get_device_name(dev);
      if (dev_name == nullptr || name != dev_name) return true;
      ibv_context* ctx = nullptr;
      DeviceAttr attr;
      result = open_efa(*api_, dev, &ctx, &attr);
      if (result == 0) *device_p = std::make_unique<HwDevice>(api_, ctx, attr);
      return false;
    });
    return rc != 0 ? rc : result;
  }

 private:
  std::shared_ptr<const RdmaApi> api_;
};

}  // namespace

int make_hw_backend(const LibraryNames& names, std::unique_ptr<backend::Backend>* backend_p,
                    std::string* reason) {
  if (backend_p == nullptr) return -EINVAL;
  std::shared_ptr<const RdmaApi> api;
  int rc = load_rdma(names, &api, reason);
  if (rc != 0) return rc;
  *backend_p = std::make_unique<HwBackend>(std::move(api));
  return 0;
}

std::unique_ptr<backend::Backend> make_hw_backend_for_api(std::shared_ptr<const RdmaApi> api) {
  if (api == nullptr) return nullptr;
  return std::make_unique<HwBackend>(std::move(api));
}

int probe_hw(const LibraryNames& names, std::string* reason) {
  std::string local;
  if (reason == nullptr) reason = &local;
  std::unique_ptr<backend::Backend> b;
  int rc = make_hw_backend(names, &b, reason);
  if (rc != 0) return rc;
  std::vector<DeviceInfo> devices;
  rc = b->enumerate(&devices);
  if (rc != 0) {
    *reason = std::string("EFA device discovery failed: ") + std::strerror(-rc);
    return -ENODEV;
  }
  if (devices.empty()) {
    *reason = "no EFA device (rdma-core loaded, no verbs device with vendor id 0x1d0f)";
    return -ENODEV;
  }
  reason->clear();
  return 0;
}

}  // namespace hw
}  // namespace xpufab
