// Compiles the growing peer table with nvcc for sm_90, from a kernel that grows a table.
#include "api/proto/grow.h"

__global__ void grow_nvcc_check_peers(struct proto_ep *ep, uint32_t n, void *mem, size_t len, int *rc) {
  if (threadIdx.x == 0) *rc = proto_grow_peers(ep, n, mem, len, ep->rx_lkey);
}
