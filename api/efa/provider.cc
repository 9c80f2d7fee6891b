// The "efa" provider: registration, backend selection, fi_getinfo offers, fabric and domain.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "api/core/info.h"
#include "api/core/provider.h"
#include "api/efa/cq_trace.h"
#include "api/efa/efa.h"

namespace xpufab::efa {

int to_fi_err(int rc) {
  if (rc >= 0) return rc;
  switch (-rc) {
    case EINVAL: return -FI_EINVAL;
    case ENOMEM: return -FI_ENOMEM;
    case EBUSY: return -FI_EBUSY;
    case ENODEV: return -FI_ENODEV;
    case ENOENT: return -FI_ENOENT;
    case EOPNOTSUPP: return -FI_EOPNOTSUPP;
    case EAGAIN: return -FI_EAGAIN;
    case ENOSPC: return -FI_ENOSPC;
    case EEXIST: return -FI_EALREADY;
    case EACCES: return -FI_EACCES;
    case EPERM: return -FI_EPERM;
    case ENOSYS: return -FI_ENOSYS;
    default: return -FI_EOTHER;
  }
}

int fi_no_bind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }
int fi_no_control(fid*, int, void*) { return -FI_ENOSYS; }
int fi_no_ops_open(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
int fi_no_tostr(const fid*, char*, size_t) { return -FI_ENOSYS; }
int fi_no_ops_set(fid*, const char*, uint64_t, void*, void*) { return -FI_ENOSYS; }

// ---- backends and shared devices ------------------------------------------------------------

namespace {

std::mutex g_dev_lock;
std::map<std::string, std::unique_ptr<backend::Backend>>& backends() {
  static auto* m = new std::map<std::string, std::unique_ptr<backend::Backend>>();
  return *m;
}
std::vector<SharedDevice*>& devices() {
  static auto* v = new std::vector<SharedDevice*>();
  return *v;
}

// g_dev_lock held.
int get_backend(const std::string& name, backend::Backend** b) {
  auto it = backends().find(name);
  if (it == backends().end()) {
    std::unique_ptr<backend::Backend> be;
    int rc = backend::open_backend(name, &be);
    if (rc) return rc;
    it = backends().emplace(name, std::move(be)).first;
  }
  *b = it->second.get();
  return 0;
}

// Routes device failure reports to the EP that owns the QP.
class DeviceEvents : public backend::EventHandler {
 public:
  explicit DeviceEvents(SharedDevice* sd) : sd_(sd) {}
  void handle_failure(backend::Qp* qp, int status) override { ep_qp_failed(sd_, qp, status); }
  void cq_overrun(backend::Cq*) override {
    EFA_WARN(kCq, "device %s: a CQ overran; completions were lost", sd_->name.c_str());
  }

 private:
  SharedDevice* sd_;
};

}  // namespace

int select_backend(std::string* name_p, std::vector<backend::DeviceInfo>* devices_p) {
  const char* env = std::getenv("FI_EFA_BACKEND");
  std::string want = env && *env ? env : "auto";
  std::lock_guard<std::mutex> g(g_dev_lock);
  std::vector<std::string> order;
  if (want == "auto") {
    order = {"hw", "emu"};
  } else {
    order = {want};
  }
  int last = -ENODEV;
  for (const auto& n : order) {
    backend::Backend* b = nullptr;
    int rc = get_backend(n, &b);
    if (rc) {
      last = rc;
      continue;
    }
    std::vector<backend::DeviceInfo> devs;
    rc = b->enumerate(&devs);
    if (rc || devs.empty()) {
      last = rc ? rc : -ENODEV;
      continue;
    }
    *name_p = n;
    *devices_p = std::move(devs);
    return 0;
  }
  return last;
}

int acquire_device(const std::string& backend_name, const std::string& name, SharedDevice** out) {
  std::lock_guard<std::mutex> g(g_dev_lock);
  for (SharedDevice* d : devices()) {
    if (d->backend == backend_name && d->name == name) {
      d->users++;
      *out = d;
      return 0;
    }
  }
  backend::Backend* b = nullptr;
  int rc = get_backend(backend_name, &b);
  if (rc) return rc;
  auto d = std::make_unique<SharedDevice>();
  rc = b->open_device(name, &d->dev);
  if (rc) return rc;
  rc = d->dev->query(&d->attr);
  if (rc) return rc;
  d->backend = backend_name;
  d->name = name;
  d->users = 1;
  d->handler = std::make_unique<DeviceEvents>(d.get());
  d->dev->set_event_handler(d->handler.get());
  *out = d.get();
  devices().push_back(d.release());
  return 0;
}

void release_device(SharedDevice* d) {
  std::unique_ptr<SharedDevice> doomed;
  {
    std::lock_guard<std::mutex> g(g_dev_lock);
    if (--d->users > 0) return;
    auto& v = devices();
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (*it == d) {
        v.erase(it);
        break;
      }
    }
    doomed.reset(d);
  }
  doomed->dev->set_event_handler(nullptr);
  // Destroyed outside the lock: the device may join its engine thread.
}

