// Internal objects of the "efa" provider (fabric "efa-direct"); the ops of each object live in
// the source file named for it. Every libfabric object is a C++ struct whose first member is the
// libfabric handle; api/efa/casts.h converts a handle back to its object after checking its
// class. Only the backend interface (api/backend/backend.h) is used to reach a device, and only
// the routines in device/ read or write queue bytes.
//
// Locking: each domain has one lock (`lock`, a futex word: Lock) for its object lists and for
// host-side CQ polling; each EP has a `tx_lock`/`rx_lock` around host posts (the device routines
// are lock-free, the locks keep the provider's per-post bookkeeping simple). Progress never holds
// an EP lock while it takes the domain lock. In a domain opened with FI_THREAD_DOMAIN the
// application serializes every call, so the data path (posts, AV look-ups, CQ staging and reads)
// takes none of these (SerialLock); set-up and teardown still do.
#ifndef XPUFAB_API_EFA_EFA_H_
#define XPUFAB_API_EFA_EFA_H_

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_xpu.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "api/backend/backend.h"
#include "api/core/fid.h"
#include "api/core/log.h"
#include "api/core/pollable.h"
#include "api/efa/zeroed_array.h"
#include "base/futex_lock.h"
#include "device/efa_completion.h"
#include "xpufab/efa_xpu/handles.h"

namespace xpufab::efa {

inline constexpr const char* kProvName = "efa";
inline constexpr const char* kFabricName = "efa-direct";
// FI_EP_DGRAM endpoints (UD QPs) live in their own fabric and domains, named as upstream's.
inline constexpr const char* kDgramFabricName = "efa";
inline constexpr const char* kDgramDomainSuffix = "-dgrm";
// The protocol fabric (api/proto/): RDM endpoints with tagged messages, atomics, RMA on every
// device generation and messages far beyond the MTU, built in software over SRD, on the host or
// in device code (FI_XPU). Upstream's efa provider calls it "efa" too, with
// domains "<device>-rdm", beside the DGRAM domains of the same fabric.
inline constexpr const char* kProtoFabricName = "efa";
inline constexpr const char* kRdmDomainSuffix = "-rdm";
// The largest message the protocol fabric carries (fi_getinfo's max_msg_size).
inline constexpr size_t kProtoMaxMsgSize = size_t{1} << 30;
// Reported as libfabric's providers report theirs, FI_VERSION(major * 100 + minor, revision * 10)
// of the release they come with (2.7.0: 207.0): applications compare it against those numbers
// (Open MPI refuses an efa provider below 112.0, libfabric 1.12).
inline constexpr uint32_t kProvVersion = FI_VERSION(207, 0);

#define EFA_WARN(subsys, ...) XPUFAB_WARN("efa", ::xpufab::core::LogSubsys::subsys, __VA_ARGS__)
#define EFA_INFO(subsys, ...) XPUFAB_INFO("efa", ::xpufab::core::LogSubsys::subsys, __VA_ARGS__)

// The fi_getname() address: GID, QPN, QKEY (FI_ADDR_EFA, 32 bytes as upstream's efa_ep_addr).
struct EfaAddr {
  uint8_t gid[16];
  uint16_t qpn;
  uint16_t pad;
  uint32_t qkey;
  uint64_t reserved;
};
static_assert(sizeof(EfaAddr) == 32, "EfaAddr layout");

// Converts a backend errno (-EINVAL ...) to the FI_E* code libfabric callers expect.
int to_fi_err(int backend_rc);

// A device opened once per process and shared by the domains on it (the emulator refuses a
// second open of the same device).
struct EfaEp;
struct SharedDevice {
  std::string backend;
  std::string name;
  std::unique_ptr<backend::Device> dev;
  backend::DeviceAttr attr{};
  int users = 0;
  // Enabled EPs by QP, so that a QP failure the device reports reaches its EP. ep_lock is taken
  // before any CQ lock and never while a domain lock is held.
  std::mutex ep_lock;
  std::map<backend::Qp*, EfaEp*> eps;
  std::unique_ptr<backend::EventHandler> handler;
};

// An eventfd that wakes a thread sleeping in a wait call (fi_cq_signal, counter updates). Only
// written while somebody waits, so the common path costs one atomic load.
struct WakeFd {
  int fd = -1;
  std::atomic<int> waiters{0};
  int open();   // 0 or -FI_ENOMEM style error
  void close();
  void wake();
  void drain();
};

// How long a sleeping wait sleeps before it drives progress itself again. A device without an
// engine thread (manual progress) writes no CQE while everybody sleeps; this bounds the delay.
inline constexpr int kWaitSliceMs = 5;

// Opens (or shares) device `name` of backend `backend_name` (provider.cc).
int acquire_device(const std::string& backend_name, const std::string& name, SharedDevice** out);
void release_device(SharedDevice* d);
// The backend FI_EFA_BACKEND selects and its devices (api/backend/choice.h): the named backend,
// or for "auto" (the default) the highest-priority one with devices, hw before emu. 0 or a
// negative errno; an unknown name is -EINVAL and logged at warn level.
int select_backend(std::string* name_p, std::vector<backend::DeviceInfo>* devices_p);
// The provider's fi_getinfo offers, one per device of the selected backend (getinfo.cc): `node`
// (with FI_SOURCE in `flags`: the local address) and the hints' addresses select the device and
// fill dest_addr.
int provider_getinfo(const char* node, uint64_t flags, const fi_info* hints, fi_info** info_p);

struct EfaFabric;
struct EfaDomain;

// The locks a post, an AV look-up or a CQ read takes where the application does not serialize
// its calls (FI_THREAD_SAFE, the default): a futex word, since pthread's mutex costs about 40
// more instructions a pair, several pairs a message.
using Lock = base::FutexLock;

// Holds `m` unless the domain's application serializes its calls (EfaDomain::app_serialized):
// a locked instruction right after a send stalls until the packet's cache lines have moved.
class SerialLock {
 public:
  SerialLock(Lock& m, bool serialized) : m_(serialized ? nullptr : &m) {
    if (m_) m_->lock();
  }
  ~SerialLock() {
    if (m_) m_->unlock();
  }
  SerialLock(const SerialLock&) = delete;
  SerialLock& operator=(const SerialLock&) = delete;

