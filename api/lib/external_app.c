/* Built by install_test.sh outside Bazel, against an installed prefix only. */
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_xpu.h>
#include <stdio.h>

/* Fails to compile against libfabric 1.17's headers, which lack FI_XPU. */
_Static_assert(FI_XPU == (1ULL << 44), "FI_XPU from the 2.7 headers");

int main(void)
{
	uint32_t v = fi_version();
	printf("version %u.%u\n", FI_MAJOR(v), FI_MINOR(v));

	struct fi_info *hints = fi_allocinfo();
	if (!hints)
		return 1;
	hints->caps = FI_MSG | FI_XPU;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY | FI_MR_XPU_DESC;
	struct fi_info *info = NULL;
	int ret = fi_getinfo(FI_VERSION(2, 7), NULL, NULL, 0, hints, &info);
	printf("getinfo %s\n", ret == 0 ? "ok" : ret == -FI_ENODATA ? "nodata" : "error");
	if (ret == 0)
		printf("provider %s %s xpu_ctx_cnt %zu\n", info->fabric_attr->prov_name,
		       info->fabric_attr->name, info->domain_attr->max_xpu_ctx_cnt);
	fi_freeinfo(info);

	ret = fi_getinfo(FI_VERSION(2, 8), NULL, NULL, 0, hints, &info);
	printf("newer %s\n", fi_strerror(-ret));
	printf("strerror %s\n", fi_strerror(-FI_ENODATA));

	uint64_t caps = FI_MSG | FI_XPU;
	printf("tostr %s\n", fi_tostr(&caps, FI_TYPE_CAPS));
	fi_freeinfo(hints);
	return 0;
}