// ---- fi_getinfo ---------------------------------------------------------------------------

namespace {

const int kDirectMrMode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;

fi_info* make_info(const backend::DeviceAttr& a) {
  fi_info* i = core::dup_one_info(nullptr);
  if (!i) return nullptr;
  const bool rd = a.device_caps & backend::kCapRdmaRead;
  const bool wr = a.device_caps & backend::kCapRdmaWrite;
  uint64_t caps = FI_MSG | FI_SEND | FI_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_XPU;
  if (rd || wr) caps |= FI_RMA;
  if (rd) caps |= FI_READ | FI_REMOTE_READ;
  if (wr) caps |= FI_WRITE | FI_REMOTE_WRITE;
  i->caps = caps;
  i->mode = 0;
  i->addr_format = FI_ADDR_EFA;
  i->src_addrlen = sizeof(EfaAddr);
  auto* sa = static_cast<EfaAddr*>(calloc(1, sizeof(EfaAddr)));
  if (!sa) {
    fi_freeinfo(i);
    return nullptr;
  }
  memcpy(sa->gid, a.gid, 16);
  i->src_addr = sa;
  i->tx_attr->caps = caps & (FI_MSG | FI_RMA | FI_XPU | FI_SEND | FI_READ | FI_WRITE);
  i->tx_attr->mode = 0;
  i->tx_attr->op_flags = FI_TRANSMIT_COMPLETE;
  i->tx_attr->msg_order = FI_ORDER_NONE;
  i->tx_attr->comp_order = FI_ORDER_NONE;
  i->tx_attr->inject_size = a.inline_buf_size;
  // What an EP gets: the data path's rings hold at most EFA_DP_MAX_ENTRIES entries and the RQ
  // ring counts descriptors (endpoint_open applies the same limits).
  const uint32_t rq_sge = a.max_rq_sge ? a.max_rq_sge : 1;
  i->tx_attr->size = std::min<size_t>(a.max_sq_wr, EFA_DP_MAX_ENTRIES / 2);
  i->tx_attr->iov_limit = a.max_sq_sge;
  i->tx_attr->rma_iov_limit = 1;
  i->rx_attr->caps =
      caps & (FI_MSG | FI_RMA | FI_XPU | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE);
  // Without unsolicited write-recv a write with immediate data consumes a posted receive.
  i->rx_attr->mode = (wr && !(a.device_caps & backend::kCapUnsolicitedWriteRecv)) ? FI_RX_CQ_DATA : 0;
  i->mode = i->rx_attr->mode;
  i->rx_attr->op_flags = 0;
  i->rx_attr->msg_order = FI_ORDER_NONE;
  i->rx_attr->comp_order = FI_ORDER_NONE;
  i->rx_attr->size = std::min<size_t>(a.max_rq_wr, EFA_DP_MAX_ENTRIES / 2 / rq_sge);
  i->rx_attr->iov_limit = a.max_rq_sge;
  i->ep_attr->type = FI_EP_RDM;
  i->ep_attr->protocol = FI_PROTO_EFA;
  i->ep_attr->protocol_version = 1;
  i->ep_attr->max_msg_size = a.max_rdma_size > a.mtu ? a.max_rdma_size : a.mtu;
  i->ep_attr->tx_ctx_cnt = 1;
  i->ep_attr->rx_ctx_cnt = 1;
  fi_domain_attr* d = i->domain_attr;
  d->name = strdup(a.name.c_str());
  d->threading = FI_THREAD_SAFE;
  d->control_progress = FI_PROGRESS_AUTO;
  d->data_progress = FI_PROGRESS_AUTO;
  d->resource_mgmt = FI_RM_DISABLED;
  d->av_type = FI_AV_TABLE;
  d->mr_mode = kDirectMrMode | FI_MR_XPU_DESC;
  d->mr_key_size = 4;
  d->cq_data_size = 4;
  d->cq_cnt = a.max_cq;
  d->ep_cnt = a.max_qp;
  d->tx_ctx_cnt = a.max_qp;
  d->rx_ctx_cnt = a.max_qp;
  d->max_ep_tx_ctx = 1;
  d->max_ep_rx_ctx = 1;
  d->cntr_cnt = 1024;
  d->mr_iov_limit = 1;
  d->caps = FI_LOCAL_COMM | FI_REMOTE_COMM;
  d->mr_cnt = a.max_mr;
  d->max_cntr_value = UINT64_MAX;
  d->max_err_cntr_value = UINT64_MAX;
  d->max_xpu_ctx_cnt = 16;
  i->fabric_attr->name = strdup(kFabricName);
  i->fabric_attr->prov_version = kProvVersion;
  if (!d->name || !i->fabric_attr->name) {
    fi_freeinfo(i);
    return nullptr;
  }
  return i;
}

const char* missing_xpu_mr_bit(int mode) {
  if (mode == FI_MR_UNSPEC || mode == FI_MR_BASIC || mode == FI_MR_SCALABLE) return "FI_MR_XPU_DESC";
  if (!(mode & FI_MR_XPU_DESC)) return "FI_MR_XPU_DESC";
  if (!(mode & FI_MR_LOCAL)) return "FI_MR_LOCAL";
  if (!(mode & FI_MR_VIRT_ADDR)) return "FI_MR_VIRT_ADDR";
  if (!(mode & FI_MR_ALLOCATED)) return "FI_MR_ALLOCATED";
  if (!(mode & FI_MR_PROV_KEY)) return "FI_MR_PROV_KEY";
  return nullptr;
}

class EfaProvider : public core::Provider {
 public:
  const char* name() const override { return kProvName; }
  uint32_t version() const override { return kProvVersion; }

