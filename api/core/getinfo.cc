// fi_getinfo, fi_fabric, fi_fabric2, fi_open and fi_version: the provider
// registry meets the application's hints here.  Matching follows
// fi_getinfo(3) and fi_domain(3); each rejection is logged at info level with
// the reason, as libfabric does, so FI_LOG_LEVEL=info explains an ENODATA.
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <strings.h>

#include <cstdarg>
#include <cstdio>

#include <cstdlib>
#include <cstring>

#include "api/core/caps.h"
#include "api/core/info.h"
#include "api/core/log.h"
#include "api/core/provider.h"

namespace xpufab::core {
namespace {

constexpr uint32_t kApiVersion = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
constexpr int kRmaTargetMrBits =
    FI_MR_RAW | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_RMA_EVENT;

// The integer in an enum field.  A C caller may store any int there, and in
// C++ loading an out-of-range enumerator through the enum type is undefined.
template <typename E>
int raw(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "enum fields are int-sized");
  int v;
  memcpy(&v, &e, sizeof(v));
  return v;
}

bool version_supported(uint32_t version) {
  if (FI_MAJOR(version) == 1) return true;
  return FI_MAJOR(version) == FI_MAJOR_VERSION && FI_MINOR(version) <= FI_MINOR_VERSION;
}

// Ranks from most to least demanding; a hint ranked below the provider asks
// for more than it offers.  -1: not a valid value.
int thread_level(int t) {
  switch (t) {
    case FI_THREAD_SAFE: return 1;
    case FI_THREAD_FID: return 2;
    case FI_THREAD_ENDPOINT: return 3;
    case FI_THREAD_COMPLETION: return 4;
    case FI_THREAD_DOMAIN: return 5;
    case FI_THREAD_UNSPEC: return 6;
    default: return -1;
  }
}

int progress_level(int p) {
  switch (p) {
    case FI_PROGRESS_AUTO: return 1;
    case FI_PROGRESS_MANUAL: return 2;
    case FI_PROGRESS_CONTROL_UNIFIED: return 2;
    case FI_PROGRESS_UNSPEC: return 3;
    default: return -1;
  }
}

int rm_level(int r) {
  switch (r) {
    case FI_RM_ENABLED: return 1;
    case FI_RM_DISABLED: return 2;
    case FI_RM_UNSPEC: return 3;
    default: return -1;
  }
}

bool rma_target_allowed(uint64_t caps) {
  if (!(caps & (FI_RMA | FI_ATOMIC))) return false;
  if (caps & (FI_REMOTE_READ | FI_REMOTE_WRITE)) return true;
  return !(caps & (FI_READ | FI_WRITE));
}

// The mr_mode bits a provider requires of an application that uses `caps`.
int required_mr_mode(uint64_t caps, int prov_mode) {
  int mode = prov_mode;
  if (!(caps & FI_HMEM)) mode &= ~FI_MR_HMEM;
  if (!rma_target_allowed(caps)) {
    if (!(mode & (FI_MR_LOCAL | FI_MR_HMEM | FI_MR_XPU_DESC))) return 0;
    mode &= ~kRmaTargetMrBits;
  }
  if (!(caps & FI_XPU)) mode &= ~FI_MR_XPU_DESC;
  return mode & ~(FI_MR_BASIC | FI_MR_SCALABLE);
}

// The hints' mr_mode for API >= 1.5, with the deprecated FI_LOCAL_MR mode bit read as the old
// spelling of FI_MR_LOCAL.
int user_mr_mode(uint32_t version, const fi_info* h) {
  int user = h->domain_attr ? h->domain_attr->mr_mode : FI_MR_UNSPEC;
  if ((h->mode & FI_LOCAL_MR) && FI_VERSION_GE(version, FI_VERSION(1, 5)) &&
      !(user & (FI_MR_BASIC | FI_MR_SCALABLE)))
    user |= FI_MR_LOCAL;
  return user;
}

// "FI_MR_LOCAL|FI_MR_PROV_KEY" for a log line.
void mr_bits_str(int bits, char* buf, size_t len) {
  static const struct {
    int bit;
    const char* name;
  } kNames[] = {
      {FI_MR_LOCAL, "FI_MR_LOCAL"},         {FI_MR_RAW, "FI_MR_RAW"},
      {FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"}, {FI_MR_ALLOCATED, "FI_MR_ALLOCATED"},
      {FI_MR_PROV_KEY, "FI_MR_PROV_KEY"},   {FI_MR_MMU_NOTIFY, "FI_MR_MMU_NOTIFY"},
      {FI_MR_RMA_EVENT, "FI_MR_RMA_EVENT"}, {FI_MR_ENDPOINT, "FI_MR_ENDPOINT"},
      {FI_MR_HMEM, "FI_MR_HMEM"},           {FI_MR_COLLECTIVE, "FI_MR_COLLECTIVE"},
      {FI_MR_XPU_DESC, "FI_MR_XPU_DESC"},
  };
  size_t used = 0;
  buf[0] = '\0';
  for (const auto& n : kNames) {
    if (!(bits & n.bit) || used >= len) continue;
    int w = snprintf(buf + used, len - used, "%s%s", used ? "|" : "", n.name);
    if (w > 0) used += static_cast<size_t>(w);
  }
  if (!used) snprintf(buf, len, "0x%x", static_cast<unsigned>(bits));
}

// Structural validation of the hints: malformed input, not a mismatch.  A negative mr_mode is
// not malformed: ~(FI_MR_BASIC | FI_MR_SCALABLE) is how applications say "any mode".
int validate_hints(const fi_info* h) {
  if (h->caps & ~kAllCaps) return -FI_EBADFLAGS;
  if ((h->src_addr == nullptr) != (h->src_addrlen == 0)) return -FI_EINVAL;
  if ((h->dest_addr == nullptr) != (h->dest_addrlen == 0)) return -FI_EINVAL;
  if (h->tx_attr) {
    if (h->tx_attr->caps & ~kAllCaps) return -FI_EBADFLAGS;
    if (h->tx_attr->op_flags & ~kOpFlags) return -FI_EBADFLAGS;
  }
  if (h->rx_attr) {
    if (h->rx_attr->caps & ~kAllCaps) return -FI_EBADFLAGS;
    if (h->rx_attr->op_flags & ~kOpFlags) return -FI_EBADFLAGS;
  }
  if (const fi_ep_attr* e = h->ep_attr) {
    if (raw(e->type) < FI_EP_UNSPEC || raw(e->type) > FI_EP_RDM) return -FI_EINVAL;
    if (e->auth_key_size && !e->auth_key) return -FI_EINVAL;
  }
  if (const fi_domain_attr* d = h->domain_attr) {
    if (thread_level(raw(d->threading)) < 0 || progress_level(raw(d->control_progress)) < 0 ||
        progress_level(raw(d->data_progress)) < 0 || rm_level(raw(d->resource_mgmt)) < 0 ||
        raw(d->av_type) < FI_AV_UNSPEC || raw(d->av_type) > FI_AV_TABLE)
      return -FI_EINVAL;
    if (d->auth_key_size && !d->auth_key) return -FI_EINVAL;
  }
  return 0;
}

// Matches one offer against the hints.  Every check runs, so that FI_LOG_LEVEL=info names each
// attribute that rules the offer out, one line apiece, not just the first.
struct Matcher {
  const char* prov;
  uint32_t version;
  const fi_info* p;  // provider's offer
  const fi_info* h;  // hints (not NULL)
  mutable int rejections = 0;

  __attribute__((format(printf, 2, 3))) void reject(const char* fmt, ...) const {
    rejections++;
    if (!log_enabled(LogLevel::kInfo, prov, LogSubsys::kCore)) return;
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    XPUFAB_INFO(prov, LogSubsys::kCore, "offer %s/%s rejected: %s",
                p->fabric_attr && p->fabric_attr->name ? p->fabric_attr->name : "?",
                p->domain_attr && p->domain_attr->name ? p->domain_attr->name : "?", why);
  }

  uint64_t granted_caps() const {
    if (!h->caps) return p->caps & ~kOptInCaps;
    uint64_t caps = (h->caps & kPrimaryCaps) | ((p->caps | h->caps) & kSecondaryCaps);
    return grant_modifiers(caps, p->caps);
  }

  void check_mr_mode(uint64_t caps) const {
    const int user = user_mr_mode(version, h);
    const int prov_mode = p->domain_attr->mr_mode;
    char bits[160];
    if ((prov_mode & FI_MR_LOCAL) && !(user & FI_MR_LOCAL))
      reject("mr_mode lacks FI_MR_LOCAL (nor FI_LOCAL_MR in mode)");
    if (FI_VERSION_LT(version, FI_VERSION(1, 5))) {
      bool ok;
      switch (user) {
        case FI_MR_UNSPEC: ok = prov_mode & (FI_MR_BASIC | FI_MR_SCALABLE); break;
        case FI_MR_BASIC: ok = prov_mode & FI_MR_BASIC; break;
        case FI_MR_SCALABLE: ok = prov_mode & FI_MR_SCALABLE; break;
        default: ok = false; break;
      }
      if (!ok) reject("mr_mode %d not offered under API < 1.5", user);
      return;
    }
    if (user & FI_MR_BASIC) {
      if ((user & ~FI_MR_BASIC) || !(prov_mode & FI_MR_BASIC))
        reject("mr_mode FI_MR_BASIC (exclusive) not offered");
      return;
    }
    if (user & FI_MR_SCALABLE) {
      if ((user & ~FI_MR_SCALABLE) || !(prov_mode & FI_MR_SCALABLE))
        reject("mr_mode FI_MR_SCALABLE (exclusive) not offered");
      return;
    }
    const int missing = required_mr_mode(caps, prov_mode) & ~user & ~FI_MR_LOCAL;
    if (missing) {
      mr_bits_str(missing, bits, sizeof(bits));
      reject("mr_mode lacks %s", bits);
    }
  }

  void check_tx() const {
    const fi_tx_attr* u = h->tx_attr;
    const fi_tx_attr* a = p->tx_attr;
    if (!u || !a) return;
    uint64_t umode = u->mode ? u->mode : h->mode;
    if (u->caps & ~expand_modifiers(a->caps)) reject("tx caps");
    if (a->mode & ~umode) reject("tx mode bits the application lacks");
    if (u->op_flags & ~(a->op_flags | kAlwaysOpFlags)) reject("tx op_flags");
    if (u->msg_order & ~a->msg_order) reject("tx msg_order");
    if (u->comp_order & ~a->comp_order) reject("tx comp_order");
    if (u->inject_size > a->inject_size)
      reject("inject_size %zu above %zu", u->inject_size, a->inject_size);
    if (u->size > a->size) reject("tx size %zu above %zu", u->size, a->size);
    if (u->iov_limit > a->iov_limit)
      reject("tx iov_limit %zu above %zu", u->iov_limit, a->iov_limit);
    if (u->rma_iov_limit > a->rma_iov_limit)
      reject("rma_iov_limit %zu above %zu", u->rma_iov_limit, a->rma_iov_limit);
    if (h->caps && (u->caps & ~expand_modifiers(h->caps) & kPrimaryCaps))
      reject("tx caps outside info caps");
  }

  void check_rx() const {
    const fi_rx_attr* u = h->rx_attr;
    const fi_rx_attr* a = p->rx_attr;
    if (!u || !a) return;
    uint64_t umode = u->mode ? u->mode : h->mode;
    if (u->caps & ~expand_modifiers(a->caps)) reject("rx caps");
    if (a->mode & ~umode) reject("rx mode bits the application lacks");
    if (u->op_flags & ~(a->op_flags | kAlwaysOpFlags)) reject("rx op_flags");
    if (u->msg_order & ~a->msg_order) reject("rx msg_order");
    if (u->comp_order & ~a->comp_order) reject("rx comp_order");
    if (u->total_buffered_recv > a->total_buffered_recv) reject("total_buffered_recv");
    if (u->size > a->size) reject("rx size %zu above %zu", u->size, a->size);
    if (u->iov_limit > a->iov_limit)
      reject("rx iov_limit %zu above %zu", u->iov_limit, a->iov_limit);
    if (h->caps && (u->caps & ~expand_modifiers(h->caps) & kPrimaryCaps))
      reject("rx caps outside info caps");
  }

  void check_ep() const {
    const fi_ep_attr* u = h->ep_attr;
    const fi_ep_attr* a = p->ep_attr;
    if (!u || !a) return;
    if (u->type != FI_EP_UNSPEC && u->type != a->type) reject("endpoint type");
    if (u->protocol != FI_PROTO_UNSPEC && u->protocol != a->protocol) reject("protocol");
    if (u->protocol_version > a->protocol_version) reject("protocol_version");
    if (u->max_msg_size > a->max_msg_size)
      reject("max_msg_size %zu above %zu", u->max_msg_size, a->max_msg_size);
    if (u->max_order_raw_size > a->max_order_raw_size) reject("max_order_raw_size");
    if (u->max_order_war_size > a->max_order_war_size) reject("max_order_war_size");
    if (u->max_order_waw_size > a->max_order_waw_size) reject("max_order_waw_size");
    const fi_domain_attr* d = p->domain_attr;
    if (u->tx_ctx_cnt == FI_SHARED_CONTEXT) {
      if (d && !d->max_ep_stx_ctx) reject("shared tx context");
    } else if (u->tx_ctx_cnt > (d && d->max_ep_tx_ctx ? d->max_ep_tx_ctx : a->tx_ctx_cnt)) {
      reject("tx_ctx_cnt");
    }
    if (u->rx_ctx_cnt == FI_SHARED_CONTEXT) {
      if (d && !d->max_ep_srx_ctx) reject("shared rx context");
    } else if (u->rx_ctx_cnt > (d && d->max_ep_rx_ctx ? d->max_ep_rx_ctx : a->rx_ctx_cnt)) {
      reject("rx_ctx_cnt");
    }
  }

  void check_domain(uint64_t caps) const {
    const fi_domain_attr* u = h->domain_attr;
    const fi_domain_attr* a = p->domain_attr;
    if (!u || !a) return;
    if (u->name && (!a->name || strcmp(u->name, a->name) != 0)) reject("domain name %s", u->name);
    if (thread_level(u->threading) < thread_level(a->threading)) reject("threading");
    if (progress_level(u->control_progress) < progress_level(a->control_progress))
      reject("control_progress");
    if (progress_level(u->data_progress) < progress_level(a->data_progress))
      reject("data_progress");
    if (rm_level(u->resource_mgmt) < rm_level(a->resource_mgmt)) reject("resource_mgmt");
    // A table's addresses are also valid FI_AV_MAP addresses (a map puts no constraint on the
    // values it returns), so an offer of a table serves an application that asks for a map.
    if (u->av_type != FI_AV_UNSPEC && a->av_type != FI_AV_UNSPEC && u->av_type != a->av_type &&
        !(u->av_type == FI_AV_MAP && a->av_type == FI_AV_TABLE))
      reject("av_type");
    check_mr_mode(caps);
    if (u->mr_key_size > a->mr_key_size) reject("mr_key_size");
    if (u->cq_data_size > a->cq_data_size) reject("cq_data_size");
    if (u->cq_cnt > a->cq_cnt) reject("cq_cnt");
    if (u->ep_cnt > a->ep_cnt) reject("ep_cnt");
    if (u->tx_ctx_cnt > a->tx_ctx_cnt) reject("domain tx_ctx_cnt");
    if (u->rx_ctx_cnt > a->rx_ctx_cnt) reject("domain rx_ctx_cnt");
    if (u->max_ep_tx_ctx > a->max_ep_tx_ctx) reject("max_ep_tx_ctx");
    if (u->max_ep_rx_ctx > a->max_ep_rx_ctx) reject("max_ep_rx_ctx");
    if (u->max_ep_stx_ctx > a->max_ep_stx_ctx) reject("max_ep_stx_ctx");
    if (u->max_ep_srx_ctx > a->max_ep_srx_ctx) reject("max_ep_srx_ctx");
    if (u->cntr_cnt > a->cntr_cnt) reject("cntr_cnt");
    if (u->mr_iov_limit > a->mr_iov_limit) reject("mr_iov_limit");
    if (u->caps & ~expand_modifiers(a->caps)) reject("domain caps");
    if (a->mode & ~(u->mode ? u->mode : h->mode)) reject("domain mode bits");
    if (u->max_err_data > a->max_err_data) reject("max_err_data");
    if (u->mr_cnt > a->mr_cnt) reject("mr_cnt");
    if (u->max_xpu_ctx_cnt > a->max_xpu_ctx_cnt) reject("max_xpu_ctx_cnt");
  }

  bool matches() const {
    if ((h->caps & FI_XPU) && FI_VERSION_LT(version, FI_VERSION(2, 7)))
      reject("FI_XPU needs API version 2.7");
    if (h->caps & ~expand_modifiers(p->caps)) reject("caps");
    uint64_t caps = granted_caps();
    if (p->mode & ~h->mode) reject("mode bits the application lacks");
    if (h->addr_format != FI_FORMAT_UNSPEC && p->addr_format != FI_FORMAT_UNSPEC &&
        h->addr_format != p->addr_format)
      reject("addr_format");
    if (const fi_fabric_attr* u = h->fabric_attr; u && p->fabric_attr) {
      if (u->name && (!p->fabric_attr->name || strcmp(u->name, p->fabric_attr->name) != 0))
        reject("fabric name %s", u->name);
      if (u->prov_version > p->fabric_attr->prov_version && p->fabric_attr->prov_version)
        reject("prov_version");
    }
    check_ep();
    check_domain(caps);
    check_tx();
    check_rx();
    return rejections == 0;
  }
};

bool set_auth_key(uint8_t** dst, size_t* dst_size, const uint8_t* key, size_t size) {
  uint8_t* copy = static_cast<uint8_t*>(malloc(size));
  if (!copy) return false;
  memcpy(copy, key, size);
  free(*dst);
  *dst = copy;
  *dst_size = size;
  return true;
}

// Builds the returned entry from the provider's offer.  nullptr on ENOMEM.
fi_info* shape_result(const Provider& prov, uint32_t version, const fi_info* p,
                      const fi_info* h) {
  fi_info* r = dup_one_info(p);
  if (!r) return nullptr;
  bool ok = true;
  if (!r->tx_attr) r->tx_attr = static_cast<fi_tx_attr*>(calloc(1, sizeof(fi_tx_attr)));
  if (!r->rx_attr) r->rx_attr = static_cast<fi_rx_attr*>(calloc(1, sizeof(fi_rx_attr)));
  if (!r->ep_attr) r->ep_attr = static_cast<fi_ep_attr*>(calloc(1, sizeof(fi_ep_attr)));
  if (!r->domain_attr)
    r->domain_attr = static_cast<fi_domain_attr*>(calloc(1, sizeof(fi_domain_attr)));
  if (!r->fabric_attr)
    r->fabric_attr = static_cast<fi_fabric_attr*>(calloc(1, sizeof(fi_fabric_attr)));
  if (!r->tx_attr || !r->rx_attr || !r->ep_attr || !r->domain_attr || !r->fabric_attr) {
    fi_freeinfo(r);
    return nullptr;
  }
  uint64_t caps =
      h ? Matcher{prov.name(), version, p, h}.granted_caps() : p->caps & ~kOptInCaps;
  bool xpu = caps & FI_XPU;
  uint64_t strip = xpu ? 0 : kOptInCaps;
  // tx/rx keep what the granted caps allow them, their modifiers included; caps the hints give
  // tx/rx are refined per class by what the offer's tx/rx carry.
  uint64_t sub_mask = caps | kSecondaryCaps;
  r->caps = caps;
  r->tx_attr->caps &= sub_mask & ~strip;
  r->rx_attr->caps &= sub_mask & ~strip;
  if (h && h->tx_attr && h->tx_attr->caps) {
    const uint64_t offered = p->tx_attr ? p->tx_attr->caps : caps;
    r->tx_attr->caps = grant_modifiers(h->tx_attr->caps & kPrimaryCaps, offered) |
                       (r->tx_attr->caps & kSecondaryCaps);
  }
  if (h && h->rx_attr && h->rx_attr->caps) {
    const uint64_t offered = p->rx_attr ? p->rx_attr->caps : caps;
    r->rx_attr->caps = grant_modifiers(h->rx_attr->caps & kPrimaryCaps, offered) |
                       (r->rx_attr->caps & kSecondaryCaps);
  }
  // The endpoint's default flags are the ones asked for, when the hints ask.
  if (h && h->tx_attr && h->tx_attr->op_flags) r->tx_attr->op_flags = h->tx_attr->op_flags;
  if (h && h->rx_attr && h->rx_attr->op_flags) r->rx_attr->op_flags = h->rx_attr->op_flags;
  r->tx_attr->op_flags &= ~strip;
  r->rx_attr->op_flags &= ~strip;
  r->ep_attr->xpu_ctx = nullptr;
  // Before API 2.0 mem_tag_format was a bit pattern (its set bits the tag bits an application
  // may use; Open MPI counts them), not 2.0's format names: FI_TAG_BITS (all 64 bits) reads as
  // 1.x's generic pattern, which also leaves all 64 bits to the application.
  if ((caps & FI_TAGGED) && FI_VERSION_LT(version, FI_VERSION(2, 0)) &&
      r->ep_attr->mem_tag_format == FI_TAG_BITS)
    r->ep_attr->mem_tag_format = kGenericTagFormat1x;

  fi_domain_attr* d = r->domain_attr;
  d->domain = nullptr;
  d->caps &= ~strip;
  if (!xpu) d->max_xpu_ctx_cnt = 0;
  if (FI_VERSION_LT(version, FI_VERSION(1, 5))) {
    int user = h && h->domain_attr ? h->domain_attr->mr_mode : FI_MR_UNSPEC;
    if (user == FI_MR_BASIC || user == FI_MR_SCALABLE)
      d->mr_mode = user;
    else
      d->mr_mode = (p->domain_attr->mr_mode & FI_MR_BASIC) ? FI_MR_BASIC : FI_MR_SCALABLE;
  } else if (h && h->domain_attr &&
             (h->domain_attr->mr_mode & (FI_MR_BASIC | FI_MR_SCALABLE))) {
    d->mr_mode = h->domain_attr->mr_mode;
  } else {
    d->mr_mode = required_mr_mode(caps, p->domain_attr ? p->domain_attr->mr_mode : 0);
    // Only bits the application allowed go back.  FI_MR_LOCAL granted through the FI_LOCAL_MR
    // mode bit is returned the way it was asked for: as that mode bit.
    if (h && h->domain_attr) {
      const int asked = h->domain_attr->mr_mode;
      if ((d->mr_mode & FI_MR_LOCAL) && !(asked & FI_MR_LOCAL)) r->mode |= FI_LOCAL_MR;
      d->mr_mode &= asked;
    }
  }
  if (h && h->domain_attr) {
    const fi_domain_attr* u = h->domain_attr;
    if (u->threading != FI_THREAD_UNSPEC) d->threading = u->threading;
    if (u->control_progress != FI_PROGRESS_UNSPEC) d->control_progress = u->control_progress;
    if (u->data_progress != FI_PROGRESS_UNSPEC) d->data_progress = u->data_progress;
    if (u->resource_mgmt != FI_RM_UNSPEC) d->resource_mgmt = u->resource_mgmt;
    if (u->av_type != FI_AV_UNSPEC) d->av_type = u->av_type;
    if (u->auth_key_size)
      ok = ok && set_auth_key(&d->auth_key, &d->auth_key_size, u->auth_key, u->auth_key_size);
  }
  if (h && h->ep_attr && h->ep_attr->auth_key_size) {
    ok = ok && set_auth_key(&r->ep_attr->auth_key, &r->ep_attr->auth_key_size,
                            h->ep_attr->auth_key, h->ep_attr->auth_key_size);
  }
  ok = ok && replace_string(&r->fabric_attr->prov_name, prov.name());
  r->fabric_attr->fabric = nullptr;
  r->fabric_attr->prov_version = prov.version();
  r->fabric_attr->api_version = version;
  if (!ok) {
    fi_freeinfo(r);
    return nullptr;
  }
  return r;
}

fi_info* attr_only_info(const Provider& prov, uint32_t version) {
  fi_info* r = dup_one_info(nullptr);
  if (!r) return nullptr;
  if (!replace_string(&r->fabric_attr->prov_name, prov.name())) {
    fi_freeinfo(r);
    return nullptr;
  }
  r->fabric_attr->prov_version = prov.version();
  r->fabric_attr->api_version = version;
  return r;
}

int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const fi_info* hints, fi_info** info_p) {
  if (!info_p) return -FI_EINVAL;
  if (!version_supported(version)) {
    XPUFAB_WARN(nullptr, LogSubsys::kCore, "API version %u.%u not supported (max %u.%u)",
                FI_MAJOR(version), FI_MINOR(version), FI_MAJOR_VERSION, FI_MINOR_VERSION);
    return -FI_ENOSYS;
  }
  if (flags & ~kGetinfoFlags) return -FI_EBADFLAGS;
  if ((flags & FI_SOURCE) && !node && !service) return -FI_EINVAL;
  if (hints) {
    int ret = validate_hints(hints);
    if (ret) return ret;
  }
  const char* want_prov =
      hints && hints->fabric_attr ? hints->fabric_attr->prov_name : nullptr;

  fi_info* head = nullptr;
  fi_info** tail = &head;
  int ret = 0;
  for (Provider* prov : registered_providers()) {
    if (!provider_enabled_by_env(prov->name())) continue;
    if (want_prov && strcasecmp(want_prov, prov->name()) != 0) continue;
    if (prov->fi_version() < version) {
      XPUFAB_INFO(prov->name(), LogSubsys::kCore, "skipped: implements API %u.%u only",
                  FI_MAJOR(prov->fi_version()), FI_MINOR(prov->fi_version()));
      continue;
    }
    if (flags & FI_PROV_ATTR_ONLY) {
      fi_info* r = attr_only_info(*prov, version);
      if (!r) { ret = -FI_ENOMEM; break; }
      *tail = r;
      tail = &r->next;
      continue;
    }
    fi_info* offers = nullptr;
    int pret = prov->getinfo(version, node, service, flags, hints, &offers);
    if (pret || !offers) {
      XPUFAB_INFO(prov->name(), LogSubsys::kCore, "getinfo returned %d (%s)", pret,
                  fi_strerror(-pret));
      if (!pret) continue;
      fi_freeinfo(offers);
      continue;
    }
    for (const fi_info* p = offers; p; p = p->next) {
      if (hints && !Matcher{prov->name(), version, p, hints}.matches()) continue;
      fi_info* r = shape_result(*prov, version, p, hints);
      if (!r) { ret = -FI_ENOMEM; break; }
      *tail = r;
      tail = &r->next;
    }
    fi_freeinfo(offers);
    if (ret) break;
  }
  if (ret) {
    fi_freeinfo(head);
    return ret;
  }
  if (!head) return -FI_ENODATA;
  *info_p = head;
  return 0;
}

}  // namespace
}  // namespace xpufab::core

