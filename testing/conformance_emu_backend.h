// Backend "emu_test" for the conformance suite: one emulated device whose generation and engine
// mode a test chooses (the profiles FI_EFA_EMU_PROFILE names cover shipped generations only; a
// device with RDMA write but without unsolicited write-recv, or without an engine thread, is
// made here), and a hook that fails a QP the provider created, as a device failure would.
#ifndef XPUFAB_TESTING_CONFORMANCE_EMU_BACKEND_H_
#define XPUFAB_TESTING_CONFORMANCE_EMU_BACKEND_H_

#include <cstdint>

#include "emu/profile.h"

namespace xpufab::testing {

inline constexpr const char* kEmuTestBackend = "emu_test";

// Takes effect for the next device the backend opens (the provider opens it on fi_getinfo /
// fi_domain and closes it when the last domain closes).
void set_emu_test_device(const emu::Profile& profile, bool engine_thread);

// Moves the QP created last on the open device to the error state with `status`
// (efa_io_comp_status), flushing its work and calling the provider's failure handler.
// -ENODEV when no device or QP exists.
int fail_last_qp(int status);

}  // namespace xpufab::testing

#endif  // XPUFAB_TESTING_CONFORMANCE_EMU_BACKEND_H_