  int getinfo(uint32_t, const char*, const char*, uint64_t, const fi_info* hints,
              fi_info** info_p) override {
    if (hints && (hints->caps & FI_XPU) && hints->domain_attr) {
      const char* bit = missing_xpu_mr_bit(hints->domain_attr->mr_mode);
      if (bit) {
        EFA_WARN(kCore, "FI_XPU requires mr_mode bit %s in the hints; nothing offered", bit);
        return -FI_ENODATA;
      }
    } else if (hints && (hints->caps & FI_XPU)) {
      EFA_WARN(kCore, "FI_XPU requires mr_mode bit FI_MR_XPU_DESC in the hints; nothing offered");
      return -FI_ENODATA;
    }
    if (hints && hints->fabric_attr && hints->fabric_attr->name &&
        strcmp(hints->fabric_attr->name, kFabricName) != 0)
      return -FI_ENODATA;
    std::string be;
    std::vector<backend::DeviceInfo> devs;
    int rc = select_backend(&be, &devs);
    if (rc) {
      EFA_INFO(kCore, "no EFA backend with devices (%d)", rc);
      return -FI_ENODATA;
    }
    fi_info* head = nullptr;
    fi_info** tail = &head;
    for (const auto& dv : devs) {
      SharedDevice* sd = nullptr;
      rc = acquire_device(be, dv.name, &sd);
      if (rc) {
        EFA_WARN(kCore, "cannot open device %s (%d)", dv.name.c_str(), rc);
        continue;
      }
      fi_info* i = make_info(sd->attr);
      release_device(sd);
      if (!i) {
        fi_freeinfo(head);
        return -FI_ENOMEM;
      }
      *tail = i;
      tail = &i->next;
    }
    if (!head) return -FI_ENODATA;
    *info_p = head;
    return 0;
  }

