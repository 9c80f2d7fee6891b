// worker_pool.h - OS threads kept between host XPU launches.
// Internal to device/runtime.
#ifndef XPUFAB_DEVICE_RUNTIME_WORKER_POOL_H_
#define XPUFAB_DEVICE_RUNTIME_WORKER_POOL_H_

#include <cstddef>

namespace xpufab::runtime {

// One job per thread: fn(arg) runs on a thread of its own.
struct WorkerJob {
  void (*fn)(void* arg) = nullptr;
  void* arg = nullptr;
};

// Starts every job on a distinct thread, all of them running at once (a
// launch's work-groups must be co-resident), reusing idle threads and
// creating the rest. Either all start or none does: returns false, having
// started nothing, if a thread could not be created. Returns without
// waiting for the jobs; each job signals its own end.
bool start_workers(const WorkerJob* jobs, size_t count);

}  // namespace xpufab::runtime

#endif  // XPUFAB_DEVICE_RUNTIME_WORKER_POOL_H_