 private:
  Lock* m_;
};
struct EfaEp;
struct EfaCq;
struct EfaCntr;
struct EfaXpuCtx;
struct EfaMr;

struct EfaFabric {
  fid_fabric fabric;
  core::FidRefs refs;
};

struct EfaDomain {
  fid_domain domain;
  EfaFabric* fab = nullptr;
  core::FidRefs refs;
  SharedDevice* sdev = nullptr;
  backend::Device* dev = nullptr;
  backend::Pd* pd = nullptr;
  backend::DeviceAttr attr{};
  fi_info* info = nullptr;  // the fi_info it was opened with (copy)
  int mr_mode = 0;
  // The application gives a descriptor for every buffer (FI_MR_LOCAL, or the FI_LOCAL_MR mode
  // bit). Without, the protocol fabric copies what it sends and receives (msg.h).
  bool local_mr = true;
  bool xpu = false;  // opened with FI_XPU
  bool dgram = false;  // a "<device>-dgrm" domain: FI_EP_DGRAM endpoints only
  bool proto = false;  // a "<device>-rdm" domain of the protocol fabric
  // Opened with FI_THREAD_DOMAIN: the application serializes every call on the domain and its
  // objects, so the host-side data path (progress, CQ reads, protocol endpoints) takes no lock.
  bool app_serialized = false;
  uint32_t trace_id = 0;    // FI_EFA_CQ_TRACE numbering (cq_trace.h)
  uint32_t trace_next_qp = 0;
  // An epoll set of the event fds of the host CQs: readable when one of them was signaled. A
  // counter in a wait set offers it, since its completions arrive through any of those CQs.
  int cq_epoll = -1;
  Lock lock;
  std::vector<EfaEp*> eps;    // enabled EPs
  // The same by QPN, for CQE dispatch (with the last one found first: most CQEs of a CQ name
  // the same QP), so that a domain with many QPs does not search them at every completion.
  std::unordered_map<uint32_t, EfaEp*> ep_of_qpn;
  EfaEp* last_ep = nullptr;
  std::vector<EfaCq*> cqs;    // host-polled CQs
  // How many of them are internal (EfaCq::internal); changed under `lock` with `cqs`.
  std::atomic<uint32_t> internal_cqs{0};
  std::vector<EfaEp*> proto_eps;  // enabled endpoints of a protocol domain (their progress)
  std::vector<EfaMr*> mrs;        // a protocol domain's MRs (the targets' key tables)
  std::map<std::vector<uint8_t>, std::pair<backend::Ah*, int>> ahs;  // GID -> AH, users

