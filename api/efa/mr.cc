// Memory registration (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY) and
// the MR's XPU descriptor (FI_GET_MR_XPU_DESC).
#include <cstring>

#include "api/efa/casts.h"
#include "api/efa/efa.h"
#include "api/efa/proto_ep.h"

namespace xpufab::efa {

namespace {

int mr_close(fid* f) {
  EfaMr* mr = to_mr(f);
  if (!mr) return -FI_EINVAL;
  if (mr->dom->proto) proto_mr_removed(mr);
  int rc = mr->dom->dev->dereg_mr(mr->bmr);
  if (rc) return to_fi_err(rc);
  mr->dom->refs.release();
  delete mr;
  return 0;
}

int mr_control(fid* f, int command, void* arg) {
  EfaMr* mr = to_mr(f);
  if (!mr) return -FI_EINVAL;
  if (command != FI_GET_MR_XPU_DESC) return -FI_ENOSYS;
  auto* d = static_cast<fi_mr_xpu_desc*>(arg);
  if (!d || !d->len) return -FI_EINVAL;
  if (d->flags & ~FI_XPU) return -FI_EINVAL;
  if (d->ctx) {
    EfaXpuCtx* x = to_xpu_ctx(d->ctx);
    if (!x || x->dom != mr->dom) return -FI_EINVAL;
  }
  if (*d->len < sizeof(struct efa_xpu_desc)) {
    *d->len = sizeof(struct efa_xpu_desc);
    return -FI_ETOOSMALL;
  }
  if (!d->buf) return -FI_EINVAL;
  struct efa_xpu_desc x;
  x.lkey = mr->bmr->lkey();
  memcpy(d->buf, &x, sizeof(x));
  *d->len = sizeof(x);
  return 0;
}

int mr_bind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }

fi_ops g_mr_fi_ops = {sizeof(fi_ops), mr_close, mr_bind, mr_control,
                      fi_no_ops_open, fi_no_tostr, fi_no_ops_set};

// The device access for fi_mr_reg's flags, limited to what the device serves: a remote access
// the device cannot serve is never exercised through it (the protocol fabric carries such writes
// and reads as packets it checks against its own keys).
uint32_t to_backend_access(uint64_t access, uint32_t device_caps) {
  // Local write is always needed: receives and read responses land in registered memory.
  uint32_t a = backend::kAccessLocalWrite;
  if (access & FI_REMOTE_WRITE) a |= backend::kAccessRemoteWrite;
  if (access & FI_REMOTE_READ) a |= backend::kAccessRemoteRead;
  return backend::served_access(a, device_caps);
}

int do_reg(EfaDomain* dom, const void* buf, size_t len, uint64_t access, uint64_t offset,
           fi_hmem_iface iface, uint64_t flags, fid_mr** mr_p, void* context) {
  if (!mr_p || (!buf && len)) return -FI_EINVAL;
  if (flags) return -FI_EBADFLAGS;
  if (iface != FI_HMEM_SYSTEM) return -FI_EOPNOTSUPP;
  if (offset) return -FI_EINVAL;  // FI_MR_VIRT_ADDR: the key addresses by virtual address
  const uint64_t valid = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  if (access & ~valid) return -FI_EINVAL;
  auto* mr = new (std::nothrow) EfaMr();
  if (!mr) return -FI_ENOMEM;
  backend::MrInitAttr a;
  a.addr = const_cast<void*>(buf);
  a.length = len;
  const uint32_t caps = dom->attr.device_caps;
  // The protocol's rendezvous reads a send buffer from the receiver's side.
  a.access = to_backend_access(access | (dom->proto ? FI_REMOTE_READ : 0), caps);
  int rc = dom->dev->reg_mr(dom->pd, a, &mr->bmr);
  if (rc) {
    delete mr;
    return to_fi_err(rc);
  }
  rc = dom->refs.acquire();
  if (rc) {
    dom->dev->dereg_mr(mr->bmr);
    delete mr;
    return rc;
  }
  mr->dom = dom;
  mr->access = access;
  mr->mr.fid.fclass = FI_CLASS_MR;
  mr->mr.fid.context = context;
  mr->mr.fid.ops = &g_mr_fi_ops;
  mr->mr.mem_desc = mr;
  mr->lkey = mr->bmr->lkey();
  mr->rkey = mr->bmr->rkey();
  mr->mr.key = mr->rkey;
  mr->addr = reinterpret_cast<uintptr_t>(buf);
  mr->len = len;
  if (dom->proto) proto_mr_added(mr);
  *mr_p = &mr->mr;
  return 0;
}

}  // namespace

int mr_reg(fid* f, const void* buf, size_t len, uint64_t access, uint64_t offset, uint64_t,
           uint64_t flags, fid_mr** mr_p, void* context) {
  EfaDomain* dom = to_domain(f);
  if (!dom) return -FI_EINVAL;
  return do_reg(dom, buf, len, access, offset, FI_HMEM_SYSTEM, flags, mr_p, context);
}

int mr_regv(fid* f, const iovec* iov, size_t count, uint64_t access, uint64_t offset,
            uint64_t key, uint64_t flags, fid_mr** mr_p, void* context) {
  if (!iov || count != 1) return count > 1 ? -FI_EOPNOTSUPP : -FI_EINVAL;
  return mr_reg(f, iov[0].iov_base, iov[0].iov_len, access, offset, key, flags, mr_p, context);
}

int mr_regattr(fid* f, const fi_mr_attr* attr, uint64_t flags, fid_mr** mr_p) {
  EfaDomain* dom = to_domain(f);
  if (!dom || !attr) return -FI_EINVAL;
  if (flags & FI_MR_DMABUF) return -FI_EOPNOTSUPP;
  if (!attr->mr_iov || attr->iov_count != 1) return attr->iov_count > 1 ? -FI_EOPNOTSUPP : -FI_EINVAL;
  return do_reg(dom, attr->mr_iov[0].iov_base, attr->mr_iov[0].iov_len, attr->access, attr->offset,
                attr->iface, flags, mr_p, attr->context);
}

}  // namespace xpufab::efa
