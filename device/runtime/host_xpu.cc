// The host XPU runtime: one thread per work-item, blocking scope barriers.
#include "device/runtime/host_xpu.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "device/runtime/group_barrier.h"
#include "device/runtime/host_xpu_testing.h"
#include "device/runtime/xpu_scope.h"
#include "rdma/fi_errno.h"

namespace xpufab::runtime {
namespace {

constexpr size_t kMinStackSize = size_t{64} << 10;
constexpr size_t kMaxStackSize = size_t{64} << 20;

// Test seam: when >= 0, thread creations after this many in a launch fail.
std::atomic<int> g_fail_thread_start_after{-1};

struct Launch;

// One work-item: its ids and the barriers of its three collective scopes.
struct ItemState {
  WorkItem item{};
  GroupBarrier* subgroup = nullptr;
  GroupBarrier* workgroup = nullptr;
  GroupBarrier* device = nullptr;  // nullptr: launch is not cooperative
  Launch* launch = nullptr;
};

struct Launch {
  const Kernel* kernel = nullptr;
  std::deque<GroupBarrier> subgroups;
  std::deque<GroupBarrier> workgroups;
  std::unique_ptr<GroupBarrier> device;
  std::vector<ItemState> items;

  // No work-item runs the kernel before every thread exists, so a failed
  // thread creation can still cancel the launch and device scope is safe.
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool gate_open = false;  // guarded by gate_mu
  bool aborted = false;    // guarded by gate_mu

  std::atomic<bool> kernel_threw{false};
};

thread_local const ItemState* t_item = nullptr;

// What a thread the runtime did not launch sees: a launch of one.
constexpr WorkItem kPlainItem = {
    /*global_id=*/0, /*global_size=*/1,    /*workgroup_id=*/0, /*num_workgroups=*/1,
    /*local_id=*/0,  /*workgroup_size=*/1, /*subgroup_id=*/0,  /*num_subgroups=*/1,
    /*lane=*/0,      /*subgroup_size=*/1,  /*cooperative=*/1,
};

void leave_scopes(const ItemState& st) {
  st.subgroup->arrive_and_drop();
  st.workgroup->arrive_and_drop();
  if (st.device != nullptr) st.device->arrive_and_drop();
}

void* work_item_main(void* arg) {
  auto* st = static_cast<ItemState*>(arg);
  Launch& launch = *st->launch;
  {
    std::unique_lock<std::mutex> lock(launch.gate_mu);
    launch.gate_cv.wait(lock, [&] { return launch.gate_open; });
    if (launch.aborted) return nullptr;
  }
  t_item = st;
  try {
    (*launch.kernel)(st->item);
  } catch (...) {
    launch.kernel_threw.store(true, std::memory_order_relaxed);
  }
  t_item = nullptr;
  leave_scopes(*st);
  return nullptr;
}

void open_gate(Launch& launch, bool abort) {
  std::lock_guard<std::mutex> lock(launch.gate_mu);
  launch.gate_open = true;
  launch.aborted = abort;
  launch.gate_cv.notify_all();
}

size_t round_to_pages(size_t bytes) {
  long page = sysconf(_SC_PAGESIZE);
  size_t p = page > 0 ? static_cast<size_t>(page) : 4096;
  return (bytes + p - 1) / p * p;
}

// Builds the ids and barriers; may throw std::bad_alloc.
void build_launch(const LaunchConfig& cfg, const Kernel& kernel, Launch& launch) {
  const uint32_t wg = cfg.workgroup_size;
  const uint32_t sg = cfg.subgroup_size;
  const uint32_t sg_per_wg = wg / sg;
  const uint32_t total = cfg.grid * wg;
  launch.kernel = &kernel;
  for (uint32_t i = 0; i < cfg.grid * sg_per_wg; ++i) launch.subgroups.emplace_back(sg);
  for (uint32_t i = 0; i < cfg.grid; ++i) launch.workgroups.emplace_back(wg);
  if (cfg.cooperative) launch.device = std::make_unique<GroupBarrier>(total);
  launch.items.resize(total);
  for (uint32_t g = 0; g < total; ++g) {
    ItemState& st = launch.items[g];
    WorkItem& it = st.item;
    it.global_id = g;
    it.global_size = total;
    it.workgroup_id = g / wg;
    it.num_workgroups = cfg.grid;
    it.local_id = g % wg;
    it.workgroup_size = wg;
    it.subgroup_id = it.local_id / sg;
    it.num_subgroups = sg_per_wg;
    it.lane = it.local_id % sg;
    it.subgroup_size = sg;
    it.cooperative = cfg.cooperative ? 1 : 0;
    st.subgroup = &launch.subgroups[it.workgroup_id * sg_per_wg + it.subgroup_id];
    st.workgroup = &launch.workgroups[it.workgroup_id];
    st.device = launch.device.get();
    st.launch = &launch;
  }
}

int run_launch(const LaunchConfig& cfg, Launch& launch) {
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return -FI_EAGAIN;
  if (pthread_attr_setstacksize(&attr, round_to_pages(cfg.stack_size)) != 0) {
    pthread_attr_destroy(&attr);
    return -FI_EINVAL;
  }
  std::vector<pthread_t> threads;
  threads.reserve(launch.items.size());
  int rc = 0;
  for (ItemState& st : launch.items) {
    pthread_t tid;
    const int fail_after = g_fail_thread_start_after.load(std::memory_order_relaxed);
    const bool injected = fail_after >= 0 && threads.size() >= static_cast<size_t>(fail_after);
    if (injected || pthread_create(&tid, &attr, work_item_main, &st) != 0) {
      std::fprintf(stderr, "host_xpu: could not start work-item %zu of %zu; launch cancelled\n",
                   threads.size(), launch.items.size());
      rc = -FI_EAGAIN;
      break;
    }
    threads.push_back(tid);
  }
  pthread_attr_destroy(&attr);
  open_gate(launch, rc != 0);
  for (pthread_t tid : threads) pthread_join(tid, nullptr);
  if (rc == 0 && launch.kernel_threw.load(std::memory_order_relaxed)) rc = -FI_EOTHER;
  return rc;
}

}  // namespace

int validate_launch(const LaunchConfig& cfg) {
  if (cfg.grid == 0 || cfg.workgroup_size == 0 || cfg.subgroup_size == 0) return -FI_EINVAL;
  if (cfg.workgroup_size > kMaxWorkgroupSize || cfg.subgroup_size > kMaxSubgroupSize) return -FI_EINVAL;
  if (cfg.workgroup_size % cfg.subgroup_size != 0) return -FI_EINVAL;
  if (cfg.stack_size < kMinStackSize || cfg.stack_size > kMaxStackSize) return -FI_EINVAL;
  // Computed in 64 bits: grid is unbounded by the checks above.
  if (uint64_t{cfg.grid} * cfg.workgroup_size > kMaxWorkItems) return -FI_E2BIG;
  return 0;
}

int launch(const LaunchConfig& config, const Kernel& kernel) {
  int rc = validate_launch(config);
  if (rc != 0) return rc;
  if (!kernel) return -FI_EINVAL;
  try {
    Launch state;
    build_launch(config, kernel, state);
    return run_launch(config, state);
  } catch (const std::bad_alloc&) {
    return -FI_ENOMEM;
  }
}

void fail_thread_start_after_for_testing(int n) {
  g_fail_thread_start_after.store(n, std::memory_order_relaxed);
}

const WorkItem* current_work_item() { return t_item != nullptr ? &t_item->item : nullptr; }

}  // namespace xpufab::runtime

