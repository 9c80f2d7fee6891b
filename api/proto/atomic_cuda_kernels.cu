// atomic.h executed by GPU threads on host-mapped memory (sm_90): the device
// half of atomic_cuda_test.cc.
#include "api/proto/atomic_cuda_kernels.h"

#include <cuda_runtime.h>

#include "api/proto/atomic.h"

namespace {

__global__ void race_kernel(int kind, int op, int datatype, size_t size, uint32_t lanes, uint32_t n, uint8_t* target,
                            const uint8_t* operand, const uint8_t* compare, uint8_t* result, int* rc) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  rc[i] = proto_atomic_execute(kind, op, datatype, target + (i % lanes) * size, operand ? operand + i * size : nullptr,
                               compare ? compare + i * size : nullptr, result ? result + i * size : nullptr, 1);
}

__global__ void execute_kernel(int kind, int op, int datatype, void* target, const void* operand, const void* compare,
                               void* result, size_t count, int* rc) {
  *rc = proto_atomic_execute(kind, op, datatype, target, operand, compare, result, count);
}

template <typename T>
T* dev(T* p) {
  void* d = nullptr;
  if (!p || cudaHostGetDevicePointer(&d, const_cast<void*>(static_cast<const void*>(p)), 0) != cudaSuccess)
    return nullptr;
  return static_cast<T*>(d);
}

}  // namespace

int proto_atomic_cuda_device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  return e == cudaSuccess ? n : -static_cast<int>(e);
}

void* proto_atomic_cuda_host_alloc(size_t bytes) {
  void* p = nullptr;
  return cudaHostAlloc(&p, bytes, cudaHostAllocMapped) == cudaSuccess ? p : nullptr;
}

void proto_atomic_cuda_host_free(void* p) { cudaFreeHost(p); }

int proto_atomic_cuda_race(int kind, int op, int datatype, size_t size, uint32_t lanes, uint32_t n, void* target,
                           const void* operand, const void* compare, void* result, int* rc) {
  race_kernel<<<(n + 127) / 128, 128>>>(kind, op, datatype, size, lanes, n, dev(static_cast<uint8_t*>(target)),
                                        dev(static_cast<const uint8_t*>(operand)),
                                        dev(static_cast<const uint8_t*>(compare)), dev(static_cast<uint8_t*>(result)),
                                        dev(rc));
  return static_cast<int>(cudaDeviceSynchronize());
}

int proto_atomic_cuda_execute(int kind, int op, int datatype, void* target, const void* operand, const void* compare,
                              void* result, size_t count, int* rc) {
  execute_kernel<<<1, 1>>>(kind, op, datatype, dev(target), dev(operand), dev(compare), dev(result), count, dev(rc));
  return static_cast<int>(cudaDeviceSynchronize());
}
