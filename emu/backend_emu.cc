// Registers the emulated device as backend "emu". FI_EFA_EMU_DEVICES (default 1, at most 64)
// sets how many devices it offers. FI_EFA_EMU_FABRIC picks the wire they share:
//   inproc (default)  devices of this process only
//   shm               processes of this user on this host (emu/net/shm_fabric.h)
//   udp               hosts; FI_EFA_EMU_UDP_ADDR=ipv4[:port] is the local endpoint (default
//                     127.0.0.1, any port), and GIDs encode it (emu/net/udp_fabric.h)
// FI_EFA_EMU_FABRIC_KEY separates fabrics; FI_EFA_EMU_TIMEOUT_MS bounds how long an operation
// to a silent peer waits before it completes with UNRESP_REMOTE. FI_EFA_EMU_ENGINE_THREAD=0 opens
// devices without an engine thread: only threads that poll or post make progress (manual progress).
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include <unistd.h>

#include "api/backend/backend.h"
#include "emu/device.h"
#include "emu/net/shm_fabric.h"
#include "emu/net/udp_fabric.h"

namespace xpufab {
namespace emu {
namespace {

int device_count() {
  const char* env = std::getenv("FI_EFA_EMU_DEVICES");
  if (env == nullptr || env[0] == '\0') return 1;
  long n = std::strtol(env, nullptr, 10);
  return n < 1 ? 1 : (n > 64 ? 64 : static_cast<int>(n));
}

// The process-wide fabric FI_EFA_EMU_FABRIC names (null: the in-process default), created on
// first use. *udp is set for the UDP fabric, whose GIDs come from its endpoint.
int process_fabric(std::shared_ptr<Fabric>* fabric_p, std::shared_ptr<net::UdpFabric>* udp) {
  static std::mutex mu;
  static std::shared_ptr<Fabric>* fabric = nullptr;
  static std::shared_ptr<net::UdpFabric>* udp_fabric = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (fabric == nullptr) {
    const char* env = std::getenv("FI_EFA_EMU_FABRIC");
    std::string kind = env ? env : "";
    std::shared_ptr<Fabric> f;
    std::shared_ptr<net::UdpFabric> u;
    if (kind == "shm") {
      std::shared_ptr<net::ShmFabric> s;
      int rc = net::ShmFabric::create(net::ShmFabricOptions(), &s);
      if (rc != 0) return rc;
      f = s;
    } else if (kind == "udp") {
      net::UdpFabricOptions o;
      if (const char* a = std::getenv("FI_EFA_EMU_UDP_ADDR")) {
        std::string addr(a);
        size_t colon = addr.find(':');
        o.addr = addr.substr(0, colon);
        if (colon != std::string::npos) o.port = static_cast<uint16_t>(std::strtoul(addr.c_str() + colon + 1, nullptr, 10));
      }
      int rc = net::UdpFabric::create(o, &u);
      if (rc != 0) return rc;
      f = u;
    } else if (!kind.empty() && kind != "inproc") {
      return -EINVAL;
    }
    // Leaked on purpose: devices may outlive static destructors.
    fabric = new std::shared_ptr<Fabric>(f);
    udp_fabric = new std::shared_ptr<net::UdpFabric>(u);
  }
  *fabric_p = *fabric;
  *udp = *udp_fabric;
  return 0;
}

// GIDs are fixed per (process, index) so that enumerate() can report them before opening.
Gid device_gid(int index) {
  std::shared_ptr<Fabric> f;
  std::shared_ptr<net::UdpFabric> udp;
  if (process_fabric(&f, &udp) == 0 && udp) return udp->gid(static_cast<uint8_t>(index));
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
    std::shared_ptr<Fabric> f;
    std::shared_ptr<net::UdpFabric> udp;
    int rc = process_fabric(&f, &udp);
    if (rc != 0) return rc;
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
      std::shared_ptr<net::UdpFabric> udp;
      int rc = process_fabric(&o.fabric, &udp);
      if (rc != 0) return rc;
      if (const char* t = std::getenv("FI_EFA_EMU_TIMEOUT_MS")) {
        uint64_t us = std::strtoull(t, nullptr, 10) * 1000;
        if (us != 0) o.response_timeout_us = static_cast<uint32_t>(std::min<uint64_t>(us / (o.max_retransmits + 1), 1u << 30));
      }
      if (const char* e = std::getenv("FI_EFA_EMU_ENGINE_THREAD")) o.engine_thread = std::strcmp(e, "0") != 0;
      std::unique_ptr<EmuDevice> dev;
      rc = create_device(o, &dev);
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

XPUFAB_REGISTER_BACKEND(g_emu_registered, (backend::BackendFactory{"emu", probe, open}),
                        backend::kPriorityEmulator);

}  // namespace emu
}  // namespace xpufab
