// Registers the "hw" backend. probe() tells the three absence cases apart in the log, at warn
// level, so that FI_EFA_BACKEND=hw failing with -FI_ENODATA always has a visible reason.
#include <cerrno>
#include <string>

#include "api/backend/backend.h"
#include "api/core/log.h"
#include "hw/hw_backend.h"

namespace xpufab {
namespace hw {
namespace {

int probe() {
  std::string reason;
  int rc = probe_hw(LibraryNames(), &reason);
  if (rc != 0) {
    const char* what = rc == -ENOENT   ? "rdma-core library missing"
                       : rc == -ENOSYS ? "rdma-core too old"
                       : rc == -ENODEV ? "no EFA device"
                                       : "unavailable";
    XPUFAB_WARN("efa", ::xpufab::core::LogSubsys::kCore, "hw backend: %s: %s", what,
                reason.c_str());
  }
  return rc;
}

int open(std::unique_ptr<backend::Backend>* backend_p) {
  std::string reason;
  int rc = make_hw_backend(LibraryNames(), backend_p, &reason);
  if (rc != 0) {
    XPUFAB_WARN("efa", ::xpufab::core::LogSubsys::kCore, "hw backend: %s", reason.c_str());
  }
  return rc;
}

constexpr backend::BackendFactory kFactory = {kBackendName, probe, open};

}  // namespace

XPUFAB_REGISTER_BACKEND(hw_backend_registered, kFactory, backend::kPriorityHardware);

}  // namespace hw
}  // namespace xpufab
