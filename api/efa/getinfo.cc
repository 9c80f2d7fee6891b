// The provider's fi_getinfo offers: one fi_info per device of the chosen backend, its attributes
// derived from what the device reports.
#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "api/core/info.h"
#include "api/efa/efa.h"
#include "api/efa/proto_ep.h"

namespace xpufab::efa {

namespace {

const int kDirectMrMode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
// The capabilities that name memory by its registration.
constexpr uint64_t kMemoryCaps = FI_RMA | FI_ATOMIC | FI_RMA_EVENT | FI_XPU | FI_READ | FI_WRITE |
                                 FI_REMOTE_READ | FI_REMOTE_WRITE;

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
  // The largest single transfer of any granted operation: an RMA moves up to max_rdma_size, a
  // SEND one MTU (provider_getinfo narrows it to the MTU for applications not asking for RMA).
  i->ep_attr->max_msg_size = (rd || wr) ? std::max(a.max_rdma_size, a.mtu) : a.mtu;
  i->ep_attr->tx_ctx_cnt = 1;
  i->ep_attr->rx_ctx_cnt = 1;
  fi_domain_attr* d = i->domain_attr;
  d->name = strdup(a.name.c_str());
  d->threading = FI_THREAD_SAFE;
  d->control_progress = FI_PROGRESS_AUTO;
  d->data_progress = FI_PROGRESS_AUTO;
  // The QPs retry receiver-not-ready without limit (rnr_retry 7), so a send to a peer without a
  // posted receive waits instead of failing: what FI_RM_ENABLED promises an RDM endpoint.
  d->resource_mgmt = FI_RM_ENABLED;
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

// The FI_EP_DGRAM offer over a UD QP, named as upstream's efa provider names it (fabric "efa",
// domain "<device>-dgrm") so that an application written for upstream finds it where it looks.
// Datagrams: SEND/RECV of at most one MTU after the 40-byte prefix (FI_MSG_PREFIX) that receives
// fill with the GRH; no RMA, no reliability (FI_RM_DISABLED), no XPU.
fi_info* make_dgram_info(const backend::DeviceAttr& a) {
  fi_info* i = make_info(a);
  if (!i) return nullptr;
  const uint64_t caps = FI_MSG | FI_SEND | FI_RECV | FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM;
  i->caps = caps;
  i->mode = FI_MSG_PREFIX;
  i->tx_attr->caps = caps & (FI_MSG | FI_SEND);
  i->tx_attr->mode = FI_MSG_PREFIX;
  i->tx_attr->rma_iov_limit = 0;
  i->rx_attr->caps = caps & (FI_MSG | FI_RECV | FI_SOURCE);
  i->rx_attr->mode = FI_MSG_PREFIX;
  i->ep_attr->type = FI_EP_DGRAM;
  i->ep_attr->max_msg_size = a.mtu;
  i->ep_attr->msg_prefix_size = backend::kGrhSize;
  fi_domain_attr* d = i->domain_attr;
  d->resource_mgmt = FI_RM_DISABLED;
  d->mr_mode = kDirectMrMode;
  d->max_xpu_ctx_cnt = 0;
  free(d->name);
  d->name = strdup((a.name + kDgramDomainSuffix).c_str());
  free(i->fabric_attr->name);
  i->fabric_attr->name = strdup(kDgramFabricName);
  if (!d->name || !i->fabric_attr->name) {
    fi_freeinfo(i);
    return nullptr;
  }
  return i;
}

// The protocol fabric's RDM offer (fabric "efa", domain "<device>-rdm", as upstream names them):
// tagged messages and atomics in software over the same SRD QPs, messages up to
// kProtoMaxMsgSize whatever the MTU, completions in FI_CQ_FORMAT_TAGGED. FI_RMA on every
// generation: the core writes in packets and reads by RDMA read or, without it, in packets
// (api/proto/rma.h), and reports remote accesses (FI_RMA_EVENT: remote counters, remote CQ
// data).
fi_info* make_proto_info(const backend::DeviceAttr& a) {
  fi_info* i = make_info(a);
  if (!i) return nullptr;
  const uint64_t caps = FI_MSG | FI_TAGGED | FI_ATOMIC | FI_RMA | FI_RMA_EVENT | FI_XPU |
                        FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE |
                        FI_DIRECTED_RECV | FI_SOURCE | FI_FENCE | FI_LOCAL_COMM | FI_REMOTE_COMM |
                        FI_MULTI_RECV | FI_TAGGED_MULTI_RECV;
  // The core handles each sender's packets in its order whatever order SRD delivers them in:
  // messages match in order, atomics execute in order, writes land in order. Reads by RDMA read
  // pass packets, so nothing is promised about them.
  const uint64_t order = FI_ORDER_SAS | FI_ORDER_WAW | FI_ORDER_RMA_WAW | FI_ORDER_ATOMIC_RAR |
                         FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAR | FI_ORDER_ATOMIC_WAW;
  i->caps = caps;
  i->mode = 0;
  i->tx_attr->caps = caps & (FI_MSG | FI_TAGGED | FI_ATOMIC | FI_RMA | FI_XPU | FI_SEND | FI_READ |
                             FI_WRITE | FI_FENCE);
  i->tx_attr->msg_order = order;
  i->rx_attr->msg_order = order;
  i->tx_attr->mode = 0;
  i->tx_attr->inject_size = proto_inject_size(a);
  i->tx_attr->iov_limit = kProtoIovLimit;
  i->tx_attr->rma_iov_limit = 1;
  i->rx_attr->caps = caps & (FI_MSG | FI_TAGGED | FI_ATOMIC | FI_RMA | FI_RMA_EVENT | FI_XPU |
                             FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_DIRECTED_RECV |
                             FI_SOURCE | FI_MULTI_RECV | FI_TAGGED_MULTI_RECV);
  // Receives are the provider's own bounce buffers: a write with immediate data never consumes
  // one of the application's.
  i->rx_attr->mode = 0;
  i->rx_attr->iov_limit = kProtoIovLimit;
  i->ep_attr->max_msg_size = kProtoMaxMsgSize;
  fi_domain_attr* d = i->domain_attr;
  // Progress is made by whoever reads a CQ or counter of the endpoint: the protocol runs in
  // the caller's thread.
  d->data_progress = FI_PROGRESS_MANUAL;
  d->cq_data_size = 8;
  // FI_XPU: device code runs the same core on an exported endpoint (fi_xpu_tsend / trecv and
  // the atomics; api/efa/ep_export.cc).
  free(d->name);
  d->name = strdup((a.name + kRdmDomainSuffix).c_str());
  free(i->fabric_attr->name);
  i->fabric_attr->name = strdup(kProtoFabricName);
  if (!d->name || !i->fabric_attr->name) {
    fi_freeinfo(i);
    return nullptr;
  }
  return i;
}

// Applications that register nothing locally (hints without FI_MR_LOCAL, as MPI's transports
// ask) get the protocol fabric all the same: the core copies the buffers that come without a
// descriptor (eager payloads through its bounce buffers, a rendezvous by a push, RMA by packets;
// api/proto/msg.h, rma.h). Memory a peer reaches is still named by its registration: RMA and
// atomics keep FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY, and hints that ask for
// neither get messages and tagged messages only. (FI_XPU hints without FI_MR_LOCAL were refused
// before: device code passes descriptors.) Where the hints ask for RMA and atomics alone, their
// completions come once the data is at the target (packet writes and atomics on the target's
// answer, RDMA writes on the device's), which is FI_DELIVERY_COMPLETE; messages complete when
// sent, so it is not offered with them.
void serve_unregistered(const fi_info* hints, fi_info* i) {
  if (!hints || !hints->domain_attr) return;
  const int user = hints->domain_attr->mr_mode;
  if ((user & (FI_MR_LOCAL | FI_MR_BASIC | FI_MR_SCALABLE)) || (hints->mode & FI_LOCAL_MR)) return;
  const bool memory = hints->caps & (FI_RMA | FI_ATOMIC);
  const uint64_t strip = memory ? FI_XPU : kMemoryCaps;
  i->caps &= ~strip;
  i->tx_attr->caps &= ~strip;
  i->rx_attr->caps &= ~strip;
  i->domain_attr->mr_mode &= ~(FI_MR_LOCAL | FI_MR_XPU_DESC);
  i->domain_attr->max_xpu_ctx_cnt = 0;
  if (!memory) {
    i->tx_attr->rma_iov_limit = 0;
    i->domain_attr->mr_mode &= ~FI_MR_ALLOCATED;
  } else if (!(hints->caps & (FI_MSG | FI_TAGGED))) {
    i->tx_attr->op_flags |= FI_DELIVERY_COMPLETE;
  }
}

// Whether the hints let a DGRAM offer through, logging why not when they ask for one.
bool want_dgram(const fi_info* hints) {
  if (!hints) return false;  // offers without hints stay the RDM ones
  const fi_ep_type t = hints->ep_attr ? hints->ep_attr->type : FI_EP_UNSPEC;
  if (t != FI_EP_DGRAM && t != FI_EP_UNSPEC) return false;
  if (hints->caps & (FI_RMA | FI_XPU | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)) {
    if (t == FI_EP_DGRAM) EFA_INFO(kCore, "FI_EP_DGRAM offers SEND/RECV only (no RMA, no FI_XPU)");
    return false;
  }
  if (!(hints->mode & FI_MSG_PREFIX)) {
    if (t == FI_EP_DGRAM)
      EFA_INFO(kCore,
               "FI_EP_DGRAM requires mode FI_MSG_PREFIX (receives get the %u-byte GRH in the "
               "prefix); the hints lack it, no DGRAM offered",
               backend::kGrhSize);
    return false;
  }
  return true;
}

bool want_rdm(const fi_info* hints) {
  return !hints || !hints->ep_attr || hints->ep_attr->type != FI_EP_DGRAM;
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

// Parses the text forms of an EFA address an application may give fi_getinfo: what
// fi_av_straddr prints ("fi_addr_efa://[GID]:QPN:QKEY"), and a GID alone, bare or in brackets
// (qpn and qkey 0: it names a device, not an endpoint).  False for anything else.
bool parse_efa_address(const char* text, EfaAddr* out) {
  static const char kPrefix[] = "fi_addr_efa://";
  EfaAddr a{};
  const char* s = text;
  const bool prefixed = strncmp(s, kPrefix, sizeof(kPrefix) - 1) == 0;
  if (prefixed) s += sizeof(kPrefix) - 1;
  char gid[INET6_ADDRSTRLEN + 1];
  const char* rest = "";
  if (*s == '[') {
    const char* close = strchr(s, ']');
    if (!close || static_cast<size_t>(close - s - 1) >= sizeof(gid)) return false;
    memcpy(gid, s + 1, close - s - 1);
    gid[close - s - 1] = '\0';
    rest = close + 1;
  } else {
    if (prefixed || strlen(s) >= sizeof(gid)) return false;
    snprintf(gid, sizeof(gid), "%s", s);
  }
  if (inet_pton(AF_INET6, gid, a.gid) != 1) return false;
  if (*rest) {
    unsigned qpn = 0, qkey = 0;
    int used = 0;
    if (sscanf(rest, ":%u:%u%n", &qpn, &qkey, &used) != 2 || rest[used] != '\0' || qpn > 0xffff)
      return false;
    a.qpn = static_cast<uint16_t>(qpn);
    a.qkey = qkey;
  }
  *out = a;
  return true;
}

// An address the hints carry: FI_ADDR_EFA (or unspecified) and EfaAddr-sized.
bool hints_address(const fi_info* hints, const void* addr, size_t len, const char* what) {
  if (hints->addr_format != FI_FORMAT_UNSPEC && hints->addr_format != FI_ADDR_EFA) {
    EFA_INFO(kCore, "hints %s is not an FI_ADDR_EFA address; nothing offered", what);
    return false;
  }
  if (len != sizeof(EfaAddr) || !addr) {
    EFA_INFO(kCore, "hints %s is %zu bytes, an EFA address %zu; nothing offered", what, len,
             sizeof(EfaAddr));
    return false;
  }
  return true;
}

// The local address and the destination an application names through node / FI_SOURCE / the
// hints, resolved before any device is opened.
struct Addressing {
  bool want_src = false;  // only the device with src.gid
  EfaAddr src{};
  bool have_dest = false;
  EfaAddr dest{};
};

int resolve_addressing(const char* node, uint64_t flags, const fi_info* hints, Addressing* out) {
  if (node) {
    EfaAddr a;
    if (!parse_efa_address(node, &a)) {
      EFA_INFO(kCore, "node \"%s\" names no EFA address (a GID or fi_addr_efa://[GID]:QPN:QKEY)",
               node);
      return -FI_ENODATA;
    }
    if (flags & FI_SOURCE) {
      out->want_src = true;
      out->src = a;
    } else {
      out->have_dest = true;
      out->dest = a;
    }
  }
  if (hints && hints->src_addr && !out->want_src) {
    if (!hints_address(hints, hints->src_addr, hints->src_addrlen, "src_addr")) return -FI_ENODATA;
    out->want_src = true;
    memcpy(&out->src, hints->src_addr, sizeof(EfaAddr));
  }
  if (hints && hints->dest_addr && !out->have_dest) {
    if (!hints_address(hints, hints->dest_addr, hints->dest_addrlen, "dest_addr"))
      return -FI_ENODATA;
    out->have_dest = true;
    memcpy(&out->dest, hints->dest_addr, sizeof(EfaAddr));
  }
  return 0;
}

int set_dest(fi_info* i, const EfaAddr& dest) {
  auto* d = static_cast<EfaAddr*>(malloc(sizeof(EfaAddr)));
  if (!d) return -FI_ENOMEM;
  *d = dest;
  free(i->dest_addr);
  i->dest_addr = d;
  i->dest_addrlen = sizeof(EfaAddr);
  return 0;
}

}  // namespace

int provider_getinfo(const char* node, uint64_t flags, const fi_info* hints, fi_info** info_p) {
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
      strcmp(hints->fabric_attr->name, kFabricName) != 0 &&
      strcmp(hints->fabric_attr->name, kProtoFabricName) != 0) {
    EFA_INFO(kCore, "fabric \"%s\" asked for, this provider offers %s (RDM) and %s (RDM, DGRAM)",
             hints->fabric_attr->name, kFabricName, kProtoFabricName);
    return -FI_ENODATA;
  }
  const bool rdm = want_rdm(hints);
  const bool dgram = want_dgram(hints);
  if (!rdm && !dgram) return -FI_ENODATA;
  Addressing addr;
  int rc = resolve_addressing(node, flags, hints, &addr);
  if (rc) return rc;
  std::string be;
  std::vector<backend::DeviceInfo> devs;
  rc = select_backend(&be, &devs);
  if (rc) {
    EFA_INFO(kCore, "no EFA backend with devices (%d)", rc);
    return -FI_ENODATA;
  }
  // efa-direct's SEND carries one MTU: an application that does not ask for RMA is told that
  // limit, as upstream's efa-direct does, so buffers sized from max_msg_size always fit.
  const bool msg_only = hints && !(hints->caps & FI_RMA);
  fi_info* head = nullptr;
  fi_info** tail = &head;
  for (const auto& dv : devs) {
    SharedDevice* sd = nullptr;
    rc = acquire_device(be, dv.name, &sd);
    if (rc) {
      EFA_WARN(kCore, "cannot open device %s (%d)", dv.name.c_str(), rc);
      continue;
    }
    if (addr.want_src && memcmp(sd->attr.gid, addr.src.gid, sizeof(addr.src.gid)) != 0) {
      char gid[INET6_ADDRSTRLEN];
      inet_ntop(AF_INET6, sd->attr.gid, gid, sizeof(gid));
      EFA_INFO(kCore, "device %s (GID %s) is not the source address asked for", dv.name.c_str(),
               gid);
      release_device(sd);
      continue;
    }
    // efa-direct first, so that applications which take the first RDM offer keep the thin
    // fabric unless their hints need the protocol (FI_TAGGED, FI_ATOMIC, large messages, or
    // the fabric named "efa"); then the protocol fabric's RDM and DGRAM domains.
    fi_info* offers[3] = {nullptr, nullptr, nullptr};
    bool failed = false;
    if (rdm) {
      offers[0] = make_info(sd->attr);
      if (offers[0] && msg_only) offers[0]->ep_attr->max_msg_size = sd->attr.mtu;
      offers[1] = make_proto_info(sd->attr);
      if (offers[1]) serve_unregistered(hints, offers[1]);
      failed |= !offers[0] || !offers[1];
    }
    if (dgram) {
      offers[2] = make_dgram_info(sd->attr);
      failed |= !offers[2];
    }
    release_device(sd);
    for (fi_info* i : offers)
      if (i && addr.have_dest && set_dest(i, addr.dest)) failed = true;
    if (failed) {
      for (fi_info* i : offers) fi_freeinfo(i);
      fi_freeinfo(head);
      return -FI_ENOMEM;
    }
    for (fi_info* i : offers) {
      if (!i) continue;
      *tail = i;
      tail = &i->next;
    }
  }
  if (!head) return -FI_ENODATA;
  *info_p = head;
  return 0;
}

}  // namespace xpufab::efa