  int fabric(fi_fabric_attr* attr, fid_fabric** fabric_p, void* context) override {
    return fabric_open(attr, fabric_p, context);
  }
};

EfaProvider g_provider;
core::ProviderRegistration g_registration(&g_provider);

}  // namespace

// ---- fabric ---------------------------------------------------------------------------------

namespace {

int fabric_close(fid* f) {
  auto* fab = reinterpret_cast<EfaFabric*>(f);
  int rc = fab->refs.try_close();
  if (rc) return rc;
  delete fab;
  return 0;
}

int fabric_no_pep(fid_fabric*, fi_info*, fid_pep**, void*) { return -FI_ENOSYS; }
int fabric_no_eq(fid_fabric*, fi_eq_attr*, fid_eq**, void*) { return -FI_ENOSYS; }
int fabric_no_wait(fid_fabric*, fi_wait_attr*, fid_wait**) { return -FI_ENOSYS; }
// fi_trywait(3): arms each CQ's event fd (FI_GETWAIT) and returns 0 when blocking on it is
// safe, -FI_EAGAIN when completions are already there to read.
int fabric_trywait(fid_fabric*, fid** fids, int count) {
  if (!fids || count <= 0) return -FI_EINVAL;
  for (int i = 0; i < count; ++i) {
    if (!fids[i] || fids[i]->fclass != FI_CLASS_CQ) return -FI_EINVAL;
    auto* cq = reinterpret_cast<EfaCq*>(fids[i]);
    if (cq->is_xpu() || cq->wait_obj != FI_WAIT_FD) return -FI_EINVAL;
    const int fd = cq->bcq->event_fd();
    if (fd >= 0) {
      // Acknowledge an earlier event so that the fd reports only the next one.
      pollfd p{fd, POLLIN, 0};
      uint64_t v;
      if (poll(&p, 1, 0) == 1 && read(fd, &v, sizeof(v)) < 0) {
        EFA_INFO(kCq, "event fd read: %d", errno);
      }
    }
    int rc = cq->bcq->arm();
    if (rc) return to_fi_err(rc);
    cq->dom->progress();  // a CQE written before arming would signal nothing
    std::lock_guard<std::mutex> g(cq->lock);
    if (!cq->staged.empty()) return -FI_EAGAIN;
  }
  return 0;
}
int fabric_domain2(fid_fabric* f, fi_info* info, fid_domain** d, uint64_t flags, void* ctx) {
  if (flags) return -FI_EBADFLAGS;
  return domain_open(f, info, d, ctx);
}

fi_ops g_fabric_fi_ops = {sizeof(fi_ops), fabric_close, fi_no_bind, fi_no_control,
                          fi_no_ops_open, fi_no_tostr, fi_no_ops_set};
fi_ops_fabric g_fabric_ops = {sizeof(fi_ops_fabric), domain_open, fabric_no_pep, fabric_no_eq,
                              fabric_no_wait, fabric_trywait, fabric_domain2};

}  // namespace

