// A seeded, deterministic fault plan for the emulated EFA device: parsed from the text of
// FI_EFA_EMU_FAULTS (or the file named there as "@path") or built by tests, and installed in a
// device as its FaultHooks (emu/fault.h).
//
// Grammar: items separated by ';' (or newlines in a file; '#' starts a comment), each key=value.
//   seed=N                  random stream of this plan (per device: mixed with its name and PID)
//   drop=P                  packets lost on arrival (P in [0,1] or a percentage "10%")
//   dup=P                   packets that arrive twice
//   corrupt=P               packets with one flipped bit; the checksum drops them
//   reorder=P  window=N     packets held back until N (default 8) later packets went by
//   delay_us=N jitter_us=J  every packet (or delay_p=P of them) waits N + [0,J) us
//   stall_us=N  stall_p=P   a doorbell the NIC notices is consumed N us later (P default 1)
//   cq_delay_us=N cq_delay_p=P   CQE writes (and later CQEs of that CQ) wait N us
//   fail=op:OPS,qp:N,peer:GID,size:RANGE,nth:K|every:K,status:STATUS
//                           the K-th (nth) or every K-th (every; default every:1) WQE matching
//                           all given fields completes with STATUS. OPS: send, read, write,
//                           any, joined with '+'. RANGE: N, A-B, >=N, <=N. STATUS: an
//                           EFA_IO_COMP_STATUS name with or without its LOCAL_ERROR_/
//                           REMOTE_ERROR_ prefix (RNR, UNRESP_REMOTE, UNREACH_REMOTE,
//                           BAD_LKEY = INVALID_LKEY, ...) or a number. Repeatable.
//   kill_peer=GID@MS        from MS ms after start, GID neither sends nor receives. Repeatable.
//   partition=GID1,GID2@A-B between A and B ms after start, GID1 and GID2 cannot reach each
//                           other. Repeatable.
// GIDs are IPv6 text (fe80::...) or 32 hex digits. Unknown keys, repeated scalar keys, values
// out of range and modifiers without their base key are errors naming the item.
//
// Determinism: decisions draw from one splitmix64 stream per plan in the order the engine asks,
// so the same seed and the same sequence of questions give the same faults. Time enters only
// through delay/stall/kill/partition windows.
#ifndef XPUFAB_EMU_FAULTS_PLAN_H_
#define XPUFAB_EMU_FAULTS_PLAN_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "emu/fault.h"

namespace xpufab {
namespace emu {
namespace faults {

using GidBytes = std::array<uint8_t, 16>;

enum OpBits : uint8_t { kOpSend = 1, kOpRead = 2, kOpWrite = 4, kOpAny = 7 };

struct FailRule {
  std::string text;           // the item as written, for messages
  uint8_t ops = kOpAny;
  uint32_t qpn = 0;           // 0: any
  bool has_peer = false;
  GidBytes peer{};
  uint32_t min_size = 0, max_size = UINT32_MAX;
  uint64_t nth = 0;           // fail only the nth match (1-based); 0: use every
  uint64_t every = 1;         // fail every k-th match
  uint8_t status = 0;
};

struct PeerWindow {
  GidBytes a{}, b{};
  bool pair = false;          // partition (a<->b) rather than kill (a with anyone)
  uint64_t from_ms = 0, to_ms = UINT64_MAX;
};

struct PlanSpec {
  uint64_t seed = 1;
  // What each device mixes into the seed besides its name: its process id, unless the plan
  // names a stream (stream=N), with which another process draws the same faults again.
  bool has_stream = false;
  uint64_t stream = 0;
  double drop = 0, dup = 0, corrupt = 0, reorder = 0;
  uint32_t window = 8;
  uint32_t delay_us = 0, jitter_us = 0;
  double delay_p = 1;
  uint32_t stall_us = 0;
  double stall_p = 1;
  uint32_t cq_delay_us = 0;
  double cq_delay_p = 1;
  std::vector<FailRule> fails;
  std::vector<PeerWindow> peers;
  // True when the plan can lose packets (the device then keeps retransmission copies).
  bool lossy() const;
  bool empty() const;
};

// 0, or -EINVAL with *error naming the offending item.
int parse_plan(const std::string& text, PlanSpec* spec, std::string* error);

// The plan text a FI_EFA_EMU_FAULTS value stands for: the value itself, or for "@path" the
// file's contents. 0, or -EINVAL with *error for a file that cannot be read.
int read_plan_text(const std::string& value, std::string* text, std::string* error);

// Reads FI_EFA_EMU_FAULTS. Sets *present to whether it is set and non-empty; "@path" reads the
// plan from a file. 0, or -EINVAL (bad plan, unreadable file) with *error.
int plan_from_env(PlanSpec* spec, bool* present, std::string* error);

// Parses a status name as fail= accepts it. -1 if unknown.
int parse_status(const std::string& name);
const char* status_name(uint8_t status);
// IPv6 text or 32 hex digits.
bool parse_gid(const std::string& text, GidBytes* gid);
std::string gid_text(const GidBytes& gid);

// The FaultHooks a device runs. Thread-compatible: the engine calls at() under the device lock.
class FaultPlan : public FaultHooks {
 public:
  // start_ns: the origin of kill/partition windows (the device's creation); 0 means the first
  // question's clock.
  explicit FaultPlan(const PlanSpec& spec, uint64_t start_ns = 0);
  FaultDecision at(const FaultContext& ctx) override;
  const PlanSpec& spec() const { return spec_; }
  // Mixes the device's identity (its name, and the plan's stream or else `process`, its PID)
  // into the random stream, so that devices sharing one plan text, in one process or several,
  // do not make identical choices.
  void personalize(const std::string& device, uint64_t process);
  uint64_t injected() const { return injected_; }

 private:
  double uniform();
  bool chance(double p);
  bool peer_blocked(const FaultContext& ctx) const;
  FaultDecision packet_in(const FaultContext& ctx);
  FaultDecision wqe(const FaultContext& ctx);

  PlanSpec spec_;
  uint64_t start_ns_;
  uint64_t rng_;
  std::vector<uint64_t> matched_;            // per fail rule
  std::map<uint32_t, uint64_t> stall_until_;  // doorbell index -> release time
  uint64_t injected_ = 0;
};

// Parses text and builds a plan. 0 or -EINVAL with *error.
int make_plan(const std::string& text, std::unique_ptr<FaultPlan>* plan, std::string* error);

}  // namespace faults
}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_FAULTS_PLAN_H_
