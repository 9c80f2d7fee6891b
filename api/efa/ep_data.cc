// The host data path of an efa-direct endpoint: it builds its work requests with device/efa_wr.h
// and posts through device/efa_sq.h and device/efa_rq.h, as device code does.
#include "api/efa/casts.h"
#include "api/efa/efa.h"
#include "device/efa_wr.h"
#include "device/xpu_prims.h"

namespace xpufab::efa {

namespace {

int host_data_ok(EfaEp* ep) {
  if (!ep->enabled) return -FI_EOPBADSTATE;
  if (ep->is_xpu()) return -FI_EOPNOTSUPP;  // device code owns an XPU EP's queues
  return 0;
}

int fill_sges(EfaEp* ep, const iovec* iov, void** desc, size_t count, efa_dp_sge* sge, size_t* total) {
  (void)ep;
  *total = 0;
  for (size_t i = 0; i < count; ++i) {
    if (!iov[i].iov_base && iov[i].iov_len) return -FI_EINVAL;
    auto* mr = desc ? static_cast<EfaMr*>(desc[i]) : nullptr;
    if (!mr && iov[i].iov_len) return -FI_EINVAL;  // FI_MR_LOCAL: a descriptor is required
    sge[i].addr = reinterpret_cast<uintptr_t>(iov[i].iov_base);
    sge[i].length = static_cast<uint32_t>(iov[i].iov_len);
    sge[i].lkey = mr ? mr->lkey : 0;
    *total += iov[i].iov_len;
  }
  return 0;
}

void set_slot(ZeroedArray<OpSlot>& slots, int req_id, uint64_t buf, bool report) {
  OpSlot& s = slots[static_cast<uint32_t>(req_id) & (slots.size() - 1)];
  xpu_store_relaxed_u64(&s.buf, buf);
  xpu_store_relaxed_u32(&s.report, report ? 1u : 0u);
}

efa_wr_limits wr_limits(const EfaEp* ep) {
  return {ep->dom->attr.mtu, ep->dom->attr.max_rdma_size, ep->dom->attr.inline_buf_size};
}

// Claims, writes and publishes one WQE, recording what its completion reports before the NIC
// can see it.
ssize_t post_sq(EfaEp* ep, const efa_dp_wr& wr, bool report) {
  int rc;
  {
    SerialLock g(ep->tx_lock, ep->dom->app_serialized);
    rc = efa_sq_check_wr(&ep->sq, &wr);
    uint32_t slot = 0;
    if (rc == 0) rc = efa_sq_claim(&ep->sq, 1, &slot);
    if (rc == 0) {
      const int req_id = efa_sq_write(&ep->sq, slot, &wr);
      set_slot(ep->sq_slots, req_id, 0, report);
      efa_sq_publish(&ep->sq, slot, 1, wr.flags);
    }
  }
  if (rc) {
    if (rc == -FI_EAGAIN) ep->dom->progress();
    return rc;
  }
  ep->dom->dev->ring_sq(ep->qp, 16);
  return 0;
}

efa_wr_args wr_args(uint32_t op, const efa_dp_sge* sge, size_t count, const EfaAvEntry& peer,
                    void* context, uint64_t data, uint64_t flags) {
  efa_wr_args a{};
  a.op = op;
  a.num_sge = static_cast<uint32_t>(count);
  a.sge = sge;
  a.ah = peer.ahn;
  a.dest_qpn = peer.addr.qpn;
  a.qkey = peer.addr.qkey;
  a.data = data;
  a.context = reinterpret_cast<uintptr_t>(context);
  a.flags = flags;
  return a;
}

ssize_t do_send(EfaEp* ep, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
                void* context, uint64_t data, uint64_t flags) {
  int rc = host_data_ok(ep);
  if (rc) return rc;
  if (!(ep->caps & FI_SEND)) return -FI_EOPNOTSUPP;
  if (count > ep->dom->attr.max_sq_sge || count > 2 || (!iov && count)) return -FI_EINVAL;
  EfaAvEntry peer;
  if (!ep->av || !ep->av->get(dest, &peer)) return -FI_EINVAL;
  // FI_MSG_PREFIX: the buffer starts with the prefix, which is not sent.
  iovec skipped[2];
  if (ep->prefix) {
    if (count == 0 || iov[0].iov_len < ep->prefix) return -FI_EINVAL;
    for (size_t i = 0; i < count; ++i) skipped[i] = iov[i];
    skipped[0].iov_base = static_cast<char*>(iov[0].iov_base) + ep->prefix;
    skipped[0].iov_len -= ep->prefix;
    iov = skipped;
  }
  efa_dp_sge sge[2] = {};
  size_t total = 0;
  const bool inject = flags & FI_INJECT;
  if (inject) {
    // Inline bytes are copied at post time: no descriptor needed.
    for (size_t i = 0; i < count; ++i) {
      sge[i].addr = reinterpret_cast<uintptr_t>(iov[i].iov_base);
      sge[i].length = static_cast<uint32_t>(iov[i].iov_len);
      total += iov[i].iov_len;
    }
  } else {
    rc = fill_sges(ep, iov, desc, count, sge, &total);
    if (rc) return rc;
  }
  if (total > UINT32_MAX) return -FI_EMSGSIZE;
  const efa_wr_args a = wr_args(EFA_DP_OP_SEND, sge, count, peer, context, data, flags);
  const efa_wr_limits lim = wr_limits(ep);
  efa_dp_wr wr;
  rc = efa_wr_build(&a, &lim, &wr);
  if (rc) return rc;
  return post_sq(ep, wr, !inject && (!ep->tx_selective || (flags & FI_COMPLETION)));
}

ssize_t do_rma(EfaEp* ep, bool write, const iovec* iov, void** desc, size_t count, fi_addr_t peer_a,
               uint64_t addr, uint64_t key, void* context, uint64_t data, uint64_t flags) {
  int rc = host_data_ok(ep);
  if (rc) return rc;
  const uint32_t cap = write ? backend::kCapRdmaWrite : backend::kCapRdmaRead;
  if (!(ep->dom->attr.device_caps & cap) || !(ep->caps & (write ? FI_WRITE : FI_READ)))
    return -FI_EOPNOTSUPP;
  if (count != 1 || !iov) return -FI_EINVAL;
  const uint32_t op = write ? EFA_DP_OP_RDMA_WRITE : EFA_DP_OP_RDMA_READ;
  rc = efa_wr_check_op(op, flags);
  if (rc) return rc;
  EfaAvEntry peer;
  if (!ep->av || !ep->av->get(peer_a, &peer)) return -FI_EINVAL;
  efa_dp_sge sge{};
  size_t total = 0;
  rc = fill_sges(ep, iov, desc, 1, &sge, &total);
  if (rc) return rc;
  if (total > UINT32_MAX) return -FI_EMSGSIZE;
  // RMA inject_size is 0 on efa-direct: FI_INJECT does not make an RMA inline.
  efa_wr_args a = wr_args(op, &sge, 1, peer, context, data, flags & ~FI_INJECT);
  a.remote_addr = addr;
  a.key = key;
  const efa_wr_limits lim = wr_limits(ep);
  efa_dp_wr wr;
  rc = efa_wr_build(&a, &lim, &wr);
  if (rc) return rc;
  return post_sq(ep, wr, !ep->tx_selective || (flags & FI_COMPLETION));
}

ssize_t do_recv(EfaEp* ep, const iovec* iov, void** desc, size_t count, void* context,
                uint64_t flags) {
  int rc = host_data_ok(ep);
  if (rc) return rc;
  if (!(ep->caps & FI_RECV)) return -FI_EOPNOTSUPP;
  if (count == 0 || count > ep->dom->attr.max_rq_sge || count > 2 || !iov) return -FI_EINVAL;
  // FI_MSG_PREFIX: the device writes the GRH into the prefix, so the whole buffer is posted.
  if (iov[0].iov_len < ep->prefix) return -FI_EINVAL;
  efa_dp_sge sge[2];
  size_t total = 0;
  rc = fill_sges(ep, iov, desc, count, sge, &total);
  if (rc) return rc;
  const bool report = !ep->rx_selective || (flags & FI_COMPLETION);
  const auto n = static_cast<uint32_t>(count);
  {
    SerialLock g(ep->rx_lock, ep->dom->app_serialized);
    rc = efa_rq_check(&ep->rq, sge, n);
    uint32_t first = 0;
    if (rc == 0) rc = efa_dp_ring_claim(&ep->rq.ring, n, &first);
    if (rc == 0) {
      const int req_id = efa_rq_write(&ep->rq, first, sge, n, reinterpret_cast<uintptr_t>(context));
      set_slot(ep->rq_slots, req_id, reinterpret_cast<uintptr_t>(iov[0].iov_base), report);
      efa_dp_ring_publish(&ep->rq.ring, first, n, 0);
    }
  }
  if (rc) {
    if (rc == -FI_EAGAIN) ep->dom->progress();
    return rc;
  }
  return 0;
}

ssize_t m_recv(fid_ep* e, void* buf, size_t len, void* desc, fi_addr_t, void* context) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  iovec v{buf, len};
  return do_recv(ep, &v, &desc, 1, context, ep->rx_op_flags);
}
ssize_t m_recvv(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t, void* context) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  return do_recv(ep, iov, desc, count, context, ep->rx_op_flags);
}
ssize_t m_recvmsg(fid_ep* e, const fi_msg* msg, uint64_t flags) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  if (!msg) return -FI_EINVAL;
  return do_recv(ep, msg->msg_iov, msg->desc, msg->iov_count, msg->context, flags);
}
ssize_t m_send(fid_ep* e, const void* buf, size_t len, void* desc, fi_addr_t dest, void* context) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  iovec v{const_cast<void*>(buf), len};
  return do_send(ep, &v, &desc, 1, dest, context, 0, ep->tx_op_flags);
}
ssize_t m_sendv(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
                void* context) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  return do_send(ep, iov, desc, count, dest, context, 0, ep->tx_op_flags);
}
ssize_t m_sendmsg(fid_ep* e, const fi_msg* msg, uint64_t flags) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  if (!msg) return -FI_EINVAL;
  return do_send(ep, msg->msg_iov, msg->desc, msg->iov_count, msg->addr, msg->context,
                 msg->data, flags);
}
ssize_t m_inject(fid_ep* e, const void* buf, size_t len, fi_addr_t dest) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  iovec v{const_cast<void*>(buf), len};
  return do_send(ep, &v, nullptr, 1, dest, nullptr, 0, FI_INJECT);
}
ssize_t m_senddata(fid_ep* e, const void* buf, size_t len, void* desc, uint64_t data,
                   fi_addr_t dest, void* context) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  iovec v{const_cast<void*>(buf), len};
  return do_send(ep, &v, &desc, 1, dest, context, data,
                 ep->tx_op_flags | FI_REMOTE_CQ_DATA);
}
ssize_t m_injectdata(fid_ep* e, const void* buf, size_t len, uint64_t data, fi_addr_t dest) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  iovec v{const_cast<void*>(buf), len};
  return do_send(ep, &v, nullptr, 1, dest, nullptr, data, FI_INJECT | FI_REMOTE_CQ_DATA);
}

