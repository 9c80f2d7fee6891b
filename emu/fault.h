// Fault hooks: the NIC engine asks a FaultHooks object at each decision point what to do. With
// no hooks installed the engine pays one null-pointer test per point. The seeded fault plan
// (emu/faults/plan.h, FI_EFA_EMU_FAULTS) implements this interface; tests may implement it
// directly.
#ifndef XPUFAB_EMU_FAULT_H_
#define XPUFAB_EMU_FAULT_H_

#include <array>
#include <cstdint>

namespace xpufab {
namespace emu {

enum class FaultPoint : uint8_t {
  kDoorbellRead,     // a changed doorbell was noticed; kDrop stalls it until the next pass
  kWqeFetch,         // a WQE was fetched; kFail completes it with `status`, kDrop loses it
  kPacketOut,        // a packet leaves; kDrop loses it (SRD retransmits requests); kFail
                     // rewrites a response's status
  kPacketIn,         // a packet arrives; kDrop, kDup, kCorrupt, kDelay, kHold
  kCompletionWrite,  // a CQE is about to be written; kDrop loses it, kFail rewrites its status,
                     // kDelay writes it (and the CQ's later entries) delay_us later
};

enum class FaultAction : uint8_t {
  kPass,
  kDrop,
  kFail,
  kDup,      // the packet is processed twice (a duplicate on the wire)
  kCorrupt,  // a seeded bit of the packet flips; the checksum catches it and the packet is lost
  kDelay,    // the packet / CQE waits delay_us
  kHold,     // reordering: the packet waits until `hold` later packets (or passes) went by
};

const char* fault_point_name(FaultPoint p);
const char* fault_action_name(FaultAction a);

struct FaultContext {
  FaultPoint point;
  uint32_t qpn;     // local QP (0 when not known)
  uint32_t slot;    // SQ/RQ/CQ slot or doorbell index where meaningful
  uint8_t op;       // efa_io_send_op_type where meaningful
  bool response;    // packets: a response rather than a request
  uint8_t queue;    // doorbells and CQEs: efa_io_queue_type (1 SQ, 2 RQ), 0 for a CQ doorbell
  uint32_t size = 0;        // WQE fetch and packets: bytes the operation moves
  bool has_peer = false;    // WQE fetch (when the AH resolves) and packets
  std::array<uint8_t, 16> peer{};   // the remote GID
  std::array<uint8_t, 16> local{};  // this device's GID
  uint64_t now_ns = 0;      // the engine's clock for this pass
};

struct FaultDecision {
  FaultAction action = FaultAction::kPass;
  uint8_t status = 0;     // kFail: the efa_io_comp_status to report
  uint32_t delay_us = 0;  // kDelay
  uint32_t hold = 0;      // kHold: later packets to let by first
  uint32_t bit = 0;       // kCorrupt: which bit (modulo the packet's size in bits) flips
  bool repeat = false;    // the continuation of a fault already reported (a stall that lasts)
};

class FaultHooks {
 public:
  virtual ~FaultHooks() = default;
  // Called from the thread driving the engine, with the device lock held: must not call back
  // into the device.
  virtual FaultDecision at(const FaultContext& ctx) = 0;
};

inline const char* fault_point_name(FaultPoint p) {
  switch (p) {
    case FaultPoint::kDoorbellRead: return "doorbell";
    case FaultPoint::kWqeFetch: return "wqe";
    case FaultPoint::kPacketOut: return "pkt_out";
    case FaultPoint::kPacketIn: return "pkt_in";
    case FaultPoint::kCompletionWrite: return "cqe";
  }
  return "?";
}

inline const char* fault_action_name(FaultAction a) {
  switch (a) {
    case FaultAction::kPass: return "pass";
    case FaultAction::kDrop: return "drop";
    case FaultAction::kFail: return "fail";
    case FaultAction::kDup: return "dup";
    case FaultAction::kCorrupt: return "corrupt";
    case FaultAction::kDelay: return "delay";
    case FaultAction::kHold: return "reorder";
  }
  return "?";
}

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_FAULT_H_
