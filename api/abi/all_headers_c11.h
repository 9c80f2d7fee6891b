/* Entry points of the C11 all-headers translation unit. */
#ifndef XPUFAB_API_ABI_ALL_HEADERS_C11_H
#define XPUFAB_API_ABI_ALL_HEADERS_C11_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fid_xpu_ep;
uint32_t all_headers_c11_version(void);
int all_headers_c11_xpu_send(struct fid_xpu_ep *ep);

#ifdef __cplusplus
}
#endif

#endif
