// Handlers for the optional fid ops the provider's objects do not offer.
#include "api/efa/efa.h"

namespace xpufab::efa {

int fi_no_bind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }
int fi_no_control(fid*, int, void*) { return -FI_ENOSYS; }
int fi_no_ops_open(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
int fi_no_tostr(const fid*, char*, size_t) { return -FI_ENOSYS; }
int fi_no_ops_set(fid*, const char*, uint64_t, void*, void*) { return -FI_ENOSYS; }

}  // namespace xpufab::efa
