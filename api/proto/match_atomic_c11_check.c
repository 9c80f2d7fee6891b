/*
 * Builds match.h and atomic.h as strict C11 (-pedantic-errors) and runs a
 * little of each, so a construct only C++ accepts fails the build and a
 * C-only miscompile fails the test.
 */
#include "api/proto/match_atomic_c11_check.h"

#include "api/proto/atomic.h"
#include "api/proto/match.h"

int proto_c11_check_match(void) {
  struct proto_match_entry pool[4];
  struct proto_match m;
  struct proto_match_hit h = {0, 0, 0, 0};
  int bad = 0;
  if (proto_match_init(&m, pool, 4) != 0) return 1;
  bad |= proto_match_post_recv(&m, 0x10, 0x0f, PROTO_ADDR_ANY, 1, &h) != 0;
  bad |= proto_match_arrive(&m, 0x20, 3, 2, &h) != 0;
  bad |= proto_match_arrive(&m, 0x1f, 3, 3, &h) != 1 || h.cookie != 1;
  bad |= proto_match_peek(&m, 0x20, 0, 3, PROTO_MATCH_PEEK_CLAIM, &h) != 1 || h.cookie != 2;
  bad |= proto_match_claim(&m, 2, &h) != 0;
  bad |= proto_match_free_count(&m) != 4;
  return bad;
}

int proto_c11_check_atomic(void) {
  _Alignas(4) uint8_t bytes[4] = {1, 2, 3, 4};
  uint64_t word = 5;
  float cx[2] = {1.0f, 2.0f};
  const uint8_t add8 = 250;
  const uint64_t cmp = 5, swap = 9;
  const float mul[2] = {0.0f, 1.0f};
  uint64_t old = 0;
  int bad = 0;
  bad |= proto_atomic_execute(PROTO_ATOMIC_PLAIN, FI_SUM, FI_UINT8, &bytes[1], &add8, 0, 0, 1) != 0;
  bad |= bytes[0] != 1 || bytes[1] != 252 || bytes[2] != 3 || bytes[3] != 4;
  bad |= proto_atomic_execute(PROTO_ATOMIC_COMPARE, FI_CSWAP, FI_UINT64, &word, &swap, &cmp, &old, 1) != 0;
  bad |= old != 5 || word != 9;
  /* (1 + 2i) * i = -2 + i */
  bad |= proto_atomic_execute(PROTO_ATOMIC_PLAIN, FI_PROD, FI_FLOAT_COMPLEX, cx, mul, 0, 0, 1) != 0;
  bad |= cx[0] != -2.0f || cx[1] != 1.0f;
  bad |= proto_atomic_valid(PROTO_ATOMIC_PLAIN, FI_SUM, FI_LONG_DOUBLE, 64) != -FI_EOPNOTSUPP;
#if defined(XPU_HAVE_CAS_U128)
  {
    _Alignas(16) xpu_u128 big = ((xpu_u128)1 << 64) - 1;
    const xpu_u128 one = 1;
    bad |= proto_atomic_execute(PROTO_ATOMIC_PLAIN, FI_SUM, FI_UINT128, &big, &one, 0, 0, 1) != 0;
    bad |= big != ((xpu_u128)1 << 64);
  }
#endif
  return bad;
}
