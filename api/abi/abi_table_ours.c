/* The ABI table compiled against our headers (api/include/rdma). */
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

#if FI_MAJOR_VERSION != 2 || FI_MINOR_VERSION != 7
#error "abi_table_ours must be built against the xpufab headers"
#endif

#include "api/abi/abi_table.h"
#include "api/abi/abi_table_expand.inc"

const struct abi_entry *abi_table_ours(size_t *count)
{
	*count = sizeof(kTable) / sizeof(kTable[0]);
	return kTable;
}