  // Drives the device and drains every host-polled CQ into its staging list.
  void progress();
  // Acknowledges and re-arms every host CQ's event fd, so that the next CQE signals cq_epoll.
  void rearm_cqs();
  // Arms the host CQs, drives progress once and, unless `ready()` then holds, sleeps until a
  // host CQ of this domain gets a CQE, `extra_fd` becomes readable, or `ms` passes (at most
  // kWaitSliceMs). Callers re-check their condition afterwards.
  void wait_event(int ms, int extra_fd, const std::function<bool()>& ready);
  EfaEp* ep_by_qpn(uint32_t qpn);  // lock held
  int get_ah(const uint8_t gid[16], backend::Ah** ah_p);
  void put_ah(const uint8_t gid[16]);
};

struct EfaAvEntry {
  bool valid = false;
  EfaAddr addr{};
  uint16_t ahn = 0;
};

struct EfaAv {
  fid_av av;
  EfaDomain* dom = nullptr;
  core::FidRefs refs;
  uint64_t flags = 0;        // fi_av_attr flags (FI_EVENT)
  fid_eq* eq = nullptr;      // bound with fi_av_bind; FI_EVENT inserts report here
  Lock lock;
  std::vector<EfaAvEntry> entries;
  // entries.size(), published after each append: progress checks it without the lock.
  std::atomic<size_t> count{0};
  // Returns a copy of a valid entry or false.
  bool get(fi_addr_t a, EfaAvEntry* out);
};

struct EfaMr {
  fid_mr mr;
  EfaDomain* dom = nullptr;
  backend::Mr* bmr = nullptr;
  // bmr's keys, fixed at registration: a post reads them without a call into the backend.
  uint32_t lkey = 0, rkey = 0;
  uint64_t access = 0;
  uint64_t addr = 0, len = 0;  // the registered range
};

// A host-side completion waiting for fi_cq_read (success or error, kept in arrival order), as
// device/efa_completion.h translates a CQE for host and device code alike.
// The protocol fabric's completions add a tag and, for a truncated receive, the bytes that did
// not fit (olen).
struct Completion {
  efa_comp c{};
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  uint64_t tag = 0;
  uint64_t olen = 0;
  bool error() const { return c.err != 0; }
};

// XPU memory obtained through a context's callbacks, released in reverse order on close.
struct XpuMem {
  void* host = nullptr;   // host address (allocated or imported region)
  void* dev = nullptr;    // device address
  size_t size = 0;
  int fd = -1;
  uint64_t offset = 0;
  bool allocated = false;  // alloc()ed (free on release) vs imported (unimport on release)
};

// What poll sets and wait sets see of a host CQ (api/core/pollable.h).
struct CqPollable : core::Pollable {
  EfaCq* cq = nullptr;
  fid* pollable_fid() override;
  core::FidRefs& pollable_refs() override;
  bool has_event() override;
  int pollable_fd() override;
};

struct CntrPollable : core::Pollable {
  EfaCntr* cntr = nullptr;
  fid* pollable_fid() override;
  core::FidRefs& pollable_refs() override;
  bool has_event() override;
  int pollable_fd() override;
};

// A host CQ's or counter's place in the core's registry of pollables (poll sets, wait sets).
struct SetMembership {
  bool registered = false;
  fid_wait* wait_set = nullptr;  // FI_WAIT_SET: the set it is attached to
  // Registers `p` and attaches it to `wait_set` when one is given; on failure nothing is left.
  int join(core::Pollable* p, fid_wait* set);
  // After the object's last reference: no set holds it, so it only leaves the registry's view.
  void leave(core::Pollable* p);
};

struct EfaCq {
  fid_cq cq;
  EfaDomain* dom = nullptr;
  core::FidRefs refs;
  fi_cq_format format = FI_CQ_FORMAT_CONTEXT;
  size_t entry_size = sizeof(fi_cq_entry);
  fi_wait_obj wait_obj = FI_WAIT_NONE;
  backend::Cq* bcq = nullptr;
  backend::CqAttr battr{};
  struct efa_cq poll{};           // device/ polling state (host CQs)
  EfaXpuCtx* xctx = nullptr;      // XPU CQ when set
  bool exported = false;
  XpuMem ring;                    // XPU CQ ring memory
  XpuMem state;                   // exported efa_xpu_cq
  struct efa_xpu_cq* xstate = nullptr;
  Lock lock;                      // staging
  std::deque<Completion> staged;
  // staged.size(), stored after each change: a read without FI_THREAD_DOMAIN that finds it 0
  // returns without the lock.
  std::atomic<size_t> nstaged{0};
  std::atomic<bool> signaled{false};
  WakeFd wake;                    // fi_cq_signal wakes fi_cq_sread
  CqPollable pollable;            // registered while a user host CQ is open
  SetMembership sets;
  bool internal = false;          // private CQ of an EP without a user CQ
  uint32_t stale_cqes = 0;        // CQEs dropped for naming no outstanding request

