// Fault hooks: the NIC engine asks a FaultHooks object at each decision point what to do. With
// no hooks installed the engine pays one null-pointer test per point. A later fault plan
// (FI_EFA_EMU_FAULTS) implements this interface; tests implement it directly.
#ifndef XPUFAB_EMU_FAULT_H_
#define XPUFAB_EMU_FAULT_H_

#include <cstdint>

namespace xpufab {
namespace emu {

enum class FaultPoint : uint8_t {
  kDoorbellRead,     // a changed doorbell was noticed; kDrop stalls it until the next pass
  kWqeFetch,         // a WQE was fetched; kFail completes it with `status`
  kPacketOut,        // a packet leaves; kDrop loses it (SRD retransmits requests)
  kPacketIn,         // a packet arrives; kDrop loses it
  kCompletionWrite,  // a CQE is about to be written; kDrop loses it, kFail rewrites its status
};

enum class FaultAction : uint8_t { kPass, kDrop, kFail };

struct FaultContext {
  FaultPoint point;
  uint32_t qpn;     // local QP (0 when not known)
  uint32_t slot;    // SQ/RQ/CQ slot or doorbell index where meaningful
  uint8_t op;       // efa_io_send_op_type where meaningful
  bool response;    // packets: a response rather than a request
  uint8_t queue;    // doorbells and CQEs: efa_io_queue_type (1 SQ, 2 RQ), 0 for a CQ doorbell
};

struct FaultDecision {
  FaultAction action = FaultAction::kPass;
  uint8_t status = 0;  // for kFail: the efa_io_comp_status to report
};

class FaultHooks {
 public:
  virtual ~FaultHooks() = default;
  // Called from the thread driving the engine, with the device lock held: must not call back
  // into the device.
  virtual FaultDecision at(const FaultContext& ctx) = 0;
};

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_FAULT_H_
