// Backend registry: a process-wide name -> factory table filled at static-initialization time.
#include <cerrno>
#include <mutex>

#include "api/backend/backend.h"

namespace xpufab {
namespace backend {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<BackendFactory> factories;
};

// Function-local static so registration from other translation units' initializers is safe.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

int register_backend(const BackendFactory& factory) {
  if (factory.name == nullptr || factory.name[0] == '\0' || factory.probe == nullptr ||
      factory.open == nullptr) {
    return -EINVAL;
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const BackendFactory& f : r.factories) {
    if (std::string(f.name) == factory.name) return -EEXIST;
  }
  r.factories.push_back(factory);
  return 0;
}

std::vector<std::string> registered_backends() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const BackendFactory& f : r.factories) names.emplace_back(f.name);
  return names;
}

int open_backend(const std::string& name, std::unique_ptr<Backend>* backend_p) {
  if (backend_p == nullptr) return -EINVAL;
  BackendFactory found{};
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (const BackendFactory& f : r.factories) {
      if (name == f.name) found = f;
    }
  }
  if (found.name == nullptr) return -ENOENT;
  int rc = found.probe();
  if (rc != 0) return rc < 0 ? rc : -ENODEV;
  return found.open(backend_p);
}

}  // namespace backend
}  // namespace xpufab
