/* Every public header in one C11 translation unit (built with -pedantic). */
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext.h>
#include <rdma/fi_profile.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_trigger.h>
#include <rdma/fi_xpu.h>
#include <rdma/fi_xpu_device.h>

#include "api/abi/all_headers_c11.h"

_Static_assert(__STDC_VERSION__ >= 201112L, "must be compiled as C11");

uint32_t all_headers_c11_version(void)
{
	return FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
}

int all_headers_c11_xpu_send(struct fid_xpu_ep *ep)
{
	return fi_xpu_send(ep, 0, 0, 0, 0, 0, 0, 0, FI_XPU_WORK_ITEM);
}

ssize_t all_headers_c11_barrier(struct fid_ep *ep)
{
	return fi_barrier(ep, 0, NULL);
}

ssize_t all_headers_c11_allreduce(struct fid_ep *ep, uint64_t *in, uint64_t *out)
{
	return fi_allreduce(ep, in, 1, NULL, out, NULL, 0, FI_UINT64, FI_SUM, 0,
			    NULL);
}

int all_headers_c11_profile_open(struct fid *fid)
{
	struct fid_profile *prof = NULL;
	return fi_profile_open(fid, 0, &prof, NULL);
}

size_t all_headers_c11_triggered_context_size(void)
{
	return sizeof(struct fi_triggered_context);
}
