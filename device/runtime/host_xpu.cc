// The host XPU runtime: each work-group is a set of fibers on one thread,
// scope barriers switch fibers.
#include "device/runtime/host_xpu.h"

#include <sched.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "device/runtime/fiber.h"
#include "device/runtime/fiber_scheduler.h"
#include "device/runtime/group_barrier.h"
#include "device/runtime/host_xpu_testing.h"
#include "device/runtime/worker_pool.h"
#include "device/runtime/xpu_scope.h"
#include "rdma/fi_errno.h"

namespace xpufab::runtime {
namespace {

constexpr size_t kMinStackSize = size_t{64} << 10;
constexpr size_t kMaxStackSize = size_t{64} << 20;

// A thread keeps its last launch for the next of the same shape, stacks
// and barriers included, unless its stacks would pin more than this.
constexpr size_t kMaxReusedStackBytes = size_t{64} << 20;

// Test seam: when >= 0, work-item starts after this many in a launch fail.
std::atomic<int> g_fail_thread_start_after{-1};
std::atomic<uint64_t> g_launches_built{0};

struct Launch;

// One work-item: its ids, its fiber and the barriers of its three
// collective scopes. A subgroup and a work-group are fibers of one thread;
// the device is too when the grid has one work-group.
struct ItemState {
  WorkItem item{};
  FiberTask task;
  LocalBarrier* subgroup = nullptr;
  LocalBarrier* workgroup = nullptr;
  // At most one is set; neither when the launch is not cooperative.
  LocalBarrier* device_local = nullptr;
  ThreadShareBarrier* device_shared = nullptr;  // this work-group's share
  Launch* launch = nullptr;

  bool has_device() const { return device_local != nullptr || device_shared != nullptr; }
  uint64_t device_arrive(bool is_source, uint64_t value) const {
    return device_local != nullptr ? device_local->arrive_and_wait(is_source, value)
                                   : device_shared->arrive_and_wait(is_source, value);
  }
  void device_drop() const {
    if (device_local != nullptr) device_local->arrive_and_drop();
    if (device_shared != nullptr) device_shared->arrive_and_drop();
  }
};

// One work-group: its work-items' fibers and the thread that runs them.
struct Group {
  FiberScheduler scheduler;
  Launch* launch = nullptr;
};

struct Launch {
  LaunchConfig config;
  const Kernel* kernel = nullptr;
  std::deque<LocalBarrier> subgroups;
  std::deque<LocalBarrier> workgroups;
  std::unique_ptr<LocalBarrier> device_local;
  // Several work-groups: one share per work-group, meeting in device_across.
  std::unique_ptr<GroupBarrier> device_across;
  std::deque<ThreadShareBarrier> device_shares;
  std::unique_ptr<ItemState[]> items;
  uint32_t total = 0;
  std::unique_ptr<Group[]> groups;
  uint32_t grid = 0;

  // Work-groups run by pool threads that have not finished.
  std::mutex done_mu;
  std::condition_variable done_cv;
  uint32_t running = 0;  // guarded by done_mu

