// Control verbs: creating, destroying and querying PDs, MRs, CQs, QPs, AHs and completion
// counters, and the table lookups the data path uses (QPN, AH by GID, memory keys).
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/resident.h"
#include "device/efa_io_defs.h"
#include "emu/device_impl.h"
#include "emu/peer_mappings.h"

namespace xpufab {
namespace emu {

using namespace ::xpufab::backend;

namespace {

uint32_t round_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

uint32_t log2_of(uint32_t pow2) {
  uint32_t l = 0;
  while ((1u << l) < pow2) ++l;
  return l;
}

}  // namespace

int DeviceImpl::alloc_pd(Pd** pd_p) {
  if (pd_p == nullptr) return -EINVAL;
  std::lock_guard<DeviceMutex> lock(mu_);
  auto* pd = new EmuPd(next_pd_++);
  pds_.insert(pd);
  live_.insert(static_cast<Pd*>(pd));
  *pd_p = pd;
  return 0;
}

int DeviceImpl::dealloc_pd(Pd* p) {
  std::lock_guard<DeviceMutex> lock(mu_);
  auto* pd = live_as<EmuPd>(p);
  if (pd == nullptr) return -EINVAL;
  if (pd->refs != 0) return -EBUSY;
  pds_.erase(pd);
  live_.erase(p);
  delete pd;
  return 0;
}

int DeviceImpl::reg_mr(Pd* p, const MrInitAttr& attr, Mr** mr_p) {
  constexpr uint32_t kAccessAll = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  if (mr_p == nullptr || attr.length == 0 || (attr.access & ~kAccessAll) != 0) return -EINVAL;
  if (attr.dmabuf_fd < 0 && attr.addr == nullptr) return -EINVAL;
  // As EFA's kernel driver: remote access the generation cannot serve is refused.
  if (backend::served_access(attr.access, profile_->device_caps) != attr.access) return -EOPNOTSUPP;
  std::lock_guard<DeviceMutex> lock(mu_);
  auto* pd = live_as<EmuPd>(p);
  if (pd == nullptr) return -EINVAL;
  uint8_t* host = static_cast<uint8_t*>(attr.addr);
  void* map_base = nullptr;
  size_t map_len = 0;
  if (attr.dmabuf_fd >= 0) {
    // The emulator reaches dma-buf memory by mapping it (a memfd stands in for a dma-buf).
    long page = sysconf(_SC_PAGESIZE);
    uint64_t off = attr.dmabuf_offset & ~static_cast<uint64_t>(page - 1);
    map_len = attr.length + (attr.dmabuf_offset - off);
    map_base = mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, attr.dmabuf_fd,
                    static_cast<off_t>(off));
    if (map_base == MAP_FAILED) return -EINVAL;
    host = static_cast<uint8_t*>(map_base) + (attr.dmabuf_offset - off);
  }
  uint32_t idx = 0;
  while (idx < mrs_.size() && mrs_[idx] != nullptr) ++idx;
  if (idx >= 65535) {
    if (map_base != nullptr) munmap(map_base, map_len);
    return -ENOMEM;
  }
  if (idx == mrs_.size()) {
    mrs_.push_back(nullptr);
    mr_gen_.push_back(0);
  }
  auto* mr = new EmuMr();
  mr->pd = pd;
  mr_gen_[idx]++;
  mr->key = (idx + 1) | (static_cast<uint32_t>(mr_gen_[idx]) << 16);
  mr->iova_ = attr.iova != 0 ? attr.iova : reinterpret_cast<uint64_t>(host);
  mr->host = host;
  mr->len = attr.length;
  mr->access = attr.access;
  mr->map_base = map_base;
  mr->map_len = map_len;
  // Peers copying out of this memory map the file rather than go through the kernel (a full
  // table only leaves them the kernel copy).
  if (map_base != nullptr)
    (void)PeerMappings::share(map_base, map_len, attr.dmabuf_fd,
                              attr.dmabuf_offset & ~static_cast<uint64_t>(sysconf(_SC_PAGESIZE) - 1));
  mrs_[idx] = mr;
  live_.insert(static_cast<Mr*>(mr));
  pd->refs++;
  *mr_p = mr;
  return 0;
}

int DeviceImpl::dereg_mr(Mr* m) {
  std::lock_guard<DeviceMutex> lock(mu_);
  auto* mr = live_as<EmuMr>(m);
  if (mr == nullptr) return -EINVAL;
  uint32_t idx = (mr->key & 0xffff) - 1;
  if (idx >= mrs_.size() || mrs_[idx] != mr) return -EINVAL;
  live_.erase(m);
  mrs_[idx] = nullptr;
  mr->pd->refs--;
  if (mr->map_base != nullptr) {
    PeerMappings::unshare(mr->map_base);
    munmap(mr->map_base, mr->map_len);
  }
  delete mr;
  return 0;
}

int DeviceImpl::create_cq(const CqInitAttr& attr, Cq** cq_p) {
  if (cq_p == nullptr || attr.entries == 0 || attr.entries > kMaxQueueDepth) return -EINVAL;
  uint32_t entries = round_pow2(attr.entries);
  if (attr.ext_buffer != nullptr && attr.ext_length < size_t{entries} * kCqeSize) return -EINVAL;
  if (attr.ext_buffer == nullptr && (attr.ext_fd >= 0 || attr.ext_length != 0)) {
    return -EINVAL;  // the emulator writes CQEs through a CPU-visible address
  }
  if (attr.ext_buffer != nullptr && !(profile_->device_caps & kCapCqWithExtMem)) return -EOPNOTSUPP;
  std::lock_guard<DeviceMutex> lock(mu_);
  if (cqs_.size() >= opt_.max_cq) return -ENOMEM;
  auto* cq = new EmuCq();
  cq->dev = this;
  cq->entries = entries;
  cq->log2_entries = log2_of(entries);
  cq->with_sgid = attr.with_sgid;
  if (attr.ext_buffer != nullptr) {
    cq->ring = static_cast<uint8_t*>(attr.ext_buffer);
    std::memset(cq->ring, 0, size_t{entries} * kCqeSize);
  } else {
    cq->ring = alloc_queue(size_t{entries} * kCqeSize, base::kResidentPage);
    cq->own_ring = true;
  }
  int rc = cq->ring == nullptr ? -ENOMEM : db_.alloc(DbKind::kCq, cq, &cq->db_index);
  if (rc == 0 && attr.with_event_fd) {
    cq->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (cq->efd < 0) {
      rc = -errno;
      db_.free(cq->db_index);
    }
  }
  if (rc != 0) {
    if (cq->own_ring) free_queue(cq->ring, size_t{cq->entries} * kCqeSize);
    delete cq;
    return rc;
  }
  cq->db = db_.word(cq->db_index);
  if (!cq->own_ring) ext_cqs_.fetch_add(1, std::memory_order_relaxed);
  cqs_.insert(cq);
  live_.insert(static_cast<Cq*>(cq));
  *cq_p = cq;
  return 0;
}

int DeviceImpl::destroy_cq(Cq* c) {
  std::lock_guard<DeviceMutex> lock(mu_);
  auto* cq = live_as<EmuCq>(c);
  if (cq == nullptr) return -EINVAL;
  if (cq->refs != 0) return -EBUSY;
  cqs_.erase(cq);
  live_.erase(c);
  cq_delayed_.erase(std::remove(cq_delayed_.begin(), cq_delayed_.end(), cq), cq_delayed_.end());
  db_.free(cq->db_index);
  if (!cq->own_ring) ext_cqs_.fetch_sub(1, std::memory_order_relaxed);
  if (cq->own_ring) free_queue(cq->ring, size_t{cq->entries} * kCqeSize);
  if (cq->efd >= 0) close(cq->efd);
  delete cq;
  return 0;
}

int DeviceImpl::arm_cq(EmuCq* cq) {
  {
    std::lock_guard<DeviceMutex> lock(mu_);
    if (cq->efd < 0) return -EOPNOTSUPP;
    cq->armed = true;
  }
  // The caller is about to block on the event: the engine thread drives from now on.
  kick();
  return 0;
}

int DeviceImpl::create_qp(const QpInitAttr& a, Qp** qp_p) {
  if (qp_p == nullptr) return -EINVAL;
  constexpr uint32_t kFlagsAll = kQpUnsolicitedWriteRecv | kQpInlineWrite;
  if ((a.flags & ~kFlagsAll) != 0) return -EINVAL;
  if (a.type != QpType::kSrd && a.type != QpType::kUd) return -EOPNOTSUPP;
  if (a.type == QpType::kUd && (a.flags != 0 || a.sl != 0)) return -EINVAL;
  if ((a.flags & kQpUnsolicitedWriteRecv) && !(profile_->device_caps & kCapUnsolicitedWriteRecv)) {
    return -EOPNOTSUPP;
  }
  bool want128 = (a.flags & kQpInlineWrite) || a.max_inline_data > profile_->inline_buf_size;
  if (want128 && profile_->inline_buf_size_ex == 0) return -EOPNOTSUPP;
  uint32_t max_inline = want128 ? profile_->inline_buf_size_ex : profile_->inline_buf_size;
  if (a.max_send_wr == 0 || a.max_send_wr > std::min(profile_->max_sq_wr, kMaxQueueDepth) ||
      a.max_recv_wr > std::min(profile_->max_rq_wr, kMaxQueueDepth) ||
      a.max_send_sge > profile_->max_sq_sge || a.max_recv_sge == 0 ||
      a.max_recv_sge > profile_->max_rq_sge || a.max_inline_data > max_inline) {
    return -EINVAL;
  }
  std::lock_guard<DeviceMutex> lock(mu_);
  auto* pd = live_as<EmuPd>(a.pd);
  auto* scq = live_as<EmuCq>(a.send_cq);
  auto* rcq = live_as<EmuCq>(a.recv_cq);
  if (pd == nullptr || scq == nullptr || rcq == nullptr) return -EINVAL;
  uint32_t qpn = 0;
  for (size_t n = 1; n < qps_.size(); ++n) {
    uint32_t cand = next_qpn_;
    next_qpn_ = next_qpn_ + 1 >= qps_.size() ? 1 : next_qpn_ + 1;
    if (qps_[cand] == nullptr) {
      qpn = cand;
      break;
    }
  }
  if (qpn == 0) return -ENOMEM;
  auto* qp = new EmuQp();
  qp->dev = this;
  qp->qpn_ = qpn;
  qp->flags = a.flags;
  qp->ud = a.type == QpType::kUd;
  qp->pd = pd;
  qp->send_cq = scq;
  qp->recv_cq = rcq;
  qp->wqe_size = want128 ? EFA_IO_TX_WQE_128_SIZE : EFA_IO_TX_WQE_SIZE;
  qp->sq_entries = round_pow2(std::max(a.max_send_wr, profile_->min_sq_wr));
  qp->sq_log2 = log2_of(qp->sq_entries);
  uint32_t batch = profile_->max_tx_batch ? (profile_->max_tx_batch * 64) / qp->wqe_size : 65535;
  // As libefa sizes it: with a minimum depth, one doorbell never covers the whole SQ. A profile
  // with min_sq_wr 1 would give a 1-entry SQ a batch of 0 here exactly as it does in libefa
  // (which then overruns its ring), so no profile reports one (emu/profile.cc).
  if (profile_->min_sq_wr != 0) batch = std::min(batch, qp->sq_entries - 1);
  qp->max_batch = batch;
  qp->max_recv_sge = a.max_recv_sge;
  qp->rq_entries = round_pow2(std::max(a.max_recv_sge * std::max(a.max_recv_wr, 1u), 1u));
  // The RQ's head is written by the first receives, which a program posts while it sets up.
  qp->sq_buf = alloc_queue(size_t{qp->sq_entries} * qp->wqe_size, base::kResidentPage);
  qp->rq_buf = alloc_queue(size_t{qp->rq_entries} * EFA_IO_RX_DESC_SIZE);
  int rc = (qp->sq_buf == nullptr || qp->rq_buf == nullptr) ? -ENOMEM : 0;
  if (rc == 0) rc = db_.alloc(DbKind::kSq, qp, &qp->sq_db_index);
  if (rc == 0) {
    rc = db_.alloc(DbKind::kRq, qp, &qp->rq_db_index);
    if (rc != 0) db_.free(qp->sq_db_index);
  }
  if (rc != 0) {
    free_queue(qp->sq_buf, size_t{qp->sq_entries} * qp->wqe_size);
    free_queue(qp->rq_buf, size_t{qp->rq_entries} * EFA_IO_RX_DESC_SIZE);
    delete qp;
    return rc;
  }
  qp->sq_db = db_.word(qp->sq_db_index);
  qp->rq_db = db_.word(qp->rq_db_index);
  qps_[qpn] = qp;
  live_.insert(static_cast<Qp*>(qp));
  pd->refs++;
  scq->refs++;
  rcq->refs++;
  *qp_p = qp;
  return 0;
}

int DeviceImpl::destroy_qp(Qp* q) {
  {
    std::lock_guard<DeviceMutex> lock(mu_);
    auto* qp = live_as<EmuQp>(q);
    if (qp == nullptr) return -EINVAL;
    live_.erase(q);
    // Outstanding work completes as FLUSHED before the QP disappears.
    if (qp->st != QpState::kReset) flush_qp(qp);
    qps_[qp->qpn_] = nullptr;
    sq_pending_.erase(std::remove(sq_pending_.begin(), sq_pending_.end(), qp), sq_pending_.end());
    for (uint32_t idx : {qp->sq_db_index, qp->rq_db_index}) {
      db_.forget_hot(idx);
      db_.free(idx);
    }
    for (auto& c : qp->cntrs) c.first->refs--;
    qp->pd->refs--;
    qp->send_cq->refs--;
    qp->recv_cq->refs--;
    free_queue(qp->sq_buf, size_t{qp->sq_entries} * qp->wqe_size);
    free_queue(qp->rq_buf, size_t{qp->rq_entries} * EFA_IO_RX_DESC_SIZE);
    delete qp;
  }
  return 0;
}

int DeviceImpl::create_ah(Pd* p, const uint8_t gid[16], Ah** ah_p) {
  if (ah_p == nullptr || gid == nullptr) return -EINVAL;
  const int rc = add_ah(p, gid, ah_p);
  // Outside the device's lock: opening a peer's mailbox takes system calls.
  if (rc == 0 && fabric_ != nullptr) {
    Gid g;
    std::memcpy(g.data(), gid, 16);
    fabric_->prepare_peer(g);
  }
  return rc;
}

int DeviceImpl::add_ah(Pd* p, const uint8_t gid[16], Ah** ah_p) {
  std::lock_guard<DeviceMutex> lock(mu_);
  auto* pd = live_as<EmuPd>(p);
  if (pd == nullptr) return -EINVAL;
  // ahn 0xFFFF means "unknown" in RX CQEs, so it is never handed out.
  uint32_t idx = 0;
  while (idx < ahs_.size() && ahs_[idx] != nullptr) ++idx;
  if (idx >= kAhUnknown) return -ENOMEM;
  if (idx == ahs_.size()) ahs_.push_back(nullptr);
  auto* ah = new EmuAh();
  ah->pd = pd;
  ah->ahn_ = static_cast<uint16_t>(idx);
  std::memcpy(ah->gid.data(), gid, 16);
  ahs_[idx] = ah;
  // The peer's SRD path (sequence numbers, retransmission timer) is made with the handle, as a
  // NIC sets its address handles up, rather than on the first request's path.
  ah->path = path_to(ah->gid);
  // The lowest-numbered AH of its PD for the GID answers ah_for_gid: this one, unless an older
  // one has a lower number (numbers are reused).
  EmuAh*& known = ah_by_gid_[{pd, ah->gid}];
  if (known == nullptr || known->ahn_ > ah->ahn_) known = ah;
  last_ah_ = nullptr;
  live_.insert(static_cast<Ah*>(ah));
  pd->refs++;
  *ah_p = ah;
  return 0;
}

int DeviceImpl::destroy_ah(Ah* a) {
  std::lock_guard<DeviceMutex> lock(mu_);
  auto* ah = live_as<EmuAh>(a);
  if (ah == nullptr) return -EINVAL;
  live_.erase(a);
  ahs_[ah->ahn_] = nullptr;
  auto known = ah_by_gid_.find({ah->pd, ah->gid});
  if (known != ah_by_gid_.end() && known->second == ah) {
    // The next-lowest for the same PD and GID answers now, if there is one (ahs_ is in number
    // order).
    auto next = std::find_if(ahs_.begin(), ahs_.end(), [ah](const EmuAh* o) {
      return o != nullptr && o->pd == ah->pd && gid_equal(o->gid, ah->gid);
    });
    if (next != ahs_.end()) {
      known->second = *next;
    } else {
      ah_by_gid_.erase(known);
    }
  }
  last_ah_ = nullptr;
  ah->pd->refs--;
  delete ah;
  return 0;
}

int DeviceImpl::create_comp_cntr(const CompCntrInitAttr& attr, CompCntr** cntr_p) {
  if (cntr_p == nullptr || (attr.value == nullptr && attr.error == nullptr)) return -EINVAL;
  if (!(profile_->device_caps & kCapCompCntr)) return -EOPNOTSUPP;
  std::lock_guard<DeviceMutex> lock(mu_);
  auto* c = new EmuCntr();
  c->value = attr.value;
  c->error = attr.error;
  cntrs_.insert(c);
  live_.insert(static_cast<CompCntr*>(c));
  *cntr_p = c;
  return 0;
}

int DeviceImpl::destroy_comp_cntr(CompCntr* cntr) {
  std::lock_guard<DeviceMutex> lock(mu_);
  auto* c = live_as<EmuCntr>(cntr);
  if (c == nullptr) return -EINVAL;
  if (c->refs != 0) return -EBUSY;
  cntrs_.erase(c);
  live_.erase(cntr);
  delete c;
  return 0;
}

int DeviceImpl::local_address(const Qp* q, uint8_t gid[16], uint32_t* qpn, uint32_t* qkey) const {
  if (gid == nullptr || qpn == nullptr || qkey == nullptr) return -EINVAL;
  std::lock_guard<DeviceMutex> lock(mu_);
  auto* qp = live_as<const EmuQp>(q);
  if (qp == nullptr) return -EINVAL;
  std::memcpy(gid, gid_.data(), 16);
  *qpn = qp->qpn_;
  *qkey = qp->qkey;
  return 0;
}

void DeviceImpl::set_event_handler(EventHandler* handler) {
  std::lock_guard<DeviceMutex> lock(mu_);
  handler_ = handler;
}

EmuAh* DeviceImpl::ah_lookup(const EmuPd* pd, const Gid& gid) {
  auto it = ah_by_gid_.find({pd, gid});
  if (it == ah_by_gid_.end()) return nullptr;
  last_ah_ = it->second;
  return last_ah_;
}


}  // namespace emu
}  // namespace xpufab
