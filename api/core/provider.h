/*
 * api/core/provider.h - the provider interface and the static registry.
 *
 * A provider (api/efa/, or a test provider) implements xpufab::core::Provider
 * and registers one long-lived instance, either at static-initialization time
 * with a ProviderRegistration object at namespace scope (put it in a
 * cc_library with alwayslink = True, or the linker drops it) or explicitly
 * with register_provider().  fi_getinfo() and fi_fabric() consult the registry.
 *
 * Division of work with the core (api/core/getinfo.cc):
 *   - Provider::getinfo returns every configuration it can offer for node /
 *     service / flags (resolving addresses, enumerating domains).  It may use
 *     the hints to skip work, but need not filter by them.
 *   - The core then matches each returned fi_info against the hints (caps,
 *     modes, endpoint type, mr_mode, names, attribute limits), trims caps to
 *     what was asked for, fills fabric_attr->prov_name/prov_version/api_version,
 *     and drops FI_XPU (and FI_MR_XPU_DESC) unless the hints ask for FI_XPU.
 *   - Returned lists are allocated with fi_allocinfo()/fi_dupinfo() (malloc);
 *     ownership passes to the core.  fid_nic objects must come from
 *     xpufab::core::nic_alloc() (api/core/info.h).
 *
 * Thread-safety: the registry is internally locked.  A provider's methods may
 * be called concurrently from several application threads.
 */
#ifndef XPUFAB_API_CORE_PROVIDER_H_
#define XPUFAB_API_CORE_PROVIDER_H_

#include <rdma/fabric.h>

#include <cstdint>
#include <vector>

namespace xpufab::core {

class Provider {
 public:
  virtual ~Provider() = default;

  // Short lowercase name ("efa"); compared case-insensitively.
  virtual const char* name() const = 0;
  // The provider's own version, FI_VERSION(major, minor).
  virtual uint32_t version() const = 0;
  // Highest libfabric API version the provider implements; fi_getinfo skips
  // providers below the version the application requests.
  virtual uint32_t fi_version() const { return FI_VERSION(2, 7); }

  // Returns 0 and a non-empty list in *info_p, or a negative FI_E* code
  // (-FI_ENODATA: nothing to offer).  *info_p is untouched on error.
  virtual int getinfo(uint32_t version, const char* node, const char* service,
                      uint64_t flags, const struct fi_info* hints,
                      struct fi_info** info_p) = 0;

  // Opens the fabric named by attr->name.  Returns 0 or a negative FI_E* code.
  virtual int fabric(struct fi_fabric_attr* attr, struct fid_fabric** fabric_p,
                     void* context) = 0;

  // Called once by unregister_provider() (and never otherwise).
  virtual void cleanup() {}
};

// Adds `prov` (not owned; must outlive its registration).  Returns 0,
// -FI_EINVAL for NULL, a missing name or fi_version() below 1.3, or
// -FI_EALREADY when a provider of the same name is registered with an equal or
// higher version() (a higher version replaces a lower one, as in libfabric).
int register_provider(Provider* prov);

// Removes `prov` and calls its cleanup().  Returns -FI_ENOENT if absent.
// Only for quiescent moments (tests, shutdown): a concurrent fi_getinfo may
// still be calling into the provider, so it must stay alive until then.
int unregister_provider(Provider* prov);

// Registered providers in registration order.
std::vector<Provider*> registered_providers();

// Finds a provider by name (case-insensitive), or nullptr.
Provider* find_provider(const char* name);

// True when FI_PROVIDER (read at each call) admits `name`: unset/empty admits
// all; "a,b" admits only those; "^a,b" admits all but those.
bool provider_enabled_by_env(const char* name);

// Registers a provider during static initialization.
class ProviderRegistration {
 public:
  explicit ProviderRegistration(Provider* prov);
  ProviderRegistration(const ProviderRegistration&) = delete;
  ProviderRegistration& operator=(const ProviderRegistration&) = delete;
};

}  // namespace xpufab::core

#endif  // XPUFAB_API_CORE_PROVIDER_H_
