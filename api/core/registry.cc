#include <rdma/fi_errno.h>
#include <strings.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "api/core/log.h"
#include "api/core/provider.h"

namespace xpufab::core {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<Provider*> providers;  // guarded by mu
};

// Function-local so that registrations from other translation units'
// static initializers never see an unconstructed registry.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

int register_provider(Provider* prov) {
  if (!prov || !prov->name() || !*prov->name()) return -FI_EINVAL;
  if (prov->fi_version() < FI_VERSION(1, 3)) {
    XPUFAB_WARN(prov->name(), LogSubsys::kCore,
                "provider API version %u.%u too old, not registered",
                FI_MAJOR(prov->fi_version()), FI_MINOR(prov->fi_version()));
    return -FI_EINVAL;
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (Provider*& p : r.providers) {
    if (p == prov) return -FI_EALREADY;
    if (strcasecmp(p->name(), prov->name()) != 0) continue;
    if (prov->version() <= p->version()) {
      XPUFAB_INFO(prov->name(), LogSubsys::kCore,
                  "duplicate provider ignored (version %u <= %u)", prov->version(),
                  p->version());
      return -FI_EALREADY;
    }
    p = prov;
    return 0;
  }
  r.providers.push_back(prov);
  return 0;
}

int unregister_provider(Provider* prov) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = std::find(r.providers.begin(), r.providers.end(), prov);
    if (it == r.providers.end()) return -FI_ENOENT;
    r.providers.erase(it);
  }
  prov->cleanup();
  return 0;
}

std::vector<Provider*> registered_providers() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.providers;
}

Provider* find_provider(const char* name) {
  if (!name) return nullptr;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (Provider* p : r.providers)
    if (strcasecmp(p->name(), name) == 0) return p;
  return nullptr;
}

bool provider_enabled_by_env(const char* name) {
  const char* env = getenv("FI_PROVIDER");
  if (!env || !*env) return true;
  bool negate = env[0] == '^';
  std::string list(env + (negate ? 1 : 0));
  bool listed = false;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    std::string item = list.substr(pos, comma - pos);
    if (!item.empty() && name && strcasecmp(item.c_str(), name) == 0) listed = true;
    pos = comma + 1;
  }
  return listed != negate;
}

ProviderRegistration::ProviderRegistration(Provider* prov) {
  int ret = register_provider(prov);
  if (ret && ret != -FI_EALREADY) {
    XPUFAB_WARN(prov ? prov->name() : nullptr, LogSubsys::kCore,
                "provider registration failed: %d", ret);
  }
}

}  // namespace xpufab::core
