#include "hw/rdma_loader.h"

#include <dlfcn.h>

#include <cerrno>
#include <cstring>

namespace xpufab {
namespace hw {
namespace {

// Prefers the exact symbol version: libibverbs still exports IBVERBS_1.0 variants of many calls
// with older struct layouts, and plain dlsym() would only be right by virtue of the default.
void* find_symbol(void* lib, const char* name, const char* version) {
  void* sym = nullptr;
  if (version != nullptr) sym = dlvsym(lib, name, version);
  if (sym == nullptr) sym = dlsym(lib, name);
  return sym;
}

// Converts a data pointer from dlsym() to a function pointer of the destination's type.
template <typename Fn>
void assign(Fn* dst, void* sym) {
  static_assert(sizeof(Fn) == sizeof(void*), "function pointers must be pointer-sized");
  std::memcpy(dst, &sym, sizeof(sym));
}

struct Want {
  const char* name;
  const char* version;
  bool required;
};

class Resolver {
 public:
  Resolver(void* lib, const char* lib_name) : lib_(lib), lib_name_(lib_name) {}

  template <typename Fn>
  void get(Fn* dst, const Want& want) {
    void* sym = find_symbol(lib_, want.name, want.version);
    assign(dst, sym);
    if (sym == nullptr && want.required && missing_.empty()) {
      missing_ = std::string(lib_name_) + " lacks " + want.name +
                 (want.version ? std::string("@") + want.version : std::string());
    }
  }

  const std::string& missing() const { return missing_; }

 private:
  void* lib_;
  const char* lib_name_;
  std::string missing_;
};

void* open_library(const std::string& name, std::string* reason) {
  dlerror();
  // RTLD_GLOBAL: libibverbs loads its provider (libefa-rdmavNN.so) itself and the provider must
  // see the same libibverbs we resolved against.
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    *reason = "cannot load " + name + ": " + (err ? err : "unknown error");
  }
  return lib;
}

}  // namespace

int load_rdma(const LibraryNames& names, std::shared_ptr<const RdmaApi>* api_p,
              std::string* reason) {
  std::string local_reason;
  if (reason == nullptr) reason = &local_reason;
  if (api_p == nullptr) {
    *reason = "no output";
    return -EINVAL;
  }
  void* verbs = open_library(names.verbs, reason);
  if (verbs == nullptr) return -ENOENT;
  void* efa = open_library(names.efa, reason);
  if (efa == nullptr) return -ENOENT;

  auto api = std::make_shared<RdmaApi>();
  std::memset(api.get(), 0, sizeof(RdmaApi));

  Resolver v(verbs, names.verbs.c_str());
  const char* v11 = "IBVERBS_1.1";
  v.get(&api->get_device_list, {"ibv_get_device_list", v11, true});
  v.get(&api->free_device_list, {"ibv_free_device_list", v11, true});
  v.get(&api->get_device_name, {"ibv_get_device_name", v11, true});
  v.get(&api->open_device, {"ibv_open_device", v11, true});
  v.get(&api->close_device, {"ibv_close_device", v11, true});
  v.get(&api->query_device, {"ibv_query_device", v11, true});
  v.get(&api->query_port, {"ibv_query_port", v11, true});
  v.get(&api->query_gid, {"ibv_query_gid", v11, true});
  v.get(&api->alloc_pd, {"ibv_alloc_pd", v11, true});
  v.get(&api->dealloc_pd, {"ibv_dealloc_pd", v11, true});
  v.get(&api->reg_mr, {"ibv_reg_mr", v11, true});
  v.get(&api->reg_mr_iova2, {"ibv_reg_mr_iova2", "IBVERBS_1.8", false});
  v.get(&api->reg_dmabuf_mr, {"ibv_reg_dmabuf_mr", "IBVERBS_1.12", false});
  v.get(&api->dereg_mr, {"ibv_dereg_mr", v11, true});
  v.get(&api->create_comp_channel, {"ibv_create_comp_channel", "IBVERBS_1.0", true});
  v.get(&api->destroy_comp_channel, {"ibv_destroy_comp_channel", "IBVERBS_1.0", true});
  v.get(&api->get_cq_event, {"ibv_get_cq_event", v11, true});
  v.get(&api->ack_cq_events, {"ibv_ack_cq_events", v11, true});
  v.get(&api->destroy_cq, {"ibv_destroy_cq", v11, true});
  v.get(&api->create_qp, {"ibv_create_qp", v11, true});
  v.get(&api->modify_qp, {"ibv_modify_qp", v11, true});
  v.get(&api->destroy_qp, {"ibv_destroy_qp", v11, true});
  v.get(&api->create_ah, {"ibv_create_ah", v11, true});
  v.get(&api->destroy_ah, {"ibv_destroy_ah", v11, true});
  // Completion counters are newer than any release this was written against; their symbol
  // version is not pinned.
  v.get(&api->destroy_comp_cntr, {"ibv_destroy_comp_cntr", nullptr, false});
  v.get(&api->qp_attach_comp_cntr, {"ibv_qp_attach_comp_cntr", nullptr, false});
  if (!v.missing().empty()) {
    *reason = v.missing() + " (not a usable libibverbs)";
    return -ENOENT;
  }

  Resolver e(efa, names.efa.c_str());
  e.get(&api->efadv_query_device, {"efadv_query_device", "EFA_1.1", true});
  e.get(&api->efadv_create_qp_ex, {"efadv_create_qp_ex", "EFA_1.1", true});
  e.get(&api->efadv_query_ah, {"efadv_query_ah", "EFA_1.1", true});
  e.get(&api->efadv_create_cq, {"efadv_create_cq", "EFA_1.2", true});
  e.get(&api->efadv_create_comp_cntr, {"efadv_create_comp_cntr", "EFA_1.7", false});
  if (!e.missing().empty()) {
    *reason = e.missing() + " (rdma-core older than v43 or not libefa)";
    return -ENOSYS;
  }
  e.get(&api->efadv_query_qp_wqs, {"efadv_query_qp_wqs", "EFA_1.4", false});
  e.get(&api->efadv_query_cq, {"efadv_query_cq", "EFA_1.4", false});
  api->queries_from = "libefa";
  if (api->efadv_query_qp_wqs == nullptr || api->efadv_query_cq == nullptr) {
    // A preloaded shim provides the two v59 queries when the installed libefa lacks them; both
    // must come from the same place, since they interpret the same objects.
    void* wqs = dlsym(RTLD_DEFAULT, "efadv_query_qp_wqs");
    void* cq = dlsym(RTLD_DEFAULT, "efadv_query_cq");
    if (wqs == nullptr || cq == nullptr) {
      *reason = names.efa +
                " lacks efadv_query_qp_wqs/efadv_query_cq: rdma-core is older than v59 "
                "(direct queue access needs v59 or newer)";
      return -ENOSYS;
    }
    assign(&api->efadv_query_qp_wqs, wqs);
    assign(&api->efadv_query_cq, cq);
    api->queries_from = "global";
  }
  *api_p = std::move(api);
  reason->clear();
  return 0;
}

int rdma_error(int rc) {
  if (rc == 0) return 0;
  if (rc > 0) return -rc;
  if (rc == -1) return errno > 0 ? -errno : -EIO;
  return rc;
}

}  // namespace hw
}  // namespace xpufab
