/*
 * rdma/fi_xpu.h - host side of FI_XPU (libfabric 2.7): XPU contexts and the
 * device handles that let GPU/XPU code drive endpoints, CQs and counters.
 *
 * Flow: fi_getinfo(caps FI_XPU, mr_mode FI_MR_XPU_DESC) -> fi_domain ->
 * fi_xpu_ctx -> fi_xpu_ctx_query -> fi_cq_open / fi_cntr_open with xpu_ctx
 * -> fi_endpoint2(FI_XPU) with ep_attr->xpu_ctx, bind, enable ->
 * fi_{ep,cq,cntr}_export_xpu into caller-owned handles -> fi_av_lookup2 /
 * fi_mr_get_xpu_desc for raw address and MR bytes -> copy all to device
 * memory -> launch kernels that use rdma/fi_xpu_device.h.
 *
 * Unlike upstream, fi_xpu_ctx() and fi_xpu_ctx_query() check that the op is
 * inside the provider's table (`size`) and set, and return -FI_ENOSYS
 * otherwise.
 */
#ifndef FI_XPU_H
#define FI_XPU_H

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Scope of a device call: every work-item of the scope must make the same
 * call with the same arguments (CUDA thread / warp / block / device; SYCL
 * work-item / sub-group / work-group / device).
 */
enum {
	FI_XPU_WORK_ITEM = 0,
	FI_XPU_SUBGROUP = 1,
	FI_XPU_WORK_GROUP = 2,
	FI_XPU_DEVICE = 3,
};

/* fi_xpu_ops.alloc flag: return a dma-buf fd and offset for the region. */
#define FI_XPU_ALLOC_DMABUF (1ULL << 0)
/* fi_xpu_ops.import flags. */
#define FI_XPU_IMPORT_IOMEMORY (1ULL << 0)  /* region is PCIe BAR MMIO */
#define FI_XPU_IMPORT_DEVICEMAP (1ULL << 1) /* map it for device access */

/* fi_xpu_ctx_attr.caps: objects the context can export. */
#define FI_XPU_CAP_EP (1ULL << 0)
#define FI_XPU_CAP_CQ (1ULL << 1)
#define FI_XPU_CAP_CNTR (1ULL << 2)
/* Device calls an exported EP takes beyond fi_xpu_send/recv/read/write:
 * fi_xpu_tsend / fi_xpu_trecv, and fi_xpu_atomic / fi_xpu_fetch_atomic /
 * fi_xpu_compare_atomic.  These are extensions: they sit in the high bits
 * so that the low ones stay free for upstream's own capabilities (later
 * libfabric releases give 1ULL << 3 to FI_XPU_CAP_WR). */
#define FI_XPU_CAP_TAGGED (1ULL << 48)
#define FI_XPU_CAP_ATOMIC (1ULL << 49)

/* fid_xpu.prov_id values; dense from 1 so a switch becomes a jump table. */
enum fi_xpu_provider {
	FI_XPU_PROV_EFA = 1,
};

/*
 * Memory callbacks the provider uses to place its queues where the XPU can
 * reach them (the layout of the 2.7.0 fi_xpu(3) page, 32 bytes).
 *   alloc:  allocate `size` bytes of device memory aligned to `alignment`;
 *           with FI_XPU_ALLOC_DMABUF also return a dma-buf *fd / *offset.
 *   import: make host memory (or MMIO with FI_XPU_IMPORT_IOMEMORY)
 *           addressable by the device; *dev_addr is the device address.
 *   free:   release memory from alloc.
 * Each returns 0 or a negative FI_E* code.
 *
 * A later upstream revision inserted `unimport` before `free` (struct
 * fi_xpu_ops_unimport below, 40 bytes).  The two layouts are told apart only
 * by `size`: providers must read `unimport` only when size >= 40 and must
 * take `free` from the offset that matches `size`.
 */
struct fi_xpu_ops {
	size_t size;
	int (*alloc)(uint64_t device, uint64_t size, uint64_t alignment,
		     uint64_t flags, void **addr, int *fd, uint64_t *offset);
	int (*import)(uint64_t device, void *host_addr, uint64_t size,
		      uint64_t flags, void **dev_addr);
	void (*free)(uint64_t device, void *addr);
};

/* The later layout with `unimport`; accepted by this implementation. */
struct fi_xpu_ops_unimport {
	size_t size;
	int (*alloc)(uint64_t device, uint64_t size, uint64_t alignment,
		     uint64_t flags, void **addr, int *fd, uint64_t *offset);
	int (*import)(uint64_t device, void *host_addr, uint64_t size,
		      uint64_t flags, void **dev_addr);
	int (*unimport)(uint64_t device, void *host_addr);
	void (*free)(uint64_t device, void *addr);
};

/* fi_xpu_ctx() input.  ops == NULL selects the provider's default
 * allocator for `iface`. */
struct fi_xpu_attr {
	enum fi_hmem_iface iface;
	uint64_t device;
	struct fi_xpu_ops *ops;
};

/* fi_xpu_ctx_query() output (2.7 layout, 24 bytes; no size field, so it
 * cannot grow compatibly). */
struct fi_xpu_ctx_attr {
	uint64_t caps;         /* FI_XPU_CAP_* */
	size_t av_addr_size;   /* bytes fi_av_lookup2(FI_XPU) writes */
	size_t mr_desc_size;   /* bytes fi_mr_get_xpu_desc() writes */
};

struct fi_ops_xpu_ctx {
	size_t size;
	int (*query)(struct fid_xpu_ctx *ctx, struct fi_xpu_ctx_attr *attr);
};

/* An XPU context: ties a domain to one XPU.  fid.fclass is
 * FI_CLASS_XPU_CTX; closed with fi_close(). */
struct fid_xpu_ctx {
	struct fid fid;
	struct fi_ops_xpu_ctx *ops;
};

/*
 * Device handle header: what device code dispatches on.  fclass is
 * FI_CLASS_EP, FI_CLASS_CQ or FI_CLASS_CNTR; prov_ctx points to the
 * provider's device-visible state.  Handles are plain data: the
 * application allocates them, the export call fills them in, and the
 * application copies them to device memory.
 */
struct fid_xpu {
	uint32_t fclass;
	uint32_t prov_id;   /* enum fi_xpu_provider */
	uint64_t prov_ctx;
};

struct fid_xpu_ep {
	struct fid_xpu fid;
};

struct fid_xpu_cq {
	struct fid_xpu fid;
};

struct fid_xpu_cntr {
	struct fid_xpu fid;
};

/*
 * fi_xpu_ctx: creates an XPU context on `domain`.  Returns 0, -FI_ENOSYS
 * when the provider has no xpu_ctx op, -FI_EINVAL for a bad attr, or the
 * provider's error.
 */
static inline int fi_xpu_ctx(struct fid_domain *domain,
			     struct fi_xpu_attr *attr,
			     struct fid_xpu_ctx **ctx, void *context)
{
	return FI_CHECK_OP(domain->ops, struct fi_ops_domain, xpu_ctx) ?
		domain->ops->xpu_ctx(domain, attr, ctx, context) : -FI_ENOSYS;
}

/* fi_xpu_ctx_query: fills *attr (2.7 layout). */
static inline int fi_xpu_ctx_query(struct fid_xpu_ctx *ctx,
				   struct fi_xpu_ctx_attr *attr)
{
	return FI_CHECK_OP(ctx->ops, struct fi_ops_xpu_ctx, query) ?
		ctx->ops->query(ctx, attr) : -FI_ENOSYS;
}

#ifdef __cplusplus
}
#endif

#endif /* FI_XPU_H */
