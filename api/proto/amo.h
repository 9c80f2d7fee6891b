/*
 * amo.h - atomics executed at the target endpoint. Host and nvcc; valid C11
 * and C++17. Include api/proto/proto.h, not this file.
 */
#ifndef XPUFAB_API_PROTO_AMO_H_
#define XPUFAB_API_PROTO_AMO_H_

#include "api/proto/core.h"

#ifdef __cplusplus
extern "C" {
#endif

XPU_FUNC int proto_amo_handle(struct proto_ep *ep, uint32_t peer, const struct proto_hdr *h, const uint8_t *payload) {
  (void)ep;
  (void)peer;
  (void)h;
  (void)payload;
  return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_API_PROTO_AMO_H_ */