extern "C" {

uint32_t fi_version(void) { return xpufab::core::kApiVersion; }

int fi_getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
               const struct fi_info* hints, struct fi_info** info) {
  return xpufab::core::getinfo(version, node, service, flags, hints, info);
}

int fi_fabric(struct fi_fabric_attr* attr, struct fid_fabric** fabric, void* context) {
  using namespace xpufab::core;
  if (!attr || !fabric || !attr->prov_name || !attr->name) return -FI_EINVAL;
  Provider* prov = find_provider(attr->prov_name);
  if (!prov || !provider_enabled_by_env(prov->name())) {
    XPUFAB_WARN(nullptr, LogSubsys::kFabric, "no provider named %s", attr->prov_name);
    return -FI_ENODEV;
  }
  fid_fabric* f = nullptr;
  int ret = prov->fabric(attr, &f, context);
  if (ret) return ret;
  if (!f) return -FI_EOTHER;
  f->api_version = attr->api_version ? attr->api_version : kApiVersion;
  *fabric = f;
  return 0;
}

int fi_fabric2(struct fi_info* info, struct fid_fabric** fabric, uint64_t flags,
               void* context) {
  if (!info || !info->fabric_attr) return -FI_EINVAL;
  if (flags) return -FI_EBADFLAGS;
  return fi_fabric(info->fabric_attr, fabric, context);
}

int fi_open(uint32_t version, const char* name, void* attr, size_t attr_len,
            uint64_t flags, struct fid** fid, void* context) {
  (void)attr;
  (void)attr_len;
  (void)flags;
  (void)context;
  if (!name || !fid) return -FI_EINVAL;
  if (!xpufab::core::version_supported(version)) return -FI_ENOSYS;
  // No named core objects (libfabric's "mr_cache", "logging") exist here.
  return -FI_ENOSYS;
}

}  // extern "C"
