// The uverbs write() command ABI of an EFA device over the emulated device. Layouts come from
// the kernel uAPI headers rdma-core installs (<rdma/ib_user_verbs.h>, <rdma/efa-abi.h>); the
// fields later rdma-core releases appended are handled by length, as the kernel does
// (reference/uverbs-efa-abi.md 2.2, 2.4-2.7, 3).
#include "emu/uverbs/uverbs_server.h"

#include <infiniband/verbs.h>
#include <rdma/efa-abi.h>
#include <rdma/ib_user_verbs.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "api/backend/backend.h"
#include "emu/device.h"

namespace xpufab {
namespace shim {
namespace {

using backend::Device;

constexpr size_t kPage = 4096;
size_t page_align(size_t n) { return (n + kPage - 1) & ~(kPage - 1); }

// Raw system calls: the public names are interposed by this same library.
int sys_close(int fd) { return static_cast<int>(syscall(SYS_close, fd)); }
ssize_t sys_read(int fd, void* b, size_t n) { return syscall(SYS_read, fd, b, n); }
ssize_t sys_write(int fd, const void* b, size_t n) { return syscall(SYS_write, fd, b, n); }

// Copies to and from addresses the caller named: a bad pointer gives EFAULT, never a crash.
// Where a sandbox forbids process_vm_*, a null pointer is still refused and others are trusted.
bool vm_blocked(ssize_t rc) { return rc < 0 && (errno == EPERM || errno == ENOSYS); }
bool copy_in(void* dst, uint64_t src, size_t n) {
  if (n == 0) return true;
  struct iovec l{dst, n}, r{reinterpret_cast<void*>(src), n};
  ssize_t rc = process_vm_readv(getpid(), &l, 1, &r, 1, 0);
  if (vm_blocked(rc) && src >= kPage) {
    std::memcpy(dst, reinterpret_cast<const void*>(src), n);
    return true;
  }
  return rc == static_cast<ssize_t>(n);
}
bool copy_out(uint64_t dst, const void* src, size_t n) {
  if (n == 0) return true;
  struct iovec l{const_cast<void*>(src), n}, r{reinterpret_cast<void*>(dst), n};
  ssize_t rc = process_vm_writev(getpid(), &l, 1, &r, 1, 0);
  if (vm_blocked(rc) && dst >= kPage) {
    std::memcpy(reinterpret_cast<void*>(dst), src, n);
    return true;
  }
  return rc == static_cast<ssize_t>(n);
}

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

struct CqObj {
  uint32_t handle = 0;
  backend::Cq* cq = nullptr;
  uint64_t user_handle = 0;
  uint32_t entries = 0;
  uint32_t log2_entries = 0;
  uint32_t entry_size = 32;
  uint8_t* emu_ring = nullptr;
  uint8_t* ring16 = nullptr;  // owned (mmap) when entry_size is 16
  uint32_t mirrored = 0;
  uint32_t* db = nullptr;
  int channel = -1;
  int efd = -1;
  uint32_t comp_reported = 0;
  uint32_t users = 0;
};

struct QpObj {
  uint32_t handle = 0;
  backend::Qp* qp = nullptr;
  uint32_t send_cq = 0, recv_cq = 0, pd = 0;
  backend::WqAttr sq{}, rq{};
  uint32_t max_send_wr = 0, max_recv_wr = 0, max_send_sge = 0, max_recv_sge = 0, max_inline = 0;
  uint32_t sq_psn = 0;
  uint8_t rnr_retry = 7;
  uint8_t sq_sig_all = 0;
  std::vector<uint64_t> keys;
};

struct Mapping {
  uint8_t* addr;
  size_t len;
};

struct Ctx {
  int fd = -1;
  bool has_context = false;
  int async_r = -1, async_w = -1;
  uint32_t next_handle = 0;
  uint64_t next_key = 1;  // in pages
  std::map<uint32_t, backend::Pd*> pds;
  std::map<uint32_t, backend::Mr*> mrs;
  std::map<uint32_t, backend::Ah*> ahs;
  std::map<uint32_t, std::unique_ptr<CqObj>> cqs;
  std::map<uint32_t, std::unique_ptr<QpObj>> qps;
  std::map<uint64_t, Mapping> keys;
  std::map<uint32_t, std::vector<uint64_t>> cq_keys;
};

struct Channel {
  std::deque<uint64_t> records;  // cq user_handles
  std::map<uint64_t, CqObj*> cqs;
};

// A range handed out by mmap: refcount, and whether this library owns (and frees) it.
struct Handed {
  size_t len;
  int refs;
  int ctx_fd;
  bool owned;
  bool orphan;  // owner object gone; free when the last mapping goes
};

struct State {
  std::mutex mu;
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<Device> dev;
  emu::EmuDevice* emu = nullptr;
  backend::DeviceAttr attr{};
  std::vector<backend::DeviceInfo> infos;
  std::map<int, std::unique_ptr<Ctx>> ctxs;
  std::map<int, Channel> channels;
  std::map<uintptr_t, Handed> handed;
  std::vector<CqObj*> served;  // CQs the service thread mirrors or forwards events for
  std::thread service;
  std::atomic<bool> stop{false};
  std::atomic<bool> shut_down{false};
  std::atomic<Device*> driven{nullptr};  // what the service thread drives (dev, read unlocked)
};

thread_local int t_new_channel = -1;

State& st() {
  static State* s = new State();  // never destroyed: threads and exit handlers outlive statics
  return *s;
}

// ---- device ----

void ensure_service_locked(State& s);

int open_backend_locked(State& s) {
  if (s.backend) return 0;
  int rc = backend::open_backend("emu", &s.backend);
  if (rc != 0) return rc;
  rc = s.backend->enumerate(&s.infos);
  if (rc != 0 || s.infos.empty()) {
    s.backend.reset();
    return rc != 0 ? rc : -ENODEV;
  }
  return 0;
}

int open_device_locked(State& s) {
  if (s.dev) return 0;
  int rc = open_backend_locked(s);
  if (rc != 0) return rc;
  rc = s.backend->open_device(s.infos[0].name, &s.dev);
  if (rc != 0) return rc;
  s.emu = dynamic_cast<emu::EmuDevice*>(s.dev.get());
  rc = s.dev->query(&s.attr);
  if (rc != 0) {
    s.dev.reset();
    s.emu = nullptr;
    return rc;
  }
  s.driven.store(s.dev.get(), std::memory_order_release);
  ensure_service_locked(s);
  return 0;
}

// ---- service thread: 16-byte CQE mirrors and completion events ----

int service_pass(State& s) {
  // libefa never calls into the NIC: it only writes doorbells. Driving the engine from here
  // while traffic flows keeps doorbells noticed at once instead of after the engine thread's
  // idle sleep (the device parks its own thread meanwhile).
  int work = 0;
  if (Device* d = s.driven.load(std::memory_order_acquire)) {
    int n = d->progress(256);
    if (n > 0) work += n;
  }
  std::lock_guard<std::mutex> lock(s.mu);
  for (CqObj* c : s.served) {
    uint64_t events = 0;
    if (c->efd >= 0) {
      uint64_t v = 0;
      if (sys_read(c->efd, &v, sizeof(v)) == sizeof(v)) events = v;
    }
    if (c->ring16 != nullptr) {
      for (;;) {
        uint32_t slot = c->mirrored & (c->entries - 1);
        const uint8_t* src = c->emu_ring + size_t{slot} * 32;
        uint32_t w0 = __atomic_load_n(reinterpret_cast<const uint32_t*>(src), __ATOMIC_ACQUIRE);
        uint8_t want = static_cast<uint8_t>(((c->mirrored >> c->log2_entries) & 1) ^ 1);
        if (((w0 >> 24) & 1u) != want) break;
        uint8_t* dst = c->ring16 + size_t{slot} * 16;
        std::memcpy(dst + 4, src + 4, 12);
        __atomic_store_n(reinterpret_cast<uint32_t*>(dst), w0, __ATOMIC_RELEASE);
        c->mirrored++;
        ++work;
      }
    }
    if (events != 0 && c->channel >= 0) {
      auto it = s.channels.find(c->channel);
      if (it != s.channels.end()) {
        for (uint64_t i = 0; i < events; ++i) it->second.records.push_back(c->user_handle);
        uint64_t n = events;
        (void)sys_write(c->channel, &n, sizeof(n));
      }
      work += static_cast<int>(events);
    }
  }
  return work;
}

// Spins (yielding the core) for a while after the last work, then sleeps with a doubling period,
// so a busy device sees microsecond latency and an idle one costs a few wakeups per second.
void service_main() {
  State& s = st();
  using clock = std::chrono::steady_clock;
  auto last_work = clock::now();
  long sleep_ns = 20000;
  while (!s.stop.load(std::memory_order_acquire)) {
    if (service_pass(s) > 0) {
      last_work = clock::now();
      sleep_ns = 20000;
      continue;
    }
    if (clock::now() - last_work < std::chrono::microseconds(500)) {
      std::this_thread::yield();
      continue;
    }
    struct timespec ts{0, sleep_ns};
    nanosleep(&ts, nullptr);
    sleep_ns = std::min(sleep_ns * 2, 4000000L);
  }
}

void ensure_service_locked(State& s) {
  if (s.service.joinable()) return;
  s.stop.store(false);
  s.service = std::thread(service_main);
}

void unserve_locked(State& s, CqObj* c) {
  s.served.erase(std::remove(s.served.begin(), s.served.end(), c), s.served.end());
}

// ---- mappings ----

uint64_t add_key(Ctx* ctx, uint8_t* addr, size_t len) {
  uint64_t key = ctx->next_key * kPage;
  ctx->next_key += (len + kPage - 1) / kPage;
  ctx->keys[key] = Mapping{addr, len};
  return key;
}

void free_owned(uint8_t* p, size_t len) { syscall(SYS_munmap, p, len); }

// ---- objects ----

void destroy_cq_locked(State& s, Ctx* ctx, CqObj* c) {
  unserve_locked(s, c);
  if (c->channel >= 0) {
    auto it = s.channels.find(c->channel);
    if (it != s.channels.end()) {
      Channel& ch = it->second;
      size_t before = ch.records.size();
      ch.records.erase(std::remove(ch.records.begin(), ch.records.end(), c->user_handle),
                       ch.records.end());
      for (size_t i = ch.records.size(); i < before; ++i) {
        uint64_t v;
        if (sys_read(c->channel, &v, sizeof(v)) != sizeof(v)) break;
      }
      ch.cqs.erase(c->user_handle);
    }
  }
  if (s.dev) s.dev->destroy_cq(c->cq);
  for (uint64_t k : ctx->cq_keys[c->handle]) ctx->keys.erase(k);
  ctx->cq_keys.erase(c->handle);
  if (c->ring16 != nullptr) {
    size_t len = page_align(size_t{c->entries} * 16);
    auto h = s.handed.find(reinterpret_cast<uintptr_t>(c->ring16));
    if (h != s.handed.end() && h->second.refs > 0) {
      h->second.orphan = true;
    } else {
      if (h != s.handed.end()) s.handed.erase(h);
      free_owned(c->ring16, len);
    }
  }
}

void destroy_qp_locked(State& s, Ctx* ctx, QpObj* q) {
  if (s.dev) s.dev->destroy_qp(q->qp);
  for (uint64_t k : q->keys) ctx->keys.erase(k);
  auto sc = ctx->cqs.find(q->send_cq);
  if (sc != ctx->cqs.end()) sc->second->users--;
  auto rc = ctx->cqs.find(q->recv_cq);
  if (rc != ctx->cqs.end()) rc->second->users--;
}

void release_ctx_objects_locked(State& s, Ctx* ctx) {
  for (auto& kv : ctx->qps) destroy_qp_locked(s, ctx, kv.second.get());
  ctx->qps.clear();
  if (s.dev) {
    for (auto& kv : ctx->ahs) s.dev->destroy_ah(kv.second);
    for (auto& kv : ctx->mrs) s.dev->dereg_mr(kv.second);
  }
  ctx->ahs.clear();
  ctx->mrs.clear();
  for (auto& kv : ctx->cqs) destroy_cq_locked(s, ctx, kv.second.get());
  ctx->cqs.clear();
  if (s.dev)
    for (auto& kv : ctx->pds) s.dev->dealloc_pd(kv.second);
  ctx->pds.clear();
  ctx->keys.clear();
  for (auto it = s.handed.begin(); it != s.handed.end();) {
    if (it->second.ctx_fd == ctx->fd) {
      if (it->second.owned && it->second.orphan)
        free_owned(reinterpret_cast<uint8_t*>(it->first), it->second.len);
      it = s.handed.erase(it);
    } else {
      ++it;
    }
  }
}

// ---- command plumbing ----

struct Cmd {
  uint32_t command;
  bool extended;
  const uint8_t* core;   // core request (after the headers)
  size_t core_len;
  const uint8_t* drv;    // driver request
  size_t drv_len;
  uint64_t response;     // user pointer
  size_t out_len;        // core response size
  uint64_t drv_response; // user pointer of the driver response
  size_t drv_out_len;
};

// Legacy commands carry the response pointer as the first u64 of the core request.
int legacy_split(Cmd* c, size_t core_size, size_t core_out) {
  if (c->core_len < core_size) return -EINVAL;
  c->drv = c->core + core_size;
  c->drv_len = c->core_len - core_size;
  c->core_len = core_size;
  if (core_out != 0) {
    std::memcpy(&c->response, c->core, 8);
    if (c->out_len < core_out) return -ENOSPC;
    c->drv_response = c->response + core_out;
    c->drv_out_len = c->out_len - core_out;
    c->out_len = core_out;
  }
  return 0;
}

int respond(const Cmd& c, const void* core, size_t core_size, const void* drv, size_t drv_size) {
  if (!copy_out(c.response, core, std::min(core_size, c.out_len))) return -EFAULT;
  if (drv_size != 0 && c.drv_out_len != 0 &&
      !copy_out(c.drv_response, drv, std::min(drv_size, c.drv_out_len))) {
    return -EFAULT;
  }
  return 0;
}

uint32_t efa_caps(const backend::DeviceAttr& a) {
  uint32_t c = EFA_QUERY_DEVICE_CAPS_RNR_RETRY | EFA_QUERY_DEVICE_CAPS_CQ_NOTIFICATIONS;
  if (a.device_caps & backend::kCapRdmaRead) c |= EFA_QUERY_DEVICE_CAPS_RDMA_READ;
  if (a.device_caps & backend::kCapCqWithSgid) c |= EFA_QUERY_DEVICE_CAPS_CQ_WITH_SGID;
  if (a.device_caps & backend::kCapRdmaWrite) c |= 1u << 5;           // RDMA_WRITE (v47)
  if (a.device_caps & backend::kCapUnsolicitedWriteRecv) c |= 1u << 6;  // (v52)
  return c;
}

void fill_device(const State& s, ib_uverbs_query_device_resp* r) {
  std::memset(r, 0, sizeof(*r));
  const backend::DeviceAttr& a = s.attr;
  r->fw_ver = 0x00000001;  // prints as 1.0.0.0
  uint64_t guid = 0;
  for (int i = 8; i < 16; ++i) guid = (guid << 8) | a.gid[i];
  r->node_guid = __builtin_bswap64(guid);
  r->sys_image_guid = r->node_guid;
  r->max_mr_size = uint64_t{1} << 39;
  r->page_size_cap = ~uint64_t{kPage - 1};
  r->vendor_id = 0x1d0f;
  r->vendor_part_id = a.vendor_part_id;
  r->max_qp = a.max_qp;
  r->max_qp_wr = std::min(a.max_sq_wr, a.max_rq_wr);
  r->max_sge = std::min(a.max_sq_sge, a.max_rq_sge);
  r->max_sge_rd = a.max_rdma_sge;
  r->max_cq = a.max_cq;
  r->max_cqe = a.max_cq_depth;
  r->max_mr = a.max_mr;
  r->max_pd = a.max_pd;
  r->max_ah = a.max_ah;
  r->max_pkeys = 1;
  r->phys_port_cnt = 1;
}

int cmd_get_context(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_get_context), sizeof(ib_uverbs_get_context_resp));
  if (rc != 0) return rc;
  if (ctx->has_context) return -EINVAL;
  efa_ibv_alloc_ucontext_cmd ucmd{};
  std::memcpy(&ucmd, c.drv, std::min(c.drv_len, sizeof(ucmd)));
  if (c.drv_len > sizeof(ucmd) && !all_zero(c.drv + sizeof(ucmd), c.drv_len - sizeof(ucmd)))
    return -EINVAL;
  rc = open_device_locked(s);
  if (rc != 0) return rc;
  // The device has a TX batch limit and a minimum SQ depth: a library that does not announce it
  // knows them is refused, as the EFA driver does.
  constexpr uint32_t kNeed = EFA_ALLOC_UCONTEXT_CMD_COMP_TX_BATCH | EFA_ALLOC_UCONTEXT_CMD_COMP_MIN_SQ_WR;
  if ((ucmd.comp_mask & kNeed) != kNeed) return -EOPNOTSUPP;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -errno;
  ib_uverbs_get_context_resp core{};
  core.async_fd = static_cast<uint32_t>(fds[0]);
  core.num_comp_vectors = 1;
  uint8_t drv[24] = {0};
  efa_ibv_alloc_ucontext_resp r{};
  r.cmds_supp_udata_mask = EFA_USER_CMDS_SUPP_UDATA_QUERY_DEVICE | EFA_USER_CMDS_SUPP_UDATA_CREATE_AH;
  r.sub_cqs_per_cq = 1;
  r.inline_buf_size = s.attr.inline_buf_size;
  r.max_llq_size = s.attr.max_sq_wr * 64;
  r.max_tx_batch = static_cast<uint16_t>(s.attr.max_tx_batch);
  r.min_sq_wr = static_cast<uint16_t>(s.attr.min_sq_wr);
  std::memcpy(drv, &r, std::min(sizeof(r), sizeof(drv)));
  rc = respond(c, &core, sizeof(core), drv, sizeof(drv));
  if (rc != 0) {
    sys_close(fds[0]);
    sys_close(fds[1]);
    return rc;
  }
  ctx->async_r = fds[0];
  ctx->async_w = fds[1];
  ctx->has_context = true;
  return 0;
}

int cmd_query_device(State& s, Ctx*, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_query_device), sizeof(ib_uverbs_query_device_resp));
  if (rc != 0) return rc;
  if (!all_zero(c.drv, c.drv_len)) return -EINVAL;
  ib_uverbs_query_device_resp r;
  fill_device(s, &r);
  return respond(c, &r, sizeof(r), nullptr, 0);
}