using xpufab::runtime::t_item;

extern "C" {

const struct xpu_host_item* xpu_host_current(void) {
  return t_item != nullptr ? &t_item->item : &xpufab::runtime::kPlainItem;
}

int xpu_host_scope_supported(int scope) {
  switch (scope) {
    case XPU_SCOPE_WORK_ITEM:
    case XPU_SCOPE_SUBGROUP:
    case XPU_SCOPE_WORK_GROUP:
      return 1;
    case XPU_SCOPE_DEVICE:
      return t_item == nullptr || t_item->device != nullptr;
    default:
      return 0;
  }
}

void xpu_host_subgroup_barrier(void) {
  if (t_item != nullptr) t_item->subgroup->arrive_and_wait(false, 0);
}

uint64_t xpu_host_subgroup_broadcast(uint64_t value, uint32_t src) {
  if (t_item == nullptr) return value;
  const auto& it = t_item->item;
  return t_item->subgroup->arrive_and_wait(it.lane == src % it.subgroup_size, value);
}

void xpu_host_workgroup_barrier(void) {
  if (t_item != nullptr) t_item->workgroup->arrive_and_wait(false, 0);
}

uint64_t xpu_host_workgroup_broadcast(uint64_t value, uint32_t src) {
  if (t_item == nullptr) return value;
  const auto& it = t_item->item;
  return t_item->workgroup->arrive_and_wait(it.local_id == src % it.workgroup_size, value);
}

void xpu_host_device_barrier(void) {
  if (t_item != nullptr && t_item->device != nullptr) t_item->device->arrive_and_wait(false, 0);
}

uint64_t xpu_host_device_broadcast(uint64_t value, uint32_t src) {
  if (t_item == nullptr || t_item->device == nullptr) return value;
  const auto& it = t_item->item;
  return t_item->device->arrive_and_wait(it.global_id == src % it.global_size, value);
}

int xpu_host_launch(const struct xpu_host_launch_attr* attr, void (*kernel)(void* arg), void* arg) {
  if (attr == nullptr || kernel == nullptr) return -FI_EINVAL;
  if ((attr->flags & ~XPU_HOST_LAUNCH_NONCOOPERATIVE) != 0) return -FI_EINVAL;
  xpufab::runtime::LaunchConfig cfg;
  cfg.grid = attr->grid;
  cfg.workgroup_size = attr->workgroup_size;
  cfg.subgroup_size = attr->subgroup_size == 0 ? XPU_HOST_DEFAULT_SUBGROUP_SIZE : attr->subgroup_size;
  cfg.cooperative = (attr->flags & XPU_HOST_LAUNCH_NONCOOPERATIVE) == 0;
  return xpufab::runtime::launch(cfg, [kernel, arg](const xpu_host_item&) { kernel(arg); });
}

}  // extern "C"
