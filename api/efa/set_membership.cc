// A host CQ's or counter's membership in the core's poll-set and wait-set registry (efa.h).
#include "api/core/pollable.h"
#include "api/core/wait_set.h"
#include "api/efa/efa.h"

namespace xpufab::efa {

int SetMembership::join(core::Pollable* p, fid_wait* set) {
  int rc = core::register_pollable(p);
  if (rc) return rc;
  registered = true;
  if (set != nullptr) {
    rc = core::wait_set_attach(set, p);
    if (rc) {
      core::unregister_pollable(p);
      registered = false;
      return rc;
    }
    wait_set = set;
  }
  return 0;
}

void SetMembership::leave(core::Pollable* p) {
  if (wait_set != nullptr) core::wait_set_detach(wait_set, p);
  wait_set = nullptr;
  if (registered) core::unregister_pollable(p);
  registered = false;
}

}  // namespace xpufab::efa