int cmd_ex_query_device(State& s, Ctx*, Cmd& c) {
  ib_uverbs_ex_query_device req{};
  if (c.core_len < sizeof(req)) return -EINVAL;
  std::memcpy(&req, c.core, sizeof(req));
  if (req.comp_mask != 0 || req.reserved != 0) return -EINVAL;
  if (!all_zero(c.drv, c.drv_len)) return -EINVAL;
  ib_uverbs_ex_query_device_resp r;
  std::memset(&r, 0, sizeof(r));
  fill_device(s, &r.base);
  if (c.out_len < sizeof(r.base) + 8) return -ENOSPC;
  r.response_length = static_cast<uint32_t>(std::min(c.out_len, sizeof(r)));
  efa_ibv_ex_query_device_resp d{};
  d.max_sq_wr = s.attr.max_sq_wr;
  d.max_rq_wr = s.attr.max_rq_wr;
  d.max_sq_sge = s.attr.max_sq_sge;
  d.max_rq_sge = s.attr.max_rq_sge;
  d.max_rdma_size = s.attr.max_rdma_size;
  d.device_caps = efa_caps(s.attr);
  return respond(c, &r, sizeof(r), &d, sizeof(d));
}

int cmd_query_port(State& s, Ctx*, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_query_port), sizeof(ib_uverbs_query_port_resp));
  if (rc != 0) return rc;
  ib_uverbs_query_port req;
  std::memcpy(&req, c.core, sizeof(req));
  if (req.port_num != 1) return -EINVAL;
  ib_uverbs_query_port_resp r;
  std::memset(&r, 0, sizeof(r));
  r.max_msg_sz = s.attr.mtu;
  r.gid_tbl_len = 1;
  r.pkey_tbl_len = 1;
  r.state = IBV_PORT_ACTIVE;
  r.max_mtu = IBV_MTU_4096;
  r.active_mtu = IBV_MTU_4096;
  r.active_width = 2;   // 4X
  r.active_speed = 32;  // EDR
  r.phys_state = 5;     // LinkUp
  r.link_layer = IBV_LINK_LAYER_UNSPECIFIED;
  return respond(c, &r, sizeof(r), nullptr, 0);
}