  bool is_xpu() const { return xctx != nullptr; }
  void stage(const Completion& c);
};

struct EfaCntr {
  fid_cntr cntr;
  EfaDomain* dom = nullptr;
  core::FidRefs refs;
  fi_wait_obj wait_obj = FI_WAIT_NONE;
  std::atomic<uint64_t> value{0};
  std::atomic<uint64_t> err{0};
  std::mutex lock;
  WakeFd wake;                    // add/set/inc wake fi_cntr_wait
  CntrPollable pollable;          // registered while a host counter is open
  SetMembership sets;
  std::mutex poll_lock;           // seen_*: what the last true has_event() reported
  uint64_t seen_value = 0, seen_err = 0;
  EfaXpuCtx* xctx = nullptr;
  bool exported = false;
  XpuMem val_mem, err_mem, state;  // XPU counter: device-written memory + exported struct
  backend::CompCntr* bcntr = nullptr;
  struct efa_xpu_cntr* xstate = nullptr;

  bool is_xpu() const { return xctx != nullptr; }
  void inc(bool error);
};

struct EfaXpuCtx {
  fid_xpu_ctx ctx;
  EfaDomain* dom = nullptr;
  core::FidRefs refs;
  fi_hmem_iface iface = FI_HMEM_SYSTEM;
  uint64_t device = 0;
  // Normalized callbacks (either fi_xpu_ops layout, or the host-memory defaults).
  int (*alloc)(uint64_t, uint64_t, uint64_t, uint64_t, void**, int*, uint64_t*) = nullptr;
  int (*import_)(uint64_t, void*, uint64_t, uint64_t, void**) = nullptr;
  int (*unimport)(uint64_t, void*) = nullptr;
  void (*free_)(uint64_t, void*) = nullptr;

