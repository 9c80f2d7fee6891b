// The "hw" backend: the backend interface on real AWS EFA devices through rdma-core (libibverbs +
// libefa, loaded at run time by hw/rdma_loader.h). Every call maps onto one verbs/efadv call; the
// queue bytes are produced by device/ code writing into the rings efadv_query_qp_wqs and
// efadv_query_cq return.
//
// Differences from the emulator a caller may meet:
//  - Cq::event_fd() is the completion channel's fd. Wait for it to become readable, then call
//    Cq::arm(), which consumes and acknowledges pending events before re-arming. Do not read()
//    the fd yourself: libibverbs counts events and ibv_destroy_cq waits until each one is
//    acknowledged through it.
//  - Qp::detach_comp_cntr() is -EOPNOTSUPP: rdma-core detaches counters only when the QP is
//    destroyed.
//  - progress() returns 0 (the NIC needs nobody to drive it); QP errors raised asynchronously by
//    the device are not yet forwarded to the EventHandler (set_qp_failed() is).
#ifndef XPUFAB_HW_HW_BACKEND_H_
#define XPUFAB_HW_HW_BACKEND_H_

#include <memory>
#include <string>

#include "api/backend/backend.h"
#include "hw/rdma_loader.h"

namespace xpufab {
namespace hw {

// Name in the backend registry.
inline constexpr const char kBackendName[] = "hw";

// Whether the hardware backend can run here: 0, or -ENOENT (library missing), -ENOSYS (rdma-core
// older than v59), -ENODEV (no EFA device). *reason gets a one-line explanation when not 0.
int probe_hw(const LibraryNames& names, std::string* reason);

// Loads rdma-core and creates the backend; fails with probe_hw()'s codes except -ENODEV (a
// backend without devices enumerates none and open_device() gives -ENODEV).
int make_hw_backend(const LibraryNames& names, std::unique_ptr<backend::Backend>* backend_p,
                    std::string* reason);

// Builds the backend over an already resolved API: the loader's, or a fake rdma-core in tests.
std::unique_ptr<backend::Backend> make_hw_backend_for_api(std::shared_ptr<const RdmaApi> api);

}  // namespace hw
}  // namespace xpufab

#endif  // XPUFAB_HW_HW_BACKEND_H_