int cmd_alloc_pd(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_alloc_pd), sizeof(ib_uverbs_alloc_pd_resp));
  if (rc != 0) return rc;
  if (!all_zero(c.drv, c.drv_len)) return -EINVAL;
  backend::Pd* pd = nullptr;
  rc = s.dev->alloc_pd(&pd);
  if (rc != 0) return rc;
  ib_uverbs_alloc_pd_resp r{ctx->next_handle};
  efa_ibv_alloc_pd_resp d{};
  d.pdn = static_cast<uint16_t>(pd->handle());
  rc = respond(c, &r, sizeof(r), &d, sizeof(d));
  if (rc != 0) {
    s.dev->dealloc_pd(pd);
    return rc;
  }
  ctx->pds[ctx->next_handle++] = pd;
  return 0;
}

int cmd_dealloc_pd(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_dealloc_pd), 0);
  if (rc != 0) return rc;
  ib_uverbs_dealloc_pd req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->pds.find(req.pd_handle);
  if (it == ctx->pds.end()) return -EINVAL;
  rc = s.dev->dealloc_pd(it->second);
  if (rc != 0) return rc;
  ctx->pds.erase(it);
  return 0;
}

int cmd_reg_mr(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_reg_mr), sizeof(ib_uverbs_reg_mr_resp));
  if (rc != 0) return rc;
  ib_uverbs_reg_mr req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->pds.find(req.pd_handle);
  if (it == ctx->pds.end()) return -EINVAL;
  // Bits 20 and up are IB_ACCESS_OPTIONAL: a device may ignore them.
  uint32_t access = req.access_flags & ((1u << 20) - 1);
  uint32_t supported = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
  if (s.attr.device_caps & backend::kCapRdmaWrite) supported |= IBV_ACCESS_REMOTE_WRITE;
  if (access & ~supported) return -EOPNOTSUPP;
  if (req.length == 0) return -EINVAL;
  backend::MrInitAttr a;
  a.addr = reinterpret_cast<void*>(req.start);
  a.length = req.length;
  a.iova = req.hca_va;
  a.access = access;
  backend::Mr* mr = nullptr;
  rc = s.dev->reg_mr(it->second, a, &mr);
  if (rc != 0) return rc;
  ib_uverbs_reg_mr_resp r{ctx->next_handle, mr->lkey(), mr->rkey()};
  rc = respond(c, &r, sizeof(r), nullptr, 0);
  if (rc != 0) {
    s.dev->dereg_mr(mr);
    return rc;
  }
  ctx->mrs[ctx->next_handle++] = mr;
  return 0;
}

