// The op tables of the protocol fabric's endpoints: every fi_msg / fi_tagged / fi_rma /
// fi_atomic entry point turns its arguments into one request of api/efa/proto_ep.h. Atomics are
// checked against the core's validity table (api/proto/atomic.h) first, so an op or datatype
// it does not execute fails with -FI_EOPNOTSUPP before anything is sent; the same table answers
// fi_atomicvalid and fi_query_atomic.
#include "api/efa/casts.h"
#include "api/efa/efa.h"
#include "api/efa/proto_ep.h"
#include "api/proto/atomic.h"

namespace xpufab::efa {

namespace {

// ---- messages -----------------------------------------------------------------------------

ssize_t send_one(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
                 bool tagged, uint64_t tag, uint64_t data, void* context, uint64_t flags) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  ProtoSend s;
  s.iov = iov;
  s.desc = desc;
  s.count = count;
  s.dest = dest;
  s.tagged = tagged;
  s.tag = tag;
  s.data = data;
  s.context = context;
  s.flags = flags;
  return proto_send(ep, s);
}

ssize_t recv_one(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t src,
                 bool tagged, uint64_t tag, uint64_t ignore, void* context, uint64_t flags) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  ProtoRecv r;
  r.iov = iov;
  r.desc = desc;
  r.count = count;
  r.src = src;
  r.tagged = tagged;
  r.tag = tag;
  r.ignore = ignore;
  r.context = context;
  r.flags = flags;
  return proto_recv(ep, r);
}

uint64_t tx_flags(fid_ep* e) {
  EfaEp* ep = to_ep(e);
  return ep ? ep->tx_op_flags : 0;
}
uint64_t rx_flags(fid_ep* e) {
  EfaEp* ep = to_ep(e);
  return ep ? ep->rx_op_flags : 0;
}

ssize_t m_recv(fid_ep* e, void* buf, size_t len, void* desc, fi_addr_t src, void* context) {
  iovec v{buf, len};
  return recv_one(e, &v, &desc, 1, src, false, 0, 0, context, rx_flags(e));
}
ssize_t m_recvv(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t src,
                void* context) {
  return recv_one(e, iov, desc, count, src, false, 0, 0, context, rx_flags(e));
}
ssize_t m_recvmsg(fid_ep* e, const fi_msg* msg, uint64_t flags) {
  if (!msg) return -FI_EINVAL;
  return recv_one(e, msg->msg_iov, msg->desc, msg->iov_count, msg->addr, false, 0, 0,
                  msg->context, flags);
}
ssize_t m_send(fid_ep* e, const void* buf, size_t len, void* desc, fi_addr_t dest, void* context) {
  iovec v{const_cast<void*>(buf), len};
  return send_one(e, &v, &desc, 1, dest, false, 0, 0, context, tx_flags(e));
}
ssize_t m_sendv(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
                void* context) {
  return send_one(e, iov, desc, count, dest, false, 0, 0, context, tx_flags(e));
}
ssize_t m_sendmsg(fid_ep* e, const fi_msg* msg, uint64_t flags) {
  if (!msg) return -FI_EINVAL;
  return send_one(e, msg->msg_iov, msg->desc, msg->iov_count, msg->addr, false, 0, msg->data,
                  msg->context, flags);
}
// The inject calls: the buffer is copied before return and nothing is reported.
ssize_t inject_one(fid_ep* e, const void* buf, size_t len, fi_addr_t dest, bool tagged,
                   uint64_t tag, uint64_t data, uint64_t flags) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  iovec v{const_cast<void*>(buf), len};
  ProtoSend s;
  s.iov = &v;
  s.count = 1;
  s.dest = dest;
  s.tagged = tagged;
  s.tag = tag;
  s.data = data;
  s.flags = flags | FI_INJECT;
  s.no_completion = true;
  return proto_send(ep, s);
}

ssize_t m_inject(fid_ep* e, const void* buf, size_t len, fi_addr_t dest) {
  return inject_one(e, buf, len, dest, false, 0, 0, 0);
}
ssize_t m_senddata(fid_ep* e, const void* buf, size_t len, void* desc, uint64_t data,
                   fi_addr_t dest, void* context) {
  iovec v{const_cast<void*>(buf), len};
  return send_one(e, &v, &desc, 1, dest, false, 0, data, context,
                  tx_flags(e) | FI_REMOTE_CQ_DATA);
}
ssize_t m_injectdata(fid_ep* e, const void* buf, size_t len, uint64_t data, fi_addr_t dest) {
  return inject_one(e, buf, len, dest, false, 0, data, FI_REMOTE_CQ_DATA);
}

