/*
 * xpu_host_abi.h - the C entry points of the host XPU runtime.
 *
 * The host XPU runs a kernel on CPU threads, each work-group a set of
 * fibers on a thread of its own, with the scope semantics of a GPU (see device/runtime/host_xpu.h for the C++
 * launch API and the full contract). Kernels do not call these functions
 * directly: they use the portable xpu_* scope primitives of
 * device/runtime/xpu_scope.h, which forward here on the host.
 *
 * Every function may be called from any thread. A thread that the runtime
 * did not launch is a launch of one work-item: every id is 0, every size is
 * 1, barriers return at once and broadcasts return their own value.
 *
 * Valid C11 and C++; no CUDA constructs, so nvcc's host pass may include it.
 */
#ifndef XPUFAB_DEVICE_RUNTIME_XPU_HOST_ABI_H_
#define XPUFAB_DEVICE_RUNTIME_XPU_HOST_ABI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Most work-items one launch may have (grid * work-group size). */
#define XPU_HOST_MAX_WORK_ITEMS 4096u
/* Largest work-group (as on CUDA). */
#define XPU_HOST_MAX_WORKGROUP_SIZE 1024u
/* Largest subgroup (the widest GPU wavefront). */
#define XPU_HOST_MAX_SUBGROUP_SIZE 64u
/* Subgroup size used when a launch asks for 0. */
#define XPU_HOST_DEFAULT_SUBGROUP_SIZE 32u

/*
 * The ids of one work-item. All ids are 0-based; every "size"/"num" field is
 * at least 1. For a launch: global_id = workgroup_id * workgroup_size +
 * local_id, subgroup_id = local_id / subgroup_size, lane = local_id %
 * subgroup_size.
 */
struct xpu_host_item {
	uint32_t global_id;      /* rank among all work-items of the launch */
	uint32_t global_size;    /* work-items in the launch */
	uint32_t workgroup_id;   /* which work-group */
	uint32_t num_workgroups; /* work-groups in the launch (the grid) */
	uint32_t local_id;       /* rank within the work-group */
	uint32_t workgroup_size; /* work-items per work-group */
	uint32_t subgroup_id;    /* which subgroup of the work-group */
	uint32_t num_subgroups;  /* subgroups per work-group */
	uint32_t lane;           /* rank within the subgroup */
	uint32_t subgroup_size;  /* work-items per subgroup */
	uint32_t cooperative;    /* 1: FI_XPU_DEVICE scope is usable */
};

/*
 * The calling thread's ids. Never NULL: a thread the runtime did not launch
 * gets a static item of one work-item (cooperative = 1). The pointer stays
 * valid while the calling work-item runs.
 */
const struct xpu_host_item *xpu_host_current(void);

/* 1 if the calling thread may use `scope` (XPU_SCOPE_* / FI_XPU_*), else 0. */
int xpu_host_scope_supported(int scope);

/*
 * Barriers and broadcasts of one scope. Every remaining work-item of the
 * scope must call the same function (a work-item that has returned from the
 * kernel no longer counts). A barrier is an acquire/release point: writes
 * made before it by any member are visible to every member after it. A
 * broadcast is a barrier that returns the `value` passed by the member whose
 * rank in the scope equals `src` modulo the scope's size (0 if that member
 * has returned). A device barrier or broadcast in a launch that is not
 * cooperative synchronizes nothing and returns `value`; check
 * xpu_host_scope_supported() first.
 */
void xpu_host_subgroup_barrier(void);
uint64_t xpu_host_subgroup_broadcast(uint64_t value, uint32_t src);
void xpu_host_workgroup_barrier(void);
uint64_t xpu_host_workgroup_broadcast(uint64_t value, uint32_t src);
void xpu_host_device_barrier(void);
uint64_t xpu_host_device_broadcast(uint64_t value, uint32_t src);

/*
 * One step of a spin wait (what xpu_relax() of device/xpu_prims.h calls on
 * the host). On a work-item it runs the other work-items of its work-group
 * that can run (they share one thread) and comes back; when none can, it
 * pauses the CPU and every 16th call gives the core away (sched_yield).
 * Elsewhere it gives the core away.
 */
void xpu_host_relax(void);

/* xpu_host_launch_attr.flags: DEVICE scope unavailable (like a CUDA launch
 * that is not cooperative), so device code can test its error path. */
#define XPU_HOST_LAUNCH_NONCOOPERATIVE (1u << 0)

struct xpu_host_launch_attr {
	uint32_t grid;           /* number of work-groups, >= 1 */
	uint32_t workgroup_size; /* work-items per work-group, >= 1 */
	uint32_t subgroup_size;  /* divides workgroup_size; 0 = default (32) */
	uint32_t flags;          /* XPU_HOST_LAUNCH_* */
};

/*
 * Runs kernel(arg) on grid * workgroup_size work-items, all of them set up
 * (stacks, threads) before any runs the kernel, and returns when all have
 * returned.
 * Returns 0; -FI_EINVAL (-22) for a NULL attr or kernel, a zero size, a
 * subgroup size that does not divide the work-group size or exceeds 64, a
 * work-group above 1024, or unknown flags; -FI_E2BIG (-7) for more than
 * XPU_HOST_MAX_WORK_ITEMS work-items; -FI_EAGAIN (-11) if the threads could
 * not be created or -FI_ENOMEM (-12) if the stacks could not be had (the
 * kernel then ran nowhere). Nothing runs on error.
 */
int xpu_host_launch(const struct xpu_host_launch_attr *attr, void (*kernel)(void *arg), void *arg);

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_DEVICE_RUNTIME_XPU_HOST_ABI_H_ */