int cmd_dereg_mr(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_dereg_mr), 0);
  if (rc != 0) return rc;
  ib_uverbs_dereg_mr req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->mrs.find(req.mr_handle);
  if (it == ctx->mrs.end()) return -EINVAL;
  rc = s.dev->dereg_mr(it->second);
  if (rc != 0) return rc;
  ctx->mrs.erase(it);
  return 0;
}

int cmd_create_ah(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_create_ah), sizeof(ib_uverbs_create_ah_resp));
  if (rc != 0) return rc;
  ib_uverbs_create_ah req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->pds.find(req.pd_handle);
  if (it == ctx->pds.end()) return -EINVAL;
  if (!req.attr.is_global) return -EINVAL;  // EFA addresses are GIDs
  backend::Ah* ah = nullptr;
  rc = s.dev->create_ah(it->second, req.attr.grh.dgid, &ah);
  if (rc != 0) return rc;
  uint32_t r = ctx->next_handle;  // ib_uverbs_create_ah_resp.ah_handle
  efa_ibv_create_ah_resp d{};
  d.efa_address_handle = ah->ahn();
  rc = respond(c, &r, sizeof(r), &d, sizeof(d));
  if (rc != 0) {
    s.dev->destroy_ah(ah);
    return rc;
  }
  ctx->ahs[ctx->next_handle++] = ah;
  return 0;
}

int cmd_destroy_ah(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_destroy_ah), 0);
  if (rc != 0) return rc;
  ib_uverbs_destroy_ah req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->ahs.find(req.ah_handle);
  if (it == ctx->ahs.end()) return -EINVAL;
  rc = s.dev->destroy_ah(it->second);
  if (rc != 0) return rc;
  ctx->ahs.erase(it);
  return 0;
}

int cmd_create_comp_channel(State& s, Ctx*, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_create_comp_channel),
                        sizeof(ib_uverbs_create_comp_channel_resp));
  if (rc != 0) return rc;
  int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (fd < 0) return -errno;
  ib_uverbs_create_comp_channel_resp r{static_cast<uint32_t>(fd)};
  rc = respond(c, &r, sizeof(r), nullptr, 0);
  if (rc != 0) {
    sys_close(fd);
    return rc;
  }
  s.channels[fd] = Channel{};
  t_new_channel = fd;
  return 0;
}

struct CqReq {
  uint64_t user_handle;
  uint32_t cqe;
  int32_t comp_channel;
};

int create_cq_common(State& s, Ctx* ctx, Cmd& c, const CqReq& req, size_t core_resp_size) {
  efa_ibv_create_cq ucmd{};
  if (c.drv_len < sizeof(ucmd)) return -EINVAL;
  std::memcpy(&ucmd, c.drv, sizeof(ucmd));
  if (!all_zero(c.drv + sizeof(ucmd), c.drv_len - sizeof(ucmd))) return -EINVAL;
  if (ucmd.comp_mask != 0 || !all_zero(ucmd.reserved_58, sizeof(ucmd.reserved_58))) return -EINVAL;
  if (ucmd.num_sub_cqs != 1) return -EINVAL;
  const bool with_sgid = ucmd.flags & EFA_CREATE_CQ_WITH_SGID;
  const bool with_channel = ucmd.flags & EFA_CREATE_CQ_WITH_COMPLETION_CHANNEL;
  if (ucmd.flags & ~uint8_t{EFA_CREATE_CQ_WITH_SGID | EFA_CREATE_CQ_WITH_COMPLETION_CHANNEL})
    return -EINVAL;
  if (ucmd.cq_entry_size != 16 && ucmd.cq_entry_size != 32) return -EINVAL;
  if (with_sgid && ucmd.cq_entry_size != 32) return -EINVAL;
  if (req.cqe == 0 || req.cqe > s.attr.max_cq_depth) return -EINVAL;
  if (req.comp_channel >= 0 && s.channels.count(req.comp_channel) == 0) return -EINVAL;
  backend::CqInitAttr a;
  a.entries = req.cqe;
  a.with_sgid = with_sgid;
  a.with_event_fd = with_channel || req.comp_channel >= 0;
  backend::Cq* cq = nullptr;
  int rc = s.dev->create_cq(a, &cq);
  if (rc != 0) return rc;
  backend::CqAttr q{};
  rc = cq->query(&q);
  auto obj = std::make_unique<CqObj>();
  obj->handle = ctx->next_handle;
  obj->cq = cq;
  obj->user_handle = req.user_handle;
  obj->entries = q.num_entries;
  while ((1u << obj->log2_entries) < obj->entries) obj->log2_entries++;
  obj->entry_size = ucmd.cq_entry_size;
  obj->emu_ring = q.buffer;
  obj->db = q.doorbell;
  obj->channel = req.comp_channel;
  if (rc == 0 && a.with_event_fd) {
    obj->efd = cq->event_fd();
    int fl = fcntl(obj->efd, F_GETFL);
    if (obj->efd < 0 || fl < 0 || fcntl(obj->efd, F_SETFL, fl | O_NONBLOCK) < 0) rc = -EIO;
  }
  size_t ring_len = page_align(size_t{obj->entries} * obj->entry_size);
  uint8_t* ring = obj->emu_ring;
  if (rc == 0 && obj->entry_size == 16) {
    void* p = mmap(nullptr, ring_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      rc = -ENOMEM;
    } else {
      obj->ring16 = static_cast<uint8_t*>(p);
      ring = obj->ring16;
    }
  }
  if (rc != 0) {
    s.dev->destroy_cq(cq);
    return rc;
  }
  uint32_t core[2] = {obj->handle, obj->entries};  // ib_uverbs_create_cq_resp
  efa_ibv_create_cq_resp d{};
  std::vector<uint64_t> keys;
  d.q_mmap_key = add_key(ctx, ring, ring_len);
  d.q_mmap_size = ring_len;
  keys.push_back(d.q_mmap_key);
  d.cq_idx = static_cast<uint16_t>(obj->handle);
  if (obj->db != nullptr) {
    uintptr_t db = reinterpret_cast<uintptr_t>(obj->db);
    uint8_t* page = reinterpret_cast<uint8_t*>(db & ~uintptr_t{kPage - 1});
    d.comp_mask |= EFA_CREATE_CQ_RESP_DB_OFF;
    d.db_off = static_cast<uint32_t>(db & (kPage - 1));
    d.db_mmap_key = add_key(ctx, page, kPage);
    keys.push_back(d.db_mmap_key);
  }
  uint8_t core_buf[16] = {0};
  std::memcpy(core_buf, &core, sizeof(core));
  if (core_resp_size > sizeof(core)) {
    uint32_t len = static_cast<uint32_t>(std::min(c.out_len, core_resp_size));
    std::memcpy(core_buf + 12, &len, 4);  // ex: response_length
  }
  rc = respond(c, core_buf, core_resp_size, &d, sizeof(d));
  if (rc != 0) {
    for (uint64_t k : keys) ctx->keys.erase(k);
    if (obj->ring16 != nullptr) free_owned(obj->ring16, ring_len);
    s.dev->destroy_cq(cq);
    return rc;
  }
  ctx->cq_keys[obj->handle] = keys;
  if (obj->channel >= 0) s.channels[obj->channel].cqs[obj->user_handle] = obj.get();
  if (obj->ring16 != nullptr || obj->efd >= 0) {
    s.served.push_back(obj.get());
    ensure_service_locked(s);
  }
  ctx->cqs[ctx->next_handle++] = std::move(obj);
  return 0;
}

