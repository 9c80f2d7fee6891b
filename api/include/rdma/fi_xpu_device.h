/*
 * rdma/fi_xpu_device.h - device side of FI_XPU (libfabric 2.7).
 *
 * Data-transfer, CQ and counter calls made by XPU (GPU) code on the handles
 * that fi_{ep,cq,cntr}_export_xpu() filled in and the application copied to
 * device memory.  `desc` and `dest_addr`/`src_addr` are the raw bytes from
 * fi_mr_get_xpu_desc() and fi_av_lookup2(FI_XPU), also in device memory.
 * `scope` (FI_XPU_WORK_ITEM ... FI_XPU_DEVICE) names the group of
 * work-items that make the call together; all of them pass the same handle,
 * scope and flags (for efa, data transfers may differ in buffers, lengths,
 * addresses and contexts: each work-item posts its own operation, see
 * rdma/fi_xpu_device_efa.h).  Immediate data is `data` with
 * FI_REMOTE_CQ_DATA in `flags`.
 *
 * Each call dispatches on the handle's prov_id.  Providers plug in through
 * an include hook: when FI_XPU_HAVE_EFA is nonzero, <rdma/fi_xpu_device_efa.h>
 * is included and must define efa_xpu_<op>() with the argument list of
 * fi_xpu_<op>() for every call below.  With no provider compiled in (or an
 * unknown prov_id), operations return -FI_ENOSYS, cntr_read/cntr_readerr
 * return 0 and cntr_wait returns at once.
 *
 * Compiles as CUDA (nvcc), HIP (hipcc), SYCL device code and plain host
 * C/C++; the host form lets kernels run on CPU threads.
 */
#ifndef FI_XPU_DEVICE_H
#define FI_XPU_DEVICE_H

#include <rdma/fi_xpu.h>

#if defined(__CUDACC__) || (defined(__HIP_DEVICE_COMPILE__) && __HIP_DEVICE_COMPILE__)
#define FI_XPU_FUNC __device__ static inline
#elif defined(__HIPCC__)
/* hipcc's host pass must see the same functions as its device pass. */
#define FI_XPU_FUNC __device__ static inline
#else
/* SYCL device code and host builds: ordinary inline functions. */
#define FI_XPU_FUNC static inline
#endif

/*
 * The efa device implementation needs xpufab's device headers
 * (<xpufab/efa_xpu/efa_xpu.h> and the data path it builds on, installed
 * under include/xpufab/, which pkg-config's Cflags put on the include path).
 * It is on by default wherever they are reachable, off for HIP and SYCL (no
 * data-path primitives there yet); -DFI_XPU_HAVE_EFA=0/1 overrides.
 */
#ifndef FI_XPU_HAVE_EFA
#if defined(__HIPCC__) || defined(SYCL_LANGUAGE_VERSION) || defined(__SYCL_DEVICE_ONLY__)
#define FI_XPU_HAVE_EFA 0
#elif defined(__has_include)
#if __has_include(<xpufab/efa_xpu/efa_xpu.h>)
#define FI_XPU_HAVE_EFA 1
#else
#define FI_XPU_HAVE_EFA 0
#endif
#else
#define FI_XPU_HAVE_EFA 0
#endif
#endif

#if FI_XPU_HAVE_EFA
#include <rdma/fi_xpu_device_efa.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

FI_XPU_FUNC int fi_xpu_write(struct fid_xpu_ep *ep,
		const void *buf,
		size_t len,
		void *desc,
		uint64_t data,
		void *dest_addr,
		uint64_t addr,
		uint64_t key,
		void *context,
		uint64_t flags,
		int scope)
{
	switch (ep->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_write(ep, buf, len, desc, data, dest_addr, addr, key, context, flags, scope);
#endif
	default:
	(void)ep;
	(void)buf;
	(void)len;
	(void)desc;
	(void)data;
	(void)dest_addr;
	(void)addr;
	(void)key;
	(void)context;
	(void)flags;
	(void)scope;
		return -FI_ENOSYS;
	}
}

FI_XPU_FUNC int fi_xpu_read(struct fid_xpu_ep *ep,
		void *buf,
		size_t len,
		void *desc,
		void *src_addr,
		uint64_t addr,
		uint64_t key,
		void *context,
		uint64_t flags,
		int scope)
{
	switch (ep->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_read(ep, buf, len, desc, src_addr, addr, key, context, flags, scope);
#endif
	default:
	(void)ep;
	(void)buf;
	(void)len;
	(void)desc;
	(void)src_addr;
	(void)addr;
	(void)key;
	(void)context;
	(void)flags;
	(void)scope;
		return -FI_ENOSYS;
	}
}

