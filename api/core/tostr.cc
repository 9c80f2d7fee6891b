// fi_tostr / fi_tostr_r: the text fi_info(1)-style tools print.  The layout
// (indentation, "[ A, B ]" flag lists, "fi_tx_attr:" headings) follows
// libfabric's, so output can be compared side by side with its tools.
#include <inttypes.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

struct Name {
  uint64_t value;
  const char* name;
};

#define N(x) {static_cast<uint64_t>(x), #x}

constexpr Name kCaps[] = {
    N(FI_MSG), N(FI_RMA), N(FI_TAGGED), N(FI_ATOMIC), N(FI_MULTICAST),
    N(FI_COLLECTIVE), N(FI_READ), N(FI_WRITE), N(FI_RECV), N(FI_SEND),
    N(FI_REMOTE_READ), N(FI_REMOTE_WRITE), N(FI_MULTI_RECV), N(FI_REMOTE_CQ_DATA),
    N(FI_TRIGGER), N(FI_FENCE), N(FI_RESCAN), N(FI_AV_USER_ID), N(FI_PEER),
    N(FI_XPU), N(FI_TAGGED_DIRECTED_RECV), N(FI_TAGGED_MULTI_RECV), N(FI_HMEM),
    N(FI_EXACT_DIRECTED_RECV), N(FI_RMA_PMEM), N(FI_SOURCE_ERR), N(FI_LOCAL_COMM),
    N(FI_REMOTE_COMM), N(FI_SHARED_AV), N(FI_RMA_EVENT), N(FI_SOURCE),
    N(FI_NAMED_RX_CTX), N(FI_DIRECTED_RECV),
};

constexpr Name kOpFlags[] = {
    N(FI_MULTI_RECV), N(FI_REMOTE_CQ_DATA), N(FI_MORE), N(FI_PEEK), N(FI_TRIGGER),
    N(FI_FENCE), N(FI_COMPLETION), N(FI_INJECT), N(FI_INJECT_COMPLETE),
    N(FI_TRANSMIT_COMPLETE), N(FI_DELIVERY_COMPLETE), N(FI_AFFINITY),
    N(FI_COMMIT_COMPLETE), N(FI_MATCH_COMPLETE), N(FI_PEER_TRANSFER), N(FI_XPU),
    N(FI_AUTH_KEY), N(FI_DISCARD), N(FI_CLAIM),
};

constexpr Name kModes[] = {
    N(FI_CONTEXT), N(FI_MSG_PREFIX), N(FI_ASYNC_IOV), N(FI_RX_CQ_DATA),
    N(FI_LOCAL_MR), N(FI_CONTEXT2),
};

constexpr Name kMsgOrder[] = {
    N(FI_ORDER_RAR), N(FI_ORDER_RAW), N(FI_ORDER_RAS), N(FI_ORDER_WAR),
    N(FI_ORDER_WAW), N(FI_ORDER_WAS), N(FI_ORDER_SAR), N(FI_ORDER_SAW),
    N(FI_ORDER_SAS), N(FI_ORDER_DATA), N(FI_ORDER_RMA_RAR), N(FI_ORDER_RMA_RAW),
    N(FI_ORDER_RMA_WAR), N(FI_ORDER_RMA_WAW), N(FI_ORDER_ATOMIC_RAR),
    N(FI_ORDER_ATOMIC_RAW), N(FI_ORDER_ATOMIC_WAR), N(FI_ORDER_ATOMIC_WAW),
};

constexpr Name kMrMode[] = {
    N(FI_MR_BASIC), N(FI_MR_SCALABLE), N(FI_MR_LOCAL), N(FI_MR_RAW),
    N(FI_MR_VIRT_ADDR), N(FI_MR_ALLOCATED), N(FI_MR_PROV_KEY), N(FI_MR_MMU_NOTIFY),
    N(FI_MR_RMA_EVENT), N(FI_MR_ENDPOINT), N(FI_MR_HMEM), N(FI_MR_COLLECTIVE),
    N(FI_MR_XPU_DESC),
};

constexpr Name kCqEventFlags[] = {
    N(FI_SEND), N(FI_RECV), N(FI_RMA), N(FI_ATOMIC), N(FI_MSG), N(FI_TAGGED),
    N(FI_MULTICAST), N(FI_COLLECTIVE), N(FI_READ), N(FI_WRITE), N(FI_REMOTE_READ),
    N(FI_REMOTE_WRITE), N(FI_REMOTE_CQ_DATA), N(FI_MULTI_RECV), N(FI_MORE),
    N(FI_CLAIM),
};

