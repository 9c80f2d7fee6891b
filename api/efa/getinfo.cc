// The provider's fi_getinfo offers: one fi_info per device of the chosen backend, its attributes
// derived from what the device reports.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "api/core/info.h"
#include "api/efa/efa.h"

namespace xpufab::efa {

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

}  // namespace

int provider_getinfo(const fi_info* hints, fi_info** info_p) {
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

}  // namespace xpufab::efa
