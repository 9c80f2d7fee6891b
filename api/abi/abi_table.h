/*
 * One row per layout fact (struct size, field offset, constant value) that
 * libfabric 1.17 and our headers both define.  The same X-macro list
 * (abi_entries.inc) is expanded once against each header set, in separate
 * translation units, so the two tables always have the same rows in the
 * same order.
 */
#ifndef XPUFAB_API_ABI_ABI_TABLE_H
#define XPUFAB_API_ABI_ABI_TABLE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct abi_entry {
	const char *name;
	unsigned long long value;
};

/* Built against /usr/include/rdma (libfabric 1.17). */
const struct abi_entry *abi_table_system(size_t *count);
/* Built against api/include/rdma (ours). */
const struct abi_entry *abi_table_ours(size_t *count);

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_API_ABI_ABI_TABLE_H */
