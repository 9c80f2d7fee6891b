/* A program built against Debian's libfabric 1.17 headers and linked against
 * its libfabric.so.1, so it binds fi_getinfo/fi_dupinfo/fi_freeinfo@FABRIC_1.3
 * and fi_fabric@FABRIC_1.1; run on xpufab's library instead.  Its hints live
 * on the stack at the 1.17 sizes, so the library may read no further than
 * those structures end. */
#include <stdio.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

static int check(int ok, const char *what)
{
	if (!ok)
		printf("FAILED: %s\n", what);
	return ok ? 0 : 1;
}

int main(void)
{
	char prov[] = "efa";
	struct fi_fabric_attr fabric_attr;
	struct fi_domain_attr domain_attr;
	struct fi_ep_attr ep_attr;
	struct fi_tx_attr tx_attr;
	struct fi_info hints, *info = NULL, *dup;
	struct fid_fabric *fabric = NULL;
	int ret, bad = 0;

	memset(&fabric_attr, 0, sizeof(fabric_attr));
	memset(&domain_attr, 0, sizeof(domain_attr));
	memset(&ep_attr, 0, sizeof(ep_attr));
	memset(&tx_attr, 0, sizeof(tx_attr));
	memset(&hints, 0, sizeof(hints));
	fabric_attr.prov_name = prov;
	domain_attr.mr_mode = ~3;
	domain_attr.tclass = FI_TC_UNSPEC;
	ep_attr.type = FI_EP_RDM;
	tx_attr.tclass = FI_TC_UNSPEC;
	hints.caps = FI_MSG;
	hints.mode = ~0ULL;
	hints.fabric_attr = &fabric_attr;
	hints.domain_attr = &domain_attr;
	hints.ep_attr = &ep_attr;
	hints.tx_attr = &tx_attr;

	ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, &hints, &info);
	printf("getinfo %d\n", ret);
	if (ret)
		return 1;
	bad += check(strcmp(info->fabric_attr->prov_name, "efa") == 0, "provider efa");
	bad += check(strcmp(info->fabric_attr->name, "efa-direct") == 0, "fabric efa-direct");
	bad += check(info->ep_attr->type == FI_EP_RDM, "RDM endpoint");
	bad += check(info->domain_attr->name != NULL, "domain name");
	bad += check((info->caps & FI_MSG) != 0, "FI_MSG offered");

	/* A copy of the caller's short structures, then of the library's. */
	dup = fi_dupinfo(&hints);
	bad += check(dup && dup->ep_attr && dup->ep_attr->type == FI_EP_RDM, "dupinfo of hints");
	bad += check(dup && dup->fabric_attr && dup->fabric_attr->prov_name != prov &&
		     strcmp(dup->fabric_attr->prov_name, "efa") == 0, "dupinfo copies prov_name");
	fi_freeinfo(dup);
	dup = fi_dupinfo(info);
	bad += check(dup && strcmp(dup->domain_attr->name, info->domain_attr->name) == 0,
		     "dupinfo of an offer");
	fi_freeinfo(dup);
	dup = fi_allocinfo();
	bad += check(dup && dup->ep_attr && dup->domain_attr && dup->fabric_attr, "allocinfo");
	fi_freeinfo(dup);

	ret = fi_fabric(info->fabric_attr, &fabric, NULL);
	bad += check(ret == 0 && fabric, "fabric opens");
	if (!ret)
		bad += check(fi_close(&fabric->fid) == 0, "fabric closes");

	ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, NULL, NULL);
	bad += check(ret == -FI_EINVAL, "NULL info pointer is -FI_EINVAL");
	fi_freeinfo(info);
	printf("%s\n", bad ? "old_abi_app: FAILED" : "old_abi_app: OK");
	return bad ? 1 : 0;
}