int fabric_open(fi_fabric_attr* attr, fid_fabric** fabric_p, void* context) {
  if (!attr || !fabric_p) return -FI_EINVAL;
  if (attr->name && strcmp(attr->name, kFabricName) != 0) return -FI_ENODATA;
  auto* fab = new (std::nothrow) EfaFabric();
  if (!fab) return -FI_ENOMEM;
  fab->fabric.fid.fclass = FI_CLASS_FABRIC;
  fab->fabric.fid.context = context;
  fab->fabric.fid.ops = &g_fabric_fi_ops;
  fab->fabric.ops = &g_fabric_ops;
  fab->fabric.api_version = FI_VERSION(2, 7);
  *fabric_p = &fab->fabric;
  return 0;
}

// ---- domain ---------------------------------------------------------------------------------

namespace {

int domain_close(fid* f) {
  auto* dom = reinterpret_cast<EfaDomain*>(f);
  int rc = dom->refs.try_close();
  if (rc) return rc;
  for (auto& kv : dom->ahs) dom->dev->destroy_ah(kv.second.first);
  dom->ahs.clear();
  if (dom->pd) dom->dev->dealloc_pd(dom->pd);
  release_device(dom->sdev);
  dom->fab->refs.release();
  fi_freeinfo(dom->info);
  delete dom;
  if (g_cq_trace_on) cq_trace_flush();
  return 0;
}

int domain_no_sep(fid_domain*, fi_info*, fid_ep**, void*) { return -FI_ENOSYS; }
int domain_no_poll(fid_domain*, fi_poll_attr*, fid_poll**) { return -FI_ENOSYS; }
int domain_no_stx(fid_domain*, fi_tx_attr*, fid_stx**, void*) { return -FI_ENOSYS; }
int domain_no_srx(fid_domain*, fi_rx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }
int domain_no_atomic(fid_domain*, fi_datatype, fi_op, fi_atomic_attr*, uint64_t) {
  return -FI_EOPNOTSUPP;
}
int domain_no_coll(fid_domain*, fi_collective_op, fi_collective_attr*, uint64_t) {
  return -FI_ENOSYS;
}

fi_ops g_domain_fi_ops = {sizeof(fi_ops), domain_close, fi_no_bind, fi_no_control,
                          fi_no_ops_open, fi_no_tostr, fi_no_ops_set};
fi_ops_domain g_domain_ops = {sizeof(fi_ops_domain), av_open,         cq_open,
                              endpoint_open,         domain_no_sep,   cntr_open,
                              domain_no_poll,        domain_no_stx,   domain_no_srx,
                              domain_no_atomic,      domain_no_coll,  endpoint2_open,
                              xpu_ctx_open};
fi_ops_mr g_mr_ops = {sizeof(fi_ops_mr), mr_reg, mr_regv, mr_regattr};

}  // namespace

int domain_open(fid_fabric* fabric, fi_info* info, fid_domain** domain_p, void* context) {
  if (!fabric || !info || !domain_p || !info->domain_attr || !info->domain_attr->name)
    return -FI_EINVAL;
  auto* fab = reinterpret_cast<EfaFabric*>(fabric);
  std::string be;
  std::vector<backend::DeviceInfo> devs;
  int rc = select_backend(&be, &devs);
  if (rc) return -FI_ENODEV;
  bool found = false;
  for (const auto& d : devs) found |= d.name == info->domain_attr->name;
  if (!found) return -FI_ENODEV;
  auto* dom = new (std::nothrow) EfaDomain();
  if (!dom) return -FI_ENOMEM;
  rc = acquire_device(be, info->domain_attr->name, &dom->sdev);
  if (rc) {
    delete dom;
    return to_fi_err(rc);
  }
  dom->dev = dom->sdev->dev.get();
  dom->attr = dom->sdev->attr;
  rc = dom->dev->alloc_pd(&dom->pd);
  if (rc) {
    release_device(dom->sdev);
    delete dom;
    return to_fi_err(rc);
  }
  dom->info = fi_dupinfo(info);
  dom->mr_mode = info->domain_attr->mr_mode;
  dom->xpu = (info->caps & FI_XPU) != 0;
  if (g_cq_trace_on) dom->trace_id = cq_trace_next_domain();
  rc = fab->refs.acquire();
  if (rc || !dom->info) {
    dom->dev->dealloc_pd(dom->pd);
    release_device(dom->sdev);
    fi_freeinfo(dom->info);
    delete dom;
    return rc ? rc : -FI_ENOMEM;
  }
  dom->fab = fab;
  dom->domain.fid.fclass = FI_CLASS_DOMAIN;
  dom->domain.fid.context = context;
  dom->domain.fid.ops = &g_domain_fi_ops;
  dom->domain.ops = &g_domain_ops;
  dom->domain.mr = &g_mr_ops;
  *domain_p = &dom->domain;
  return 0;
}

