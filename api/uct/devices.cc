// The backend the transport runs on and the devices its MDs and interfaces share: one backend
// instance and one open Device per name for the life of the process, as the efa provider keeps.
#include <cerrno>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/backend/backend.h"
#include "api/backend/choice.h"
#include "api/uct/srd.h"

namespace xpufab {
namespace uct {
namespace {

std::mutex& table_lock() {
  static auto* m = new std::mutex();
  return *m;
}

std::map<std::string, std::unique_ptr<backend::Backend>>& backends() {
  static auto* m = new std::map<std::string, std::unique_ptr<backend::Backend>>();
  return *m;
}

std::map<std::string, SharedDevice*>& devices() {
  static auto* m = new std::map<std::string, SharedDevice*>();
  return *m;
}

struct Chosen {
  bool done = false;
  int rc = 0;
  std::string backend;
  std::vector<backend::DeviceInfo> devices;
  std::string why;
};

Chosen& chosen() {
  static auto* c = new Chosen();
  return *c;
}

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

// Once per process, under table_lock().
Chosen& choose_locked() {
  Chosen& c = chosen();
  if (c.done) return c;
  c.done = true;
  backend::BackendChoice choice;
  c.rc = backend::choose_backend(backend::requested_backend(), get_backend, &choice, &c.why);
  if (c.rc == 0) {
    c.backend = choice.name;
    c.devices = choice.devices;
  }
  return c;
}

}  // namespace

int list_devices(std::string* backend_p, std::vector<backend::DeviceInfo>* devices_p,
                 std::string* why) {
  std::lock_guard<std::mutex> g(table_lock());
  Chosen& c = choose_locked();
  if (c.rc) {
    if (why) *why = c.why;
    return c.rc;
  }
  if (backend_p) *backend_p = c.backend;
  if (devices_p) *devices_p = c.devices;
  return 0;
}

int acquire_device(const std::string& name, SharedDevice** dev_p) {
  std::lock_guard<std::mutex> g(table_lock());
  Chosen& c = choose_locked();
  if (c.rc) return c.rc;
  auto it = devices().find(name);
  if (it != devices().end()) {
    ++it->second->refs;
    *dev_p = it->second;
    return 0;
  }
  bool known = false;
  for (const auto& d : c.devices) known |= d.name == name;
  if (!known) return -ENODEV;
  backend::Backend* b = nullptr;
  int rc = get_backend(c.backend, &b);
  if (rc) return rc;
  auto sd = std::make_unique<SharedDevice>();
  sd->backend = c.backend;
  sd->name = name;
  rc = b->open_device(name, &sd->dev);
  if (rc == 0) rc = sd->dev->query(&sd->attr);
  if (rc == 0) rc = sd->dev->alloc_pd(&sd->pd);
  if (rc) return rc;
  sd->refs = 1;
  *dev_p = sd.get();
  devices()[name] = sd.release();
  return 0;
}

// The device stays open once used: peers may still address its QPs until the process ends, and
// reopening an emulated device would give it a new identity.
void release_device(SharedDevice* dev) {
  std::lock_guard<std::mutex> g(table_lock());
  if (dev && dev->refs > 0) --dev->refs;
}

}  // namespace uct
}  // namespace xpufab