// ---- tagged messages ------------------------------------------------------------------------

// FI_MULTI_RECV among the endpoint's receive flags applies to its untagged receives only.
uint64_t tagged_rx_flags(fid_ep* e) { return rx_flags(e) & ~FI_MULTI_RECV; }

ssize_t t_recv(fid_ep* e, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t tag,
               uint64_t ignore, void* context) {
  iovec v{buf, len};
  return recv_one(e, &v, &desc, 1, src, true, tag, ignore, context, tagged_rx_flags(e));
}
ssize_t t_recvv(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t src,
                uint64_t tag, uint64_t ignore, void* context) {
  return recv_one(e, iov, desc, count, src, true, tag, ignore, context, tagged_rx_flags(e));
}
ssize_t t_recvmsg(fid_ep* e, const fi_msg_tagged* msg, uint64_t flags) {
  if (!msg) return -FI_EINVAL;
  return recv_one(e, msg->msg_iov, msg->desc, msg->iov_count, msg->addr, true, msg->tag,
                  msg->ignore, msg->context, flags);
}
ssize_t t_send(fid_ep* e, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t tag,
               void* context) {
  iovec v{const_cast<void*>(buf), len};
  return send_one(e, &v, &desc, 1, dest, true, tag, 0, context, tx_flags(e));
}
ssize_t t_sendv(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
                uint64_t tag, void* context) {
  return send_one(e, iov, desc, count, dest, true, tag, 0, context, tx_flags(e));
}
ssize_t t_sendmsg(fid_ep* e, const fi_msg_tagged* msg, uint64_t flags) {
  if (!msg) return -FI_EINVAL;
  return send_one(e, msg->msg_iov, msg->desc, msg->iov_count, msg->addr, true, msg->tag,
                  msg->data, msg->context, flags);
}
ssize_t t_inject(fid_ep* e, const void* buf, size_t len, fi_addr_t dest, uint64_t tag) {
  return inject_one(e, buf, len, dest, true, tag, 0, 0);
}
ssize_t t_senddata(fid_ep* e, const void* buf, size_t len, void* desc, uint64_t data,
                   fi_addr_t dest, uint64_t tag, void* context) {
  iovec v{const_cast<void*>(buf), len};
  return send_one(e, &v, &desc, 1, dest, true, tag, data, context,
                  tx_flags(e) | FI_REMOTE_CQ_DATA);
}
ssize_t t_injectdata(fid_ep* e, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                     uint64_t tag) {
  return inject_one(e, buf, len, dest, true, tag, data, FI_REMOTE_CQ_DATA);
}

// ---- RMA ------------------------------------------------------------------------------------

ssize_t rma_one(fid_ep* e, bool write, const iovec* iov, void** desc, size_t count, fi_addr_t peer,
                uint64_t addr, uint64_t key, void* context, uint64_t data, uint64_t flags) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  return proto_rma(ep, write, iov, desc, count, peer, addr, key, context, data, flags);
}

