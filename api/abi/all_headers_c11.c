/* Every public header in one C11 translation unit (built with -pedantic). */
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
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
