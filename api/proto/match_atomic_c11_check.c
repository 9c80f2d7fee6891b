/*
 * Builds match.h and atomic.h as strict C11 (-pedantic-errors) and runs a
 * little of each, so a construct only C++ accepts fails the build and a
 * C-only miscompile fails the test.
 */
#include "api/proto/match_atomic_c11_check.h"

#include "api/proto/match.h"

int proto_c11_check_match(void) {
  struct proto_match_entry pool[4];
  struct proto_match m;
  struct proto_match_hit h;
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
