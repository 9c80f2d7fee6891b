/*
 * api/core/test_provider.h - a configurable provider for the core's tests
 * (testonly).  It offers whatever fi_info templates it is given, so tests
 * can drive every matching rule of fi_getinfo without real hardware.  Its
 * fabric offers the core's EQs, wait sets and fi_trywait, and bare domains
 * that offer the core's poll sets, wired as a provider wires them; closing
 * the fabric fails with -FI_EBUSY while those objects are open.
 *
 * Linking this library also registers, at static-initialization time, one
 * provider named "statictest" offering default_offer() (fabric "static-fab"),
 * which proves registration through ProviderRegistration.
 */
#ifndef XPUFAB_API_CORE_TEST_PROVIDER_H_
#define XPUFAB_API_CORE_TEST_PROVIDER_H_

#include <rdma/fabric.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "api/core/provider.h"

namespace xpufab::core::testing {

// An RDM offer: FI_MSG|FI_RMA|FI_TAGGED|FI_ATOMIC|FI_HMEM|FI_XPU with the
// usual direction modifiers and FI_LOCAL_COMM|FI_REMOTE_COMM|FI_SOURCE,
// mr_mode LOCAL|VIRT_ADDR|ALLOCATED|PROV_KEY|HMEM|XPU_DESC, FI_ADDR_EFA,
// domain `domain`, fabric `fabric`, max_xpu_ctx_cnt 1, a nic, a 16-byte
// src_addr.  Caller frees with fi_freeinfo.
struct fi_info* default_offer(const char* fabric, const char* domain);

class TestProvider : public Provider {
 public:
  // Takes ownership of `offers` (a list; may be null: getinfo -> ENODATA).
  TestProvider(std::string name, uint32_t version, struct fi_info* offers,
               uint32_t api_version = FI_VERSION(2, 7));
  ~TestProvider() override;

  const char* name() const override { return name_.c_str(); }
  uint32_t version() const override { return version_; }
  uint32_t fi_version() const override { return api_version_; }
  int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
              const struct fi_info* hints, struct fi_info** info_p) override;
  int fabric(struct fi_fabric_attr* attr, struct fid_fabric** fabric_p,
             void* context) override;
  void cleanup() override { cleanups_++; }

  // What the last getinfo call received (read them once calls have returned).
  std::string last_node, last_service;  // guarded by mu_ while calls run
  uint64_t last_flags = 0;
  int getinfo_calls = 0;
  int cleanups_ = 0;
  // When non-zero, getinfo fails with this code.
  int fail_with = 0;
  std::atomic<int> open_fabrics{0};

 private:
  std::mutex mu_;  // getinfo may run on several application threads at once
  std::string name_;
  uint32_t version_;
  uint32_t api_version_;
  struct fi_info* offers_;
};

// Registers a provider for the lifetime of a test scope.
class ScopedProvider {
 public:
  explicit ScopedProvider(Provider* prov) : prov_(prov) { ret_ = register_provider(prov); }
  ~ScopedProvider() {
    if (ret_ == 0) unregister_provider(prov_);
  }
  int status() const { return ret_; }

 private:
  Provider* prov_;
  int ret_;
};

}  // namespace xpufab::core::testing

#endif  // XPUFAB_API_CORE_TEST_PROVIDER_H_
