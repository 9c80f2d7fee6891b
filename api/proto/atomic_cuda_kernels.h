/*
 * Launchers for the GPU test of atomic.h (atomic_cuda_kernels.cu). Plain C++
 * declarations so the test builds with the host compiler.
 */
#ifndef XPUFAB_API_PROTO_ATOMIC_CUDA_KERNELS_H_
#define XPUFAB_API_PROTO_ATOMIC_CUDA_KERNELS_H_

#include <cstddef>
#include <cstdint>

/* Number of CUDA devices, or a negative CUDA error code. */
int proto_atomic_cuda_device_count();

/* Host memory mapped into the GPU (cudaHostAlloc, mapped); nullptr on failure. */
void* proto_atomic_cuda_host_alloc(size_t bytes);
void proto_atomic_cuda_host_free(void* p);

/*
 * n GPU threads (blocks of 128) each run proto_atomic_execute(kind, op,
 * datatype) on one element: thread i targets target + (i % lanes) * size with
 * operand + i * size, compare + i * size, and writes result + i * size and
 * rc[i]. Buffers are host-mapped. 0 or a CUDA error code.
 */
int proto_atomic_cuda_race(int kind, int op, int datatype, size_t size, uint32_t lanes, uint32_t n, void* target,
                           const void* operand, const void* compare, void* result, int* rc);

/* One GPU thread runs proto_atomic_execute over `count` elements. 0 or a CUDA error code; *rc its result. */
int proto_atomic_cuda_execute(int kind, int op, int datatype, void* target, const void* operand, const void* compare,
                              void* result, size_t count, int* rc);

#endif /* XPUFAB_API_PROTO_ATOMIC_CUDA_KERNELS_H_ */
