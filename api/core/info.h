/*
 * api/core/info.h - helpers for building and copying fi_info lists.
 *
 * Everything here allocates with malloc/calloc/strdup, as fi_freeinfo()
 * releases with free(): applications may hang their own strdup()ed strings
 * off a hints structure and free it with fi_freeinfo(), as with libfabric.
 */
#ifndef XPUFAB_API_CORE_INFO_H_
#define XPUFAB_API_CORE_INFO_H_

#include <rdma/fabric.h>

namespace xpufab::core {

// A zeroed fid_nic with device, bus and link attributes allocated and the
// core's ops (close frees it, control(FI_DUP) deep-copies it).  prov_attr is
// copied by pointer on duplication and never freed by the core.  Returns
// nullptr when out of memory.
struct fid_nic* nic_alloc();

// Deep copy of one nic (nullptr in, nullptr out; nullptr on ENOMEM).
struct fid_nic* nic_dup(const struct fid_nic* nic);

// Frees a nic made by nic_alloc/nic_dup.
void nic_free(struct fid_nic* nic);

// Copies one fi_info (not the list behind ->next) into a fresh structure.
// nullptr -> all attribute structs allocated and zeroed (fi_allocinfo).
// Returns nullptr when out of memory.
struct fi_info* dup_one_info(const struct fi_info* info);

// Replaces *dst with a malloc()ed copy of src (nullptr allowed).  Returns
// false when out of memory, leaving *dst unchanged.
bool replace_string(char** dst, const char* src);

}  // namespace xpufab::core

#endif  // XPUFAB_API_CORE_INFO_H_