int cmd_create_cq(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_create_cq), sizeof(ib_uverbs_create_cq_resp));
  if (rc != 0) return rc;
  ib_uverbs_create_cq req;
  std::memcpy(&req, c.core, sizeof(req));
  if (req.comp_vector != 0) return -EINVAL;
  return create_cq_common(s, ctx, c, CqReq{req.user_handle, req.cqe, req.comp_channel},
                          sizeof(ib_uverbs_create_cq_resp));
}

int cmd_ex_create_cq(State& s, Ctx* ctx, Cmd& c) {
  ib_uverbs_ex_create_cq req{};
  if (c.core_len < sizeof(req)) return -EINVAL;
  std::memcpy(&req, c.core, sizeof(req));
  if (req.comp_vector != 0 || req.comp_mask != 0 || req.reserved != 0) return -EINVAL;
  if (req.flags != 0) return -EOPNOTSUPP;
  if (c.out_len < sizeof(ib_uverbs_create_cq_resp)) return -ENOSPC;
  return create_cq_common(s, ctx, c, CqReq{req.user_handle, req.cqe, req.comp_channel},
                          sizeof(ib_uverbs_ex_create_cq_resp));
}

int cmd_destroy_cq(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_destroy_cq), sizeof(ib_uverbs_destroy_cq_resp));
  if (rc != 0) return rc;
  ib_uverbs_destroy_cq req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->cqs.find(req.cq_handle);
  if (it == ctx->cqs.end()) return -EINVAL;
  if (it->second->users > 0) return -EBUSY;
  ib_uverbs_destroy_cq_resp r{it->second->comp_reported, 0};
  rc = respond(c, &r, sizeof(r), nullptr, 0);
  if (rc != 0) return rc;
  destroy_cq_locked(s, ctx, it->second.get());
  ctx->cqs.erase(it);
  return 0;
}

int cmd_create_qp(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_create_qp), sizeof(ib_uverbs_create_qp_resp));
  if (rc != 0) return rc;
  ib_uverbs_create_qp req;
  std::memcpy(&req, c.core, sizeof(req));
  // Driver part: 16 bytes up to v51, then flags (v52) and sl (v55); unknown tails must be zero.
  uint8_t drv[24] = {0};
  if (c.drv_len < 16) return -EINVAL;
  std::memcpy(drv, c.drv, std::min(c.drv_len, sizeof(drv)));
  if (c.drv_len > sizeof(drv) && !all_zero(c.drv + sizeof(drv), c.drv_len - sizeof(drv)))
    return -EINVAL;
  uint32_t comp_mask, rq_ring_size, sq_ring_size, driver_qp_type;
  std::memcpy(&comp_mask, drv, 4);
  std::memcpy(&rq_ring_size, drv + 4, 4);
  std::memcpy(&sq_ring_size, drv + 8, 4);
  std::memcpy(&driver_qp_type, drv + 12, 4);
  uint16_t flags;
  std::memcpy(&flags, drv + 16, 2);
  uint8_t sl = drv[18];
  if (comp_mask != 0 || !all_zero(drv + 19, 5)) return -EINVAL;
  if (req.qp_type != IBV_QPT_DRIVER || driver_qp_type != EFA_QP_DRIVER_TYPE_SRD) return -EOPNOTSUPP;
  if (req.is_srq) return -EINVAL;
  if (flags & ~1u) return -EOPNOTSUPP;  // only UNSOLICITED_WRITE_RECV
  if (sq_ring_size == 0 || sq_ring_size % 64 != 0) return -EINVAL;
  if (rq_ring_size % 16 != 0) return -EINVAL;
  auto pd = ctx->pds.find(req.pd_handle);
  auto scq = ctx->cqs.find(req.send_cq_handle);
  auto rcq = ctx->cqs.find(req.recv_cq_handle);
  if (pd == ctx->pds.end() || scq == ctx->cqs.end() || rcq == ctx->cqs.end()) return -EINVAL;
  backend::QpInitAttr a;
  a.pd = pd->second;
  a.send_cq = scq->second->cq;
  a.recv_cq = rcq->second->cq;
  a.max_send_wr = sq_ring_size / 64;
  a.max_send_sge = std::max<uint32_t>(req.max_send_sge, 1);
  a.max_recv_sge = std::max<uint32_t>(req.max_recv_sge, 1);
  a.max_recv_wr = rq_ring_size / 16 / a.max_recv_sge;
  a.max_inline_data = 0;  // 64-byte WQEs: what libefa's LLQ layout expects
  a.flags = (flags & 1u) ? uint32_t{backend::kQpUnsolicitedWriteRecv} : 0u;
  a.sl = sl;
  if (req.max_send_sge > s.attr.max_sq_sge || req.max_recv_sge > s.attr.max_rq_sge ||
      req.max_inline_data > s.attr.inline_buf_size) {
    return -EINVAL;
  }
  backend::Qp* qp = nullptr;
  rc = s.dev->create_qp(a, &qp);
  if (rc != 0) return rc;
  auto obj = std::make_unique<QpObj>();
  obj->handle = ctx->next_handle;
  obj->qp = qp;
  obj->pd = req.pd_handle;
  obj->send_cq = req.send_cq_handle;
  obj->recv_cq = req.recv_cq_handle;
  rc = qp->query_wqs(&obj->sq, &obj->rq);
  if (rc == 0 && (size_t{obj->sq.num_entries} * obj->sq.entry_size != sq_ring_size ||
                  size_t{obj->rq.num_entries} * obj->rq.entry_size < rq_ring_size)) {
    rc = -EINVAL;  // the device would size the rings differently from what libefa computed
  }
  if (rc != 0) {
    s.dev->destroy_qp(qp);
    return rc;
  }
  obj->max_send_wr = req.max_send_wr;
  obj->max_recv_wr = req.max_recv_wr;
  obj->max_send_sge = req.max_send_sge;
  obj->max_recv_sge = req.max_recv_sge;
  obj->max_inline = req.max_inline_data;
  obj->sq_sig_all = req.sq_sig_all;
  ib_uverbs_create_qp_resp r{};
  r.qp_handle = obj->handle;
  r.qpn = qp->qpn();
  r.max_send_wr = req.max_send_wr;
  r.max_recv_wr = req.max_recv_wr;
  r.max_send_sge = req.max_send_sge;
  r.max_recv_sge = req.max_recv_sge;
  r.max_inline_data = req.max_inline_data;
  efa_ibv_create_qp_resp d{};
  auto page_of = [](const void* p) {
    return reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{kPage - 1});
  };
  auto off_of = [](const void* p) {
    return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) & (kPage - 1));
  };
  d.sq_db_offset = off_of(obj->sq.doorbell);
  d.sq_db_mmap_key = add_key(ctx, page_of(obj->sq.doorbell), kPage);
  d.llq_desc_offset = off_of(obj->sq.buffer);
  d.llq_desc_mmap_key =
      add_key(ctx, page_of(obj->sq.buffer), page_align(sq_ring_size + d.llq_desc_offset));
  d.rq_db_offset = off_of(obj->rq.doorbell);
  d.rq_db_mmap_key = add_key(ctx, page_of(obj->rq.doorbell), kPage);
  obj->keys = {d.sq_db_mmap_key, d.llq_desc_mmap_key, d.rq_db_mmap_key};
  if (rq_ring_size != 0) {
    d.rq_mmap_size = page_align(rq_ring_size);
    d.rq_mmap_key = add_key(ctx, obj->rq.buffer, d.rq_mmap_size);
    obj->keys.push_back(d.rq_mmap_key);
  }
  rc = respond(c, &r, sizeof(r), &d, sizeof(d));
  if (rc != 0) {
    for (uint64_t k : obj->keys) ctx->keys.erase(k);
    s.dev->destroy_qp(qp);
    return rc;
  }
  scq->second->users++;
  rcq->second->users++;
  ctx->qps[ctx->next_handle++] = std::move(obj);
  return 0;
}

