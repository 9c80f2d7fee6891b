// The emulated fabrics the multi-process tests run over, set in the parent's environment before
// it forks, so that every member of a group opens its device on the same fabric: shared memory,
// UDP on loopback, and shared memory with loss and reordering.
#ifndef XPUFAB_TESTING_EFA_FABRIC_ENV_H_
#define XPUFAB_TESTING_EFA_FABRIC_ENV_H_

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace xpufab::efa_fabric {

enum class Wire { kShm, kUdp, kShmFaults };

inline const char* wire_name(Wire w) {
  switch (w) {
    case Wire::kShm: return "Shm";
    case Wire::kUdp: return "Udp";
    case Wire::kShmFaults: return "ShmFaults";
  }
  return "?";
}

// `test` keeps the packets of one test's group away from any other's.
inline void use_wire(Wire w, const std::string& test) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  setenv("FI_EFA_BACKEND", "emu", 1);
  setenv("FI_EFA_EMU_FABRIC", w == Wire::kUdp ? "udp" : "shm", 1);
  setenv("FI_EFA_EMU_SHM_DIR", tmp ? tmp : "/tmp", 1);
  setenv("FI_EFA_EMU_UDP_ADDR", "127.0.0.1", 1);
  const std::string key = "efa-fabric-" + test + "-" + wire_name(w) + "-" + std::to_string(getpid());
  setenv("FI_EFA_EMU_FABRIC_KEY", key.c_str(), 1);
  // A 4 MiB rendezvous is a burst of RDMA read responses; over UDP on a loaded machine the
  // socket drops part of it and the retransmissions take longer than the device's default
  // patience with a silent peer.
  setenv("FI_EFA_EMU_TIMEOUT_MS", "30000", 1);
  if (w == Wire::kShmFaults)
    setenv("FI_EFA_EMU_FAULTS", "seed=1;drop=0.1;reorder=0.2", 1);
  else
    unsetenv("FI_EFA_EMU_FAULTS");
}

}  // namespace xpufab::efa_fabric

#endif  // XPUFAB_TESTING_EFA_FABRIC_ENV_H_
