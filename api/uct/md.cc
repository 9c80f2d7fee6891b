// Component "xpufab" and its memory domains: one MD per backend device (named after it, as UCX's
// ib component names an MD after its HCA), registration through the backend's MRs, rkeys that
// carry the 32-bit EFA remote key, and allocation of file-backed host memory.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "api/backend/backend.h"
#include "api/uct/srd.h"

namespace xpufab {
namespace uct {
namespace {

ucs_status_t status_of_errno(int rc) {
  switch (rc) {
    case 0:
      return UCS_OK;
    case -ENOMEM:
      return UCS_ERR_NO_MEMORY;
    case -ENODEV:
    case -ENOENT:
      return UCS_ERR_NO_DEVICE;
    case -EOPNOTSUPP:
      return UCS_ERR_UNSUPPORTED;
    case -EINVAL:
      return UCS_ERR_INVALID_PARAM;
    case -EBUSY:
      return UCS_ERR_BUSY;
    default:
      return UCS_ERR_IO_ERROR;
  }
}

ucs_status_t query_md_resources(uct_component_t*, uct_md_resource_desc_t** resources_p,
                                unsigned* num_p) {
  std::vector<backend::DeviceInfo> devs;
  std::string backend_name, why;
  if (list_devices(&backend_name, &devs, &why) != 0) devs.clear();
  auto* res = static_cast<uct_md_resource_desc_t*>(
      calloc(devs.empty() ? 1 : devs.size(), sizeof(uct_md_resource_desc_t)));
  if (!res) return UCS_ERR_NO_MEMORY;
  unsigned n = 0;
  for (const auto& d : devs) {
    if (d.name.size() >= UCT_MD_NAME_MAX) continue;  // cannot be named to UCX
    std::strncpy(res[n].md_name, d.name.c_str(), UCT_MD_NAME_MAX - 1);
    ++n;
  }
  *resources_p = res;
  *num_p = n;
  return UCS_OK;
}

void md_close(uct_md_h tl) {
  auto* md = reinterpret_cast<SrdMd*>(tl);
  release_device(md->dev);
  delete md;
}

ucs_status_t md_query(uct_md_h tl, uct_md_attr_t* attr) {
  auto* md = reinterpret_cast<SrdMd*>(tl);
  std::memset(attr, 0, sizeof(*attr));
  attr->cap.max_alloc = SIZE_MAX;
  attr->cap.max_reg = md->dev->attr.max_rdma_size ? SIZE_MAX : 0;
  attr->cap.flags = UCT_MD_FLAG_ALLOC | UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_MEMH |
                    UCT_MD_FLAG_NEED_RKEY | UCT_MD_FLAG_SOCKADDR;
  attr->cap.reg_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
  attr->cap.access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
  attr->cap.detect_mem_types = 0;
  attr->cap.alloc_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
  attr->reg_cost.c = 1e-6;   // a registration round trip to the device
  attr->reg_cost.m = 1e-10;  // pinning, per byte
  attr->rkey_packed_size = sizeof(PackedRkey);
  std::memset(&attr->local_cpus, 0xff, sizeof(attr->local_cpus));  // no NUMA affinity known
  return UCS_OK;
}

// The access a registration asks for: all that the device serves.
uint32_t device_access(const backend::DeviceAttr& d) {
  return backend::served_access(
      backend::kAccessLocalWrite | backend::kAccessRemoteWrite | backend::kAccessRemoteRead,
      d.device_caps);
}

ucs_status_t mem_reg(uct_md_h tl, void* address, size_t length, unsigned, uct_mem_h* memh_p) {
  auto* md = reinterpret_cast<SrdMd*>(tl);
  if (address == nullptr || length == 0) return UCS_ERR_INVALID_PARAM;
  backend::MrInitAttr a;
  a.addr = address;
  a.length = length;
  a.access = device_access(md->dev->attr);
  backend::Mr* mr = nullptr;
  int rc = md->dev->dev->reg_mr(md->dev->pd, a, &mr);
  if (rc) return status_of_errno(rc);
  mr_publish(md->dev, reinterpret_cast<uintptr_t>(address), length, mr->rkey());
  *memh_p = new SrdMemh{mr};
  return UCS_OK;
}

// Host memory in a memfd, mapped shared and registered by its descriptor (the dma-buf path of
// the backend): a device that reaches memory by mapping it (the emulator, whose peers then copy
// out of the file rather than through the kernel) gets the file; one that refuses the descriptor
// gets the mapping's address, as mem_reg would give it.
ucs_status_t mem_alloc(uct_md_h tl, size_t* length_p, void** address_p, ucs_memory_type_t mem_type,
                       unsigned, const char*, uct_mem_h* memh_p) {
  auto* md = reinterpret_cast<SrdMd*>(tl);
  if (length_p == nullptr || address_p == nullptr || memh_p == nullptr || *length_p == 0)
    return UCS_ERR_INVALID_PARAM;
  if (mem_type != UCS_MEMORY_TYPE_HOST) return UCS_ERR_UNSUPPORTED;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (*length_p > SIZE_MAX - page) return UCS_ERR_NO_MEMORY;
  const size_t len = (*length_p + page - 1) & ~(page - 1);
  const int fd = memfd_create("xpufab-uct", MFD_CLOEXEC);
  if (fd < 0) return UCS_ERR_NO_MEMORY;
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(len)) == 0)
    p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return UCS_ERR_NO_MEMORY;
  }
  backend::MrInitAttr a;
  a.length = len;
  a.iova = reinterpret_cast<uintptr_t>(p);
  a.dmabuf_fd = fd;
  a.dmabuf_offset = 0;
  a.access = device_access(md->dev->attr);
  backend::Mr* mr = nullptr;
  int rc = md->dev->dev->reg_mr(md->dev->pd, a, &mr);
  if (rc) {
    a.dmabuf_fd = -1;
    a.iova = 0;
    a.addr = p;
    rc = md->dev->dev->reg_mr(md->dev->pd, a, &mr);
  }
  close(fd);  // the mapping (and the device's, if it took the descriptor) keeps the file
  if (rc) {
    munmap(p, len);
    return status_of_errno(rc);
  }
  mr_publish(md->dev, reinterpret_cast<uintptr_t>(p), len, mr->rkey());
  auto* memh = new SrdMemh{mr};
  memh->alloc_addr = p;
  memh->alloc_len = len;
  *length_p = len;
  *address_p = p;
  *memh_p = memh;
  return UCS_OK;
}

