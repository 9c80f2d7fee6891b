// Address vectors (FI_AV_TABLE over device AHs) and memory registration.
#include <cstdio>
#include <cstring>

#include "api/efa/efa.h"

namespace xpufab::efa {

// ---- AV -------------------------------------------------------------------------------------

bool EfaAv::get(fi_addr_t a, EfaAvEntry* out) {
  std::lock_guard<std::mutex> g(lock);
  if (a >= entries.size() || !entries[a].valid) return false;
  *out = entries[a];
  return true;
}

namespace {

int av_close(fid* f) {
  auto* av = reinterpret_cast<EfaAv*>(f);
  int rc = av->refs.try_close();
  if (rc) return rc;
  for (auto& e : av->entries)
    if (e.valid) av->dom->put_ah(e.addr.gid);
  av->dom->refs.release();
  delete av;
  return 0;
}

int av_insert(fid_av* fav, const void* addr, size_t count, fi_addr_t* fi_addr, uint64_t flags,
              void*) {
  auto* av = reinterpret_cast<EfaAv*>(fav);
  if ((!addr && count) || flags) return -FI_EINVAL;
  const auto* in = static_cast<const EfaAddr*>(addr);
  int done = 0;
  for (size_t i = 0; i < count; ++i) {
    backend::Ah* ah = nullptr;
    int rc = av->dom->get_ah(in[i].gid, &ah);
    if (rc) {
      if (fi_addr) fi_addr[i] = FI_ADDR_NOTAVAIL;
      continue;
    }
    EfaAvEntry e;
    e.valid = true;
    e.addr = in[i];
    e.ahn = ah->ahn();
    std::lock_guard<std::mutex> g(av->lock);
    av->entries.push_back(e);
    if (fi_addr) fi_addr[i] = av->entries.size() - 1;
    done++;
  }
  return done;
}

int av_insertsvc(fid_av*, const char*, const char*, fi_addr_t*, uint64_t, void*) {
  return -FI_ENOSYS;
}
int av_insertsym(fid_av*, const char*, size_t, const char*, size_t, fi_addr_t*, uint64_t, void*) {
  return -FI_ENOSYS;
}

int av_remove(fid_av* fav, fi_addr_t* fi_addr, size_t count, uint64_t flags) {
  auto* av = reinterpret_cast<EfaAv*>(fav);
  if ((!fi_addr && count) || flags) return -FI_EINVAL;
  std::vector<EfaAddr> gone;
  {
    std::lock_guard<std::mutex> g(av->lock);
    for (size_t i = 0; i < count; ++i)
      if (fi_addr[i] >= av->entries.size() || !av->entries[fi_addr[i]].valid) return -FI_EINVAL;
    for (size_t i = 0; i < count; ++i) {
      av->entries[fi_addr[i]].valid = false;
      gone.push_back(av->entries[fi_addr[i]].addr);
    }
  }
  for (auto& a : gone) av->dom->put_ah(a.gid);
  return 0;
}

int av_lookup(fid_av* fav, fi_addr_t fi_addr, void* addr, size_t* addrlen) {
  auto* av = reinterpret_cast<EfaAv*>(fav);
  if (!addrlen) return -FI_EINVAL;
  EfaAvEntry e;
  if (!av->get(fi_addr, &e)) return -FI_EINVAL;
  size_t n = *addrlen < sizeof(EfaAddr) ? *addrlen : sizeof(EfaAddr);
  if (addr && n) memcpy(addr, &e.addr, n);
  *addrlen = sizeof(EfaAddr);
  return 0;
}

const char* av_straddr(fid_av*, const void* addr, char* buf, size_t* len) {
  if (!addr || !buf || !len) return nullptr;
  const auto* a = static_cast<const EfaAddr*>(addr);
  char tmp[96];
  int n = snprintf(tmp, sizeof(tmp),
                   "fi_addr_efa://[%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:"
                   "%02x%02x]:%u:%u",
                   a->gid[0], a->gid[1], a->gid[2], a->gid[3], a->gid[4], a->gid[5], a->gid[6],
                   a->gid[7], a->gid[8], a->gid[9], a->gid[10], a->gid[11], a->gid[12], a->gid[13],
                   a->gid[14], a->gid[15], a->qpn, a->qkey);
  if (*len > 0) {
    snprintf(buf, *len, "%s", tmp);
  }
  *len = static_cast<size_t>(n) + 1;
  return buf;
}

int av_no_set(fid_av*, fi_av_set_attr*, fid_av_set**, void*) { return -FI_ENOSYS; }
int av_no_insert_auth(fid_av*, const void*, size_t, fi_addr_t*, uint64_t) { return -FI_ENOSYS; }
int av_no_lookup_auth(fid_av*, fi_addr_t, void*, size_t*) { return -FI_ENOSYS; }
int av_no_user_id(fid_av*, fi_addr_t, fi_addr_t, uint64_t) { return -FI_ENOSYS; }

// Raw device address for XPU code: {ahn, remote_qpn, remote_qkey} (efa_xpu_peer).
int av_lookup2(fid_av* fav, fi_addr_t fi_addr, void* buf, size_t* len, uint64_t flags,
               fid_xpu_ctx* ctx) {
  auto* av = reinterpret_cast<EfaAv*>(fav);
  if (flags == 0 && ctx == nullptr) return av_lookup(fav, fi_addr, buf, len);
  if (flags & ~FI_XPU) return -FI_EINVAL;
  if (!len || !ctx || ctx->fid.fclass != FI_CLASS_XPU_CTX) return -FI_EINVAL;
  if (reinterpret_cast<EfaXpuCtx*>(ctx)->dom != av->dom) return -FI_EINVAL;
  EfaAvEntry e;
  if (!av->get(fi_addr, &e)) return -FI_EINVAL;
  if (*len < sizeof(struct efa_xpu_peer)) {
    *len = sizeof(struct efa_xpu_peer);
    return -FI_ETOOSMALL;
  }
  if (!buf) return -FI_EINVAL;
  struct efa_xpu_peer p;
  p.ahn = e.ahn;
  p.remote_qpn = e.addr.qpn;
  p.remote_qkey = e.addr.qkey;
  memcpy(buf, &p, sizeof(p));
  *len = sizeof(p);
  return 0;
}

fi_ops g_av_fi_ops = {sizeof(fi_ops), av_close, fi_no_bind, fi_no_control,
                      fi_no_ops_open, fi_no_tostr, fi_no_ops_set};
fi_ops_av g_av_ops = {sizeof(fi_ops_av), av_insert,     av_insertsvc,      av_insertsym,
                      av_remove,         av_lookup,     av_straddr,        av_no_set,
                      av_no_insert_auth, av_no_lookup_auth, av_no_user_id, av_lookup2};

}  // namespace

int av_open(fid_domain* domain, fi_av_attr* attr, fid_av** av_p, void* context) {
  if (!domain || !attr || !av_p) return -FI_EINVAL;
  if (attr->type != FI_AV_UNSPEC && attr->type != FI_AV_TABLE) return -FI_EINVAL;
  if (attr->flags || attr->name || attr->rx_ctx_bits) return -FI_EINVAL;
  auto* dom = reinterpret_cast<EfaDomain*>(domain);
  auto* av = new (std::nothrow) EfaAv();
  if (!av) return -FI_ENOMEM;
  int rc = dom->refs.acquire();
  if (rc) {
    delete av;
    return rc;
  }
  av->dom = dom;
  av->entries.reserve(attr->count ? attr->count : 16);
  av->av.fid.fclass = FI_CLASS_AV;
  av->av.fid.context = context;
  av->av.fid.ops = &g_av_fi_ops;
  av->av.ops = &g_av_ops;
  *av_p = &av->av;
  return 0;
}

// ---- MR -------------------------------------------------------------------------------------

namespace {

int mr_close(fid* f) {
  auto* mr = reinterpret_cast<EfaMr*>(f);
  int rc = mr->dom->dev->dereg_mr(mr->bmr);
  if (rc) return to_fi_err(rc);
  mr->dom->refs.release();
  delete mr;
  return 0;
}

int mr_control(fid* f, int command, void* arg) {
  auto* mr = reinterpret_cast<EfaMr*>(f);
  if (command != FI_GET_MR_XPU_DESC) return -FI_ENOSYS;
  auto* d = static_cast<fi_mr_xpu_desc*>(arg);
  if (!d || !d->len) return -FI_EINVAL;
  if (d->flags & ~FI_XPU) return -FI_EINVAL;
  if (d->ctx) {
    if (d->ctx->fid.fclass != FI_CLASS_XPU_CTX ||
        reinterpret_cast<EfaXpuCtx*>(d->ctx)->dom != mr->dom)
      return -FI_EINVAL;
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

uint32_t to_backend_access(uint64_t access) {
  // Local write is always needed: receives and read responses land in registered memory.
  uint32_t a = backend::kAccessLocalWrite;
  if (access & FI_REMOTE_WRITE) a |= backend::kAccessRemoteWrite;
  if (access & FI_REMOTE_READ) a |= backend::kAccessRemoteRead;
  return a;
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
  a.access = to_backend_access(access);
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
  mr->mr.key = mr->bmr->rkey();
  *mr_p = &mr->mr;
  return 0;
}

EfaDomain* domain_of(fid* f) {
  if (!f || f->fclass != FI_CLASS_DOMAIN) return nullptr;
  return reinterpret_cast<EfaDomain*>(f);
}

}  // namespace

int mr_reg(fid* f, const void* buf, size_t len, uint64_t access, uint64_t offset, uint64_t,
           uint64_t flags, fid_mr** mr_p, void* context) {
  EfaDomain* dom = domain_of(f);
  if (!dom) return -FI_EINVAL;
  return do_reg(dom, buf, len, access, offset, FI_HMEM_SYSTEM, flags, mr_p, context);
}

int mr_regv(fid* f, const iovec* iov, size_t count, uint64_t access, uint64_t offset,
            uint64_t key, uint64_t flags, fid_mr** mr_p, void* context) {
  if (!iov || count != 1) return count > 1 ? -FI_EOPNOTSUPP : -FI_EINVAL;
  return mr_reg(f, iov[0].iov_base, iov[0].iov_len, access, offset, key, flags, mr_p, context);
}

int mr_regattr(fid* f, const fi_mr_attr* attr, uint64_t flags, fid_mr** mr_p) {
  EfaDomain* dom = domain_of(f);
  if (!dom || !attr) return -FI_EINVAL;
  if (flags & FI_MR_DMABUF) return -FI_EOPNOTSUPP;
  if (!attr->mr_iov || attr->iov_count != 1) return attr->iov_count > 1 ? -FI_EOPNOTSUPP : -FI_EINVAL;
  return do_reg(dom, attr->mr_iov[0].iov_base, attr->mr_iov[0].iov_len, attr->access, attr->offset,
                attr->iface, flags, mr_p, attr->context);
}

}  // namespace xpufab::efa
