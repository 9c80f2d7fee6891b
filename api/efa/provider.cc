// The "efa" provider: its registration with the core, the backend it runs on (FI_EFA_BACKEND,
// api/backend/choice.h) and the process-wide table of open devices its domains share.
#include <cerrno>
#include <cstring>

#include "api/backend/backend.h"
#include "api/backend/choice.h"
#include "api/core/param.h"
#include "api/core/provider.h"
#include "api/efa/efa.h"

namespace xpufab::efa {

int to_fi_err(int rc) {
  if (rc >= 0) return rc;
  switch (-rc) {
    case EINVAL: return -FI_EINVAL;
    case ENOMEM: return -FI_ENOMEM;
    case EBUSY: return -FI_EBUSY;
    case ENODEV: return -FI_ENODEV;
    case ENOENT: return -FI_ENOENT;
    case EOPNOTSUPP: return -FI_EOPNOTSUPP;
    case EAGAIN: return -FI_EAGAIN;
    case ENOSPC: return -FI_ENOSPC;
    case EEXIST: return -FI_EALREADY;
    case EACCES: return -FI_EACCES;
    case EPERM: return -FI_EPERM;
    case ENOSYS: return -FI_ENOSYS;
    default: return -FI_EOTHER;
  }
}

// ---- backends and shared devices ------------------------------------------------------------

namespace {

// Guards the open backends and the device table.
std::mutex g_dev_lock;
// Each backend is opened once and kept for the life of the process.
std::map<std::string, std::unique_ptr<backend::Backend>>& backends() {
  static auto* m = new std::map<std::string, std::unique_ptr<backend::Backend>>();
  return *m;
}
std::vector<SharedDevice*>& devices() {
  static auto* v = new std::vector<SharedDevice*>();
  return *v;
}

// g_dev_lock held.
int get_backend(const std::string& name, backend::Backend** b) {
  auto it = backends().find(name);
  if (it == backends().end()) {
    std::unique_ptr<backend::Backend> be;
    int rc = backend::open_backend(name, &be);
    if (rc) return rc;
    it = backends().emplace(name, std::move(be)).first;
  }
  *b = it->second.get();
  return 0;
}

// Routes device failure reports to the EP that owns the QP.
class DeviceEvents : public backend::EventHandler {
 public:
  explicit DeviceEvents(SharedDevice* sd) : sd_(sd) {}
  void handle_failure(backend::Qp* qp, int status) override { ep_qp_failed(sd_, qp, status); }
  void cq_overrun(backend::Cq*) override {
    EFA_WARN(kCq, "device %s: a CQ overran; completions were lost", sd_->name.c_str());
  }

 private:
  SharedDevice* sd_;
};

}  // namespace

int select_backend(std::string* name_p, std::vector<backend::DeviceInfo>* devices_p) {
  const std::string want = backend::requested_backend();
  backend::BackendChoice choice;
  std::string why;
  int rc;
  {
    std::lock_guard<std::mutex> g(g_dev_lock);
    rc = backend::choose_backend(want, get_backend, &choice, &why);
  }
  if (rc == -EINVAL) {
    EFA_WARN(kCore, "%s", why.c_str());
    return rc;
  }
  if (rc) {
    EFA_INFO(kCore, "%s", why.c_str());
    return rc;
  }
  *name_p = std::move(choice.name);
  *devices_p = std::move(choice.devices);
  return 0;
}

int acquire_device(const std::string& backend_name, const std::string& name, SharedDevice** out) {
  std::lock_guard<std::mutex> g(g_dev_lock);
  for (SharedDevice* d : devices()) {
    if (d->backend == backend_name && d->name == name) {
      d->users++;
      *out = d;
      return 0;
    }
  }
  backend::Backend* b = nullptr;
  int rc = get_backend(backend_name, &b);
  if (rc) return rc;
  auto d = std::make_unique<SharedDevice>();
  rc = b->open_device(name, &d->dev);
  if (rc) return rc;
  rc = d->dev->query(&d->attr);
  if (rc) return rc;
  d->backend = backend_name;
  d->name = name;
  d->users = 1;
  d->handler = std::make_unique<DeviceEvents>(d.get());
  d->dev->set_event_handler(d->handler.get());
  *out = d.get();
  devices().push_back(d.release());
  return 0;
}

void release_device(SharedDevice* d) {
  std::unique_ptr<SharedDevice> doomed;
  {
    std::lock_guard<std::mutex> g(g_dev_lock);
    if (--d->users > 0) return;
    auto& v = devices();
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (*it == d) {
        v.erase(it);
        break;
      }
    }
    doomed.reset(d);
  }
  doomed->dev->set_event_handler(nullptr);
  // Destroyed outside the lock: the device may join its engine thread.
}

// ---- registration ---------------------------------------------------------------------------

namespace {

class EfaProvider : public core::Provider {
 public:
  const char* name() const override { return kProvName; }
  uint32_t version() const override { return kProvVersion; }

  // EFA has no service namespace: an endpoint's QPN is assigned when it is enabled.
  int getinfo(uint32_t, const char* node, const char*, uint64_t flags, const fi_info* hints,
              fi_info** info_p) override {
    return provider_getinfo(node, flags, hints, info_p);
  }

  int fabric(fi_fabric_attr* attr, fid_fabric** fabric_p, void* context) override {
    return fabric_open(attr, fabric_p, context);
  }
};

// The variables the provider itself reads, declared so that fi_getparams (fi_info -e) lists them
// with their values. Declared before the registration, so a program never sees the provider
// without them.
struct ParamDeclarations {
  ParamDeclarations() {
    core::define_param(kProvName, "backend", FI_PARAM_STRING,
                       "Backend to run on: a registered name (emu, hw) or auto, the "
                       "highest-priority backend with a device (default: auto)");
    core::define_param(kProvName, "cq_trace", FI_PARAM_STRING,
                       "File recording every completion the provider polls, in backend-independent "
                       "fields, read when the process starts (default: none)");
    core::define_param(kProvName, "max_peers", FI_PARAM_INT,
                       "Most peers one endpoint of the efa fabric exchanges messages with; its "
                       "peer table grows to this on demand, lowered to what the device's receive "
                       "queue and CQ hold (default: 1024)");
  }
};

// The backends' own variables (the emulator's FI_EFA_EMU_*), declared when they are listed: the
// backends register during static initialization too, in an order nothing fixes.
void declare_backend_settings() {
  constexpr char kPrefix[] = "FI_EFA_";
  for (const backend::BackendSetting& b : backend::backend_settings()) {
    if (std::strncmp(b.env_name, kPrefix, sizeof(kPrefix) - 1) != 0) continue;
    fi_param_type type = FI_PARAM_STRING;
    if (b.type == backend::SettingType::kInt) type = FI_PARAM_INT;
    if (b.type == backend::SettingType::kBool) type = FI_PARAM_BOOL;
    core::define_param(kProvName, b.env_name + sizeof(kPrefix) - 1, type, b.help);
  }
}

struct BackendSettingDeclarations {
  BackendSettingDeclarations() { core::add_param_declarer(declare_backend_settings); }
};

ParamDeclarations g_params;
BackendSettingDeclarations g_backend_params;
EfaProvider g_provider;
core::ProviderRegistration g_registration(&g_provider);

}  // namespace

}  // namespace xpufab::efa