constexpr Name kEpType[] = {N(FI_EP_UNSPEC), N(FI_EP_MSG), N(FI_EP_DGRAM), N(FI_EP_RDM)};

constexpr Name kAddrFormat[] = {
    N(FI_FORMAT_UNSPEC), N(FI_SOCKADDR), N(FI_SOCKADDR_IN), N(FI_SOCKADDR_IN6),
    N(FI_SOCKADDR_IB), N(FI_ADDR_PSMX), N(FI_ADDR_GNI), N(FI_ADDR_BGQ),
    N(FI_ADDR_MLX), N(FI_ADDR_STR), N(FI_ADDR_PSMX2), N(FI_ADDR_IB_UD),
    N(FI_ADDR_EFA), N(FI_ADDR_PSMX3), N(FI_ADDR_OPX), N(FI_ADDR_CXI),
    N(FI_ADDR_UCX), N(FI_SOCKADDR_IP),
};

constexpr Name kThreading[] = {
    N(FI_THREAD_UNSPEC), N(FI_THREAD_SAFE), N(FI_THREAD_FID), N(FI_THREAD_DOMAIN),
    N(FI_THREAD_COMPLETION), N(FI_THREAD_ENDPOINT),
};

constexpr Name kProgress[] = {
    N(FI_PROGRESS_UNSPEC), N(FI_PROGRESS_AUTO), N(FI_PROGRESS_MANUAL),
    N(FI_PROGRESS_CONTROL_UNIFIED),
};

constexpr Name kResourceMgmt[] = {N(FI_RM_UNSPEC), N(FI_RM_DISABLED), N(FI_RM_ENABLED)};

constexpr Name kAvType[] = {N(FI_AV_UNSPEC), N(FI_AV_MAP), N(FI_AV_TABLE)};

constexpr Name kProtocol[] = {
    N(FI_PROTO_UNSPEC), N(FI_PROTO_RDMA_CM_IB_RC), N(FI_PROTO_IWARP),
    N(FI_PROTO_IB_UD), N(FI_PROTO_PSMX), N(FI_PROTO_UDP), N(FI_PROTO_SOCK_TCP),
    N(FI_PROTO_MXM), N(FI_PROTO_IWARP_RDM), N(FI_PROTO_IB_RDM), N(FI_PROTO_GNI),
    N(FI_PROTO_RXM), N(FI_PROTO_RXD), N(FI_PROTO_MLX), N(FI_PROTO_NETWORKDIRECT),
    N(FI_PROTO_PSMX2), N(FI_PROTO_SHM), N(FI_PROTO_MRAIL), N(FI_PROTO_RSTREAM),
    N(FI_PROTO_RDMA_CM_IB_XRC), N(FI_PROTO_EFA), N(FI_PROTO_PSMX3),
    N(FI_PROTO_RXM_TCP), N(FI_PROTO_OPX), N(FI_PROTO_CXI), N(FI_PROTO_XNET),
    N(FI_PROTO_COLL), N(FI_PROTO_UCX), N(FI_PROTO_SM2), N(FI_PROTO_CXI_RNR),
    N(FI_PROTO_LPP), N(FI_PROTO_LNX),
};

constexpr Name kDatatype[] = {
    N(FI_INT8), N(FI_UINT8), N(FI_INT16), N(FI_UINT16), N(FI_INT32), N(FI_UINT32),
    N(FI_INT64), N(FI_UINT64), N(FI_FLOAT), N(FI_DOUBLE), N(FI_FLOAT_COMPLEX),
    N(FI_DOUBLE_COMPLEX), N(FI_LONG_DOUBLE), N(FI_LONG_DOUBLE_COMPLEX),
    N(FI_INT128), N(FI_UINT128), N(FI_FLOAT16), N(FI_BFLOAT16),
    N(FI_FLOAT8_E4M3), N(FI_FLOAT8_E5M2), N(FI_VOID),
};

constexpr Name kAtomicOp[] = {
    N(FI_MIN), N(FI_MAX), N(FI_SUM), N(FI_PROD), N(FI_LOR), N(FI_LAND), N(FI_BOR),
    N(FI_BAND), N(FI_LXOR), N(FI_BXOR), N(FI_ATOMIC_READ), N(FI_ATOMIC_WRITE),
    N(FI_CSWAP), N(FI_CSWAP_NE), N(FI_CSWAP_LE), N(FI_CSWAP_LT), N(FI_CSWAP_GE),
    N(FI_CSWAP_GT), N(FI_MSWAP), N(FI_DIFF), N(FI_NOOP),
};