int cmd_query_qp(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_query_qp), sizeof(ib_uverbs_query_qp_resp));
  if (rc != 0) return rc;
  ib_uverbs_query_qp req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->qps.find(req.qp_handle);
  if (it == ctx->qps.end()) return -EINVAL;
  QpObj* q = it->second.get();
  uint8_t gid[16];
  uint32_t qpn = 0, qkey = 0;
  rc = s.dev->local_address(q->qp, gid, &qpn, &qkey);
  if (rc != 0) return rc;
  ib_uverbs_query_qp_resp r;
  std::memset(&r, 0, sizeof(r));
  r.max_send_wr = q->max_send_wr;
  r.max_recv_wr = q->max_recv_wr;
  r.max_send_sge = q->max_send_sge;
  r.max_recv_sge = q->max_recv_sge;
  r.max_inline_data = q->max_inline;
  r.qkey = qkey;
  r.sq_psn = q->sq_psn;
  r.qp_state = static_cast<uint8_t>(q->qp->state());
  r.cur_qp_state = r.qp_state;
  r.port_num = 1;
  r.rnr_retry = q->rnr_retry;
  r.sq_draining = 0;
  return respond(c, &r, sizeof(r), nullptr, 0);
}

int cmd_modify_qp(State&, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_modify_qp), 0);
  if (rc != 0) return rc;
  ib_uverbs_modify_qp req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->qps.find(req.qp_handle);
  if (it == ctx->qps.end()) return -EINVAL;
  constexpr uint32_t kKnown = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY |
                              IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_RNR_RETRY |
                              IBV_QP_SQ_PSN;
  if (req.attr_mask & ~kKnown) return -EINVAL;
  if (req.qp_state > IBV_QPS_ERR || req.cur_qp_state > IBV_QPS_ERR) return -EINVAL;
  backend::QpAttr a;
  uint32_t m = 0;
  if (req.attr_mask & IBV_QP_STATE) m |= backend::kQpAttrState;
  if (req.attr_mask & IBV_QP_CUR_STATE) m |= backend::kQpAttrCurState;
  if (req.attr_mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) m |= backend::kQpAttrEnSqdAsyncNotify;
  if (req.attr_mask & IBV_QP_PKEY_INDEX) m |= backend::kQpAttrPkeyIndex;
  if (req.attr_mask & IBV_QP_PORT) m |= backend::kQpAttrPort;
  if (req.attr_mask & IBV_QP_QKEY) m |= backend::kQpAttrQkey;
  if (req.attr_mask & IBV_QP_RNR_RETRY) m |= backend::kQpAttrRnrRetry;
  if (req.attr_mask & IBV_QP_SQ_PSN) m |= backend::kQpAttrSqPsn;
  a.state = static_cast<backend::QpState>(req.qp_state);
  a.cur_state = static_cast<backend::QpState>(req.cur_qp_state);
  a.pkey_index = req.pkey_index;
  a.port = req.port_num;
  a.qkey = req.qkey;
  a.sq_psn = req.sq_psn;
  a.rnr_retry = req.rnr_retry;
  a.en_sqd_async_notify = req.en_sqd_async_notify != 0;
  rc = it->second->qp->modify(a, m);
  if (rc != 0) return rc;
  if (m & backend::kQpAttrSqPsn) it->second->sq_psn = req.sq_psn;
  if (m & backend::kQpAttrRnrRetry) it->second->rnr_retry = req.rnr_retry;
  return 0;
}

int cmd_destroy_qp(State& s, Ctx* ctx, Cmd& c) {
  int rc = legacy_split(&c, sizeof(ib_uverbs_destroy_qp), sizeof(ib_uverbs_destroy_qp_resp));
  if (rc != 0) return rc;
  ib_uverbs_destroy_qp req;
  std::memcpy(&req, c.core, sizeof(req));
  auto it = ctx->qps.find(req.qp_handle);
  if (it == ctx->qps.end()) return -EINVAL;
  ib_uverbs_destroy_qp_resp r{0};
  rc = respond(c, &r, sizeof(r), nullptr, 0);
  if (rc != 0) return rc;
  destroy_qp_locked(s, ctx, it->second.get());
  ctx->qps.erase(it);
  return 0;
}

