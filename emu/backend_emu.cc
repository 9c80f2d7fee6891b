// Registers the emulated device as backend "emu". FI_EFA_EMU_DEVICES (default 1, at most 64)
// sets how many devices it offers; they share the process-wide in-process fabric.
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <unistd.h>

#include "api/backend/backend.h"
#include "emu/device.h"

namespace xpufab {
namespace emu {
namespace {

int device_count() {
  const char* env = std::getenv("FI_EFA_EMU_DEVICES");
  if (env == nullptr || env[0] == '\0') return 1;
  long n = std::strtol(env, nullptr, 10);
  return n < 1 ? 1 : (n > 64 ? 64 : static_cast<int>(n));
}

// GIDs are fixed per (process, index) so that enumerate() can report them before opening.
Gid device_gid(int index) {
  uint32_t pid = static_cast<uint32_t>(getpid());
  return Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 'e', static_cast<uint8_t>(pid >> 16),
             static_cast<uint8_t>(pid >> 8), static_cast<uint8_t>(pid), 0, 0,
             static_cast<uint8_t>(index)};
}

class EmuBackend : public backend::Backend {
 public:
  const char* name() const override { return "emu"; }

  int enumerate(std::vector<backend::DeviceInfo>* devices_p) override {
    if (devices_p == nullptr) return -EINVAL;
    devices_p->clear();
    for (int i = 0, n = device_count(); i < n; ++i) {
      backend::DeviceInfo info;
      info.name = "efa_emu" + std::to_string(i);
      Gid g = device_gid(i);
      std::memcpy(info.gid, g.data(), 16);
      devices_p->push_back(info);
    }
    return 0;
  }

  // -ENODEV for an unknown name; -EBUSY while the same device is open elsewhere in the process.
  int open_device(const std::string& name, std::unique_ptr<backend::Device>* device_p) override {
    if (device_p == nullptr) return -EINVAL;
    for (int i = 0, n = device_count(); i < n; ++i) {
      if (name != "efa_emu" + std::to_string(i)) continue;
      DeviceOptions o;
      o.name = name;
      o.has_gid = true;
      o.gid = device_gid(i);
      std::unique_ptr<EmuDevice> dev;
      int rc = create_device(o, &dev);
      if (rc == -EEXIST) return -EBUSY;
      if (rc != 0) return rc;
      *device_p = std::move(dev);
      return 0;
    }
    return -ENODEV;
  }
};

int probe() { return 0; }  // always available

int open(std::unique_ptr<backend::Backend>* backend_p) {
  backend_p->reset(new EmuBackend());
  return 0;
}

}  // namespace

XPUFAB_REGISTER_BACKEND(g_emu_registered, (backend::BackendFactory{"emu", probe, open}));

}  // namespace emu
}  // namespace xpufab
