// Compiles the protocol core with nvcc for sm_90, from a kernel that runs its progress function.
#include "api/proto/proto.h"

__global__ void proto_nvcc_check_progress(struct proto_ep *ep, struct proto_comp *out) {
  if (threadIdx.x == 0) proto_progress(ep, out, 1);
}
