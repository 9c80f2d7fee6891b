// Address vectors: FI_AV_TABLE over the domain's shared address handles. An AV opened with
// FI_EVENT reports each insert on the EQ bound to it (fi_av(3)).
#include <cstdio>
#include <cstring>

#include "api/core/eq.h"
#include "api/efa/casts.h"
#include "api/efa/efa.h"

namespace xpufab::efa {

bool EfaAv::get(fi_addr_t a, EfaAvEntry* out) {
  SerialLock g(lock, dom->app_serialized);
  if (a >= entries.size() || !entries[a].valid) return false;
  *out = entries[a];
  return true;
}

namespace {

int av_close(fid* f) {
  EfaAv* av = to_av(f);
  if (!av) return -FI_EINVAL;
  int rc = av->refs.try_close();
  if (rc) return rc;
  for (auto& e : av->entries)
    if (e.valid) av->dom->put_ah(e.addr.gid);
  if (av->eq) core::eq_bind_release(&av->eq->fid);
  av->dom->refs.release();
  delete av;
  return 0;
}

// fi_av_bind(3): an AV binds to one EQ, which then receives its FI_EVENT reports.
int av_bind(fid* f, fid* bfid, uint64_t flags) {
  EfaAv* av = to_av(f);
  if (!av || !bfid) return -FI_EINVAL;
  if (bfid->fclass != FI_CLASS_EQ) return -FI_EINVAL;
  if (flags) return -FI_EBADFLAGS;
  if (av->eq) return -FI_EINVAL;
  int rc = core::eq_bind_acquire(bfid);
  if (rc) return rc;
  // A core EQ's fid is the first member of its fid_eq (eq_bind_acquire checked it is one).
  av->eq = reinterpret_cast<fid_eq*>(bfid);
  return 0;
}

int av_insert(fid_av* fav, const void* addr, size_t count, fi_addr_t* fi_addr, uint64_t flags,
              void* context) {
  EfaAv* av = to_av(fav);
  if (!av || (!addr && count) || flags) return -FI_EINVAL;
  const bool event = av->flags & FI_EVENT;
  if (event && !av->eq) return -FI_ENOEQ;
  const auto* in = static_cast<const EfaAddr*>(addr);
  int done = 0;
  for (size_t i = 0; i < count; ++i) {
    backend::Ah* ah = nullptr;
    int rc = av->dom->get_ah(in[i].gid, &ah);
    if (rc) {
      if (fi_addr) fi_addr[i] = FI_ADDR_NOTAVAIL;
      if (event) {
        // fi_av(3): a failed address is an error event whose data is its index in the input.
        fi_eq_err_entry err{};
        err.fid = &av->av.fid;
        err.context = context;
        err.data = i;
        err.err = -rc;
        core::eq_post_error(av->eq, &err);
      }
      continue;
    }
    EfaAvEntry e;
    e.valid = true;
    e.addr = in[i];
    e.ahn = ah->ahn();
    std::lock_guard<Lock> g(av->lock);
    av->entries.push_back(e);
    av->count.store(av->entries.size(), std::memory_order_release);
    if (fi_addr) fi_addr[i] = av->entries.size() - 1;
    done++;
  }
  if (done) {
    // Exported protocol endpoints on this AV: device code names the new peers right away.
    std::lock_guard<Lock> g(av->dom->lock);
    for (EfaEp* ep : av->dom->proto_eps)
      if (ep->av == av && ep->exported) xpu_ep_av_grown(ep);
  }
  if (!event) return done;
  fi_eq_entry e{&av->av.fid, context, static_cast<uint64_t>(done)};
  ssize_t rc = core::eq_post(av->eq, FI_AV_COMPLETE, &e, sizeof(e));
  return rc < 0 ? static_cast<int>(rc) : 0;
}

int av_insertsvc(fid_av*, const char*, const char*, fi_addr_t*, uint64_t, void*) {
  return -FI_ENOSYS;
}
int av_insertsym(fid_av*, const char*, size_t, const char*, size_t, fi_addr_t*, uint64_t, void*) {
  return -FI_ENOSYS;
}

int av_remove(fid_av* fav, fi_addr_t* fi_addr, size_t count, uint64_t flags) {
  EfaAv* av = to_av(fav);
  if (!av || (!fi_addr && count) || flags) return -FI_EINVAL;
  std::vector<EfaAddr> gone;
  {
    std::lock_guard<Lock> g(av->lock);
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
  EfaAv* av = to_av(fav);
  if (!av || !addrlen) return -FI_EINVAL;
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
  if (flags == 0 && ctx == nullptr) return av_lookup(fav, fi_addr, buf, len);
  EfaAv* av = to_av(fav);
  if (!av || (flags & ~FI_XPU)) return -FI_EINVAL;
  EfaXpuCtx* x = to_xpu_ctx(ctx);
  if (!len || !x || x->dom != av->dom) return -FI_EINVAL;
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

fi_ops g_av_fi_ops = {sizeof(fi_ops), av_close, av_bind, fi_no_control,
                      fi_no_ops_open, fi_no_tostr, fi_no_ops_set};
fi_ops_av g_av_ops = {sizeof(fi_ops_av), av_insert,     av_insertsvc,      av_insertsym,
                      av_remove,         av_lookup,     av_straddr,        av_no_set,
                      av_no_insert_auth, av_no_lookup_auth, av_no_user_id, av_lookup2};

}  // namespace

int av_open(fid_domain* domain, fi_av_attr* attr, fid_av** av_p, void* context) {
  if (!domain || !attr || !av_p) return -FI_EINVAL;
  // A map is served by the table: its addresses are the table's indices, which a map may be.
  if (attr->type != FI_AV_UNSPEC && attr->type != FI_AV_TABLE && attr->type != FI_AV_MAP)
    return -FI_EINVAL;
  if ((attr->flags & ~FI_EVENT) || attr->name || attr->rx_ctx_bits) return -FI_EINVAL;
  EfaDomain* dom = to_domain(domain);
  if (!dom) return -FI_EINVAL;
  auto* av = new (std::nothrow) EfaAv();
  if (!av) return -FI_ENOMEM;
  int rc = dom->refs.acquire();
  if (rc) {
    delete av;
    return rc;
  }
  av->dom = dom;
  av->flags = attr->flags;
  av->entries.reserve(attr->count ? attr->count : 16);
  av->av.fid.fclass = FI_CLASS_AV;
  av->av.fid.context = context;
  av->av.fid.ops = &g_av_fi_ops;
  av->av.ops = &g_av_ops;
  *av_p = &av->av;
  return 0;
}

}  // namespace xpufab::efa
