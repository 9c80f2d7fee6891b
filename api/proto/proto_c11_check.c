/* Compiles the protocol core as strict C11: the headers must stay inside the subset device code uses. */
#include "api/proto/proto.h"

size_t proto_c11_check_mem_size(const struct proto_config *c, const struct proto_dev *d);
size_t proto_c11_check_mem_size(const struct proto_config *c, const struct proto_dev *d) {
  return proto_ep_mem_size(c, d);
}