ucs_status_t mem_free(uct_md_h tl, uct_mem_h memh_h) {
  auto* md = reinterpret_cast<SrdMd*>(tl);
  auto* memh = static_cast<SrdMemh*>(memh_h);
  if (memh == nullptr || memh->alloc_addr == nullptr) return UCS_ERR_INVALID_PARAM;
  mr_withdraw(md->dev, memh->mr->rkey());
  int rc = md->dev->dev->dereg_mr(memh->mr);
  if (rc) return status_of_errno(rc);
  munmap(memh->alloc_addr, memh->alloc_len);
  delete memh;
  return UCS_OK;
}

ucs_status_t mem_dereg(uct_md_h tl, const uct_md_mem_dereg_params_t* params) {
  auto* md = reinterpret_cast<SrdMd*>(tl);
  if (!(params->field_mask & XPUFAB_UCT_MD_MEM_DEREG_FIELD_MEMH) || params->memh == nullptr)
    return UCS_ERR_INVALID_PARAM;
  if ((params->field_mask & XPUFAB_UCT_MD_MEM_DEREG_FIELD_FLAGS) && params->flags != 0)
    return UCS_ERR_UNSUPPORTED;  // no invalidation (UCT_MD_FLAG_INVALIDATE is not advertised)
  auto* memh = static_cast<SrdMemh*>(params->memh);
  if (memh->alloc_addr != nullptr) return UCS_ERR_INVALID_PARAM;  // mem_alloc's: mem_free
  mr_withdraw(md->dev, memh->mr->rkey());
  int rc = md->dev->dev->dereg_mr(memh->mr);
  if (rc) return status_of_errno(rc);
  delete memh;
  return UCS_OK;
}

ucs_status_t mkey_pack(uct_md_h, uct_mem_h memh, const uct_md_mkey_pack_params_t*, void* buffer) {
  if (memh == nullptr) return UCS_ERR_INVALID_PARAM;
  PackedRkey p{kRkeyMagic, static_cast<SrdMemh*>(memh)->mr->rkey()};
  std::memcpy(buffer, &p, sizeof(p));
  return UCS_OK;
}

ucs_status_t detect_memory_type(uct_md_h, const void*, size_t, ucs_memory_type_t* type_p) {
  *type_p = UCS_MEMORY_TYPE_HOST;
  return UCS_OK;
}

int is_sockaddr_accessible(uct_md_h, const ucs_sock_addr_t* sockaddr, uct_sockaddr_accessibility_t mode) {
  return sockaddr_accessible(sockaddr, mode);
}

uct_md_ops_t g_md_ops = {
    md_close,
    md_query,
    mem_alloc,
    mem_free,
    nullptr,  // mem_advise: UCT_MD_FLAG_ADVISE is not advertised
    mem_reg,
    mem_dereg,
    nullptr,  // mem_query: host memory only, nothing to report
    mkey_pack,
    is_sockaddr_accessible,
    detect_memory_type,
};

ucs_status_t md_open(uct_component_t* component, const char* md_name, const uct_md_config_t*,
                     uct_md_h* md_p) {
  SharedDevice* dev = nullptr;
  int rc = acquire_device(md_name, &dev);
  if (rc) return status_of_errno(rc);
  auto* md = new SrdMd;
  md->super.ops = &g_md_ops;
  md->super.component = component;
  md->dev = dev;
  *md_p = &md->super;
  return UCS_OK;
}

ucs_status_t rkey_unpack(uct_component_t*, const void* buffer, uct_rkey_t* rkey_p,
                         void** handle_p) {
  PackedRkey p;
  std::memcpy(&p, buffer, sizeof(p));
  if (p.magic != kRkeyMagic) return UCS_ERR_INVALID_PARAM;
  *rkey_p = p.rkey;
  *handle_p = nullptr;
  return UCS_OK;
}

ucs_status_t rkey_ptr(uct_component_t*, uct_rkey_t, void*, uint64_t, void**) {
  return UCS_ERR_UNSUPPORTED;  // remote memory is never mapped here
}

ucs_status_t rkey_release(uct_component_t*, uct_rkey_t, void*) { return UCS_OK; }

void md_vfs_init(uct_md_h) {}

ucs_config_field_t g_md_config_table[] = {{nullptr, nullptr, nullptr, 0, {}}};

}  // namespace

uct_component_t g_component = {
    {'x', 'p', 'u', 'f', 'a', 'b', 0},
    query_md_resources,
    md_open,
    cm_open,
    rkey_unpack,
    rkey_ptr,
    rkey_release,
    {"xpufab memory domain", "XPUFAB_", g_md_config_table, sizeof(uct_md_config_t), {}},
    {"xpufab connection manager", "XPUFAB_CM_", uct_cm_config_table, sizeof(uct_cm_config_t), {}},
    {&g_component.tl_list, &g_component.tl_list},
    {nullptr, nullptr},
    UCT_COMPONENT_FLAG_CM,  // cm.cc
    md_vfs_init,
};

}  // namespace uct
}  // namespace xpufab