ssize_t r_read(fid_ep* e, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t addr,
               uint64_t key, void* context) {
  iovec v{buf, len};
  return rma_one(e, false, &v, &desc, 1, src, addr, key, context, 0, tx_flags(e));
}
ssize_t r_readv(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t src,
                uint64_t addr, uint64_t key, void* context) {
  return rma_one(e, false, iov, desc, count, src, addr, key, context, 0, tx_flags(e));
}
ssize_t r_readmsg(fid_ep* e, const fi_msg_rma* msg, uint64_t flags) {
  if (!msg || !msg->rma_iov || msg->rma_iov_count != 1) return -FI_EINVAL;
  return rma_one(e, false, msg->msg_iov, msg->desc, msg->iov_count, msg->addr,
                 msg->rma_iov[0].addr, msg->rma_iov[0].key, msg->context, msg->data, flags);
}
ssize_t r_write(fid_ep* e, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t addr,
                uint64_t key, void* context) {
  iovec v{const_cast<void*>(buf), len};
  return rma_one(e, true, &v, &desc, 1, dest, addr, key, context, 0, tx_flags(e));
}
ssize_t r_writev(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
                 uint64_t addr, uint64_t key, void* context) {
  return rma_one(e, true, iov, desc, count, dest, addr, key, context, 0, tx_flags(e));
}
ssize_t r_writemsg(fid_ep* e, const fi_msg_rma* msg, uint64_t flags) {
  if (!msg || !msg->rma_iov || msg->rma_iov_count != 1) return -FI_EINVAL;
  return rma_one(e, true, msg->msg_iov, msg->desc, msg->iov_count, msg->addr,
                 msg->rma_iov[0].addr, msg->rma_iov[0].key, msg->context, msg->data, flags);
}
// The inject calls: copied before return, nothing reported.
ssize_t rma_inject(fid_ep* e, const void* buf, size_t len, fi_addr_t dest, uint64_t addr,
                   uint64_t key, uint64_t data, uint64_t flags) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  iovec v{const_cast<void*>(buf), len};
  return proto_rma(ep, true, &v, nullptr, 1, dest, addr, key, nullptr, data, flags | FI_INJECT,
                   true);
}
ssize_t r_inject(fid_ep* e, const void* buf, size_t len, fi_addr_t dest, uint64_t addr,
                 uint64_t key) {
  return rma_inject(e, buf, len, dest, addr, key, 0, 0);
}
ssize_t r_writedata(fid_ep* e, const void* buf, size_t len, void* desc, uint64_t data,
                    fi_addr_t dest, uint64_t addr, uint64_t key, void* context) {
  iovec v{const_cast<void*>(buf), len};
  return rma_one(e, true, &v, &desc, 1, dest, addr, key, context, data,
                 tx_flags(e) | FI_REMOTE_CQ_DATA);
}
ssize_t r_injectdata(fid_ep* e, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                     uint64_t addr, uint64_t key) {
  return rma_inject(e, buf, len, dest, addr, key, data, FI_REMOTE_CQ_DATA);
}

// ---- atomics --------------------------------------------------------------------------------

// The validity answer for an endpoint: -FI_EOPNOTSUPP for what the table refuses, else the
// element count one request carries.
int valid_count(EfaEp* ep, int kind, fi_datatype dt, fi_op op, size_t* count) {
  if (!ep || !count) return -FI_EINVAL;
  if (!(ep->caps & FI_ATOMIC)) return -FI_EOPNOTSUPP;
  const int64_t n = proto_atomic_valid(kind, op, dt, proto_atomic_max_bytes(ep->dom));
  if (n < 0) return static_cast<int>(n);
  *count = static_cast<size_t>(n);
  return 0;
}

// Builds one atomic request from the single-segment forms every entry point reduces to.
ssize_t atomic_one(fid_ep* e, int kind, const fi_ioc* iov, size_t iov_count, const fi_ioc* cmp,
                   size_t cmp_count, fi_ioc* res, size_t res_count, void** res_desc,
                   fi_addr_t dest, uint64_t addr, uint64_t key, fi_datatype dt, fi_op op,
                   void* context, uint64_t flags, bool inject_call = false) {
  EfaEp* ep = to_ep(e);
  if (!ep) return -FI_EINVAL;
  size_t max = 0;
  int rc = valid_count(ep, kind, dt, op, &max);
  if (rc) return rc;
  // One contiguous segment per buffer (iov_limit 1 for atomics); FI_ATOMIC_READ sends none.
  if (op != FI_ATOMIC_READ && (iov_count != 1 || !iov)) return -FI_EINVAL;
  const size_t count = op == FI_ATOMIC_READ && iov_count == 0 ? (res ? res->count : 0)
                                                              : iov[0].count;
  if (count == 0 || count > max) return -FI_EINVAL;
  if (op != FI_ATOMIC_READ && !iov[0].addr) return -FI_EINVAL;
  if (kind == PROTO_ATOMIC_COMPARE &&
      (cmp_count != 1 || !cmp || !cmp[0].addr || cmp[0].count != count))
    return -FI_EINVAL;
  if (kind != PROTO_ATOMIC_PLAIN && (res_count != 1 || !res || !res[0].addr || res[0].count != count))
    return -FI_EINVAL;
  ProtoAtomic a;
  a.kind = kind;
  a.op = op;
  a.datatype = dt;
  a.count = count;
  a.buf = op == FI_ATOMIC_READ ? nullptr : iov[0].addr;
  a.compare = kind == PROTO_ATOMIC_COMPARE ? cmp[0].addr : nullptr;
  a.result = kind != PROTO_ATOMIC_PLAIN ? res[0].addr : nullptr;
  a.result_desc = kind != PROTO_ATOMIC_PLAIN && res_desc ? res_desc[0] : nullptr;
  a.dest = dest;
  a.addr = addr;
  a.key = key;
  a.context = context;
  a.flags = flags;
  a.no_completion = inject_call;
  return proto_atomic(ep, a);
}

