/*
 * Launchers for the data-path GPU test (efa_dp_cuda_kernels.cu). Plain C++
 * declarations so the test itself builds with the host compiler.
 */
#ifndef XPUFAB_DEVICE_EFA_DP_CUDA_KERNELS_H_
#define XPUFAB_DEVICE_EFA_DP_CUDA_KERNELS_H_

#include <cstdint>

struct efa_sq;
struct efa_cq;

/* Number of CUDA devices, or a negative CUDA error code. */
int efa_dp_cuda_device_count();

/* Host memory mapped into the GPU (cudaHostAlloc, mapped); nullptr on failure. */
void* efa_dp_cuda_host_alloc(size_t bytes);
void efa_dp_cuda_host_free(void* p);

/*
 * n GPU threads (blocks of 64) each post one SEND with context = sge.addr =
 * their global index, retrying on -FI_EAGAIN. 0 or a CUDA error code; errors
 * from the data path are counted into *errors.
 */
int efa_dp_cuda_post_sends(efa_sq* sq, uint32_t n, uint32_t* errors);

/*
 * n GPU threads poll `cq` until `n` completions are consumed in total; each
 * completion goes to efa_sq_complete and its context is recorded in
 * seen[context] (incremented). 0 or a CUDA error code.
 */
int efa_dp_cuda_poll_completions(efa_cq* cq, efa_sq* sq, uint32_t n, uint32_t* seen, uint32_t* errors);

#endif /* XPUFAB_DEVICE_EFA_DP_CUDA_KERNELS_H_ */