// Teardown after the device is gone (process exit): answer destroys with success so rdma-core
// finishes its own cleanup.
bool is_destroy(uint32_t cmd) {
  return cmd == IB_USER_VERBS_CMD_DEALLOC_PD || cmd == IB_USER_VERBS_CMD_DESTROY_AH ||
         cmd == IB_USER_VERBS_CMD_DEREG_MR || cmd == IB_USER_VERBS_CMD_DESTROY_CQ ||
         cmd == IB_USER_VERBS_CMD_DESTROY_QP;
}

int dispatch(State& s, Ctx* ctx, Cmd& c) {
  if (c.extended) {
    if (!ctx->has_context) return -EINVAL;
    switch (c.command) {
      case IB_USER_VERBS_EX_CMD_QUERY_DEVICE: return cmd_ex_query_device(s, ctx, c);
      case IB_USER_VERBS_EX_CMD_CREATE_CQ: return cmd_ex_create_cq(s, ctx, c);
      default: return -EOPNOTSUPP;
    }
  }
  if (c.command == IB_USER_VERBS_CMD_GET_CONTEXT) return cmd_get_context(s, ctx, c);
  if (!ctx->has_context) return -EINVAL;
  if (s.shut_down.load() || !s.dev) {
    if (!is_destroy(c.command)) return -EIO;
    uint8_t zeros[8] = {0};
    if (c.out_len != 0) {
      std::memcpy(&c.response, c.core, 8);
      copy_out(c.response, zeros, std::min(c.out_len, sizeof(zeros)));
    }
    return 0;
  }
  switch (c.command) {
    case IB_USER_VERBS_CMD_QUERY_DEVICE: return cmd_query_device(s, ctx, c);
    case IB_USER_VERBS_CMD_QUERY_PORT: return cmd_query_port(s, ctx, c);
    case IB_USER_VERBS_CMD_ALLOC_PD: return cmd_alloc_pd(s, ctx, c);
    case IB_USER_VERBS_CMD_DEALLOC_PD: return cmd_dealloc_pd(s, ctx, c);
    case IB_USER_VERBS_CMD_CREATE_AH: return cmd_create_ah(s, ctx, c);
    case IB_USER_VERBS_CMD_DESTROY_AH: return cmd_destroy_ah(s, ctx, c);
    case IB_USER_VERBS_CMD_REG_MR: return cmd_reg_mr(s, ctx, c);
    case IB_USER_VERBS_CMD_DEREG_MR: return cmd_dereg_mr(s, ctx, c);
    case IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL: return cmd_create_comp_channel(s, ctx, c);
    case IB_USER_VERBS_CMD_CREATE_CQ: return cmd_create_cq(s, ctx, c);
    case IB_USER_VERBS_CMD_DESTROY_CQ: return cmd_destroy_cq(s, ctx, c);
    case IB_USER_VERBS_CMD_CREATE_QP: return cmd_create_qp(s, ctx, c);
    case IB_USER_VERBS_CMD_QUERY_QP: return cmd_query_qp(s, ctx, c);
    case IB_USER_VERBS_CMD_MODIFY_QP: return cmd_modify_qp(s, ctx, c);
    case IB_USER_VERBS_CMD_DESTROY_QP: return cmd_destroy_qp(s, ctx, c);
    default: return -EOPNOTSUPP;  // a verb the EFA driver does not offer
  }
}

}  // namespace

void register_context(int fd) {
  State& s = st();
  std::lock_guard<std::mutex> lock(s.mu);
  auto ctx = std::make_unique<Ctx>();
  ctx->fd = fd;
  s.ctxs[fd] = std::move(ctx);
}

bool is_context(int fd) {
  State& s = st();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.ctxs.count(fd) != 0;
}

bool close_context(int fd) {
  State& s = st();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.ctxs.find(fd);
  if (it == s.ctxs.end()) return false;
  Ctx* ctx = it->second.get();
  release_ctx_objects_locked(s, ctx);
  if (ctx->async_w >= 0) sys_close(ctx->async_w);
  s.ctxs.erase(it);
  return true;
}

ssize_t handle_write(int fd, const void* buf, size_t count) {
  State& s = st();
  ib_uverbs_cmd_hdr hdr;
  if (count < sizeof(hdr)) return -EINVAL;
  std::vector<uint8_t> req(count);
  if (!copy_in(req.data(), reinterpret_cast<uint64_t>(buf), count)) return -EFAULT;
  std::memcpy(&hdr, req.data(), sizeof(hdr));
  if (hdr.command & ~uint32_t{IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_CMD_COMMAND_MASK})
    return -EINVAL;
  Cmd c{};
  c.command = hdr.command & IB_USER_VERBS_CMD_COMMAND_MASK;
  c.extended = hdr.command & IB_USER_VERBS_CMD_FLAG_EXTENDED;
  if (c.extended) {
    ib_uverbs_ex_cmd_hdr ex;
    if (count < sizeof(hdr) + sizeof(ex)) return -EINVAL;
    std::memcpy(&ex, req.data() + sizeof(hdr), sizeof(ex));
    size_t core = size_t{hdr.in_words} * 8, drv = size_t{ex.provider_in_words} * 8;
    if (sizeof(hdr) + sizeof(ex) + core + drv != count || ex.cmd_hdr_reserved != 0) return -EINVAL;
    c.core = req.data() + sizeof(hdr) + sizeof(ex);
    c.core_len = core;
    c.drv = c.core + core;
    c.drv_len = drv;
    c.response = ex.response;
    c.out_len = size_t{hdr.out_words} * 8;
    c.drv_response = ex.response + c.out_len;
    c.drv_out_len = size_t{ex.provider_out_words} * 8;
    if ((c.out_len != 0 || c.drv_out_len != 0) && ex.response == 0) return -EFAULT;
  } else {
    if (size_t{hdr.in_words} * 4 != count) return -EINVAL;
    c.core = req.data() + sizeof(hdr);
    c.core_len = count - sizeof(hdr);
    c.out_len = size_t{hdr.out_words} * 4;
  }
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.ctxs.find(fd);
  if (it == s.ctxs.end()) return -EBADF;
  int rc = dispatch(s, it->second.get(), c);
  return rc != 0 ? rc : static_cast<ssize_t>(count);
}

void* handle_mmap(int fd, size_t length, int prot, int flags, off_t key, int* err) {
  (void)prot;
  State& s = st();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.ctxs.find(fd);
  if (it == s.ctxs.end()) {
    *err = EBADF;
    return nullptr;
  }
  auto m = it->second->keys.find(static_cast<uint64_t>(key));
  if (m == it->second->keys.end() || !(flags & MAP_SHARED) || length != m->second.len) {
    *err = EINVAL;
    return nullptr;
  }
  uintptr_t a = reinterpret_cast<uintptr_t>(m->second.addr);
  auto h = s.handed.find(a);
  if (h == s.handed.end()) {
    bool owned = false;
    for (const auto& kv : it->second->cqs)
      if (kv.second->ring16 == m->second.addr) owned = true;
    s.handed[a] = Handed{m->second.len, 1, fd, owned, false};
  } else {
    h->second.refs++;
  }
  return m->second.addr;
}

bool handle_munmap(void* addr, size_t length) {
  (void)length;
  State& s = st();
  std::lock_guard<std::mutex> lock(s.mu);
  auto h = s.handed.find(reinterpret_cast<uintptr_t>(addr));
  if (h == s.handed.end()) return false;
  if (--h->second.refs <= 0) {
    if (h->second.owned && h->second.orphan) free_owned(static_cast<uint8_t*>(addr), h->second.len);
    s.handed.erase(h);
  }
  return true;
}

