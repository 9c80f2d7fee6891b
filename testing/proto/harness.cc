#include "testing/proto/harness.h"

#include <cerrno>
#include <chrono>
#include <cstdlib>

#include "api/proto/backend_dev.h"

namespace xpufab::proto_test {

Stack::~Stack() { dev_.reset(); }

int Stack::open() {
  int rc = backend::open_backend("emu", &backend_);
  if (rc) return rc;
  std::vector<backend::DeviceInfo> devs;
  rc = backend_->enumerate(&devs);
  if (rc) return rc;
  if (devs.empty()) return -ENODEV;
  rc = backend_->open_device(devs[0].name, &dev_);
  if (rc) return rc;
  return dev_->query(&attr_);
}

Node::~Node() {
  backend::Device* d = stack_->dev();
  if (!d) return;
  if (qp_) d->destroy_qp(qp_);
  for (auto& a : ahs_) d->destroy_ah(a.second);
  for (auto* m : mrs_) d->dereg_mr(m);
  if (bounce_mr_) d->dereg_mr(bounce_mr_);
  if (cq_) d->destroy_cq(cq_);
  if (pd_) d->dealloc_pd(pd_);
  std::free(bounce_);
}

int Node::open(const proto_config& cfg, uint32_t sq_depth, uint8_t rnr_retry) {
  backend::Device* d = stack_->dev();
  const backend::DeviceAttr& at = stack_->attr();
  int rc = d->alloc_pd(&pd_);
  if (rc) return rc;
  const uint32_t nrx = proto_rx_buffers(&cfg);
  backend::CqInitAttr ca;
  ca.entries = sq_depth + nrx;
  ca.with_sgid = (at.device_caps & backend::kCapCqWithSgid) != 0;
  rc = d->create_cq(ca, &cq_);
  if (rc) return rc;
  backend::QpInitAttr qa;
  qa.type = backend::QpType::kSrd;
  qa.pd = pd_;
  qa.send_cq = cq_;
  qa.recv_cq = cq_;
  qa.max_send_wr = sq_depth;
  qa.max_recv_wr = nrx;
  qa.max_send_sge = at.max_sq_sge;
  qa.max_recv_sge = 1;
  rc = d->create_qp(qa, &qp_);
  if (rc) return rc;
  backend::QpAttr a;
  a.state = backend::QpState::kInit;
  a.qkey = 0x1000u + (static_cast<uint32_t>(reinterpret_cast<uintptr_t>(this) >> 4) & 0xffffu);
  rc = qp_->modify(a, backend::kQpAttrState | backend::kQpAttrPkeyIndex | backend::kQpAttrPort |
                          backend::kQpAttrQkey);
  if (rc) return rc;
  a.state = backend::QpState::kRtr;
  rc = qp_->modify(a, backend::kQpAttrState);
  if (rc) return rc;
  a.state = backend::QpState::kRts;
  a.rnr_retry = rnr_retry;
  rc = qp_->modify(a, backend::kQpAttrState | backend::kQpAttrSqPsn |
                          ((at.device_caps & backend::kCapRnrRetry) ? backend::kQpAttrRnrRetry : 0u));
  if (rc) return rc;
  rc = d->local_address(qp_, gid_, &qpn_, &qkey_);
  if (rc) return rc;
  proto_dev pd{};
  rc = proto::dev_of(qp_, cq_, at, ca.with_sgid, &pd);
  if (rc) return rc;
  bounce_len_ = proto_bounce_size(&cfg, &pd);
  bounce_ = static_cast<uint8_t*>(std::aligned_alloc(4096, (bounce_len_ + 4095) / 4096 * 4096));
  if (!bounce_) return -ENOMEM;
  std::memset(bounce_, 0, bounce_len_);
  backend::MrInitAttr ma;
  ma.addr = bounce_;
  ma.length = bounce_len_;
  ma.access = backend::kAccessLocalWrite;
  rc = d->reg_mr(pd_, ma, &bounce_mr_);
  if (rc) return rc;
  const size_t mem_len = proto_ep_mem_size(&cfg, &pd);
  mem_.assign(mem_len / 8 + 1, 0);
  return proto_ep_init(&ep_, &cfg, &pd, mem_.data(), mem_.size() * 8, bounce_, bounce_mr_->lkey());
}

NodeAddress Node::address() const {
  NodeAddress a{};
  std::memcpy(a.gid, gid_, 16);
  a.qpn = qpn_;
  a.qkey = qkey_;
  return a;
}

int Node::add_peer(const NodeAddress& a, uint32_t* peer) {
  const std::string g(reinterpret_cast<const char*>(a.gid), 16);
  backend::Ah* ah = nullptr;
  for (auto& e : ahs_)
    if (e.first == g) ah = e.second;
  if (!ah) {
    int rc = stack_->dev()->create_ah(pd_, a.gid, &ah);
    if (rc) return rc;
    ahs_.emplace_back(g, ah);
  }
  return proto_peer_add_gid(&ep_, ah->ahn(), static_cast<uint16_t>(a.qpn), a.qkey, a.gid, peer);
}

int Node::reg(void* p, size_t len, uint32_t* lkey, uint32_t* rkey) {
  backend::MrInitAttr ma;
  ma.addr = p;
  ma.length = len;
  backend::DeviceAttr da{};
  int rc = stack_->dev()->query(&da);
  if (rc) return rc;
  ma.access = backend::served_access(
      backend::kAccessLocalWrite | backend::kAccessRemoteRead | backend::kAccessRemoteWrite,
      da.device_caps);
  backend::Mr* mr = nullptr;
  rc = stack_->dev()->reg_mr(pd_, ma, &mr);
  if (rc) return rc;
  mrs_.push_back(mr);
  *lkey = mr->lkey();
  *rkey = mr->rkey();
  return 0;
}

int Node::progress(proto_comp* out, int max) {
  stack_->dev()->progress(64);
  const int n = proto_progress(&ep_, out, max);
  for (int i = 0; i < n; ++i)
    if (out[i].prov_errno == EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR) ++rnr_errors_;
  return n;
}

int Node::poll() {
  proto_comp c[32];
  const int n = progress(c, 32);
  for (int i = 0; i < n; ++i) comps_.push_back(c[i]);
  return n;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void fill(void* p, size_t n, uint32_t seed) {
  uint8_t* b = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed * 131 + i * 7 + (i >> 8) + (seed >> 8));
}

bool has_pattern(const void* p, size_t n, uint32_t seed) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i)
    if (b[i] != static_cast<uint8_t>(seed * 131 + i * 7 + (i >> 8) + (seed >> 8))) return false;
  return true;
}

}  // namespace xpufab::proto_test
