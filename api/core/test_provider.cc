#include "api/core/test_provider.h"

#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>

#include "api/core/eq.h"
#include "api/core/fid.h"
#include "api/core/info.h"
#include "api/core/poll_set.h"
#include "api/core/trywait.h"
#include "api/core/wait_set.h"

namespace xpufab::core::testing {
namespace {

struct TestFabric {
  fid_fabric fabric;  // first: the C handle
  TestProvider* prov;
  FidRefs refs;  // open domains, EQs and wait sets
};

struct TestDomain {
  fid_domain domain;  // first: the C handle
  TestFabric* fab;
  FidRefs refs;  // open poll sets
};

int fabric_close(fid* f) {
  auto* tf = reinterpret_cast<TestFabric*>(f);
  int rc = tf->refs.try_close();
  if (rc) return rc;
  tf->prov->open_fabrics--;
  delete tf;
  return 0;
}
int no_bind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }
int no_control(fid*, int, void*) { return -FI_ENOSYS; }
int no_ops_open(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
int no_tostr(const fid*, char*, size_t) { return -FI_ENOSYS; }
int no_ops_set(fid*, const char*, uint64_t, void*, void*) { return -FI_ENOSYS; }

fi_ops g_fabric_fid_ops = {sizeof(fi_ops), fabric_close, no_bind, no_control,
                           no_ops_open, no_tostr, no_ops_set};

int domain_close(fid* f) {
  auto* td = reinterpret_cast<TestDomain*>(f);
  int rc = td->refs.try_close();
  if (rc) return rc;
  td->fab->refs.release();
  delete td;
  return 0;
}

fi_ops g_domain_fid_ops = {sizeof(fi_ops), domain_close, no_bind, no_control,
                           no_ops_open, no_tostr, no_ops_set};

// The wiring a provider needs for the core's poll sets: one line.
int domain_poll_open(fid_domain* d, fi_poll_attr* attr, fid_poll** pollset) {
  return poll_open(d, attr, pollset, &reinterpret_cast<TestDomain*>(d)->refs);
}

fi_ops_domain make_domain_ops() {
  fi_ops_domain ops{};
  ops.size = sizeof(ops);
  ops.poll_open = domain_poll_open;
  return ops;
}
fi_ops_domain g_domain_ops = make_domain_ops();

// A bare domain: the core's poll sets are all it offers.
int fabric_domain(fid_fabric* f, fi_info*, fid_domain** d, void* context) {
  auto* tf = reinterpret_cast<TestFabric*>(f);
  int rc = tf->refs.acquire();
  if (rc) return rc;
  auto* td = new TestDomain{};
  td->domain.fid.fclass = FI_CLASS_DOMAIN;
  td->domain.fid.context = context;
  td->domain.fid.ops = &g_domain_fid_ops;
  td->domain.ops = &g_domain_ops;
  td->fab = tf;
  *d = &td->domain;
  return 0;
}

// The wiring a provider needs for the core's EQs and wait sets.
int fabric_eq_open(fid_fabric* f, fi_eq_attr* attr, fid_eq** eq, void* context) {
  return eq_open(f, attr, eq, context, &reinterpret_cast<TestFabric*>(f)->refs);
}
int fabric_wait_open(fid_fabric* f, fi_wait_attr* attr, fid_wait** waitset) {
  return wait_open(f, attr, waitset, &reinterpret_cast<TestFabric*>(f)->refs);
}

fi_ops_fabric make_fabric_ops() {
  fi_ops_fabric ops{};
  ops.size = sizeof(ops);
  ops.domain = fabric_domain;
  ops.eq_open = fabric_eq_open;
  ops.wait_open = fabric_wait_open;
  ops.trywait = trywait;
  return ops;
}
fi_ops_fabric g_fabric_ops = make_fabric_ops();

}  // namespace

fi_info* default_offer(const char* fabric, const char* domain) {
  fi_info* i = fi_allocinfo();
  if (!i) return nullptr;
  const uint64_t caps = FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_HMEM | FI_XPU |
                        FI_READ | FI_WRITE | FI_SEND | FI_RECV | FI_REMOTE_READ |
                        FI_REMOTE_WRITE | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_SOURCE;
  i->caps = caps;
  i->mode = FI_CONTEXT;
  i->addr_format = FI_ADDR_EFA;
  i->src_addrlen = 16;
  i->src_addr = calloc(1, 16);
  if (!i->src_addr) {
    fi_freeinfo(i);
    return nullptr;
  }
  memset(i->src_addr, 0xab, 16);
  i->tx_attr->caps = FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_HMEM | FI_XPU |
                     FI_SEND | FI_READ | FI_WRITE;
  i->tx_attr->mode = FI_CONTEXT;
  i->tx_attr->op_flags = FI_COMPLETION | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE;
  i->tx_attr->msg_order = FI_ORDER_SAS;
  i->tx_attr->inject_size = 32;
  i->tx_attr->size = 1024;
  i->tx_attr->iov_limit = 2;
  i->tx_attr->rma_iov_limit = 1;
  i->rx_attr->caps = FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_HMEM | FI_XPU |
                     FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SOURCE;
  i->rx_attr->mode = FI_CONTEXT;
  i->rx_attr->op_flags = FI_COMPLETION;
  i->rx_attr->msg_order = FI_ORDER_SAS;
  i->rx_attr->size = 4096;
  i->rx_attr->iov_limit = 2;
  i->ep_attr->type = FI_EP_RDM;
  i->ep_attr->protocol = FI_PROTO_EFA;
  i->ep_attr->protocol_version = 4;
  i->ep_attr->max_msg_size = 1 << 30;
  i->ep_attr->max_order_raw_size = 8192;
  i->ep_attr->max_order_waw_size = 8192;
  i->ep_attr->max_order_war_size = 8192;
  i->ep_attr->mem_tag_format = 0xaaaaaaaaaaaaaaaaULL;
  i->ep_attr->tx_ctx_cnt = 1;
  i->ep_attr->rx_ctx_cnt = 1;
  fi_domain_attr* d = i->domain_attr;
  d->name = strdup(domain);
  d->threading = FI_THREAD_SAFE;
  d->control_progress = FI_PROGRESS_AUTO;
  d->data_progress = FI_PROGRESS_MANUAL;
  d->resource_mgmt = FI_RM_ENABLED;
  d->av_type = FI_AV_UNSPEC;
  d->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
               FI_MR_HMEM | FI_MR_XPU_DESC;
  d->mr_key_size = 4;
  d->cq_data_size = 4;
  d->cq_cnt = 64;
  d->ep_cnt = 128;
  d->tx_ctx_cnt = 1;
  d->rx_ctx_cnt = 1;
  d->max_ep_tx_ctx = 1;
  d->max_ep_rx_ctx = 1;
  d->cntr_cnt = 32;
  d->mr_iov_limit = 1;
  d->caps = FI_LOCAL_COMM | FI_REMOTE_COMM | FI_XPU;
  d->mr_cnt = 65536;
  d->max_err_data = 64;
  d->max_xpu_ctx_cnt = 1;
  i->fabric_attr->name = strdup(fabric);
  i->nic = nic_alloc();
  if (i->nic) {
    i->nic->device_attr->name = strdup(domain);
    i->nic->device_attr->vendor_id = strdup("0x1d0f");
    i->nic->bus_attr->bus_type = FI_BUS_PCI;
    i->nic->bus_attr->attr.pci.bus_id = 0x10;
    i->nic->link_attr->mtu = 8928;
    i->nic->link_attr->state = FI_LINK_UP;
    i->nic->link_attr->address = strdup("fe80::1");
  }
  return i;
}

TestProvider::TestProvider(std::string name, uint32_t version, fi_info* offers,
                           uint32_t api_version)
    : name_(std::move(name)), version_(version), api_version_(api_version), offers_(offers) {}

TestProvider::~TestProvider() { fi_freeinfo(offers_); }

int TestProvider::getinfo(uint32_t, const char* node, const char* service, uint64_t flags,
                          const fi_info*, fi_info** info_p) {
  std::lock_guard<std::mutex> lock(mu_);
  getinfo_calls++;
  last_node = node ? node : "";
  last_service = service ? service : "";
  last_flags = flags;
  if (fail_with) return fail_with;
  if (!offers_) return -FI_ENODATA;
  fi_info* head = nullptr;
  fi_info** tail = &head;
  for (const fi_info* o = offers_; o; o = o->next) {
    fi_info* c = fi_dupinfo(o);
    if (!c) {
      fi_freeinfo(head);
      return -FI_ENOMEM;
    }
    *tail = c;
    tail = &c->next;
  }
  *info_p = head;
  return 0;
}

int TestProvider::fabric(fi_fabric_attr* attr, fid_fabric** fabric_p, void* context) {
  bool known = false;
  for (const fi_info* o = offers_; o; o = o->next)
    if (o->fabric_attr->name && strcmp(o->fabric_attr->name, attr->name) == 0) known = true;
  if (!known) return -FI_ENODATA;
  auto* tf = new TestFabric{};
  tf->fabric.fid.fclass = FI_CLASS_FABRIC;
  tf->fabric.fid.context = context;
  tf->fabric.fid.ops = &g_fabric_fid_ops;
  tf->fabric.ops = &g_fabric_ops;
  tf->prov = this;
  open_fabrics++;
  *fabric_p = &tf->fabric;
  return 0;
}

namespace {
TestProvider* static_provider() {
  static TestProvider* p =
      new TestProvider("statictest", FI_VERSION(1, 0), default_offer("static-fab", "static0"));
  return p;
}
ProviderRegistration g_static_registration(static_provider());
}  // namespace

}  // namespace xpufab::core::testing
