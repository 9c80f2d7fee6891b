/* Compiles the growing peer table as strict C11, the subset of the core it is written in. */
#include "api/proto/grow.h"

size_t grow_c11_check_mem_size(const struct proto_config *c, uint32_t n);
size_t grow_c11_check_mem_size(const struct proto_config *c, uint32_t n) { return proto_grow_mem_size(c, n); }
