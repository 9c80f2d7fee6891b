/*
 * xpu_scope_c11_check.h - a kernel written in C11 against the scope
 * primitives, so the test proves the headers are valid C and behave the
 * same from C.
 */
#ifndef XPUFAB_DEVICE_RUNTIME_XPU_SCOPE_C11_CHECK_H_
#define XPUFAB_DEVICE_RUNTIME_XPU_SCOPE_C11_CHECK_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What one work-item of the C kernel saw. */
struct xpu_c11_record {
	uint32_t rank[4];      /* xpu_scope_rank(scope) for scopes 0..3 */
	uint32_t size[4];      /* xpu_scope_size(scope) */
	int leader[4];         /* xpu_scope_is_leader(scope) */
	int supported[5];      /* xpu_scope_supported(scope), scope 4 unknown */
	int barrier_rc[5];     /* xpu_scope_barrier(scope) */
	uint64_t bcast[4];     /* xpu_scope_broadcast_u64(scope, 100*scope + device rank, 1) */
};

/* arg: struct xpu_c11_record[device size], indexed by device rank. */
void xpu_scope_c11_kernel(void *arg);

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_DEVICE_RUNTIME_XPU_SCOPE_C11_CHECK_H_ */
