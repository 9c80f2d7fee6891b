#include "emu/settings.h"

namespace xpufab {
namespace emu {

using backend::SettingType;

const backend::BackendSetting kEmuSettings[] = {
    {"FI_EFA_EMU_PROFILE", SettingType::kString,
     "Emulated generation: gen1, gen2, gen3, gen4 or latest (default: latest)"},
    {"FI_EFA_EMU_CAPS_CLEAR", SettingType::kString,
     "Capabilities removed from the profile: names (rdma_write,comp_cntr,...), none, or a mask"},
    {"FI_EFA_EMU_DEVICES", SettingType::kInt, "Emulated devices a process offers (default: 1)"},
    {"FI_EFA_EMU_FABRIC", SettingType::kString,
     "Wire the emulated devices share: shm (this host), inproc (this process) or udp "
     "(default: shm)"},
    {"FI_EFA_EMU_SHM_DIR", SettingType::kString,
     "Directory of the shm fabric's mailboxes (default: /dev/shm)"},
    {"FI_EFA_EMU_UDP_ADDR", SettingType::kString,
     "Local ipv4[:port] of the UDP fabric (default: 127.0.0.1, any port)"},
    {"FI_EFA_EMU_FABRIC_KEY", SettingType::kString,
     "Fabric key: separates fabrics and keys every UDP packet's checksum"},
    {"FI_EFA_EMU_TIMEOUT_MS", SettingType::kInt,
     "How long an operation to a silent peer waits before UNRESP_REMOTE (default: the device's)"},
    {"FI_EFA_EMU_MAX_QP", SettingType::kInt,
     "Most QPs one emulated device holds (default: 2048, at most 65535)"},
    {"FI_EFA_EMU_ONE_COPY", SettingType::kBool,
     "Large RDMA payloads copied straight between processes where the fabric allows "
     "(default: 1)"},
    {"FI_EFA_EMU_POSITION_ANSWERS", SettingType::kBool,
     "Requests that ran as asked are answered by the responder's executed mark where the fabric "
     "shows it (shm), not by a packet each (default: 1)"},
    {"FI_EFA_EMU_MIN_RTO_US", SettingType::kInt,
     "Floor of the retransmission timeout in microseconds (default: 10)"},
    {"FI_EFA_EMU_ENGINE_THREAD", SettingType::kBool,
     "An engine thread per device; 0: only threads that poll or post move the device "
     "(default: 1)"},
    {"FI_EFA_EMU_PARK_MAX_US", SettingType::kInt,
     "Longest park of the engine thread while a caller drives it, in microseconds (default: "
     "4000)"},
    {"FI_EFA_EMU_SEED", SettingType::kInt, "Seed of the emulator's random choices"},
    {"FI_EFA_EMU_STRICT", SettingType::kBool, "Device diagnostics are fatal (default: 0)"},
    {"FI_EFA_EMU_CHECK_BATCH", SettingType::kBool,
     "Check the device's max_batch on every doorbell (default: 0)"},
    {"FI_EFA_EMU_FAULTS", SettingType::kString, "Fault plan, or @file holding one"},
    {"FI_EFA_EMU_TRACE", SettingType::kString,
     "Event trace written to <prefix>.<device>.json and .txt"},
    {"FI_EFA_EMU_TRACE_MAX", SettingType::kInt, "Events the trace keeps"},
    {"FI_EFA_EMU_STATS", SettingType::kString,
     "Statistics written to <prefix>.<device>.stats"},
};

const size_t kNumEmuSettings = sizeof(kEmuSettings) / sizeof(kEmuSettings[0]);

}  // namespace emu
}  // namespace xpufab