FI_XPU_FUNC int fi_xpu_send(struct fid_xpu_ep *ep,
		const void *buf,
		size_t len,
		void *desc,
		uint64_t data,
		void *dest_addr,
		void *context,
		uint64_t flags,
		int scope)
{
	switch (ep->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_send(ep, buf, len, desc, data, dest_addr, context, flags, scope);
#endif
	default:
	(void)ep;
	(void)buf;
	(void)len;
	(void)desc;
	(void)data;
	(void)dest_addr;
	(void)context;
	(void)flags;
	(void)scope;
		return -FI_ENOSYS;
	}
}

FI_XPU_FUNC int fi_xpu_recv(struct fid_xpu_ep *ep,
		void *buf,
		size_t len,
		void *desc,
		void *src_addr,
		void *context,
		uint64_t flags,
		int scope)
{
	switch (ep->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_recv(ep, buf, len, desc, src_addr, context, flags, scope);
#endif
	default:
	(void)ep;
	(void)buf;
	(void)len;
	(void)desc;
	(void)src_addr;
	(void)context;
	(void)flags;
	(void)scope;
		return -FI_ENOSYS;
	}
}

FI_XPU_FUNC int fi_xpu_tsend(struct fid_xpu_ep *ep,
		const void *buf,
		size_t len,
		void *desc,
		uint64_t data,
		void *dest_addr,
		uint64_t tag,
		void *context,
		uint64_t flags,
		int scope)
{
	switch (ep->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_tsend(ep, buf, len, desc, data, dest_addr, tag, context, flags, scope);
#endif
	default:
	(void)ep;
	(void)buf;
	(void)len;
	(void)desc;
	(void)data;
	(void)dest_addr;
	(void)tag;
	(void)context;
	(void)flags;
	(void)scope;
		return -FI_ENOSYS;
	}
}

FI_XPU_FUNC int fi_xpu_trecv(struct fid_xpu_ep *ep,
		void *buf,
		size_t len,
		void *desc,
		void *src_addr,
		uint64_t tag,
		uint64_t ignore,
		void *context,
		uint64_t flags,
		int scope)
{
	switch (ep->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_trecv(ep, buf, len, desc, src_addr, tag, ignore, context, flags, scope);
#endif
	default:
	(void)ep;
	(void)buf;
	(void)len;
	(void)desc;
	(void)src_addr;
	(void)tag;
	(void)ignore;
	(void)context;
	(void)flags;
	(void)scope;
		return -FI_ENOSYS;
	}
}

FI_XPU_FUNC int fi_xpu_atomic(struct fid_xpu_ep *ep,
		const void *buf,
		size_t count,
		void *desc,
		void *dest_addr,
		uint64_t addr,
		uint64_t key,
		int datatype,
		int op,
		void *context,
		uint64_t flags,
		int scope)
{
	switch (ep->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_atomic(ep, buf, count, desc, dest_addr, addr, key, datatype, op, context, flags, scope);
#endif
	default:
	(void)ep;
	(void)buf;
	(void)count;
	(void)desc;
	(void)dest_addr;
	(void)addr;
	(void)key;
	(void)datatype;
	(void)op;
	(void)context;
	(void)flags;
	(void)scope;
		return -FI_ENOSYS;
	}
}

FI_XPU_FUNC int fi_xpu_fetch_atomic(struct fid_xpu_ep *ep,
		const void *buf,
		size_t count,
		void *desc,
		void *result,
		void *result_desc,
		void *dest_addr,
		uint64_t addr,
		uint64_t key,
		int datatype,
		int op,
		void *context,
		uint64_t flags,
		int scope)
{
	switch (ep->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_fetch_atomic(ep, buf, count, desc, result, result_desc, dest_addr, addr, key, datatype, op, context, flags, scope);
#endif
	default:
	(void)ep;
	(void)buf;
	(void)count;
	(void)desc;
	(void)result;
	(void)result_desc;
	(void)dest_addr;
	(void)addr;
	(void)key;
	(void)datatype;
	(void)op;
	(void)context;
	(void)flags;
	(void)scope;
		return -FI_ENOSYS;
	}
}

FI_XPU_FUNC int fi_xpu_compare_atomic(struct fid_xpu_ep *ep,
		const void *buf,
		size_t count,
		void *desc,
		const void *compare,
		void *compare_desc,
		void *result,
		void *result_desc,
		void *dest_addr,
		uint64_t addr,
		uint64_t key,
		int datatype,
		int op,
		void *context,
		uint64_t flags,
		int scope)
{
	switch (ep->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_compare_atomic(ep, buf, count, desc, compare, compare_desc, result, result_desc, dest_addr, addr, key, datatype, op, context, flags, scope);
#endif
	default:
	(void)ep;
	(void)buf;
	(void)count;
	(void)desc;
	(void)compare;
	(void)compare_desc;
	(void)result;
	(void)result_desc;
	(void)dest_addr;
	(void)addr;
	(void)key;
	(void)datatype;
	(void)op;
	(void)context;
	(void)flags;
	(void)scope;
		return -FI_ENOSYS;
	}
}

