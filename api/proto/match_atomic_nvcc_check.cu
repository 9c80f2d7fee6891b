// match.h and atomic.h compiled by nvcc for sm_90 and called from device code, so a construct
// the device cannot run (host-only calls, 16-byte CAS paths) fails the build. Nothing here runs.
#include "api/proto/atomic.h"
#include "api/proto/match.h"

namespace {

__global__ void match_kernel(proto_match* m, proto_match_entry* pool, int* out) {
  proto_match_hit h;
  out[0] = proto_match_init(m, pool, 16);
  out[1] = proto_match_post_recv(m, 1, 0, PROTO_ADDR_ANY, 7, &h);
  out[2] = proto_match_arrive(m, 1, 3, 8, &h);
  out[3] = proto_match_peek(m, 1, 0, 3, PROTO_MATCH_PEEK_CLAIM, &h);
  out[4] = proto_match_claim(m, 8, &h) + proto_match_discard(m, 8, &h) + proto_match_cancel(m, 7, &h);
  out[5] = proto_match_remove(m, proto_match_find_posted(m, 1, 3), &h);
  out[6] = static_cast<int>(proto_match_find_unexpected(m, 1, 0, 3) + proto_match_find_claimed(m, 8) +
                            proto_match_posted_count(m) + proto_match_unexpected_count(m) + proto_match_free_count(m));
}

// Every kind, op and datatype, so each width's path (sub-word, 32, 64, 128 bits) is instantiated.
__global__ void atomic_kernel(void* target, const void* operand, const void* compare, void* result, int64_t* out) {
  int64_t acc = 0;
  for (int kind = PROTO_ATOMIC_PLAIN; kind <= PROTO_ATOMIC_COMPARE; kind++)
    for (int op = FI_MIN; op <= FI_MSWAP; op++)
      for (int dt = FI_INT8; dt <= FI_UINT128; dt++) {
        acc += proto_atomic_valid(kind, op, dt, 4096);
        acc += proto_atomic_execute(kind, op, dt, target, operand, compare, result, 1);
      }
  out[0] = acc + static_cast<int64_t>(proto_atomic_datatype_size(FI_DOUBLE_COMPLEX));
}

}  // namespace

void* xpufab_proto_nvcc_check_match_kernel() { return reinterpret_cast<void*>(&match_kernel); }
void* xpufab_proto_nvcc_check_atomic_kernel() { return reinterpret_cast<void*>(&atomic_kernel); }