constexpr Name kCollectiveOp[] = {
    N(FI_BARRIER), N(FI_BROADCAST), N(FI_ALLTOALL), N(FI_ALLREDUCE),
    N(FI_ALLGATHER), N(FI_REDUCE_SCATTER), N(FI_REDUCE), N(FI_SCATTER), N(FI_GATHER),
};

constexpr Name kEqEvent[] = {
    N(FI_NOTIFY), N(FI_CONNREQ), N(FI_CONNECTED), N(FI_SHUTDOWN),
    N(FI_MR_COMPLETE), N(FI_AV_COMPLETE), N(FI_JOIN_COMPLETE),
};

// enum fi_op_type (rdma/fi_trigger.h in libfabric; values are ABI).
constexpr Name kOpType[] = {
    {0, "FI_OP_RECV"},          {1, "FI_OP_SEND"},          {2, "FI_OP_TRECV"},
    {3, "FI_OP_TSEND"},         {4, "FI_OP_READ"},          {5, "FI_OP_WRITE"},
    {6, "FI_OP_ATOMIC"},        {7, "FI_OP_FETCH_ATOMIC"},  {8, "FI_OP_COMPARE_ATOMIC"},
    {9, "FI_OP_CNTR_SET"},      {10, "FI_OP_CNTR_ADD"},
};

constexpr Name kHmemIface[] = {
    N(FI_HMEM_SYSTEM), N(FI_HMEM_CUDA), N(FI_HMEM_ROCR), N(FI_HMEM_ZE),
    N(FI_HMEM_NEURON), N(FI_HMEM_SYNAPSEAI),
};

constexpr Name kCqFormat[] = {
    N(FI_CQ_FORMAT_UNSPEC), N(FI_CQ_FORMAT_CONTEXT), N(FI_CQ_FORMAT_MSG),
    N(FI_CQ_FORMAT_DATA), N(FI_CQ_FORMAT_TAGGED),
};

constexpr Name kWaitObj[] = {
    N(FI_WAIT_NONE), N(FI_WAIT_UNSPEC), N(FI_WAIT_SET), N(FI_WAIT_FD),
    N(FI_WAIT_MUTEX_COND), N(FI_WAIT_YIELD), N(FI_WAIT_POLLFD),
};

constexpr Name kCqWaitCond[] = {N(FI_CQ_COND_NONE), N(FI_CQ_COND_THRESHOLD)};

constexpr Name kLogLevel[] = {
    {0, "FI_LOG_WARN"}, {1, "FI_LOG_TRACE"}, {2, "FI_LOG_INFO"}, {3, "FI_LOG_DEBUG"},
};

constexpr Name kLogSubsys[] = {
    {0, "FI_LOG_CORE"},  {1, "FI_LOG_FABRIC"}, {2, "FI_LOG_DOMAIN"},
    {3, "FI_LOG_EP_CTRL"}, {4, "FI_LOG_EP_DATA"}, {5, "FI_LOG_AV"},
    {6, "FI_LOG_CQ"},    {7, "FI_LOG_EQ"},     {8, "FI_LOG_MR"},
    {9, "FI_LOG_CNTR"},
};

constexpr Name kFidClass[] = {
    N(FI_CLASS_UNSPEC), N(FI_CLASS_FABRIC), N(FI_CLASS_DOMAIN), N(FI_CLASS_EP),
    N(FI_CLASS_SEP), N(FI_CLASS_RX_CTX), N(FI_CLASS_SRX_CTX), N(FI_CLASS_TX_CTX),
    N(FI_CLASS_STX_CTX), N(FI_CLASS_PEP), N(FI_CLASS_INTERFACE), N(FI_CLASS_AV),
    N(FI_CLASS_MR), N(FI_CLASS_EQ), N(FI_CLASS_CQ), N(FI_CLASS_CNTR),
    N(FI_CLASS_WAIT), N(FI_CLASS_POLL), N(FI_CLASS_CONNREQ), N(FI_CLASS_MC),
    N(FI_CLASS_NIC), N(FI_CLASS_AV_SET), N(FI_CLASS_MR_CACHE),
    N(FI_CLASS_MEM_MONITOR), N(FI_CLASS_PEER_CQ), N(FI_CLASS_PEER_SRX),
    N(FI_CLASS_LOG), N(FI_CLASS_PEER_AV), N(FI_CLASS_PEER_AV_SET),
    N(FI_CLASS_PEER_CNTR), N(FI_CLASS_PROFILE), N(FI_CLASS_XPU_CTX),
};