int EfaDomain::get_ah(const uint8_t gid[16], backend::Ah** ah_p) {
  std::vector<uint8_t> key(gid, gid + 16);
  std::lock_guard<std::mutex> g(lock);
  auto it = ahs.find(key);
  if (it != ahs.end()) {
    it->second.second++;
    *ah_p = it->second.first;
    return 0;
  }
  backend::Ah* ah = nullptr;
  int rc = dev->create_ah(pd, gid, &ah);
  if (rc) return to_fi_err(rc);
  ahs.emplace(key, std::make_pair(ah, 1));
  *ah_p = ah;
  return 0;
}

void EfaDomain::put_ah(const uint8_t gid[16]) {
  std::vector<uint8_t> key(gid, gid + 16);
  std::lock_guard<std::mutex> g(lock);
  auto it = ahs.find(key);
  if (it == ahs.end()) return;
  if (--it->second.second == 0) {
    dev->destroy_ah(it->second.first);
    ahs.erase(it);
  }
}

EfaEp* EfaDomain::ep_by_qpn(uint32_t qpn) {
  for (EfaEp* ep : eps)
    if (ep->qpn == qpn) return ep;
  return nullptr;
}

int WakeFd::open() {
  fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  return fd < 0 ? -FI_ENOMEM : 0;
}

void WakeFd::close() {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

void WakeFd::wake() {
  if (fd < 0 || waiters.load(std::memory_order_acquire) == 0) return;
  uint64_t one = 1;
  ssize_t n = write(fd, &one, sizeof(one));
  (void)n;
}

void WakeFd::drain() {
  uint64_t v;
  if (fd >= 0) {
    ssize_t n = read(fd, &v, sizeof(v));
    (void)n;
  }
}

void EfaDomain::wait_event(int ms, int extra_fd, const std::function<bool()>& ready) {
  std::vector<pollfd> fds;
  {
    std::lock_guard<std::mutex> g(lock);
    for (EfaCq* cq : cqs) {
      const int fd = cq->bcq ? cq->bcq->event_fd() : -1;
      if (fd >= 0 && cq->bcq->arm() == 0) fds.push_back(pollfd{fd, POLLIN, 0});
    }
  }
  if (extra_fd >= 0) fds.push_back(pollfd{extra_fd, POLLIN, 0});
  // A CQE written before the CQ was armed signals nothing: drain once, and skip the sleep if
  // that made the caller's condition true.
  progress();
  if (ready()) return;
  const int slice = std::max(0, std::min(ms, kWaitSliceMs));
  if (poll(fds.data(), fds.size(), slice) <= 0) return;
  for (const pollfd& p : fds) {
    if (!(p.revents & POLLIN)) continue;
    uint64_t v;
    ssize_t n = read(p.fd, &v, sizeof(v));
    (void)n;
  }
}

void EfaDomain::progress() {
  dev->progress(64);
  std::lock_guard<std::mutex> g(lock);
  for (EfaCq* cq : cqs) cq_drain(cq);
}

}  // namespace xpufab::efa
