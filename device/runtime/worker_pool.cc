#include "device/runtime/worker_pool.h"

#include <pthread.h>

#include <condition_variable>
#include <mutex>
#include <new>
#include <vector>

namespace xpufab::runtime {
namespace {

// A worker only runs fiber schedulers (kernels run on fiber stacks), so a
// small stack does.
constexpr size_t kWorkerStackSize = size_t{256} << 10;
// Idle threads kept for later launches; more than this exit when done.
constexpr size_t kMaxIdle = 64;

struct Worker {
  std::mutex mu;
  std::condition_variable cv;
  WorkerJob job;  // guarded by mu; fn == nullptr: none yet
};

class Pool {
 public:
  static Pool& get() { return *current(); }

  bool start(const WorkerJob* jobs, size_t count) {
    std::vector<Worker*> got;
    try {
      got.reserve(count);
    } catch (const std::bad_alloc&) {
      return false;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (got.size() < count && !idle_.empty()) {
        got.push_back(idle_.back());
        idle_.pop_back();
      }
    }
    while (got.size() < count) {
      Worker* w = spawn();
      if (w == nullptr) {
        // Back to idle, unused: none of the jobs runs.
        for (Worker* g : got) give_back_idle(g);
        return false;
      }
      got.push_back(w);
    }
    for (size_t i = 0; i < count; ++i) {
      std::lock_guard<std::mutex> lock(got[i]->mu);
      got[i]->job = jobs[i];
      got[i]->cv.notify_one();
    }
    return true;
  }

 private:
  static Pool*& current() {
    // Leaked: idle workers wait on it until the process exits.
    static Pool* pool = [] {
      // A forked child has none of the parent's threads: it starts afresh
      // (the parent's idle list is abandoned in the child).
      pthread_atfork(nullptr, nullptr, [] { current() = new Pool; });
      return new Pool;
    }();
    return pool;
  }

  static void* worker_main(void* arg) {
    auto* w = static_cast<Worker*>(arg);
    for (;;) {
      WorkerJob job;
      {
        std::unique_lock<std::mutex> lock(w->mu);
        w->cv.wait(lock, [w] { return w->job.fn != nullptr; });
        job = w->job;
        w->job = WorkerJob{};
      }
      job.fn(job.arg);
      if (!get().give_back_idle(w)) break;
    }
    delete w;
    return nullptr;
  }

  Worker* spawn() {
    Worker* w = new (std::nothrow) Worker;
    if (w == nullptr) return nullptr;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) {
      delete w;
      return nullptr;
    }
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, kWorkerStackSize);
    pthread_t tid;
    const int rc = pthread_create(&tid, &attr, worker_main, w);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
      delete w;
      return nullptr;
    }
    return w;
  }

  // False when enough threads are idle: the caller then exits.
  bool give_back_idle(Worker* w) {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() >= kMaxIdle) return false;
    try {
      idle_.push_back(w);
    } catch (const std::bad_alloc&) {
      return false;
    }
    return true;
  }

  std::mutex mu_;
  std::vector<Worker*> idle_;  // guarded by mu_
};

}  // namespace

bool start_workers(const WorkerJob* jobs, size_t count) { return count == 0 || Pool::get().start(jobs, count); }

}  // namespace xpufab::runtime