#undef N

class Out {
 public:
  void printf(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0) s_.append(tmp, static_cast<size_t>(n) < sizeof(tmp) ? n : sizeof(tmp) - 1);
  }
  void str(const char* s) { s_.append(s); }
  std::string& s() { return s_; }

 private:
  std::string s_;
};

// Reads an enum field as the int a C caller may have stored (any value).
template <typename E>
uint64_t raw(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "enum fields are int-sized");
  int v;
  memcpy(&v, &e, sizeof(v));
  return static_cast<uint64_t>(v);
}

template <size_t K>
void put_enum(Out& o, const Name (&names)[K], uint64_t v) {
  for (const Name& n : names) {
    if (n.value == v) {
      o.str(n.name);
      return;
    }
  }
  o.printf("Unknown(%" PRIu64 ")", v);
}

template <size_t K>
void put_flags(Out& o, const Name (&names)[K], uint64_t v) {
  o.str("[ ");
  bool first = true;
  uint64_t seen = 0;
  for (const Name& n : names) {
    if (n.value && (v & n.value) == n.value && !(seen & n.value)) {
      o.str(first ? "" : ", ");
      o.str(n.name);
      seen |= n.value;
      first = false;
    }
  }
  if (uint64_t rest = v & ~seen) {
    o.printf("%s0x%" PRIx64, first ? "" : ", ", rest);
  }
  o.str(" ]");
}

void put_order(Out& o, uint64_t v) {
  if (!v) {
    o.str("[ FI_ORDER_NONE ]");
    return;
  }
  put_flags(o, kMsgOrder, v);
}

void put_version(Out& o, uint32_t v) { o.printf("%u.%u", FI_MAJOR(v), FI_MINOR(v)); }

void put_addr(Out& o, uint32_t format, const void* addr, size_t len) {
  if (!addr) {
    o.str("(null)");
    return;
  }
  const uint8_t* b = static_cast<const uint8_t*>(addr);
  if (format == FI_ADDR_STR) {
    o.s().append(static_cast<const char*>(addr), strnlen(static_cast<const char*>(addr), len));
    return;
  }
  o.str("fi_addr_raw://");
  for (size_t i = 0; i < len; ++i) o.printf("%02x", b[i]);
}

void tx_attr(Out& o, const fi_tx_attr* a, const char* ind) {
  o.printf("%sfi_tx_attr:\n", ind);
  if (!a) return;
  o.printf("%s    caps: ", ind); put_flags(o, kCaps, a->caps);
  o.printf("\n%s    mode: ", ind); put_flags(o, kModes, a->mode);
  o.printf("\n%s    op_flags: ", ind); put_flags(o, kOpFlags, a->op_flags);
  o.printf("\n%s    msg_order: ", ind); put_order(o, a->msg_order);
  o.printf("\n%s    comp_order: ", ind); put_order(o, a->comp_order);
  o.printf("\n%s    inject_size: %zu\n", ind, a->inject_size);
  o.printf("%s    size: %zu\n", ind, a->size);
  o.printf("%s    iov_limit: %zu\n", ind, a->iov_limit);
  o.printf("%s    rma_iov_limit: %zu\n", ind, a->rma_iov_limit);
  o.printf("%s    tclass: 0x%x\n", ind, a->tclass);
}

void rx_attr(Out& o, const fi_rx_attr* a, const char* ind) {
  o.printf("%sfi_rx_attr:\n", ind);
  if (!a) return;
  o.printf("%s    caps: ", ind); put_flags(o, kCaps, a->caps);
  o.printf("\n%s    mode: ", ind); put_flags(o, kModes, a->mode);
  o.printf("\n%s    op_flags: ", ind); put_flags(o, kOpFlags, a->op_flags);
  o.printf("\n%s    msg_order: ", ind); put_order(o, a->msg_order);
  o.printf("\n%s    comp_order: ", ind); put_order(o, a->comp_order);
  o.printf("\n%s    total_buffered_recv: %zu\n", ind, a->total_buffered_recv);
  o.printf("%s    size: %zu\n", ind, a->size);
  o.printf("%s    iov_limit: %zu\n", ind, a->iov_limit);
}

