// The emulated EFA device: a backend::Device whose queues live in ordinary memory and whose NIC
// engine consumes the same WQE/RX-descriptor bytes and produces the same CQE bytes as the
// hardware (formats in device/efa_io_defs.h).
//
// Engine. step() does one bounded pass: take packets that arrived, notice doorbell writes,
// fetch and execute WQEs, fire timers (RNR retry, timeouts). Any thread may drive it through
// progress(); one optional engine thread per device drives it when nobody else does. The engine
// thread parks while callers are driving (so a 2-core machine does not pay for hand-offs),
// spins briefly after work while requests of the device await answers (or device code polls an
// external-memory CQ, where its sleeps also start short), and otherwise sleeps at once; fabric
// deliveries and control calls wake it early. A park lasts park_us, doubling up to park_max_us
// while the callers keep driving (a caller that called during a park drives still, though
// preempted since); arming a CQ (a caller about to block on its event) and kick() end it at
// once, and a caller that just stops calling is taken over from within two parks.
// A device kernel that only writes doorbells is noticed within the sleep period
// (idle_sleep_max_us, or four times that once the device has been idle for a second, unless a
// CQ in external memory is live: device code polls that one and never calls in, so its device
// keeps the idle_sleep_max_us bound and parks of park_us).
//
// Doorbells are dense 32-bit words in one page (as the doorbell BAR is). The cost of a pass does
// not grow with idle QPs; a doorbell of an idle QP is noticed within a bounded number of passes,
// and after the engine slept the whole page is compared once (emu/doorbells.h).
//
// Diagnostics (reported through stats, the diagnostic sink, and in strict mode as a fatal error
// naming the QP and slot):
//  - kStaleWqe: a doorbell covers a slot whose phase or meta_desc bit shows it was not written
//    yet; the engine waits for the WQE rather than executing stale bytes.
//  - kBatchExceeded (opt-in, check_batch): one observed SQ doorbell advance exceeds max_batch.
//    The engine samples doorbell memory, so two legal doorbells between two samples look like
//    one; the check is exact only when the engine observes every doorbell (a test that steps
//    after each ring), hence off by default.
//  - kSqOverrun / kRqOverrun: the producer count runs more than the ring size ahead of the
//    completions written (SQ) or descriptors consumed (RQ): a slot was overwritten.
//  - kCqOverrun: a CQE would overwrite an entry the consumer has not released through the CQ
//    doorbell (checked once the consumer has written the CQ doorbell); the CQE is dropped and
//    the event handler's cq_overrun() runs.
//  - kRqMalformed: receive descriptors without first/last framing.
//
// Statuses with no single hardware rule, chosen here (see the tests): a QKEY mismatch answers
// REMOTE_ERROR_BAD_DEST_QPN; a receive buffer with a bad lkey gives the receiver an RX CQE with
// LOCAL_ERROR_INVALID_LKEY and the sender REMOTE_ERROR_BAD_STATUS; malformed WQE framing (meta
// first/last clear, reserved bits set) completes with LOCAL_ERROR_QP_INTERNAL_ERROR without
// moving the QP to ERR (every status a WQE's bytes alone decide: emu/wqe_decode.h); an op the responder's generation lacks answers
// REMOTE_ERROR_FEATURE_MISMATCH; REMOTE_ERROR_ABORT only comes from a fault hook.
// A CQ arm written through the CQ doorbell is sampled like any doorbell: a later doorbell write
// with arm 0 before the engine looks hides it. Cq::arm() is exact.
//
// The implementation is split by responsibility; emu/device_impl.h lists the files.
#ifndef XPUFAB_EMU_DEVICE_H_
#define XPUFAB_EMU_DEVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api/backend/backend.h"
#include "emu/fabric.h"
#include "emu/fault.h"
#include "emu/profile.h"
#include "emu/trace/trace.h"