  int alloc_mem(size_t size, uint64_t flags, XpuMem* m);
  int import_mem(void* host, size_t size, uint64_t flags, XpuMem* m);
  void release(XpuMem* m);
};

// What a host post's completion needs beyond the CQE and the request's context (which the
// request table keeps): written before the post is published, read before its request is freed
// (the index is reused after that). Accessed with relaxed atomics (device/xpu_prims.h), as a
// stale CQE may read the slot of an index a post is filling.
struct OpSlot {
  uint64_t buf = 0;     // a receive's first buffer (FI_CQ_FORMAT_DATA's buf)
  uint32_t report = 1;  // a success writes a CQ entry (not suppressed by FI_SELECTIVE_COMPLETION)
};

struct EfaEp {
  fid_ep ep;
  EfaDomain* dom = nullptr;
  fi_info* info = nullptr;
  uint64_t caps = 0;
  uint64_t tx_op_flags = 0, rx_op_flags = 0;
  bool enabled = false;
  EfaAv* av = nullptr;
  fid_eq* eq = nullptr;     // bound with fi_ep_bind (asynchronous events)
  EfaCq* tx_cq = nullptr;   // user CQ or internal
  EfaCq* rx_cq = nullptr;
  bool tx_selective = false, rx_selective = false;
  EfaCq* err_cq = nullptr;  // host CQ bound to an XPU EP for errors
  EfaCntr* cntr_send = nullptr;
  EfaCntr* cntr_recv = nullptr;
  EfaCntr* cntr_read = nullptr;
  EfaCntr* cntr_write = nullptr;
  EfaCntr* cntr_rread = nullptr;
  EfaCntr* cntr_rwrite = nullptr;
  backend::Qp* qp = nullptr;
  uint32_t qpn = 0, qkey = 0;
  uint32_t trace_qp = 0;  // enable order within the domain (cq_trace.h)
  size_t tx_size = 0, rx_size = 0;
  size_t max_msg = 0;
  size_t prefix = 0;  // FI_MSG_PREFIX bytes in front of every buffer (DGRAM: the GRH)
  // FI_OPT_MIN_MULTI_RECV of a protocol-fabric endpoint (its core takes it on enable).
  size_t min_multi_recv = 64;
  bool dgram = false;
  Lock tx_lock, rx_lock;
  struct efa_sq sq{};
  struct efa_rq rq{};
  ZeroedArray<uint64_t> sq_scratch, rq_scratch;
  ZeroedArray<OpSlot> sq_slots, rq_slots;  // by request-table index of sq / rq
  EfaXpuCtx* xctx = nullptr;  // XPU EP
  bool exported = false;
  std::vector<XpuMem> xmem;   // imports/allocs of the export
  struct efa_xpu_ep* xstate = nullptr;
  struct efa_xpu_av_entry* xav_host = nullptr;  // host address of xstate's AV mirror
  std::vector<backend::CompCntr*> attached;
  std::atomic<bool> failed{false};  // the device failed the QP (handle_failure)
  struct ProtoState* proto = nullptr;  // a protocol-fabric endpoint's state (proto_state.h)