void ep_attr(Out& o, const fi_ep_attr* a, const char* ind) {
  o.printf("%sfi_ep_attr:\n", ind);
  if (!a) return;
  o.printf("%s    type: ", ind); put_enum(o, kEpType, raw(a->type));
  o.printf("\n%s    protocol: ", ind); put_enum(o, kProtocol, a->protocol);
  o.printf("\n%s    protocol_version: %u\n", ind, a->protocol_version);
  o.printf("%s    max_msg_size: %zu\n", ind, a->max_msg_size);
  o.printf("%s    msg_prefix_size: %zu\n", ind, a->msg_prefix_size);
  o.printf("%s    max_order_raw_size: %zu\n", ind, a->max_order_raw_size);
  o.printf("%s    max_order_war_size: %zu\n", ind, a->max_order_war_size);
  o.printf("%s    max_order_waw_size: %zu\n", ind, a->max_order_waw_size);
  o.printf("%s    mem_tag_format: 0x%016" PRIx64 "\n", ind, a->mem_tag_format);
  o.printf("%s    tx_ctx_cnt: %zu\n", ind, a->tx_ctx_cnt);
  o.printf("%s    rx_ctx_cnt: %zu\n", ind, a->rx_ctx_cnt);
  o.printf("%s    auth_key_size: %zu\n", ind, a->auth_key_size);
  o.printf("%s    xpu_ctx: %p\n", ind, static_cast<const void*>(a->xpu_ctx));
}

void domain_attr(Out& o, const fi_domain_attr* a, const char* ind) {
  o.printf("%sfi_domain_attr:\n", ind);
  if (!a) return;
  o.printf("%s    domain: %p\n", ind, static_cast<const void*>(a->domain));
  o.printf("%s    name: %s\n", ind, a->name ? a->name : "(null)");
  o.printf("%s    threading: ", ind); put_enum(o, kThreading, raw(a->threading));
  o.printf("\n%s    control_progress: ", ind); put_enum(o, kProgress, raw(a->control_progress));
  o.printf("\n%s    data_progress: ", ind); put_enum(o, kProgress, raw(a->data_progress));
  o.printf("\n%s    resource_mgmt: ", ind); put_enum(o, kResourceMgmt, raw(a->resource_mgmt));
  o.printf("\n%s    av_type: ", ind); put_enum(o, kAvType, raw(a->av_type));
  o.printf("\n%s    mr_mode: ", ind); put_flags(o, kMrMode, static_cast<uint32_t>(a->mr_mode));
  o.printf("\n%s    mr_key_size: %zu\n", ind, a->mr_key_size);
  o.printf("%s    cq_data_size: %zu\n", ind, a->cq_data_size);
  o.printf("%s    cq_cnt: %zu\n", ind, a->cq_cnt);
  o.printf("%s    ep_cnt: %zu\n", ind, a->ep_cnt);
  o.printf("%s    tx_ctx_cnt: %zu\n", ind, a->tx_ctx_cnt);
  o.printf("%s    rx_ctx_cnt: %zu\n", ind, a->rx_ctx_cnt);
  o.printf("%s    max_ep_tx_ctx: %zu\n", ind, a->max_ep_tx_ctx);
  o.printf("%s    max_ep_rx_ctx: %zu\n", ind, a->max_ep_rx_ctx);
  o.printf("%s    max_ep_stx_ctx: %zu\n", ind, a->max_ep_stx_ctx);
  o.printf("%s    max_ep_srx_ctx: %zu\n", ind, a->max_ep_srx_ctx);
  o.printf("%s    cntr_cnt: %zu\n", ind, a->cntr_cnt);
  o.printf("%s    mr_iov_limit: %zu\n", ind, a->mr_iov_limit);
  o.printf("%s    caps: ", ind); put_flags(o, kCaps, a->caps);
  o.printf("\n%s    mode: ", ind); put_flags(o, kModes, a->mode);
  o.printf("\n%s    auth_key_size: %zu\n", ind, a->auth_key_size);
  o.printf("%s    max_err_data: %zu\n", ind, a->max_err_data);
  o.printf("%s    mr_cnt: %zu\n", ind, a->mr_cnt);
  o.printf("%s    tclass: 0x%x\n", ind, a->tclass);
  o.printf("%s    max_ep_auth_key: %zu\n", ind, a->max_ep_auth_key);
  o.printf("%s    max_group_id: %u\n", ind, a->max_group_id);
  o.printf("%s    max_cntr_value: %" PRIu64 "\n", ind, a->max_cntr_value);
  o.printf("%s    max_err_cntr_value: %" PRIu64 "\n", ind, a->max_err_cntr_value);
  o.printf("%s    max_xpu_ctx_cnt: %zu\n", ind, a->max_xpu_ctx_cnt);
}

