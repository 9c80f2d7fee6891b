// host_xpu_testing.h - test seams of the host XPU runtime. Not for
// production code.
#ifndef XPUFAB_DEVICE_RUNTIME_HOST_XPU_TESTING_H_
#define XPUFAB_DEVICE_RUNTIME_HOST_XPU_TESTING_H_

#include <cstdint>

namespace xpufab::runtime {

// Makes every later launch fail to start its work-item number n (0-based)
// and all after it, as if the system were out of threads or stacks; the
// launch then returns -FI_EAGAIN having run nothing. n < 0 turns it off.
// Process-wide: tests using it must not run launches concurrently.
void fail_thread_start_after_for_testing(int n);

// How many launches, process-wide, were built afresh (ids, barriers, stacks)
// rather than reusing the calling thread's previous one of the same shape.
uint64_t launches_built_for_testing();

}  // namespace xpufab::runtime

#endif  // XPUFAB_DEVICE_RUNTIME_HOST_XPU_TESTING_H_