  bool is_xpu() const { return xctx != nullptr; }
};

// Object constructors (ops tables live with the objects).
int fabric_open(fi_fabric_attr* attr, fid_fabric** fabric_p, void* context);
int domain_open(fid_fabric* fabric, fi_info* info, fid_domain** domain_p, void* context);
int av_open(fid_domain* domain, fi_av_attr* attr, fid_av** av_p, void* context);
int mr_reg(fid* fid, const void* buf, size_t len, uint64_t access, uint64_t offset,
           uint64_t requested_key, uint64_t flags, fid_mr** mr_p, void* context);
int mr_regv(fid* fid, const iovec* iov, size_t count, uint64_t access, uint64_t offset,
            uint64_t requested_key, uint64_t flags, fid_mr** mr_p, void* context);
int mr_regattr(fid* fid, const fi_mr_attr* attr, uint64_t flags, fid_mr** mr_p);
// The fid part of an exported device handle (efa_xpu_ep / _cq / _cntr): this provider's id and
// the device address of the handle's state, carried as an integer (fid_xpu.prov_ctx, fi_xpu.h).
template <typename Handle>
void stamp_xpu_handle(Handle* st, size_t fclass, const void* dev_state) {
  st->fid.fid.fclass = fclass;
  st->fid.fid.prov_id = FI_XPU_PROV_EFA;
  st->fid.fid.prov_ctx = reinterpret_cast<uintptr_t>(dev_state);
}

// fi_cq_attr and fi_cntr_attr end with xpu_ctx since 2.7; a program built against older headers
// (Debian's fi_pingpong, any 1.x application) passes the shorter struct, where that field is not
// there to read. It is read when FI_XPU says it is set or the application asked for API >= 2.7, so
// the fi_xpu(3) example's form (xpu_ctx without FI_XPU) keeps working.
template <typename Attr>
fid_xpu_ctx* attr_xpu_ctx(const EfaDomain* dom, const Attr* attr) {
  if (attr->flags & FI_XPU) return attr->xpu_ctx;
  if (dom->fab == nullptr || dom->fab->fabric.api_version < FI_VERSION(2, 7)) return nullptr;
  return attr->xpu_ctx;
}

int cq_open(fid_domain* domain, fi_cq_attr* attr, fid_cq** cq_p, void* context);
int cntr_open(fid_domain* domain, fi_cntr_attr* attr, fid_cntr** cntr_p, void* context);
int endpoint_open(fid_domain* domain, fi_info* info, fid_ep** ep_p, void* context);
int endpoint2_open(fid_domain* domain, fi_info* info, fid_ep** ep_p, uint64_t flags, void* context);
int xpu_ctx_open(fid_domain* domain, fi_xpu_attr* attr, fid_xpu_ctx** ctx_p, void* context);
// fi_ep_export_xpu (api/efa/ep_export.cc); exporting again refreshes the device's copy of the AV.
int xpu_ep_export(EfaEp* ep, uint64_t flags, fid_xpu_ep* out);
// Entries were appended to the AV of exported endpoint `ep`: its AV mirror, and for a
// protocol-fabric endpoint its core's peers, take them in without another export.
void xpu_ep_av_grown(EfaEp* ep);

// Creates ep->qp from `qa` and brings it to RTS (qpn, qkey set); nothing is left on failure.
int qp_create_rts(EfaEp* ep, const backend::QpInitAttr& qa);

// Internal CQ of an EP that has no user CQ for a direction (the QP needs one).
int cq_create_internal(EfaDomain* dom, EfaCq** cq_p);
void cq_destroy_internal(EfaCq* cq);
// Polls one host CQ's ring and dispatches its CQEs (domain lock held).
void cq_drain(EfaCq* cq);

// A CQ read whose entries the domain's progress may write straight into the caller's buffer
// (cq.cc), rather than stage them on the CQ for the read to copy out again.
struct DirectRead {
  EfaCq* cq = nullptr;
  uint8_t* out = nullptr;
  size_t room = 0;
  size_t n = 0;  // entries written
  fi_addr_t* src = nullptr;
};
// Puts a completion on `cq`: into `d`'s buffer when `d` reads `cq` and has room, nothing is
// staged before it and it is no error; staged otherwise. `d` may be null.
void cq_report(EfaCq* cq, const Completion& c, DirectRead* d);

// The device reported that `qp` failed with efa_io_comp_status `status`: marks the EP and, for
// an XPU EP, reports the failure on the host CQ bound to it for errors.
void ep_qp_failed(SharedDevice* sd, backend::Qp* qp, int status);

// Host counter/XPU counter helpers for the EP.
int cntr_attach(EfaCntr* cntr, EfaEp* ep, uint32_t ops);

// Handlers for optional fid ops the provider does not offer (libfabric's fi_no_* convention).
int fi_no_bind(fid*, fid*, uint64_t);
int fi_no_control(fid*, int, void*);
int fi_no_ops_open(fid*, const char*, uint64_t, void**, void*);
int fi_no_tostr(const fid*, char*, size_t);
int fi_no_ops_set(fid*, const char*, uint64_t, void*, void*);

// Op groups of endpoints without FI_TAGGED / FI_ATOMIC: the inline wrappers of
// <rdma/fi_tagged.h> and <rdma/fi_atomic.h> call through the table unchecked, so every entry
// exists and fails with -FI_ENOSYS.
fi_ops_tagged* no_tagged_ops();
fi_ops_atomic* no_atomic_ops();

// An efa-direct endpoint's send, receive and RMA calls (ep_data.cc).
fi_ops_msg* direct_msg_ops();
fi_ops_rma* direct_rma_ops();

}  // namespace xpufab::efa

#endif  // XPUFAB_API_EFA_EFA_H_
