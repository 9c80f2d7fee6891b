// XPU contexts: the application's fi_xpu_ops (either layout) or host-memory defaults, and the
// bookkeeping that releases every allocation and import on close and on failure paths.
#include <cstdlib>

#include "api/efa/casts.h"
#include "api/efa/efa.h"

namespace xpufab::efa {

namespace {

// Defaults for FI_HMEM_SYSTEM: device memory is host memory, imports are identity maps.
int host_alloc(uint64_t, uint64_t size, uint64_t alignment, uint64_t, void** addr, int* fd,
               uint64_t* offset) {
  if (!addr) return -FI_EINVAL;
  size_t al = alignment < 64 ? 64 : alignment;
  void* p = nullptr;
  if (posix_memalign(&p, al, size ? size : 1)) return -FI_ENOMEM;
  *addr = p;
  if (fd) *fd = -1;  // host memory has no dma-buf; the emulated NIC uses the address
  if (offset) *offset = 0;
  return 0;
}
int host_import(uint64_t, void* host_addr, uint64_t, uint64_t, void** dev_addr) {
  if (!dev_addr) return -FI_EINVAL;
  *dev_addr = host_addr;
  return 0;
}
void host_free(uint64_t, void* addr) { free(addr); }

int ctx_query(fid_xpu_ctx* c, fi_xpu_ctx_attr* attr) {
  EfaXpuCtx* x = to_xpu_ctx(c);
  if (!x || !attr) return -FI_EINVAL;
  // Device code polls a CQ ring in XPU memory, so XPU CQs (and the EPs that need one) exist only
  // where the device can place a CQ in external memory (rdma-core v59 efadv).
  attr->caps = 0;
  if (x->dom->attr.device_caps & backend::kCapCqWithExtMem)
    attr->caps |= FI_XPU_CAP_EP | FI_XPU_CAP_CQ;
  if (x->dom->attr.device_caps & backend::kCapCompCntr) attr->caps |= FI_XPU_CAP_CNTR;
  // The protocol fabric's exported endpoints run the core in device code: tagged messages and
  // atomics (efa-direct's have neither).
  if (x->dom->proto && (attr->caps & FI_XPU_CAP_EP)) attr->caps |= FI_XPU_CAP_TAGGED | FI_XPU_CAP_ATOMIC;
  attr->av_addr_size = sizeof(efa_xpu_peer);
  attr->mr_desc_size = sizeof(efa_xpu_desc);
  return 0;
}

int ctx_close(fid* f) {
  EfaXpuCtx* x = to_xpu_ctx(f);
  if (!x) return -FI_EINVAL;
  int rc = x->refs.try_close();
  if (rc) return rc;
  x->dom->refs.release();
  delete x;
  return 0;
}

fi_ops g_ctx_fi_ops = {sizeof(fi_ops), ctx_close, fi_no_bind, fi_no_control,
                       fi_no_ops_open, fi_no_tostr, fi_no_ops_set};
fi_ops_xpu_ctx g_ctx_ops = {sizeof(fi_ops_xpu_ctx), ctx_query};

}  // namespace

// XpuMem.allocated == true: from alloc(), released with free(). Otherwise imported; when the
// provider also owns the host block (imported state structs), fd is -2 and the block is freed.
int EfaXpuCtx::alloc_mem(size_t size, uint64_t flags, XpuMem* m) {
  *m = XpuMem{};
  void* addr = nullptr;
  int fd = -1;
  uint64_t off = 0;
  int rc = alloc(device, size, 64, flags, &addr, (flags & FI_XPU_ALLOC_DMABUF) ? &fd : nullptr,
                 (flags & FI_XPU_ALLOC_DMABUF) ? &off : nullptr);
  if (rc) return rc < 0 ? rc : -FI_ENOMEM;
  if (!addr) return -FI_ENOMEM;
  m->host = addr;
  m->dev = addr;
  m->size = size;
  m->fd = fd;
  m->offset = off;
  m->allocated = true;
  return 0;
}

int EfaXpuCtx::import_mem(void* host, size_t size, uint64_t flags, XpuMem* m) {
  *m = XpuMem{};
  bool own = false;
  if (!host) {
    if (posix_memalign(&host, 64, size ? size : 1)) return -FI_ENOMEM;
    own = true;
  }
  void* dev = nullptr;
  int rc = import_(device, host, size, flags, &dev);
  if (rc || !dev) {
    if (own) free(host);
    return rc < 0 ? rc : -FI_EINVAL;
  }
  m->host = host;
  m->dev = dev;
  m->size = size;
  m->fd = own ? -2 : -1;
  return 0;
}

void EfaXpuCtx::release(XpuMem* m) {
  if (!m->host) return;
  if (m->allocated) {
    free_(device, m->dev);
  } else {
    if (unimport) unimport(device, m->host);
    if (m->fd == -2) free(m->host);
  }
  *m = XpuMem{};
}

int xpu_ctx_open(fid_domain* domain, fi_xpu_attr* attr, fid_xpu_ctx** ctx_p, void* context) {
  if (!domain || !attr || !ctx_p) return -FI_EINVAL;
  EfaDomain* dom = to_domain(domain);
  if (!dom) return -FI_EINVAL;
  if (!dom->xpu) return -FI_EOPNOTSUPP;  // the domain was not opened with FI_XPU
  auto* x = new (std::nothrow) EfaXpuCtx();
  if (!x) return -FI_ENOMEM;
  x->iface = attr->iface;
  x->device = attr->device;
  if (!attr->ops) {
    if (attr->iface != FI_HMEM_SYSTEM) {
      delete x;
      return -FI_EOPNOTSUPP;  // no built-in allocator for device memory
    }
    x->alloc = host_alloc;
    x->import_ = host_import;
    x->free_ = host_free;
  } else if (attr->ops->size == sizeof(fi_xpu_ops)) {
    x->alloc = attr->ops->alloc;
    x->import_ = attr->ops->import;
    x->free_ = attr->ops->free;
  } else if (attr->ops->size == sizeof(fi_xpu_ops_unimport)) {
    // The size says the application passed the longer layout behind the fi_xpu_ops pointer.
    const auto* o = reinterpret_cast<const fi_xpu_ops_unimport*>(attr->ops);
    x->alloc = o->alloc;
    x->import_ = o->import;
    x->unimport = o->unimport;
    x->free_ = o->free;
  } else {
    delete x;
    return -FI_EINVAL;
  }
  if (!x->alloc || !x->import_ || !x->free_) {
    delete x;
    return -FI_EINVAL;
  }
  int rc = dom->refs.acquire();
  if (rc) {
    delete x;
    return rc;
  }
  x->dom = dom;
  x->ctx.fid.fclass = FI_CLASS_XPU_CTX;
  x->ctx.fid.context = context;
  x->ctx.fid.ops = &g_ctx_fi_ops;
  x->ctx.ops = &g_ctx_ops;
  *ctx_p = &x->ctx;
  return 0;
}

}  // namespace xpufab::efa