int take_new_channel() {
  int fd = t_new_channel;
  t_new_channel = -1;
  return fd;
}

bool close_channel(int fd) {
  State& s = st();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.channels.find(fd);
  if (it == s.channels.end()) return false;
  for (auto& kv : it->second.cqs) kv.second->channel = -1;
  s.channels.erase(it);
  return true;
}

ssize_t channel_read(int fd, void* buf, size_t count, bool nonblocking) {
  State& s = st();
  if (count < 8) return -EINVAL;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(s.mu);
      auto it = s.channels.find(fd);
      if (it == s.channels.end()) return -EBADF;
      Channel& ch = it->second;
      if (!ch.records.empty()) {
        uint64_t token;
        if (sys_read(fd, &token, 8) == 8) {
          uint64_t rec = ch.records.front();
          ch.records.pop_front();
          auto cq = ch.cqs.find(rec);
          if (cq != ch.cqs.end()) cq->second->comp_reported++;
          if (!copy_out(reinterpret_cast<uint64_t>(buf), &rec, 8)) return -EFAULT;
          return 8;
        }
      }
    }
    if (nonblocking) return -EAGAIN;
    // Wait for a token without taking it, then try again under the lock.
    struct pollfd_like {
      int fd;
      short events, revents;
    } p{fd, 1 /* POLLIN */, 0};
    syscall(SYS_poll, &p, 1, 100);
  }
}

bool gid_text(int index, char* out, size_t out_len) {
  State& s = st();
  std::lock_guard<std::mutex> lock(s.mu);
  if (open_backend_locked(s) != 0 || index < 0 || static_cast<size_t>(index) >= s.infos.size())
    return false;
  const uint8_t* g = s.infos[index].gid;
  snprintf(out, out_len, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x\n",
           g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13],
           g[14], g[15]);
  return true;
}

int query_qp_wqs(const void* ibv_qp_p, efadv_compat_wq_attr* sq, efadv_compat_wq_attr* rq,
                 uint32_t inlen) {
  if (ibv_qp_p == nullptr || sq == nullptr || rq == nullptr) return EINVAL;
  if (inlen < EFADV_COMPAT_WQ_ATTR_MIN_INLEN) return EINVAL;
  const ibv_qp* qp = static_cast<const ibv_qp*>(ibv_qp_p);
  if (qp->context == nullptr) return EINVAL;
  State& s = st();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.ctxs.find(qp->context->cmd_fd);
  if (it == s.ctxs.end()) return EOPNOTSUPP;  // not a device this library serves
  auto q = it->second->qps.find(qp->handle);
  if (q == it->second->qps.end()) return EINVAL;
  const QpObj& o = *q->second;
  efadv_compat_wq_attr a{};
  a.buffer = o.sq.buffer;
  a.entry_size = o.sq.entry_size;
  a.num_entries = o.sq.num_entries;
  a.doorbell = o.sq.doorbell;
  a.max_batch = o.sq.max_batch;
  efadv_compat_wq_attr b{};
  b.buffer = o.rq.buffer;
  b.entry_size = o.rq.entry_size;
  b.num_entries = o.rq.num_entries;
  b.doorbell = o.rq.doorbell;
  b.max_batch = o.rq.max_batch;
  size_t n = std::min<size_t>(inlen, sizeof(a));
  std::memset(sq, 0, inlen);
  std::memset(rq, 0, inlen);
  std::memcpy(sq, &a, n);
  std::memcpy(rq, &b, n);
  return 0;
}

int query_cq(const void* ibv_cq_p, efadv_compat_cq_attr* attr, uint32_t inlen) {
  if (ibv_cq_p == nullptr || attr == nullptr) return EINVAL;
  if (inlen < offsetof(efadv_compat_cq_attr, doorbell)) return EINVAL;
  const ibv_cq* cq = static_cast<const ibv_cq*>(ibv_cq_p);
  if (cq->context == nullptr) return EINVAL;
  State& s = st();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.ctxs.find(cq->context->cmd_fd);
  if (it == s.ctxs.end()) return EOPNOTSUPP;
  auto c = it->second->cqs.find(cq->handle);
  if (c == it->second->cqs.end()) return EINVAL;
  const CqObj& o = *c->second;
  // The NIC's native ring (32-byte CQEs) even when libefa polls a 16-byte view of it: a v59+
  // libefa would have created the CQ with 32-byte entries, and the same indices and phases
  // hold in both views.
  efadv_compat_cq_attr a{};
  a.buffer = o.emu_ring;
  a.entry_size = 32;
  a.num_entries = o.entries;
  a.doorbell = o.db;
  size_t n = std::min<size_t>(inlen, sizeof(a));
  std::memset(attr, 0, n);
  std::memcpy(attr, &a, n);
  return 0;
}

void after_fork_child() {
  State& s = st();
  // The parent's threads and device state are not ours: drop them without running destructors
  // (and without detaching the parent's address from a shared fabric).
  new (&s.mu) std::mutex();
  s.driven.store(nullptr);
  (void)s.dev.release();
  (void)s.backend.release();
  s.emu = nullptr;
  for (auto& kv : s.ctxs) (void)kv.second.release();
  s.ctxs.clear();
  s.channels.clear();
  s.handed.clear();
  s.served.clear();
  if (s.service.joinable()) {
    // A std::thread copied by fork names a thread that does not exist here.
    new (&s.service) std::thread();
  }
  s.infos.clear();
}

void at_exit() {
  State& s = st();
  std::unique_ptr<Device> dev;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.shut_down.exchange(true)) return;
    for (auto& kv : s.ctxs) release_ctx_objects_locked(s, kv.second.get());
    if (s.emu != nullptr) {
      const char* path = std::getenv("XPUFAB_EMU_STATS");
      if (path != nullptr && path[0] != '\0') {
        emu::Stats t = s.emu->stats();
        char line[512];
        int n = snprintf(line, sizeof(line),
                         "pid=%d device=%s packets_tx=%llu packets_rx=%llu bytes_tx=%llu "
                         "bytes_rx=%llu wqes=%llu cqes=%llu error_cqes=%llu retransmits=%llu "
                         "rnr_naks=%llu\n",
                         static_cast<int>(getpid()), s.attr.name.c_str(),
                         (unsigned long long)t.packets_tx, (unsigned long long)t.packets_rx,
                         (unsigned long long)t.bytes_tx, (unsigned long long)t.bytes_rx,
                         (unsigned long long)t.wqes, (unsigned long long)t.cqes,
                         (unsigned long long)t.error_cqes, (unsigned long long)t.retransmits,
                         (unsigned long long)t.rnr_naks);
        int fd = static_cast<int>(
            syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
        if (fd >= 0) {
          if (n > 0) (void)sys_write(fd, line, static_cast<size_t>(n));
          sys_close(fd);
        }
      }
    }
    s.driven.store(nullptr, std::memory_order_release);
    dev = std::move(s.dev);
    s.emu = nullptr;
  }
  s.stop.store(true, std::memory_order_release);
  if (s.service.joinable()) s.service.join();
  dev.reset();
}

}  // namespace shim
}  // namespace xpufab
