#include "api/core/trywait.h"

#include <rdma/fi_errno.h>

#include "api/core/eq.h"
#include "api/core/wait_set.h"

namespace xpufab::core {

bool trywait_core_fid(fid* f, int* rc) {
  if (is_eq(f)) {
    *rc = eq_trywait(f);
    return true;
  }
  if (is_wait_set(f)) {
    *rc = wait_set_trywait(f);
    return true;
  }
  return false;
}

int trywait(fid_fabric*, fid** fids, int count) {
  if (!fids || count <= 0) return -FI_EINVAL;
  for (int i = 0; i < count; ++i) {
    int rc;
    if (!trywait_core_fid(fids[i], &rc)) return -FI_EINVAL;
    if (rc) return rc;
  }
  return 0;
}

}  // namespace xpufab::core