FI_XPU_FUNC uint64_t fi_xpu_cntr_read(struct fid_xpu_cntr *cntr,
		int scope)
{
	switch (cntr->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_cntr_read(cntr, scope);
#endif
	default:
	(void)cntr;
	(void)scope;
		return 0;
	}
}

FI_XPU_FUNC uint64_t fi_xpu_cntr_readerr(struct fid_xpu_cntr *cntr,
		int scope)
{
	switch (cntr->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_cntr_readerr(cntr, scope);
#endif
	default:
	(void)cntr;
	(void)scope;
		return 0;
	}
}

FI_XPU_FUNC void fi_xpu_cntr_wait(struct fid_xpu_cntr *cntr,
		uint64_t threshold,
		int timeout,
		int scope)
{
	switch (cntr->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		efa_xpu_cntr_wait(cntr, threshold, timeout, scope);
		return;
#endif
	default:
	(void)cntr;
	(void)threshold;
	(void)timeout;
	(void)scope;
		return;
	}
}

FI_XPU_FUNC int fi_xpu_cntr_add(struct fid_xpu_cntr *cntr,
		uint64_t value,
		int scope)
{
	switch (cntr->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_cntr_add(cntr, value, scope);
#endif
	default:
	(void)cntr;
	(void)value;
	(void)scope;
		return -FI_ENOSYS;
	}
}

FI_XPU_FUNC int fi_xpu_cntr_set(struct fid_xpu_cntr *cntr,
		uint64_t value,
		int scope)
{
	switch (cntr->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_cntr_set(cntr, value, scope);
#endif
	default:
	(void)cntr;
	(void)value;
	(void)scope;
		return -FI_ENOSYS;
	}
}

FI_XPU_FUNC int fi_xpu_cntr_adderr(struct fid_xpu_cntr *cntr,
		uint64_t value,
		int scope)
{
	switch (cntr->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_cntr_adderr(cntr, value, scope);
#endif
	default:
	(void)cntr;
	(void)value;
	(void)scope;
		return -FI_ENOSYS;
	}
}

FI_XPU_FUNC int fi_xpu_cntr_seterr(struct fid_xpu_cntr *cntr,
		uint64_t value,
		int scope)
{
	switch (cntr->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_cntr_seterr(cntr, value, scope);
#endif
	default:
	(void)cntr;
	(void)value;
	(void)scope;
		return -FI_ENOSYS;
	}
}

FI_XPU_FUNC int64_t fi_xpu_cq_read(struct fid_xpu_cq *cq,
		void *buf,
		size_t count,
		int scope)
{
	switch (cq->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_cq_read(cq, buf, count, scope);
#endif
	default:
	(void)cq;
	(void)buf;
	(void)count;
	(void)scope;
		return -FI_ENOSYS;
	}
}

FI_XPU_FUNC int64_t fi_xpu_cq_readfrom(struct fid_xpu_cq *cq,
		void *buf,
		size_t count,
		void *src_addr,
		int scope)
{
	switch (cq->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_cq_readfrom(cq, buf, count, src_addr, scope);
#endif
	default:
	(void)cq;
	(void)buf;
	(void)count;
	(void)src_addr;
	(void)scope;
		return -FI_ENOSYS;
	}
}

FI_XPU_FUNC int64_t fi_xpu_cq_readerr(struct fid_xpu_cq *cq,
		void *buf,
		uint64_t flags,
		int scope)
{
	switch (cq->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_cq_readerr(cq, buf, flags, scope);
#endif
	default:
	(void)cq;
	(void)buf;
	(void)flags;
	(void)scope;
		return -FI_ENOSYS;
	}
}

FI_XPU_FUNC int64_t fi_xpu_cq_sread(struct fid_xpu_cq *cq,
		void *buf,
		size_t count,
		uint64_t threshold,
		int scope)
{
	switch (cq->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_cq_sread(cq, buf, count, threshold, scope);
#endif
	default:
	(void)cq;
	(void)buf;
	(void)count;
	(void)threshold;
	(void)scope;
		return -FI_ENOSYS;
	}
}

FI_XPU_FUNC int64_t fi_xpu_cq_sreadfrom(struct fid_xpu_cq *cq,
		void *buf,
		size_t count,
		void *src_addr,
		uint64_t threshold,
		int scope)
{
	switch (cq->fid.prov_id) {
#if FI_XPU_HAVE_EFA
	case FI_XPU_PROV_EFA:
		return efa_xpu_cq_sreadfrom(cq, buf, count, src_addr, threshold, scope);
#endif
	default:
	(void)cq;
	(void)buf;
	(void)count;
	(void)src_addr;
	(void)threshold;
	(void)scope;
		return -FI_ENOSYS;
	}
}

#ifdef __cplusplus
}
#endif

#endif /* FI_XPU_DEVICE_H */
