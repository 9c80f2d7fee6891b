/*
 * xpu_func.h - the qualifier of every function the data path and the device
 * calls share between host compilers and nvcc. Valid C11, C++17 and CUDA.
 *
 *   XPU_FUNC         callable from host code and from CUDA device code
 *   XPU_DEVICE_FUNC  device code only under nvcc (the efa_xpu_* calls, which
 *                    use __shared__ memory, warp votes and %globaltimer);
 *                    an ordinary function for host compilers, so kernels run
 *                    on the host XPU
 *
 * The public FI_XPU_FUNC of rdma/fi_xpu_device.h is libfabric's and is
 * defined there.
 */
#ifndef XPUFAB_DEVICE_XPU_FUNC_H_
#define XPUFAB_DEVICE_XPU_FUNC_H_

#if defined(__CUDACC__)
#define XPU_FUNC __host__ __device__ static inline
#define XPU_DEVICE_FUNC __device__ static inline
#else
#define XPU_FUNC static inline
#define XPU_DEVICE_FUNC static inline
#endif

#endif /* XPUFAB_DEVICE_XPU_FUNC_H_ */
