// fi_xpu_ops for FI_HMEM_CUDA over the CUDA runtime, for XPU contexts whose kernels run on a GPU
// while the NIC (the emulated device, or one that reaches host memory) works on host memory:
//   alloc    cudaHostAlloc(mapped, portable): host memory the GPU addresses directly; requires
//            unified addressing (device address == host address), else -FI_EOPNOTSUPP. No
//            dma-buf: *fd = -1, *offset = 0.
//   import   cudaHostRegister(mapped, portable; + IoMemory for FI_XPU_IMPORT_IOMEMORY, falling
//            back to plain registration for host RAM) and cudaHostGetDevicePointer. A range inside
//            memory that is already registered or was allocated here is only translated.
//   unimport cudaHostUnregister of what import registered.
//   free     cudaFreeHost.
// No CUDA types here, so host-compiled code can use it. Each call returns 0 or -FI_E*.
#ifndef XPUFAB_TESTING_XPU_CUDA_XPU_OPS_H_
#define XPUFAB_TESTING_XPU_CUDA_XPU_OPS_H_

#include <rdma/fi_xpu.h>

#include <cstddef>

namespace xpufab::cuda {

// The callbacks, in the layout with `unimport` (size 40). Static storage; never NULL.
fi_xpu_ops_unimport* xpu_ops();

// Number of CUDA devices, or a negative cudaError_t when the runtime cannot tell.
int device_count();

// Mapped host memory for buffers and handles that GPU code reads (zeroed); nullptr on failure.
void* host_alloc(size_t bytes);
void host_free(void* p);

}  // namespace xpufab::cuda

#endif  // XPUFAB_TESTING_XPU_CUDA_XPU_OPS_H_
