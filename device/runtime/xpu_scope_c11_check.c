#include "device/runtime/xpu_scope_c11_check.h"

#include "device/runtime/xpu_scope.h"

void xpu_scope_c11_kernel(void *arg) {
	struct xpu_c11_record *rec = (struct xpu_c11_record *)arg + xpu_device_rank();
	int scope;
	for (scope = 0; scope < 4; ++scope) {
		rec->rank[scope] = xpu_scope_rank(scope);
		rec->size[scope] = xpu_scope_size(scope);
		rec->leader[scope] = xpu_scope_is_leader(scope);
	}
	for (scope = 0; scope < 5; ++scope) {
		rec->supported[scope] = xpu_scope_supported(scope);
		rec->barrier_rc[scope] = xpu_scope_barrier(scope);
	}
	for (scope = 0; scope < 4; ++scope)
		rec->bcast[scope] = xpu_scope_broadcast_u64(scope, 100u * (uint64_t)scope + xpu_device_rank(), 1);
}