namespace xpufab {
namespace emu {

enum class DiagKind : uint8_t {
  kStaleWqe,
  kBatchExceeded,
  kSqOverrun,
  kRqOverrun,
  kCqOverrun,
  kRqMalformed,
};
const char* diag_name(DiagKind kind);

struct Diagnostic {
  DiagKind kind;
  std::string device;
  uint32_t qpn;   // 0 for CQ diagnostics
  uint32_t slot;  // ring slot (SQ/RQ/CQ index)
  std::string message;
};

// Everything a device is made of. create_device reads no environment: options_env.h fills
// these from FI_EFA_EMU_* for the emu backend and for tests that want the same defaults.
constexpr uint32_t kOneCopyMin = 16384;

struct DeviceOptions {
  std::string name;                  // default "efa_emu<N>"
  const Profile* profile = nullptr;  // default: the newest generation
  bool has_gid = false;              // default: a process-unique link-local GID
  Gid gid{};
  std::shared_ptr<Fabric> fabric;    // default: InProcFabric::process_fabric()
  bool engine_thread = true;         // false: only progress() callers drive the engine
  bool strict = false;               // diagnostics are fatal
  bool check_batch = false;          // kBatchExceeded; see above
  uint64_t seed = 1;                 // reordering and other random choices
  bool reorder = true;               // deliver packets of one batch in a seeded random order
  uint32_t max_qp = 2048;
  uint32_t max_cq = 2048;
  // RDMA payloads of at least kOneCopyMin bytes travel by reference where the fabric lets a
  // device reach its peers' memory (Fabric::peer_memory): the responder copies a WRITE's bytes
  // out of the requester's memory once it checked the key, and the requester copies a READ's
  // bytes out of the responder's, instead of both passing through the wire. A refused copy
  // (the kernel's ptrace rules) sends the bytes over the wire to that peer from then on.
  bool one_copy = true;
  // Where the fabric shows a requester how far its responder has executed what it read
  // (Fabric::executed_mark: the shm fabric), a request that ran as asked (status OK, nothing to
  // return) is answered by that mark moving past it, not by a packet: a NIC's acknowledgement
  // costs the host nothing, and the emulator's packet would cost both ends a ring record on the
  // path of every message. Every other answer is a packet. Off with a fault plan or a trace
  // (each answer is then a packet they see), and while this device's engine thread alone
  // drives it and has gone to sleep (it would see a mark move only when it wakes).
  bool position_answers = true;
  uint32_t rnr_delay_us = 20;        // wait before an RNR retry (an op's first three: 1/8, 1/4, 1/2 of it)
  uint32_t unreach_timeout_us = 2000;   // unknown destination -> UNREACH/UNRESP completion
  // An operation whose peer stays silent for response_timeout_us x (max_retransmits + 1), and
  // was asked at least max_retransmits times meanwhile, completes with UNRESP_REMOTE. Requests
  // are retransmitted on every fabric, after a retransmission timeout measured per peer (RFC
  // 6298: smoothed RTT + 4 x RTT variance, doubled on each timeout, at most response_timeout_us),
  // and at once when responses to three requests sent later have come back first (fast
  // retransmit). The floor is min_rto_us where this device expects loss (a fault plan, a lossy
  // fabric) and at least initial_rto_us elsewhere, so that a peer that is only slow to be
  // scheduled is rarely sent a request twice. Responders answer a repeat without running it.
  // A peer that has not yet taken in what was sent to it, or has not finished an engine pass
  // begun after the last transmission (Fabric::peer_stalled: a process starved of CPU or behind
  // on a backlog), is waited for up to 16 times that long before the operation fails; so is
  // one whose answer may be queued unread at this device (Fabric::rx_pending). Before that, a
  // timeout that finds the request itself unread by the peer, or read by no engine pass of it
  // that has finished (Fabric::unserved: it is not lost, the peer is behind), backs off and
  // waits instead of sending another copy into the peer's backlog.
  uint32_t response_timeout_us = 200000;
  uint32_t max_retransmits = 3;
  uint32_t min_rto_us = 10;          // RTO floor, suited to shared memory (FI_EFA_EMU_MIN_RTO_US)
  uint32_t initial_rto_us = 1000;    // RTO towards a peer before its first RTT sample
  uint32_t idle_spin_us = 100;       // engine thread: spin this long after work while requests await answers
  uint32_t idle_sleep_max_us = 4000; // then sleep this long (4x after a second idle); with an external-memory CQ, from 1 us doubling
  uint32_t park_us = 200;            // engine thread parks while a caller drove within this (see above)
  uint32_t park_max_us = 4000;       // a park doubles up to this while the caller goes on driving
  // Nonzero: the engine's clock advances this many ns per pass instead of following the wall
  // clock, so that a run driven by step() from one thread (engine_thread = false) is
  // deterministic, timers and fault windows included.
  uint64_t step_clock_ns = 0;
  FaultHooks* faults = nullptr;      // not owned; wins over fault_plan
  // A plan in the FI_EFA_EMU_FAULTS grammar (emu/faults/plan.h), owned by the device. A bad plan
  // makes create_device fail with -EINVAL and a log line.
  std::string fault_plan;
  // Record an event trace of up to trace_capacity events. A trace_prefix turns tracing on and
  // writes <prefix>.<device>.json/.txt when the device is destroyed.
  bool trace = false;
  size_t trace_capacity = size_t{1} << 20;
  std::string trace_prefix;
  // Nonempty: write <prefix>.<device>.stats (format_stats) when the device is destroyed.
  std::string stats_prefix;
  // Receives every diagnostic (non-strict mode). Called with the device lock held.
  std::function<void(const Diagnostic&)> diagnostic_sink;
  // Receives the device's messages, one line each without a newline: a trace or statistics file
  // that cannot be written, a rejected fault plan, and the strict-mode fatal diagnostic (just
  // before the abort). Null: they are dropped. The emu backend writes them to stderr.
  std::function<void(const std::string&)> log;
};

struct Stats {
  uint64_t steps, doorbells, wqes, cqes, error_cqes, packets_tx, packets_rx, bytes_tx, bytes_rx;
  uint64_t retransmits, rnr_naks, rnr_retries, dropped_packets, faults_injected, idle_sleeps;
  // Fault plan effects: packets dropped by the checksum, duplicates processed, packets held back
  // (reordered) or delayed, CQEs delayed, doorbell stalls, operations timed out.
  uint64_t corrupt_dropped, duplicates, reordered, delayed_packets, delayed_cqes, stalls, timeouts;
  uint64_t diag[6];  // indexed by DiagKind
  // One-copy transfers: payload bytes copied straight between memories, and copies refused
  // (each falls back to the wire).
  uint64_t one_copy_bytes, one_copy_refused;
  // Timeouts that found the peer's engine stalled (a starved process) and kept waiting.
  uint64_t stalled_waits;
  // Timeouts that found answers still queued unread at this device (its own engine behind) and
  // read them before judging the peer, or (on a lossless path) before sending the request again.
  uint64_t backlog_waits;
  // Retransmission timeouts that found the request still unread by the peer, or read by no
  // finished engine pass of it (Fabric::unserved), and waited instead of sending it again.
  uint64_t unserved_waits;
  // Answers by position (DeviceOptions::position_answers): requests this device answered by its
  // executed mark instead of a packet, and its own requests a peer's mark answered.
  uint64_t position_answers, answered_by_position;
  // The longest idle sleep and the longest park the engine thread has chosen (microseconds): a
  // device kernel's doorbell waits at most the sleep, a caller's hand-over at most the park.
  uint64_t longest_sleep_us, longest_park_us;
  // Parks of the engine thread while callers drove, those a kick (or a CQ armed) ended early,
  // and the times it took over after a park because no caller had called during it: each park
  // and each takeover is one wakeup of the thread.
  uint64_t parks, park_kicks, takeovers;
  // progress() calls that found the device idle without taking its lock or running a pass (a
  // pass that found nothing vouched for it; the inbox, the wire and the doorbells were unchanged).
  uint64_t idle_polls;
};

// Per-QP counters (like `rdma statistic qp`). Kept while the QP exists.
struct QpStats {
  uint32_t qpn = 0;
  uint64_t wqes = 0, tx_cqes = 0, rx_cqes = 0, error_cqes = 0;
  uint64_t packets_tx = 0, packets_rx = 0, bytes_tx = 0, bytes_rx = 0;
  uint64_t retransmits = 0, rnr_naks_rx = 0, rnr_naks_tx = 0, dropped_packets = 0;
  uint64_t faults_injected = 0, timeouts = 0;
  uint64_t outstanding = 0;  // operations awaiting a response now
};

class EmuDevice;

// Creates a device from options alone (no environment; see options_env.h). -EINVAL on a bad
// fault plan or a zero max_qp/max_cq, -EEXIST if the GID is taken on the fabric.
int create_device(const DeviceOptions& options, std::unique_ptr<EmuDevice>* device_p);

class EmuDevice : public backend::Device {
 public:
  virtual Stats stats() const = 0;
  // Every live QP's counters, by QPN.
  virtual std::vector<QpStats> qp_stats() const = 0;
  // The event trace; null unless tracing is on.
  virtual const Trace* trace() const = 0;
  virtual const Profile& profile() const = 0;
  virtual Gid gid() const = 0;
  // One engine pass on the calling thread regardless of the engine thread (tests use this for
  // deterministic runs). Returns the work done.
  virtual int step(int budget) = 0;
  // Wakes the engine thread (a caller that rang a doorbell and will not drive progress itself).
  virtual void kick() = 0;
  // What the calling thread wrote so far (a send buffer, a receive buffer it cleared) happens
  // before whatever a pass does once it has seen a doorbell written after this call. For
  // callers whose doorbell writes ThreadSanitizer cannot follow: libefa rings doorbells with
  // plain stores in code built without it, so the order those stores give is invisible to it.
  virtual void publish_writes() = 0;
};

// `ethtool -S`-style text of a device's counters and, per QP, `rdma statistic`-style lines:
// "name: value" per line, QP lines as "qp N name: value". Read back by tools/emustat.
std::string format_stats(const std::string& device, const Stats& s, const std::vector<QpStats>& qps);

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_DEVICE_H_
