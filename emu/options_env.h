// The one reader of the FI_EFA_EMU_* environment for the emulated device and the emu backend.
// The device model itself reads no environment; what a variable sets ends up in DeviceOptions
// (device_options_from_env) or in the backend's choices (backend_env).
//
// Device (applied over what the caller set):
//   FI_EFA_EMU_PROFILE=gen1..gen4|latest  the generation, when options leave profile null
//   FI_EFA_EMU_CAPS_CLEAR=names|mask      device_caps bits removed from that profile (profile.h)
//   FI_EFA_EMU_STRICT=1, FI_EFA_EMU_CHECK_BATCH=1  turn strict / check_batch on (also yes, true)
//   FI_EFA_EMU_SEED=N                     the seed
//   FI_EFA_EMU_FAULTS=plan|@file          the fault plan, when options set neither hooks nor plan
//   FI_EFA_EMU_TRACE=prefix               trace, written to <prefix>.<device>.json/.txt
//   FI_EFA_EMU_TRACE_MAX=N                events the trace keeps (N > 0)
//   FI_EFA_EMU_STATS=prefix               statistics, written to <prefix>.<device>.stats
//   FI_EFA_EMU_MIN_RTO_US=N               the retransmission timeout's floor (N > 0, default 10)
//   FI_EFA_EMU_ONE_COPY=0                 large RDMA payloads always cross the fabric (no
//                                         process_vm_readv one-copy transfers)
//   FI_EFA_EMU_POSITION_ANSWERS=0         every answer is a packet (no answers by position)
// Backend:
//   FI_EFA_EMU_DEVICES=N                  devices offered (default 1, clamped to 1..64)
//   FI_EFA_EMU_FABRIC=shm|inproc|udp      the wire the devices share (default shm)
//   FI_EFA_EMU_UDP_ADDR=ipv4[:port]       the UDP fabric's local endpoint
//   FI_EFA_EMU_TIMEOUT_MS=N               bound on an operation to a silent peer (0: default)
//   FI_EFA_EMU_ENGINE_THREAD=0            devices without an engine thread (manual progress)
// Read elsewhere, by the fabrics themselves: FI_EFA_EMU_FABRIC_KEY (emu/net/wire.h) and
// FI_EFA_EMU_SHM_DIR (emu/net/shm_fabric.h).
#ifndef XPUFAB_EMU_OPTIONS_ENV_H_
#define XPUFAB_EMU_OPTIONS_ENV_H_

#include <cstdint>
#include <string>

#include "emu/device.h"

namespace xpufab {
namespace emu {

// FI_EFA_EMU_PROFILE if set (-EINVAL when it names no profile), else the default; then
// FI_EFA_EMU_CAPS_CLEAR, if set, removes device_caps bits from that profile so the emulator can
// mirror a real device that lacks them (hardware bring-up compares the two). Its value is a
// comma-separated list of cap names (as caps_to_string() prints them, e.g.
// "cq_with_ext_mem,comp_cntr") or a numeric backend::DeviceCap mask ("0x60"); -EINVAL for an
// unknown name or trailing garbage. The device then refuses what the cleared caps stand for,
// exactly as it does for a generation without them. The returned profile lives for the whole
// process.
int profile_from_env(const Profile** profile_p);

// Applies the device variables to *options. 0, or -EINVAL with *error naming the variable and
// its bad value (an unknown profile or cap, a fault plan that does not parse or a file that
// cannot be read, a TRACE_MAX or MIN_RTO_US that is not a positive number, a MAX_QP outside
// 1..65535).
int device_options_from_env(DeviceOptions* options, std::string* error);

enum class FabricKind : uint8_t { kInProc, kShm, kUdp };

struct BackendEnv {
  int devices = 1;
  FabricKind fabric = FabricKind::kShm;
  bool has_udp_addr = false;
  std::string udp_addr;    // ipv4 text
  uint16_t udp_port = 0;   // 0: any (also when FI_EFA_EMU_UDP_ADDR names no port)
  uint64_t timeout_ms = 0; // 0: the device's own timeouts
  bool engine_thread = true;
};

// Reads the backend variables. 0, or -EINVAL with *error for an unknown fabric.
int backend_env(BackendEnv* env, std::string* error);

// Sets a device's response timeout so that an operation to a silent peer fails after about
// timeout_ms, across its retransmissions. No change for 0.
void apply_timeout_ms(uint64_t timeout_ms, DeviceOptions* options);

// A DeviceOptions::log that writes each line to stderr.
void log_to_stderr(const std::string& line);

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_OPTIONS_ENV_H_