  std::atomic<bool> kernel_threw{false};
};

// What a thread the runtime did not launch sees: a launch of one.
constexpr WorkItem kPlainItem = {
    /*global_id=*/0, /*global_size=*/1,    /*workgroup_id=*/0, /*num_workgroups=*/1,
    /*local_id=*/0,  /*workgroup_size=*/1, /*subgroup_id=*/0,  /*num_subgroups=*/1,
    /*lane=*/0,      /*subgroup_size=*/1,  /*cooperative=*/1,
};

// The calling work-item, or nullptr on a thread the runtime did not launch
// (or its scheduler loop).
const ItemState* current_item() {
  const FiberTask* task = FiberScheduler::current();
  return task != nullptr ? static_cast<const ItemState*>(task->user) : nullptr;
}

void leave_scopes(const ItemState& st) {
  st.subgroup->arrive_and_drop();
  st.workgroup->arrive_and_drop();
  st.device_drop();
}

void work_item_main(FiberTask* task) {
  auto* st = static_cast<ItemState*>(task->user);
  Launch& launch = *st->launch;
  try {
    (*launch.kernel)(st->item);
  } catch (...) {
    launch.kernel_threw.store(true, std::memory_order_relaxed);
  }
  leave_scopes(*st);
}

// A work-group run by a pool thread.
void group_main(void* arg) {
  auto* group = static_cast<Group*>(arg);
  Launch& launch = *group->launch;
  group->scheduler.run();
  std::lock_guard<std::mutex> lock(launch.done_mu);
  if (--launch.running == 0) launch.done_cv.notify_one();
}

// Makes every work-item a fiber of its group's scheduler, ready to run.
void add_fibers(Launch& launch) {
  for (uint32_t g = 0; g < launch.total; ++g) {
    ItemState& st = launch.items[g];
    launch.groups[st.item.workgroup_id].scheduler.add(&st.task);
  }
}

// Builds the ids, barriers and stacks; may throw std::bad_alloc. Returns 0,
// -FI_ENOMEM (no stack) or -FI_EAGAIN (the test seam).
int build_launch(const LaunchConfig& cfg, const Kernel& kernel, Launch& launch) {
  const uint32_t wg = cfg.workgroup_size;
  const uint32_t sg = cfg.subgroup_size;
  const uint32_t sg_per_wg = wg / sg;
  const uint32_t total = cfg.grid * wg;
  g_launches_built.fetch_add(1, std::memory_order_relaxed);
  launch.config = cfg;
  launch.kernel = &kernel;
  for (uint32_t i = 0; i < cfg.grid * sg_per_wg; ++i) launch.subgroups.emplace_back(sg);
  for (uint32_t i = 0; i < cfg.grid; ++i) launch.workgroups.emplace_back(wg);
  if (cfg.cooperative && cfg.grid == 1) launch.device_local = std::make_unique<LocalBarrier>(total);
  if (cfg.cooperative && cfg.grid > 1) {
    launch.device_across = std::make_unique<GroupBarrier>(cfg.grid);
    for (uint32_t i = 0; i < cfg.grid; ++i) launch.device_shares.emplace_back(wg, launch.device_across.get());
  }
  launch.items.reset(new ItemState[total]);
  launch.total = total;
  launch.groups.reset(new Group[cfg.grid]);
  launch.grid = cfg.grid;
  const int fail_after = g_fail_thread_start_after.load(std::memory_order_relaxed);
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
    st.device_local = launch.device_local.get();
    if (launch.device_across) st.device_shared = &launch.device_shares[it.workgroup_id];
    st.launch = &launch;
    if (fail_after >= 0 && g >= static_cast<uint32_t>(fail_after)) {
      std::fprintf(stderr, "host_xpu: could not start work-item %u of %u; launch cancelled\n", g, total);
      return -FI_EAGAIN;
    }
    if (!st.task.stack.acquire(cfg.stack_size)) {
      std::fprintf(stderr, "host_xpu: no stack for work-item %u of %u; launch cancelled\n", g, total);
      return -FI_ENOMEM;
    }
    st.task.body = work_item_main;
    st.task.user = &st;
  }
  for (uint32_t g = 0; g < cfg.grid; ++g) launch.groups[g].launch = &launch;
  add_fibers(launch);
  return 0;
}

// Readies a launch that ran to its end (every work-item returned, so every
// barrier was left by all its members) for another run of the same shape.
void rearm_launch(Launch& launch, const Kernel& kernel) {
  const LaunchConfig& cfg = launch.config;
  launch.kernel = &kernel;
  launch.kernel_threw.store(false, std::memory_order_relaxed);
  for (LocalBarrier& b : launch.subgroups) b.rearm(cfg.subgroup_size);
  for (LocalBarrier& b : launch.workgroups) b.rearm(cfg.workgroup_size);
  if (launch.device_local) launch.device_local->rearm(launch.total);
  if (launch.device_across) launch.device_across->rearm(cfg.grid);
  for (ThreadShareBarrier& b : launch.device_shares) b.rearm(cfg.workgroup_size);
  for (uint32_t g = 0; g < launch.total; ++g) launch.items[g].task.stack.recycle();
  add_fibers(launch);
}

bool same_shape(const LaunchConfig& a, const LaunchConfig& b) {
  return a.grid == b.grid && a.workgroup_size == b.workgroup_size && a.subgroup_size == b.subgroup_size &&
         a.cooperative == b.cooperative && a.stack_size == b.stack_size;
}

// The calling thread's last launch. A launch nested in one of its
// work-items finds it empty (the outer launch holds it) and builds its own.
thread_local std::unique_ptr<Launch> t_reusable;

std::unique_ptr<Launch> take_reusable(const LaunchConfig& cfg) {
  if (!t_reusable || !same_shape(t_reusable->config, cfg)) return nullptr;
  // The seam fails launches as they are built.
  if (g_fail_thread_start_after.load(std::memory_order_relaxed) >= 0) return nullptr;
  return std::move(t_reusable);
}

void keep_reusable(std::unique_ptr<Launch> launch) {
  if (uint64_t{launch->total} * launch->config.stack_size > kMaxReusedStackBytes) return;
  t_reusable = std::move(launch);
}

// Work-group 0 runs on the calling thread, the others on pool threads, all
// at once: a kernel may spin on a flag another work-group sets.
int run_launch(Launch& launch) {
  const uint32_t others = launch.grid - 1;
  if (others > 0) {
    std::vector<WorkerJob> jobs(others);
    for (uint32_t i = 0; i < others; ++i) jobs[i] = WorkerJob{group_main, &launch.groups[i + 1]};
    launch.running = others;
    if (!start_workers(jobs.data(), jobs.size())) {
      std::fprintf(stderr, "host_xpu: could not start threads for %u work-groups; launch cancelled\n",
                   launch.grid);
      return -FI_EAGAIN;
    }
  }
  launch.groups[0].scheduler.run();
  if (others > 0) {
    std::unique_lock<std::mutex> lock(launch.done_mu);
    launch.done_cv.wait(lock, [&] { return launch.running == 0; });
  }
  return launch.kernel_threw.load(std::memory_order_relaxed) ? -FI_EOTHER : 0;
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
    std::unique_ptr<Launch> state = take_reusable(config);
    if (state) {
      rearm_launch(*state, kernel);
    } else {
      state = std::make_unique<Launch>();
      rc = build_launch(config, kernel, *state);
      if (rc != 0) return rc;
    }
    rc = run_launch(*state);
    // Work-items that ran left everything as they found it; a launch that
    // could not start its threads still holds fibers that never ran.
    if (rc == 0 || rc == -FI_EOTHER) keep_reusable(std::move(state));
    return rc;
  } catch (const std::bad_alloc&) {
    return -FI_ENOMEM;
  }
}

