// fi_xpu_ops for FI_HMEM_CUDA (see cuda_xpu_ops.h).
#include "testing/xpu/cuda_xpu_ops.h"

#include <cuda_runtime.h>
#include <rdma/fi_errno.h>

#include <cstring>
#include <mutex>
#include <set>

namespace xpufab::cuda {
namespace {

std::mutex g_mu;
std::set<void*> g_registered;  // host addresses import registered (unimport unregisters them)

int to_fi(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return 0;
    case cudaErrorMemoryAllocation: return -FI_ENOMEM;
    case cudaErrorInvalidValue: return -FI_EINVAL;
    case cudaErrorNotSupported: return -FI_EOPNOTSUPP;
    default: return -FI_EIO;
  }
}

int use_device(uint64_t device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || device >= static_cast<uint64_t>(n)) return -FI_ENODEV;
  return to_fi(cudaSetDevice(static_cast<int>(device)));
}

int ops_alloc(uint64_t device, uint64_t size, uint64_t alignment, uint64_t, void** addr, int* fd,
              uint64_t* offset) {
  if (!addr || alignment > 4096) return -FI_EINVAL;
  int rc = use_device(device);
  if (rc) return rc;
  void* p = nullptr;
  rc = to_fi(cudaHostAlloc(&p, size ? size : 1, cudaHostAllocMapped | cudaHostAllocPortable));
  if (rc) return rc;
  void* d = nullptr;
  if (cudaHostGetDevicePointer(&d, p, 0) != cudaSuccess || d != p) {
    cudaFreeHost(p);
    return -FI_EOPNOTSUPP;  // the provider uses one address on both sides
  }
  memset(p, 0, size ? size : 1);
  *addr = p;
  if (fd) *fd = -1;
  if (offset) *offset = 0;
  return 0;
}

int ops_import(uint64_t device, void* host, uint64_t size, uint64_t flags, void** dev) {
  if (!host || !dev) return -FI_EINVAL;
  int rc = use_device(device);
  if (rc) return rc;
  const unsigned base = cudaHostRegisterMapped | cudaHostRegisterPortable;
  cudaError_t e = cudaErrorInvalidValue;
  if (flags & FI_XPU_IMPORT_IOMEMORY) {
    e = cudaHostRegister(host, size, base | cudaHostRegisterIoMemory);
    if (e != cudaSuccess && e != cudaErrorHostMemoryAlreadyRegistered) (void)cudaGetLastError();
  }
  if (e != cudaSuccess && e != cudaErrorHostMemoryAlreadyRegistered) e = cudaHostRegister(host, size, base);
  if (e == cudaSuccess) {
    std::lock_guard<std::mutex> g(g_mu);
    g_registered.insert(host);
  } else if (e == cudaErrorHostMemoryAlreadyRegistered) {
    (void)cudaGetLastError();  // inside a registered or cudaHostAlloc'ed range: translate only
  } else {
    return to_fi(e);
  }
  return to_fi(cudaHostGetDevicePointer(dev, host, 0));
}

int ops_unimport(uint64_t device, void* host) {
  {
    std::lock_guard<std::mutex> g(g_mu);
    if (!g_registered.erase(host)) return 0;
  }
  int rc = use_device(device);
  if (rc) return rc;
  return to_fi(cudaHostUnregister(host));
}

void ops_free(uint64_t device, void* addr) {
  if (use_device(device) == 0) cudaFreeHost(addr);
}

fi_xpu_ops_unimport g_ops = {sizeof(fi_xpu_ops_unimport), ops_alloc, ops_import, ops_unimport, ops_free};

}  // namespace

fi_xpu_ops_unimport* xpu_ops() { return &g_ops; }

int device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  return e == cudaSuccess ? n : -static_cast<int>(e);
}

void* host_alloc(size_t bytes) {
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
    return nullptr;
  memset(p, 0, bytes ? bytes : 1);
  return p;
}

void host_free(void* p) {
  if (p) cudaFreeHost(p);
}

}  // namespace xpufab::cuda