ssize_t r_read(fid_ep* e, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t addr,
               uint64_t key, void* context) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  iovec v{buf, len};
  return do_rma(ep, false, &v, &desc, 1, src, addr, key, context, 0, ep->tx_op_flags);
}
ssize_t r_readv(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t src,
                uint64_t addr, uint64_t key, void* context) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  return do_rma(ep, false, iov, desc, count, src, addr, key, context, 0, ep->tx_op_flags);
}
ssize_t r_readmsg(fid_ep* e, const fi_msg_rma* msg, uint64_t flags) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  if (!msg || !msg->rma_iov || msg->rma_iov_count != 1) return -FI_EINVAL;
  return do_rma(ep, false, msg->msg_iov, msg->desc, msg->iov_count, msg->addr,
                msg->rma_iov[0].addr, msg->rma_iov[0].key, msg->context, msg->data, flags);
}
ssize_t r_write(fid_ep* e, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t addr,
                uint64_t key, void* context) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  iovec v{const_cast<void*>(buf), len};
  return do_rma(ep, true, &v, &desc, 1, dest, addr, key, context, 0, ep->tx_op_flags);
}
ssize_t r_writev(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
                 uint64_t addr, uint64_t key, void* context) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  return do_rma(ep, true, iov, desc, count, dest, addr, key, context, 0, ep->tx_op_flags);
}
ssize_t r_writemsg(fid_ep* e, const fi_msg_rma* msg, uint64_t flags) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  if (!msg || !msg->rma_iov || msg->rma_iov_count != 1) return -FI_EINVAL;
  return do_rma(ep, true, msg->msg_iov, msg->desc, msg->iov_count, msg->addr,
                msg->rma_iov[0].addr, msg->rma_iov[0].key, msg->context, msg->data, flags);
}
ssize_t r_inject(fid_ep*, const void*, size_t, fi_addr_t, uint64_t, uint64_t) {
  return -FI_ENOSYS;  // inject_size for RMA is 0 on efa-direct
}
ssize_t r_writedata(fid_ep* e, const void* buf, size_t len, void* desc, uint64_t data,
                    fi_addr_t dest, uint64_t addr, uint64_t key, void* context) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  iovec v{const_cast<void*>(buf), len};
  return do_rma(ep, true, &v, &desc, 1, dest, addr, key, context, data,
                ep->tx_op_flags | FI_REMOTE_CQ_DATA);
}
ssize_t r_injectdata(fid_ep*, const void*, size_t, uint64_t, fi_addr_t, uint64_t, uint64_t) {
  return -FI_ENOSYS;
}

fi_ops_msg g_msg_ops = {sizeof(fi_ops_msg), m_recv,   m_recvv,     m_recvmsg,   m_send,
                        m_sendv,            m_sendmsg, m_inject,   m_senddata,  m_injectdata};
fi_ops_rma g_rma_ops = {sizeof(fi_ops_rma), r_read,  r_readv,     r_readmsg,    r_write,
                        r_writev,           r_writemsg, r_inject, r_writedata,  r_injectdata};

}  // namespace

fi_ops_msg* direct_msg_ops() { return &g_msg_ops; }
fi_ops_rma* direct_rma_ops() { return &g_rma_ops; }

}  // namespace xpufab::efa
