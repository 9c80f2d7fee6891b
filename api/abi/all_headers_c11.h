/* Entry points of the C11 all-headers translation unit. */
#ifndef XPUFAB_API_ABI_ALL_HEADERS_C11_H
#define XPUFAB_API_ABI_ALL_HEADERS_C11_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fid;
struct fid_ep;
struct fid_xpu_ep;
uint32_t all_headers_c11_version(void);
int all_headers_c11_xpu_send(struct fid_xpu_ep *ep);
/* Collective and profile calls on objects that do not offer them. */
ssize_t all_headers_c11_barrier(struct fid_ep *ep);
ssize_t all_headers_c11_allreduce(struct fid_ep *ep, uint64_t *in, uint64_t *out);
int all_headers_c11_profile_open(struct fid *fid);
size_t all_headers_c11_triggered_context_size(void);

#ifdef __cplusplus
}
#endif

#endif