ssize_t a_write(fid_ep* e, const void* buf, size_t count, void*, fi_addr_t dest, uint64_t addr,
                uint64_t key, fi_datatype dt, fi_op op, void* context) {
  fi_ioc v{const_cast<void*>(buf), count};
  return atomic_one(e, PROTO_ATOMIC_PLAIN, &v, 1, nullptr, 0, nullptr, 0, nullptr, dest, addr,
                    key, dt, op, context, tx_flags(e));
}
ssize_t a_writev(fid_ep* e, const fi_ioc* iov, void**, size_t count, fi_addr_t dest,
                 uint64_t addr, uint64_t key, fi_datatype dt, fi_op op, void* context) {
  return atomic_one(e, PROTO_ATOMIC_PLAIN, iov, count, nullptr, 0, nullptr, 0, nullptr, dest,
                    addr, key, dt, op, context, tx_flags(e));
}
// The *msg forms: one target segment whose element count matches the operands.
bool one_target(const fi_msg_atomic* msg) {
  return msg && msg->rma_iov && msg->rma_iov_count == 1;
}
ssize_t a_writemsg(fid_ep* e, const fi_msg_atomic* msg, uint64_t flags) {
  if (!one_target(msg)) return -FI_EINVAL;
  return atomic_one(e, PROTO_ATOMIC_PLAIN, msg->msg_iov, msg->iov_count, nullptr, 0, nullptr, 0,
                    nullptr, msg->addr, msg->rma_iov[0].addr, msg->rma_iov[0].key, msg->datatype,
                    msg->op, msg->context, flags);
}
ssize_t a_inject(fid_ep* e, const void* buf, size_t count, fi_addr_t dest, uint64_t addr,
                 uint64_t key, fi_datatype dt, fi_op op) {
  fi_ioc v{const_cast<void*>(buf), count};
  return atomic_one(e, PROTO_ATOMIC_PLAIN, &v, 1, nullptr, 0, nullptr, 0, nullptr, dest, addr,
                    key, dt, op, nullptr, FI_INJECT, true);
}
ssize_t a_readwrite(fid_ep* e, const void* buf, size_t count, void*, void* result,
                    void* result_desc, fi_addr_t dest, uint64_t addr, uint64_t key,
                    fi_datatype dt, fi_op op, void* context) {
  fi_ioc v{const_cast<void*>(buf), count};
  fi_ioc r{result, count};
  return atomic_one(e, PROTO_ATOMIC_FETCH, &v, 1, nullptr, 0, &r, 1, &result_desc, dest, addr,
                    key, dt, op, context, tx_flags(e));
}
ssize_t a_readwritev(fid_ep* e, const fi_ioc* iov, void**, size_t count, fi_ioc* resultv,
                     void** result_desc, size_t result_count, fi_addr_t dest, uint64_t addr,
                     uint64_t key, fi_datatype dt, fi_op op, void* context) {
  return atomic_one(e, PROTO_ATOMIC_FETCH, iov, count, nullptr, 0, resultv, result_count,
                    result_desc, dest, addr, key, dt, op, context, tx_flags(e));
}
ssize_t a_readwritemsg(fid_ep* e, const fi_msg_atomic* msg, fi_ioc* resultv, void** result_desc,
                       size_t result_count, uint64_t flags) {
  if (!one_target(msg)) return -FI_EINVAL;
  return atomic_one(e, PROTO_ATOMIC_FETCH, msg->msg_iov, msg->iov_count, nullptr, 0, resultv,
                    result_count, result_desc, msg->addr, msg->rma_iov[0].addr,
                    msg->rma_iov[0].key, msg->datatype, msg->op, msg->context, flags);
}
ssize_t a_compwrite(fid_ep* e, const void* buf, size_t count, void*, const void* compare, void*,
                    void* result, void* result_desc, fi_addr_t dest, uint64_t addr, uint64_t key,
                    fi_datatype dt, fi_op op, void* context) {
  fi_ioc v{const_cast<void*>(buf), count};
  fi_ioc c{const_cast<void*>(compare), count};
  fi_ioc r{result, count};
  return atomic_one(e, PROTO_ATOMIC_COMPARE, &v, 1, &c, 1, &r, 1, &result_desc, dest, addr, key,
                    dt, op, context, tx_flags(e));
}
ssize_t a_compwritev(fid_ep* e, const fi_ioc* iov, void**, size_t count, const fi_ioc* comparev,
                     void**, size_t compare_count, fi_ioc* resultv, void** result_desc,
                     size_t result_count, fi_addr_t dest, uint64_t addr, uint64_t key,
                     fi_datatype dt, fi_op op, void* context) {
  return atomic_one(e, PROTO_ATOMIC_COMPARE, iov, count, comparev, compare_count, resultv,
                    result_count, result_desc, dest, addr, key, dt, op, context, tx_flags(e));
}
ssize_t a_compwritemsg(fid_ep* e, const fi_msg_atomic* msg, const fi_ioc* comparev, void**,
                       size_t compare_count, fi_ioc* resultv, void** result_desc,
                       size_t result_count, uint64_t flags) {
  if (!one_target(msg)) return -FI_EINVAL;
  return atomic_one(e, PROTO_ATOMIC_COMPARE, msg->msg_iov, msg->iov_count, comparev,
                    compare_count, resultv, result_count, result_desc, msg->addr,
                    msg->rma_iov[0].addr, msg->rma_iov[0].key, msg->datatype, msg->op,
                    msg->context, flags);
}
int a_writevalid(fid_ep* e, fi_datatype dt, fi_op op, size_t* count) {
  return valid_count(to_ep(e), PROTO_ATOMIC_PLAIN, dt, op, count);
}
int a_readwritevalid(fid_ep* e, fi_datatype dt, fi_op op, size_t* count) {
  return valid_count(to_ep(e), PROTO_ATOMIC_FETCH, dt, op, count);
}
int a_compwritevalid(fid_ep* e, fi_datatype dt, fi_op op, size_t* count) {
  return valid_count(to_ep(e), PROTO_ATOMIC_COMPARE, dt, op, count);
}