void fabric_attr(Out& o, const fi_fabric_attr* a, const char* ind) {
  o.printf("%sfi_fabric_attr:\n", ind);
  if (!a) return;
  o.printf("%s    name: %s\n", ind, a->name ? a->name : "(null)");
  o.printf("%s    prov_name: %s\n", ind, a->prov_name ? a->prov_name : "(null)");
  o.printf("%s    prov_version: ", ind); put_version(o, a->prov_version);
  o.printf("\n%s    api_version: ", ind); put_version(o, a->api_version);
  o.str("\n");
}

void nic(Out& o, const fid_nic* n, const char* ind) {
  if (!n) {
    o.printf("%snic: (nil)\n", ind);
    return;
  }
  o.printf("%snic:\n", ind);
  if (const fi_device_attr* d = n->device_attr) {
    o.printf("%s    fi_device_attr:\n", ind);
    o.printf("%s        name: %s\n", ind, d->name ? d->name : "(null)");
    o.printf("%s        device_id: %s\n", ind, d->device_id ? d->device_id : "(null)");
    o.printf("%s        device_version: %s\n", ind,
             d->device_version ? d->device_version : "(null)");
    o.printf("%s        vendor_id: %s\n", ind, d->vendor_id ? d->vendor_id : "(null)");
    o.printf("%s        driver: %s\n", ind, d->driver ? d->driver : "(null)");
    o.printf("%s        firmware: %s\n", ind, d->firmware ? d->firmware : "(null)");
  }
  if (const fi_bus_attr* b = n->bus_attr) {
    o.printf("%s    fi_bus_attr:\n", ind);
    o.printf("%s        bus_type: %s\n", ind,
             raw(b->bus_type) == FI_BUS_PCI ? "FI_BUS_PCI" : "FI_BUS_UNKNOWN");
    if (raw(b->bus_type) == FI_BUS_PCI) {
      o.printf("%s        fi_pci_attr:\n", ind);
      o.printf("%s            domain_id: %u\n", ind, b->attr.pci.domain_id);
      o.printf("%s            bus_id: %u\n", ind, b->attr.pci.bus_id);
      o.printf("%s            device_id: %u\n", ind, b->attr.pci.device_id);
      o.printf("%s            function_id: %u\n", ind, b->attr.pci.function_id);
    }
  }
  if (const fi_link_attr* l = n->link_attr) {
    o.printf("%s    fi_link_attr:\n", ind);
    o.printf("%s        address: %s\n", ind, l->address ? l->address : "(null)");
    o.printf("%s        mtu: %zu\n", ind, l->mtu);
    o.printf("%s        speed: %zu\n", ind, l->speed);
    o.printf("%s        state: %s\n", ind,
             raw(l->state) == FI_LINK_UP     ? "FI_LINK_UP"
             : raw(l->state) == FI_LINK_DOWN ? "FI_LINK_DOWN"
                                        : "FI_LINK_UNKNOWN");
    o.printf("%s        network_type: %s\n", ind,
             l->network_type ? l->network_type : "(null)");
  }
}

void info(Out& o, const fi_info* i) {
  o.str("fi_info:\n");
  o.str("    caps: "); put_flags(o, kCaps, i->caps);
  o.str("\n    mode: "); put_flags(o, kModes, i->mode);
  o.str("\n    addr_format: "); put_enum(o, kAddrFormat, i->addr_format);
  o.printf("\n    src_addrlen: %zu\n", i->src_addrlen);
  o.printf("    dest_addrlen: %zu\n", i->dest_addrlen);
  o.str("    src_addr: "); put_addr(o, i->addr_format, i->src_addr, i->src_addrlen);
  o.str("\n    dest_addr: "); put_addr(o, i->addr_format, i->dest_addr, i->dest_addrlen);
  o.printf("\n    handle: %p\n", static_cast<const void*>(i->handle));
  tx_attr(o, i->tx_attr, "    ");
  rx_attr(o, i->rx_attr, "    ");
  ep_attr(o, i->ep_attr, "    ");
  domain_attr(o, i->domain_attr, "    ");
  fabric_attr(o, i->fabric_attr, "    ");
  nic(o, i->nic, "    ");
}

