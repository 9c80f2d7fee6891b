// Domains: one device (shared with the other domains on it), its PD and address handles, the
// host-side progress, the waits that sleep on the host CQs, and the core's poll sets.
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "api/core/poll_set.h"
#include "api/efa/casts.h"
#include "api/efa/cq_trace.h"
#include "api/efa/efa.h"
#include "api/efa/proto_ep.h"
#include "device/efa_cq.h"

namespace xpufab::efa {

namespace {

// Removes `suffix` from the end of *name; true when it was there (and something precedes it).
bool strip_suffix(std::string* name, const std::string& suffix) {
  if (name->size() <= suffix.size() ||
      name->compare(name->size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  name->resize(name->size() - suffix.size());
  return true;
}

int domain_close(fid* f) {
  EfaDomain* dom = to_domain(f);
  if (!dom) return -FI_EINVAL;
  int rc = dom->refs.try_close();
  if (rc) return rc;
  for (auto& kv : dom->ahs) dom->dev->destroy_ah(kv.second.first);
  dom->ahs.clear();
  if (dom->pd) dom->dev->dealloc_pd(dom->pd);
  release_device(dom->sdev);
  dom->fab->refs.release();
  fi_freeinfo(dom->info);
  if (dom->cq_epoll >= 0) close(dom->cq_epoll);
  delete dom;
  if (g_cq_trace_on) cq_trace_flush();
  return 0;
}

int domain_no_sep(fid_domain*, fi_info*, fid_ep**, void*) { return -FI_ENOSYS; }
int domain_poll_open(fid_domain* d, fi_poll_attr* attr, fid_poll** ps) {
  EfaDomain* dom = to_domain(d);
  if (!dom) return -FI_EINVAL;
  return core::poll_open(d, attr, ps, &dom->refs);
}
int domain_no_stx(fid_domain*, fi_tx_attr*, fid_stx**, void*) { return -FI_ENOSYS; }
int domain_no_srx(fid_domain*, fi_rx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }
// Only the protocol fabric executes atomics (at the target, in software).
int domain_query_atomic(fid_domain* d, fi_datatype datatype, fi_op op, fi_atomic_attr* attr,
                        uint64_t flags) {
  EfaDomain* dom = to_domain(d);
  if (!dom) return -FI_EINVAL;
  if (!dom->proto) return -FI_EOPNOTSUPP;
  return proto_query_atomic(dom, datatype, op, attr, flags);
}
int domain_no_coll(fid_domain*, fi_collective_op, fi_collective_attr*, uint64_t) {
  return -FI_ENOSYS;
}

fi_ops g_domain_fi_ops = {sizeof(fi_ops), domain_close, fi_no_bind, fi_no_control,
                          fi_no_ops_open, fi_no_tostr, fi_no_ops_set};
fi_ops_domain g_domain_ops = {sizeof(fi_ops_domain), av_open,         cq_open,
                              endpoint_open,         domain_no_sep,   cntr_open,
                              domain_poll_open,      domain_no_stx,   domain_no_srx,
                              domain_query_atomic,   domain_no_coll,  endpoint2_open,
                              xpu_ctx_open};
fi_ops_mr g_mr_ops = {sizeof(fi_ops_mr), mr_reg, mr_regv, mr_regattr};

}  // namespace

int domain_open(fid_fabric* fabric, fi_info* info, fid_domain** domain_p, void* context) {
  if (!fabric || !info || !domain_p || !info->domain_attr || !info->domain_attr->name)
    return -FI_EINVAL;
  EfaFabric* fab = to_fabric(fabric);
  if (!fab) return -FI_EINVAL;
  std::string be;
  std::vector<backend::DeviceInfo> devs;
  int rc = select_backend(&be, &devs);
  if (rc) return -FI_ENODEV;
  // "<device>-dgrm" names the device's DGRAM domain, "<device>-rdm" its protocol domain, the
  // device's own name the efa-direct one.
  std::string dev_name = info->domain_attr->name;
  const bool dgram = strip_suffix(&dev_name, kDgramDomainSuffix);
  const bool proto = !dgram && strip_suffix(&dev_name, kRdmDomainSuffix);
  bool found = false;
  for (const auto& d : devs) found |= d.name == dev_name;
  if (!found) return -FI_ENODEV;
  if (dgram && (info->caps & FI_XPU)) return -FI_EOPNOTSUPP;
  // The thin fabric's domains carry neither tags nor atomics.
  if (!proto && (info->caps & (FI_TAGGED | FI_ATOMIC))) return -FI_EOPNOTSUPP;
  auto* dom = new (std::nothrow) EfaDomain();
  if (!dom) return -FI_ENOMEM;
  dom->dgram = dgram;
  dom->proto = proto;
  rc = acquire_device(be, dev_name, &dom->sdev);
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
  dom->local_mr = (dom->mr_mode & FI_MR_LOCAL) || (info->mode & FI_LOCAL_MR);
  dom->app_serialized = info->domain_attr->threading == FI_THREAD_DOMAIN;
  dom->xpu = (info->caps & FI_XPU) != 0;
  if (g_cq_trace_on) dom->trace_id = cq_trace_next_domain();
  dom->cq_epoll = epoll_create1(EPOLL_CLOEXEC);
  rc = dom->cq_epoll < 0 ? -FI_ENOMEM : fab->refs.acquire();
  if (rc || !dom->info) {
    if (rc == 0) fab->refs.release();
    if (dom->cq_epoll >= 0) close(dom->cq_epoll);
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
  std::lock_guard<Lock> g(lock);
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
  std::lock_guard<Lock> g(lock);
  auto it = ahs.find(key);
  if (it == ahs.end()) return;
  if (--it->second.second == 0) {
    dev->destroy_ah(it->second.first);
    ahs.erase(it);
  }
}

EfaEp* EfaDomain::ep_by_qpn(uint32_t qpn) {
  if (last_ep != nullptr && last_ep->qpn == qpn) return last_ep;
  auto it = ep_of_qpn.find(qpn);
  if (it == ep_of_qpn.end()) return nullptr;
  last_ep = it->second;
  return last_ep;
}

void EfaDomain::wait_event(int ms, int extra_fd, const std::function<bool()>& ready) {
  std::vector<pollfd> fds;
  {
    std::lock_guard<Lock> g(lock);
    for (EfaCq* cq : cqs) {
      const int fd = cq->bcq ? cq->bcq->event_fd() : -1;
      if (fd >= 0 && cq->bcq->arm() == 0) fds.push_back(pollfd{fd, POLLIN, 0});
    }
    // A protocol endpoint's packets complete on the core's own CQ.
    for (EfaEp* ep : proto_eps) {
      const int fd = proto_event_fd(ep);
      if (fd >= 0) fds.push_back(pollfd{fd, POLLIN, 0});
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

void EfaDomain::rearm_cqs() {
  std::lock_guard<Lock> g(lock);
  for (EfaCq* cq : cqs) {
    const int fd = cq->bcq ? cq->bcq->event_fd() : -1;
    if (fd < 0) continue;
    pollfd p{fd, POLLIN, 0};
    uint64_t v;
    if (poll(&p, 1, 0) == 1) {
      ssize_t n = read(fd, &v, sizeof(v));
      (void)n;
    }
    cq->bcq->arm();
  }
}

namespace {

// The host side of a domain's progress (its lock held, or FI_THREAD_DOMAIN).
__attribute__((always_inline)) inline void progress_hosts(EfaDomain* dom) {
  // A protocol endpoint's completions come from the core's progress, run by whoever reads one
  // of the domain's CQs or counters; the core owns its QP's CQ, and no QP of a protocol domain
  // completes on a host CQ.
  if (dom->proto) {
    if (!dom->proto_eps.empty()) proto_progress_all(dom->proto_eps);
    return;
  }
  // Most reads find every CQ's next entry invalid: a look at it skips the poll and its lock.
  for (EfaCq* cq : dom->cqs)
    if (efa_cq_ready(&cq->poll)) cq_drain(cq);
}

__attribute__((noinline)) void progress_hosts_locked(EfaDomain* dom) {
  std::lock_guard<Lock> g(dom->lock);
  progress_hosts(dom);
}

}  // namespace

void EfaDomain::progress() {
  dev->progress(64);
  if (!app_serialized) return progress_hosts_locked(this);
  progress_hosts(this);
}

}  // namespace xpufab::efa
