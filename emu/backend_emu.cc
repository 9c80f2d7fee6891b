// Registers the emulated device as backend "emu". FI_EFA_EMU_DEVICES (default 1, at most 64)
// sets how many devices it offers. FI_EFA_EMU_FABRIC picks the wire they share:
//   shm (default)     processes of this user on this host (emu/net/shm_fabric.h), as every
//                     process of a real EFA host shares its NIC; devices of one process reach
//                     each other directly, without the mailbox
//   inproc            devices of this process only
//   udp               hosts; FI_EFA_EMU_UDP_ADDR=ipv4[:port] is the local endpoint (default
//                     127.0.0.1, any port), and GIDs encode it (emu/net/udp_fabric.h)
// FI_EFA_EMU_FABRIC_KEY separates fabrics; FI_EFA_EMU_TIMEOUT_MS bounds how long an operation
// to a silent peer waits before it completes with UNRESP_REMOTE. FI_EFA_EMU_ENGINE_THREAD=0 opens
// devices without an engine thread: only threads that poll or post make progress (manual progress).
// All of these, and the device's own variables, are read by emu/options_env.h.
#include <atomic>
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
#include "emu/options_env.h"
#include "emu/settings.h"

namespace xpufab {
namespace emu {
namespace {

int device_count() {
  BackendEnv e;
  backend_env(&e, nullptr);
  return e.devices;
}

// The shm fabric of this process, to leave when the process exits: the fabric itself is never
// destroyed, so its mailboxes and its key's directory would otherwise stay behind.
pid_t exiting_shm_pid = 0;
std::atomic<net::ShmFabric*> exiting_shm_fabric{nullptr};  // published after the pid

void leave_shm_fabric_at_exit() {
  net::ShmFabric* f = exiting_shm_fabric.load(std::memory_order_acquire);
  // A forked child that exits must not close its parent's mailboxes.
  if (f != nullptr && getpid() == exiting_shm_pid) f->leave();
}

// The process-wide fabric FI_EFA_EMU_FABRIC names (null: the in-process fabric), created on
// first use. *udp is set for the UDP fabric, whose GIDs come from its endpoint.
int process_fabric(std::shared_ptr<Fabric>* fabric_p, std::shared_ptr<net::UdpFabric>* udp) {
  static std::mutex mu;
  static std::shared_ptr<Fabric>* fabric = nullptr;
  static std::shared_ptr<net::UdpFabric>* udp_fabric = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (fabric == nullptr) {
    BackendEnv e;
    int rc = backend_env(&e, nullptr);
    if (rc != 0) return rc;
    std::shared_ptr<Fabric> f;
    std::shared_ptr<net::UdpFabric> u;
    if (e.fabric == FabricKind::kShm) {
      std::shared_ptr<net::ShmFabric> s;
      rc = net::ShmFabric::create(net::ShmFabricOptions(), &s);
      if (rc != 0) return rc;
      exiting_shm_pid = getpid();
      exiting_shm_fabric.store(s.get(), std::memory_order_release);
      std::atexit(leave_shm_fabric_at_exit);
      f = s;
    } else if (e.fabric == FabricKind::kUdp) {
      net::UdpFabricOptions o;
      if (e.has_udp_addr) {
        o.addr = e.udp_addr;
        o.port = e.udp_port;
      }
      rc = net::UdpFabric::create(o, &u);
      if (rc != 0) return rc;
      f = u;
    }
    // Leaked on purpose: devices may outlive static destructors.
    fabric = new std::shared_ptr<Fabric>(f);
    udp_fabric = new std::shared_ptr<net::UdpFabric>(u);
  }
  *fabric_p = *fabric;
  *udp = *udp_fabric;
  return 0;
}

// GIDs are fixed per (process, index) so that enumerate() can report them before opening; the
// process part is random (process_nonce), since PIDs repeat across PID namespaces that share
// /dev/shm (concurrent sandboxed tests). A reopened device keeps its GID: the shm fabric sends
// to its new mailbox at once, and its tokens differ from its predecessor's (device_impl.h).
Gid device_gid(int index) {
  std::shared_ptr<Fabric> f;
  std::shared_ptr<net::UdpFabric> udp;
  if (process_fabric(&f, &udp) == 0 && udp) return udp->gid(static_cast<uint8_t>(index));
  uint64_t n = process_nonce();
  return Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 'e', static_cast<uint8_t>(n >> 32),
             static_cast<uint8_t>(n >> 24), static_cast<uint8_t>(n >> 16), static_cast<uint8_t>(n >> 8),
             static_cast<uint8_t>(n), static_cast<uint8_t>(index)};
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
      BackendEnv e;
      rc = backend_env(&e, nullptr);
      if (rc != 0) return rc;
      apply_timeout_ms(e.timeout_ms, &o);
      o.engine_thread = e.engine_thread;
      o.log = log_to_stderr;
      std::string err;
      rc = device_options_from_env(&o, &err);
      if (rc != 0) {
        log_to_stderr("xpufab emu: " + name + ": " + err);
        return rc;
      }
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

XPUFAB_REGISTER_BACKEND(g_emu_registered,
                        (backend::BackendFactory{"emu", probe, open, kEmuSettings,
                                                 kNumEmuSettings}),
                        backend::kPriorityEmulator);

}  // namespace emu
}  // namespace xpufab