void av_attr(Out& o, const fi_av_attr* a) {
  o.str("fi_av_attr:\n    type: "); put_enum(o, kAvType, raw(a->type));
  o.printf("\n    rx_ctx_bits: %d\n    count: %zu\n    ep_per_node: %zu\n", a->rx_ctx_bits,
           a->count, a->ep_per_node);
  o.printf("    name: %s\n    map_addr: %p\n    flags: ", a->name ? a->name : "(null)",
           a->map_addr);
  put_flags(o, kOpFlags, a->flags);
  o.str("\n");
}

void cq_attr(Out& o, const fi_cq_attr* a) {
  o.printf("fi_cq_attr:\n    size: %zu\n    flags: ", a->size);
  put_flags(o, kOpFlags, a->flags);
  o.str("\n    format: "); put_enum(o, kCqFormat, raw(a->format));
  o.str("\n    wait_obj: "); put_enum(o, kWaitObj, raw(a->wait_obj));
  o.printf("\n    signaling_vector: %d\n    wait_cond: ", a->signaling_vector);
  put_enum(o, kCqWaitCond, raw(a->wait_cond));
  o.printf("\n    wait_set: %p\n", static_cast<const void*>(a->wait_set));
  // Not versioned: meaningful only with FI_XPU in flags (printed regardless).
  o.printf("    xpu_ctx: %p\n", static_cast<const void*>(a->xpu_ctx));
}

void cntr_attr(Out& o, const fi_cntr_attr* a) {
  o.printf("fi_cntr_attr:\n    events: %s\n    wait_obj: ",
           raw(a->events) == FI_CNTR_EVENTS_BYTES ? "FI_CNTR_EVENTS_BYTES" : "FI_CNTR_EVENTS_COMP");
  put_enum(o, kWaitObj, raw(a->wait_obj));
  o.printf("\n    wait_set: %p\n    flags: ", static_cast<const void*>(a->wait_set));
  put_flags(o, kOpFlags, a->flags);
  o.printf("\n    xpu_ctx: %p\n", static_cast<const void*>(a->xpu_ctx));
}

void mr_attr(Out& o, const fi_mr_attr* a) {
  o.printf("fi_mr_attr:\n    mr_iov: %p\n    iov_count: %zu\n    access: ",
           static_cast<const void*>(a->mr_iov), a->iov_count);
  put_flags(o, kCaps, a->access);
  o.printf("\n    offset: 0x%" PRIx64 "\n    requested_key: 0x%" PRIx64
           "\n    context: %p\n    auth_key_size: %zu\n    iface: ",
           a->offset, a->requested_key, a->context, a->auth_key_size);
  put_enum(o, kHmemIface, raw(a->iface));
  o.printf("\n    device: 0x%" PRIx64 "\n", a->device.reserved);
}

void cq_err_entry(Out& o, const fi_cq_err_entry* e) {
  o.printf("fi_cq_err_entry:\n    op_context: %p\n    flags: ", e->op_context);
  put_flags(o, kCqEventFlags, e->flags);
  o.printf("\n    len: %zu\n    buf: %p\n    data: 0x%" PRIx64 "\n    tag: 0x%" PRIx64
           "\n    olen: %zu\n    err: %d (%s)\n    prov_errno: %d\n    err_data: %p\n"
           "    err_data_size: %zu\n",
           e->len, e->buf, e->data, e->tag, e->olen, e->err, fi_strerror(e->err),
           e->prov_errno, e->err_data, e->err_data_size);
}

