// Backend registry: a process-wide name -> (factory, priority) table filled at
// static-initialization time.
#include <algorithm>
#include <cerrno>
#include <mutex>
#include <string>

#include "api/backend/backend.h"

namespace xpufab {
namespace backend {
namespace {

struct Entry {
  BackendFactory factory;
  int priority;
};

struct Registry {
  std::mutex mu;
  std::vector<Entry> entries;  // registration order
};

// Function-local static so registration from other translation units' initializers is safe.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

int register_backend(const BackendFactory& factory, int priority) {
  if (factory.name == nullptr || factory.name[0] == '\0' || factory.probe == nullptr ||
      factory.open == nullptr || priority < 0 || std::string(factory.name) == "auto" ||
      (factory.settings == nullptr && factory.num_settings != 0)) {
    return -EINVAL;
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const Entry& e : r.entries) {
    if (std::string(e.factory.name) == factory.name) return -EEXIST;
  }
  r.entries.push_back(Entry{factory, priority});
  return 0;
}

std::vector<std::string> registered_backends() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const Entry& e : r.entries) names.emplace_back(e.factory.name);
  return names;
}

std::vector<std::string> backends_by_priority() {
  std::vector<Entry> ranked;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (const Entry& e : r.entries) {
      if (e.priority != kPriorityByNameOnly) ranked.push_back(e);
    }
  }
  // Stable: equal priorities keep their registration order.
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const Entry& a, const Entry& b) { return a.priority > b.priority; });
  std::vector<std::string> names;
  for (const Entry& e : ranked) names.emplace_back(e.factory.name);
  return names;
}

std::vector<BackendSetting> backend_settings() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<BackendSetting> settings;
  for (const Entry& e : r.entries) {
    if (e.factory.settings == nullptr) continue;
    settings.insert(settings.end(), e.factory.settings, e.factory.settings + e.factory.num_settings);
  }
  return settings;
}

int open_backend(const std::string& name, std::unique_ptr<Backend>* backend_p) {
  if (backend_p == nullptr) return -EINVAL;
  BackendFactory found{};
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (const Entry& e : r.entries) {
      if (name == e.factory.name) found = e.factory;
    }
  }
  if (found.name == nullptr) return -ENOENT;
  int rc = found.probe();
  if (rc != 0) return rc < 0 ? rc : -ENODEV;
  return found.open(backend_p);
}

}  // namespace backend
}  // namespace xpufab
