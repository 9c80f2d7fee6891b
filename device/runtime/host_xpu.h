// host_xpu.h - the host XPU: runs device kernels on CPU threads with the
// scope semantics of a GPU.
//
// A launch has `grid` work-groups of `workgroup_size` work-items, each
// work-group split into subgroups of `subgroup_size` (default 32) lanes.
// Each work-group runs on an OS thread of its own (the caller's for
// work-group 0, kept pool threads for the others), its work-items being
// fibers of that thread that take turns: a work-item runs until it waits at
// a barrier or broadcast of any scope, or spins with xpu_relax(), and
// another of its group runs meanwhile. All work-items exist before any runs
// the kernel, so:
// - a kernel may spin on a flag another work-group sets, however it spins:
//   the setter's thread is scheduled by the OS;
// - a kernel may spin on a flag another work-item of its own work-group
//   sets if it spins with xpu_relax() (device/xpu_prims.h), which lets the
//   setter run; a spin that never calls it (or that sleeps in the OS)
//   holds the whole work-group's thread;
// - FI_XPU_DEVICE scope (a barrier over the whole grid) is safe: every
//   work-item of the launch is co-resident, as in a cooperative CUDA launch.
//
// Kernels use the portable primitives of device/runtime/xpu_scope.h (ids,
// barriers, broadcasts); C++ kernels may also read the WorkItem they are
// passed. Barriers and broadcasts are acquire/release points that
// ThreadSanitizer understands (fiber switches are annotated for it and for
// AddressSanitizer), and a waiting work-item costs no CPU: its thread runs
// the others or sleeps. A work-item that returns leaves every barrier of
// its scopes, so `if (id >= n) return;` before a barrier does not hang.
// Thread-locals are per work-group, not per work-item: a kernel must not
// hold a thread-affine resource (a mutex) across a barrier or xpu_relax().
//
// A thread the runtime did not launch is a launch of one work-item: ids 0,
// sizes 1, barriers return at once, broadcasts return their own value, and
// all four scopes are supported. So FI_XPU_WORK_ITEM calls (and trivially
// the others) work from any host thread.
//
// Limits (violations are rejected before any work-item starts): at most
// kMaxWorkItems work-items per launch, kMaxWorkgroupSize per work-group,
// subgroup size 1..kMaxSubgroupSize dividing the work-group size. Launches
// may run concurrently and may be nested (a work-item may launch a kernel;
// the new work-items are a separate launch, and the launching work-item's
// group waits for it). Each work-item has a stack of `stack_size` bytes
// with a guard page below it.
#ifndef XPUFAB_DEVICE_RUNTIME_HOST_XPU_H_
#define XPUFAB_DEVICE_RUNTIME_HOST_XPU_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "device/runtime/xpu_host_abi.h"

namespace xpufab::runtime {

inline constexpr uint32_t kMaxWorkItems = XPU_HOST_MAX_WORK_ITEMS;
inline constexpr uint32_t kMaxWorkgroupSize = XPU_HOST_MAX_WORKGROUP_SIZE;
inline constexpr uint32_t kMaxSubgroupSize = XPU_HOST_MAX_SUBGROUP_SIZE;
inline constexpr uint32_t kDefaultSubgroupSize = XPU_HOST_DEFAULT_SUBGROUP_SIZE;
inline constexpr size_t kDefaultStackSize = size_t{512} << 10;

struct LaunchConfig {
  uint32_t grid = 1;                              // work-groups
  uint32_t workgroup_size = 1;                    // work-items per work-group
  uint32_t subgroup_size = kDefaultSubgroupSize;  // must divide workgroup_size
  bool cooperative = true;                        // false: no FI_XPU_DEVICE scope
  size_t stack_size = kDefaultStackSize;          // per work-item; 64 KiB .. 64 MiB
};

// The calling work-item's ids (see xpu_host_item for the field meanings).
using WorkItem = xpu_host_item;

using Kernel = std::function<void(const WorkItem&)>;

// Checks a launch configuration without running anything. Returns 0,
// -FI_EINVAL (a zero or oversized dimension, a subgroup size that does not
// divide the work-group size, a stack outside 64 KiB .. 64 MiB) or
// -FI_E2BIG (more than kMaxWorkItems work-items).
[[nodiscard]] int validate_launch(const LaunchConfig& config);

// Runs `kernel` once per work-item and returns when every work-item has
// returned. Thread-safe. Returns 0; the validate_launch() errors, or
// -FI_EINVAL for an empty kernel (nothing runs then); -FI_ENOMEM or
// -FI_EAGAIN if the launch's memory (stacks) or threads could not be had
// (the kernel then runs nowhere); -FI_EOTHER if
// a work-item let an exception escape (that work-item stops there and leaves
// its barriers; the others run to completion).
[[nodiscard]] int launch(const LaunchConfig& config, const Kernel& kernel);

// The calling thread's work-item, or nullptr on a thread the runtime did
// not launch (xpu_host_current() then returns the one-work-item default).
const WorkItem* current_work_item();

}  // namespace xpufab::runtime

#endif  // XPUFAB_DEVICE_RUNTIME_HOST_XPU_H_