// Returns false for an unknown type.
bool format(Out& o, const void* data, int type) {
  auto u64 = [data] { return *static_cast<const uint64_t*>(data); };
  auto i32 = [data] { return static_cast<uint64_t>(*static_cast<const int*>(data)); };
  auto u32 = [data] { return static_cast<uint64_t>(*static_cast<const uint32_t*>(data)); };
  switch (type) {
    case FI_TYPE_INFO:
      // One entry, not the list it heads: fi_info -v walks the list itself and prints each.
      info(o, static_cast<const fi_info*>(data));
      return true;
    case FI_TYPE_EP_TYPE: put_enum(o, kEpType, i32()); return true;
    case FI_TYPE_CAPS: put_flags(o, kCaps, u64()); return true;
    case FI_TYPE_OP_FLAGS: put_flags(o, kOpFlags, u64()); return true;
    case FI_TYPE_ADDR_FORMAT: put_enum(o, kAddrFormat, u32()); return true;
    case FI_TYPE_TX_ATTR: tx_attr(o, static_cast<const fi_tx_attr*>(data), ""); return true;
    case FI_TYPE_RX_ATTR: rx_attr(o, static_cast<const fi_rx_attr*>(data), ""); return true;
    case FI_TYPE_EP_ATTR: ep_attr(o, static_cast<const fi_ep_attr*>(data), ""); return true;
    case FI_TYPE_DOMAIN_ATTR:
      domain_attr(o, static_cast<const fi_domain_attr*>(data), "");
      return true;
    case FI_TYPE_FABRIC_ATTR:
      fabric_attr(o, static_cast<const fi_fabric_attr*>(data), "");
      return true;
    case FI_TYPE_THREADING: put_enum(o, kThreading, i32()); return true;
    case FI_TYPE_PROGRESS: put_enum(o, kProgress, i32()); return true;
    case FI_TYPE_PROTOCOL: put_enum(o, kProtocol, u32()); return true;
    case FI_TYPE_MSG_ORDER: put_order(o, u64()); return true;
    case FI_TYPE_MODE: put_flags(o, kModes, u64()); return true;
    case FI_TYPE_AV_TYPE: put_enum(o, kAvType, i32()); return true;
    case FI_TYPE_ATOMIC_TYPE: put_enum(o, kDatatype, i32()); return true;
    case FI_TYPE_ATOMIC_OP: put_enum(o, kAtomicOp, i32()); return true;
    // As upstream: the library's own version, whatever `data` points at (fi_info --version passes
    // a string).
    case FI_TYPE_VERSION: put_version(o, FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)); return true;
    case FI_TYPE_EQ_EVENT: put_enum(o, kEqEvent, u32()); return true;
    case FI_TYPE_CQ_EVENT_FLAGS: put_flags(o, kCqEventFlags, u64()); return true;
    case FI_TYPE_MR_MODE: put_flags(o, kMrMode, u32()); return true;
    case FI_TYPE_OP_TYPE: put_enum(o, kOpType, i32()); return true;
    case FI_TYPE_FID: {
      const fid* f = static_cast<const fid*>(data);
      o.printf("fid: %p class: ", static_cast<const void*>(f));
      put_enum(o, kFidClass, f->fclass);
      return true;
    }
    case FI_TYPE_COLLECTIVE_OP: put_enum(o, kCollectiveOp, i32()); return true;
    case FI_TYPE_HMEM_IFACE: put_enum(o, kHmemIface, i32()); return true;
    case FI_TYPE_CQ_FORMAT: put_enum(o, kCqFormat, i32()); return true;
    case FI_TYPE_LOG_LEVEL: put_enum(o, kLogLevel, i32()); return true;
    case FI_TYPE_LOG_SUBSYS: put_enum(o, kLogSubsys, i32()); return true;
    case FI_TYPE_AV_ATTR: av_attr(o, static_cast<const fi_av_attr*>(data)); return true;
    case FI_TYPE_CQ_ATTR: cq_attr(o, static_cast<const fi_cq_attr*>(data)); return true;
    case FI_TYPE_MR_ATTR: mr_attr(o, static_cast<const fi_mr_attr*>(data)); return true;
    case FI_TYPE_CNTR_ATTR: cntr_attr(o, static_cast<const fi_cntr_attr*>(data)); return true;
    case FI_TYPE_CQ_ERR_ENTRY:
      cq_err_entry(o, static_cast<const fi_cq_err_entry*>(data));
      return true;
    case FI_TYPE_CQ_WAIT_COND: put_enum(o, kCqWaitCond, i32()); return true;
    case FI_TYPE_WAIT_OBJ: put_enum(o, kWaitObj, i32()); return true;
    default: return false;
  }
}

}  // namespace

extern "C" {

char* fi_tostr_r(char* buf, size_t len, const void* data, enum fi_type datatype) {
  // As in libfabric, a missing buffer or object yields NULL.
  if (!buf || !len || !data) return nullptr;
  Out o;
  if (!format(o, data, datatype)) o.str("Unknown type");
  size_t n = o.s().size() < len - 1 ? o.s().size() : len - 1;
  memcpy(buf, o.s().data(), n);
  buf[n] = '\0';
  return buf;
}

char* fi_tostr(const void* data, enum fi_type datatype) {
  // One buffer per thread, reused by the next call (the documented contract).
  thread_local std::string buf;
  if (!data) return nullptr;
  Out o;
  if (!format(o, data, datatype)) o.str("Unknown type");
  buf = std::move(o.s());
  return buf.data();
}

}  // extern "C"