fi_ops_msg g_msg = {sizeof(fi_ops_msg), m_recv,    m_recvv,  m_recvmsg,  m_send,
                    m_sendv,            m_sendmsg, m_inject, m_senddata, m_injectdata};
fi_ops_tagged g_tagged = {sizeof(fi_ops_tagged), t_recv,    t_recvv,  t_recvmsg,  t_send,
                          t_sendv,               t_sendmsg, t_inject, t_senddata, t_injectdata};
fi_ops_rma g_rma = {sizeof(fi_ops_rma), r_read,     r_readv,  r_readmsg,   r_write,
                    r_writev,           r_writemsg, r_inject, r_writedata, r_injectdata};
fi_ops_atomic g_atomic = {sizeof(fi_ops_atomic), a_write,        a_writev,
                          a_writemsg,            a_inject,       a_readwrite,
                          a_readwritev,          a_readwritemsg, a_compwrite,
                          a_compwritev,          a_compwritemsg, a_writevalid,
                          a_readwritevalid,      a_compwritevalid};

}  // namespace

fi_ops_msg* proto_msg_ops() { return &g_msg; }
fi_ops_tagged* proto_tagged_ops() { return &g_tagged; }
fi_ops_rma* proto_rma_ops() { return &g_rma; }
fi_ops_atomic* proto_atomic_ops() { return &g_atomic; }

int proto_query_atomic(EfaDomain* dom, fi_datatype datatype, fi_op op, fi_atomic_attr* attr,
                       uint64_t flags) {
  if (!attr) return -FI_EINVAL;
  if (flags & ~(FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC)) return -FI_EBADFLAGS;
  if ((flags & FI_FETCH_ATOMIC) && (flags & FI_COMPARE_ATOMIC)) return -FI_EINVAL;
  const int kind = (flags & FI_COMPARE_ATOMIC) ? PROTO_ATOMIC_COMPARE
                   : (flags & FI_FETCH_ATOMIC) ? PROTO_ATOMIC_FETCH
                                               : PROTO_ATOMIC_PLAIN;
  const int64_t n = proto_atomic_valid(kind, op, datatype, proto_atomic_max_bytes(dom));
  if (n < 0) return static_cast<int>(n);
  attr->count = static_cast<size_t>(n);
  attr->size = proto_atomic_datatype_size(datatype);
  return 0;
}

}  // namespace xpufab::efa
