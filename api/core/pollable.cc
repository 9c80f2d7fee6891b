#include "api/core/pollable.h"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <unordered_map>

namespace xpufab::core {
namespace {

struct Registry {
  std::mutex mu;
  std::unordered_map<const fid*, Pollable*> by_fid;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: objects may close during exit
  return *r;
}

}  // namespace

void Pollable::wake_watchers() {
  if (watching_.load(std::memory_order_seq_cst) == 0) return;
  std::lock_guard<std::mutex> g(watchers_mu_);
  for (Watcher* w : watchers_) w->wake();
}

void Pollable::add_watcher(Watcher* w) {
  std::lock_guard<std::mutex> g(watchers_mu_);
  watchers_.push_back(w);
  watching_.store(watchers_.size(), std::memory_order_seq_cst);
}

void Pollable::remove_watcher(Watcher* w) {
  std::lock_guard<std::mutex> g(watchers_mu_);
  auto it = std::find(watchers_.begin(), watchers_.end(), w);
  if (it != watchers_.end()) watchers_.erase(it);
  watching_.store(watchers_.size(), std::memory_order_seq_cst);
}

int register_pollable(Pollable* p) {
  if (!p || !p->pollable_fid()) return -FI_EINVAL;
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  return r.by_fid.emplace(p->pollable_fid(), p).second ? 0 : -FI_EALREADY;
}

void unregister_pollable(Pollable* p) {
  if (!p) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.by_fid.find(p->pollable_fid());
  if (it != r.by_fid.end() && it->second == p) r.by_fid.erase(it);
}

int acquire_pollable(const fid* f, Pollable** p) {
  if (!f || !p) return -FI_EINVAL;
  Registry& r = registry();
  // The lookup and the acquire happen under the registry lock: an object is
  // unregistered before it is freed, so the pointer is live while we hold it.
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.by_fid.find(f);
  if (it == r.by_fid.end()) return -FI_EINVAL;
  int rc = it->second->pollable_refs().acquire();
  if (rc) return rc;
  *p = it->second;
  return 0;
}

}  // namespace xpufab::core
