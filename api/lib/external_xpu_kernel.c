/* Built by install_test.sh outside Bazel: device code for the host XPU, compiled from the installed
 * headers (the EFA device implementation included) and launched through libxpufab.so. */
#include <rdma/fi_xpu_device.h>
#include <device/runtime/xpu_host_abi.h>
#include <stdio.h>

#if !FI_XPU_HAVE_EFA
#error "the installed headers should enable the EFA device implementation"
#endif

struct launch_state {
	unsigned seen[64];
	int unknown_provider_rc[64];
};

static void kernel(void *arg)
{
	struct launch_state *st = arg;
	const struct xpu_host_item *me = xpu_host_current();
	/* A handle no provider owns: every device call refuses it. */
	struct fid_xpu_cq cq = {{FI_CLASS_CQ, 0, 0}};
	struct fi_cq_entry entry;
	st->unknown_provider_rc[me->global_id] =
		(int)fi_xpu_cq_read(&cq, &entry, 1, FI_XPU_WORK_ITEM);
	uint64_t lane0 = xpu_host_subgroup_broadcast(me->lane == 0 ? me->global_id : 0, 0);
	st->seen[me->global_id] = (unsigned)lane0 + 1;
}

int main(void)
{
	struct launch_state st = {{0}, {0}};
	struct xpu_host_launch_attr attr = {4, 16, 8, 0};
	int ret = xpu_host_launch(&attr, kernel, &st);
	printf("launch %d\n", ret);
	unsigned ok = 0;
	for (unsigned i = 0; i < 64; ++i)
		ok += st.seen[i] == (i / 8) * 8 + 1 && st.unknown_provider_rc[i] == -FI_ENOSYS;
	printf("work-items %u\n", ok);
	return 0;
}
