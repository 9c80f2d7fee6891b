// The emulated device's life cycle: construction, the engine thread's start, destruction (trace
// and statistics files), query, diagnostics, and create_device. See device.h for the model and
// device_impl.h for where each responsibility lives.
#include "emu/device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "device/efa_io_defs.h"
#include "emu/device_impl.h"
#include "emu/faults/plan.h"

namespace xpufab {
namespace emu {

using namespace ::xpufab::backend;

const char* diag_name(DiagKind kind) {
  switch (kind) {
    case DiagKind::kStaleWqe: return "doorbell covers an unwritten WQE (stale phase/meta_desc)";
    case DiagKind::kBatchExceeded: return "more than max_batch WQEs behind one doorbell";
    case DiagKind::kSqOverrun: return "SQ overrun";
    case DiagKind::kRqOverrun: return "RQ overrun";
    case DiagKind::kCqOverrun: return "CQ overrun";
    case DiagKind::kRqMalformed: return "malformed RX descriptors (first/last framing)";
  }
  return "unknown diagnostic";
}

DeviceImpl::DeviceImpl(const DeviceOptions& o, const Profile* profile, std::shared_ptr<Fabric> fabric,
                       Gid gid, std::string name, std::unique_ptr<FaultHooks> own_faults)
    : opt_(o), profile_(profile), fabric_(std::move(fabric)), gid_(gid), name_(std::move(name)),
      own_faults_(std::move(own_faults)), rng_(o.seed) {
  for (auto& v : stats_.v) v.store(0, std::memory_order_relaxed);
  if (opt_.trace) trace_.reset(new Trace(name_, opt_.trace_capacity));
  may_lose_ = opt_.faults != nullptr || !fabric_->lossless();
  max_rto_ns_ = std::max<uint64_t>(opt_.response_timeout_us, 1) * 1000;
  uint64_t floor_us = std::max(opt_.min_rto_us, 1u);
  if (!may_lose_) floor_us = std::max<uint64_t>(floor_us, opt_.initial_rto_us);
  min_rto_ns_ = std::min(floor_us * 1000, max_rto_ns_);
  initial_rto_ns_ = std::min(std::max<uint64_t>(uint64_t{opt_.initial_rto_us} * 1000, min_rto_ns_), max_rto_ns_);
  silence_limit_ns_ = max_rto_ns_ * (uint64_t{opt_.max_retransmits} + 1);
  // Any value will do as long as successive devices differ; the clock and the address mix both.
  uint64_t mix = (now_ns() ^ reinterpret_cast<uintptr_t>(this)) * 0x9e3779b97f4a7c15ull;
  epoch_ = static_cast<uint32_t>(mix >> 32);
  borrow_payloads_ = fabric_->copies_on_send();
  batch_sends_ = fabric_->batches_sends();
  one_copy_ = opt_.one_copy && fabric_->peer_memory();
  positions_ = opt_.position_answers && opt_.faults == nullptr && !trace_;
  if (one_copy_) self_ref_ = PeerMemory::self();
  step_now_ = opt_.step_clock_ns != 0 ? uint64_t{1000000000} : now_ns();
}

int DeviceImpl::init() {
  int rc = db_.init(opt_.max_qp * 2 + opt_.max_cq);
  if (rc != 0) return rc;
  qps_.assign(std::min<uint32_t>(opt_.max_qp, 65535) + 1, nullptr);
  rc = fabric_->attach(gid_, this);
  if (rc != 0) return rc;
  attached_ = true;
  if (opt_.engine_thread) {
    // The engine thread takes over from callers that stop, and tells the fabric when it stops.
    fabric_->poll_rx_handed_over(gid_);
    thread_ = std::thread([this] { engine_loop(); });
  }
  return 0;
}

DeviceImpl::~DeviceImpl() {
  stop_.store(true);
  kick();
  if (thread_.joinable()) thread_.join();
  if (attached_) fabric_->detach(gid_);
  if (trace_ && !opt_.trace_prefix.empty()) {
    int rc = trace_->write_files(opt_.trace_prefix);
    if (rc != 0) {
      log("xpufab emu: " + name_ + ": cannot write trace " + opt_.trace_prefix + ".*: " +
          std::strerror(-rc));
    }
  }
  if (!opt_.stats_prefix.empty()) {
    std::string path = opt_.stats_prefix + "." + name_ + ".stats";
    std::string body = format_stats(name_, stats(), qp_stats());
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr || std::fwrite(body.data(), 1, body.size(), f) != body.size()) {
      log("xpufab emu: " + name_ + ": cannot write " + path);
    }
    if (f != nullptr) std::fclose(f);
  }
  std::lock_guard<DeviceMutex> lock(mu_);
  for (EmuQp* qp : qps_) {
    if (qp == nullptr) continue;
    free_queue(qp->sq_buf, size_t{qp->sq_entries} * qp->wqe_size);
    free_queue(qp->rq_buf, size_t{qp->rq_entries} * EFA_IO_RX_DESC_SIZE);
    delete qp;
  }
  for (EmuAh* ah : ahs_) delete ah;
  for (EmuMr* mr : mrs_) {
    if (mr == nullptr) continue;
    if (mr->map_base != nullptr) munmap(mr->map_base, mr->map_len);
    delete mr;
  }
  for (EmuCq* cq : cqs_) {
    if (cq->own_ring) free_queue(cq->ring, size_t{cq->entries} * kCqeSize);
    if (cq->efd >= 0) close(cq->efd);
    delete cq;
  }
  for (EmuCntr* c : cntrs_) delete c;
  for (EmuPd* pd : pds_) delete pd;
}

int DeviceImpl::query(DeviceAttr* a) const {
  if (a == nullptr) return -EINVAL;
  a->name = name_;
  a->profile = profile_->name;
  std::memcpy(a->gid, gid_.data(), 16);
  a->vendor_part_id = profile_->vendor_part_id;
  a->max_qp = opt_.max_qp;
  a->max_cq = opt_.max_cq;
  a->max_mr = 65535;
  a->max_pd = 65535;
  a->max_ah = 65535;
  a->max_sq_wr = std::min(profile_->max_sq_wr, kMaxQueueDepth);
  a->max_rq_wr = std::min(profile_->max_rq_wr, kMaxQueueDepth);
  a->max_sq_sge = profile_->max_sq_sge;
  a->max_rq_sge = profile_->max_rq_sge;
  a->max_rdma_sge = EFA_IO_TX_DESC_NUM_RDMA_BUFS;
  a->inline_buf_size = profile_->inline_buf_size;
  a->inline_buf_size_ex = profile_->inline_buf_size_ex;
  a->device_caps = profile_->device_caps;
  a->max_rdma_size = profile_->max_rdma_size;
  a->mtu = profile_->mtu;
  a->max_tx_batch = profile_->max_tx_batch;
  a->min_sq_wr = profile_->min_sq_wr;
  a->max_cq_depth = kMaxQueueDepth;
  a->link_speed_gbps = 100;
  return 0;
}

void DeviceImpl::diag(DiagKind kind, uint32_t qpn, uint32_t slot, const char* detail) {
  bump(kDiag0 + static_cast<int>(kind));
  if (trace_) tr(TraceKind::kDiag, qpn, slot, static_cast<uint8_t>(kind), 0, 0, 0, 0);
  char msg[256];
  std::snprintf(msg, sizeof(msg), "%s: %s on QP %u slot %u%s%s", name_.c_str(), diag_name(kind), qpn,
                slot, detail[0] ? ": " : "", detail);
  if (opt_.strict) {
    log(std::string("xpufab emu fatal: ") + msg);
    std::abort();
  }
  if (opt_.diagnostic_sink) opt_.diagnostic_sink(Diagnostic{kind, name_, qpn, slot, msg});
}

namespace {

std::atomic<uint32_t> g_device_seq{0};

}  // namespace

int create_device(const DeviceOptions& options, std::unique_ptr<EmuDevice>* device_p) {
  if (device_p == nullptr || options.max_qp == 0 || options.max_cq == 0) return -EINVAL;
  DeviceOptions o = options;
  const Profile* profile = o.profile != nullptr ? o.profile : &default_profile();
  uint32_t seq = g_device_seq.fetch_add(1);
  std::string name = o.name.empty() ? "efa_emu" + std::to_string(seq) : o.name;
  Gid gid = o.gid;
  if (!o.has_gid) {
    // Link-local fe80::/64 with an interface id unique to this process and device.
    uint64_t n = process_nonce();
    gid = Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 'x', static_cast<uint8_t>(n >> 16),
              static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n), static_cast<uint8_t>(seq >> 16),
              static_cast<uint8_t>(seq >> 8), static_cast<uint8_t>(seq)};
  }
  // The fault plan: hooks win over a plan; a plan that does nothing installs no hooks.
  std::unique_ptr<faults::FaultPlan> plan;
  if (o.faults == nullptr && !o.fault_plan.empty()) {
    faults::PlanSpec spec;
    std::string err;
    if (faults::parse_plan(o.fault_plan, &spec, &err) != 0) {
      if (o.log) {
        o.log("xpufab emu: " + name + ": fault plan rejected (DeviceOptions::fault_plan): " + err);
      }
      return -EINVAL;
    }
    if (!spec.empty()) {
      // Random loss needs more attempts than a lossless fabric's defaults, so that no operation
      // fails from bad luck: keep the overall timeout, split it into at least 16 retransmissions.
      if ((spec.drop > 0 || spec.corrupt > 0) && o.max_retransmits < 16) {
        uint64_t total = uint64_t{o.response_timeout_us} * (o.max_retransmits + 1);
        o.max_retransmits = 16;
        o.response_timeout_us = static_cast<uint32_t>(std::max<uint64_t>(total / 17, 1));
      }
      plan.reset(new faults::FaultPlan(spec, o.step_clock_ns != 0 ? 0 : now_ns()));
      // Each device's faults are its own: the name alone would give the devices of two
      // processes (each called efa_emu0) the same fault sequence. The PID, unlike the GID's
      // random part, repeats from run to run where PIDs do (a sandbox), so a seed there
      // reproduces its faults; elsewhere the plan's stream stands for it.
      plan->personalize(name, static_cast<uint64_t>(getpid()));
      o.faults = plan.get();
    }
  }
  if (!o.trace_prefix.empty()) o.trace = true;
  std::shared_ptr<Fabric> fabric = o.fabric ? o.fabric : InProcFabric::process_fabric();
  std::unique_ptr<DeviceImpl> dev(new DeviceImpl(o, profile, std::move(fabric), gid, name, std::move(plan)));
  int rc = dev->init();
  if (rc != 0) return rc;
  *device_p = std::move(dev);
  return 0;
}

}  // namespace emu
}  // namespace xpufab