void fail_thread_start_after_for_testing(int n) {
  g_fail_thread_start_after.store(n, std::memory_order_relaxed);
}

uint64_t launches_built_for_testing() { return g_launches_built.load(std::memory_order_relaxed); }

const WorkItem* current_work_item() {
  const ItemState* st = current_item();
  return st != nullptr ? &st->item : nullptr;
}

}  // namespace xpufab::runtime

using xpufab::runtime::current_item;

extern "C" {

const struct xpu_host_item* xpu_host_current(void) {
  const xpufab::runtime::ItemState* st = current_item();
  return st != nullptr ? &st->item : &xpufab::runtime::kPlainItem;
}

void xpu_host_relax(void) {
  // A thread the runtime did not launch may share the cores with many others.
  if (xpufab::runtime::FiberScheduler::current() == nullptr) {
    sched_yield();
    return;
  }
  if (xpufab::runtime::FiberScheduler::yield()) return;
  // Nothing else of this work-group can run. A system call per spin would
  // hand the core to any runnable process for a whole time slice on a busy
  // machine; the thread offers it now and then and otherwise just pauses
  // (the OS still preempts it for the thread it waits for).
  thread_local uint32_t spins = 0;
  if ((++spins & 15) == 0) {
    sched_yield();
  } else {
    xpufab::runtime::cpu_pause();
  }
}

int xpu_host_scope_supported(int scope) {
  const xpufab::runtime::ItemState* const t_item = current_item();
  switch (scope) {
    case XPU_SCOPE_WORK_ITEM:
    case XPU_SCOPE_SUBGROUP:
    case XPU_SCOPE_WORK_GROUP:
      return 1;
    case XPU_SCOPE_DEVICE:
      return t_item == nullptr || t_item->has_device();
    default:
      return 0;
  }
}

void xpu_host_subgroup_barrier(void) {
  const xpufab::runtime::ItemState* const t_item = current_item();
  if (t_item != nullptr) t_item->subgroup->arrive_and_wait(false, 0);
}

uint64_t xpu_host_subgroup_broadcast(uint64_t value, uint32_t src) {
  const xpufab::runtime::ItemState* const t_item = current_item();
  if (t_item == nullptr) return value;
  const auto& it = t_item->item;
  return t_item->subgroup->arrive_and_wait(it.lane == src % it.subgroup_size, value);
}

void xpu_host_workgroup_barrier(void) {
  const xpufab::runtime::ItemState* const t_item = current_item();
  if (t_item != nullptr) t_item->workgroup->arrive_and_wait(false, 0);
}

uint64_t xpu_host_workgroup_broadcast(uint64_t value, uint32_t src) {
  const xpufab::runtime::ItemState* const t_item = current_item();
  if (t_item == nullptr) return value;
  const auto& it = t_item->item;
  return t_item->workgroup->arrive_and_wait(it.local_id == src % it.workgroup_size, value);
}

void xpu_host_device_barrier(void) {
  const xpufab::runtime::ItemState* const t_item = current_item();
  if (t_item != nullptr && t_item->has_device()) t_item->device_arrive(false, 0);
}

uint64_t xpu_host_device_broadcast(uint64_t value, uint32_t src) {
  const xpufab::runtime::ItemState* const t_item = current_item();
  if (t_item == nullptr || !t_item->has_device()) return value;
  const auto& it = t_item->item;
  return t_item->device_arrive(it.global_id == src % it.global_size, value);
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
