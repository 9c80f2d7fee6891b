/* The ABI table compiled against Debian's libfabric 1.17 headers.  This
 * target has no dependency on //api:headers, so <rdma/...> resolves to
 * /usr/include/rdma; the guard below fails the build if it ever does not. */
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_trigger.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_ext.h>
#include <rdma/providers/fi_log.h>

#if FI_MAJOR_VERSION != 1 || FI_MINOR_VERSION != 17
#error "abi_table_system must be built against libfabric 1.17 headers"
#endif

#include "api/abi/abi_table.h"
#include "api/abi/abi_table_expand.inc"

const struct abi_entry *abi_table_system(size_t *count)
{
	*count = sizeof(kTable) / sizeof(kTable[0]);
	return kTable;
}
