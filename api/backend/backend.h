// xpufab backend interface: the contract the emulated device (emu/) and the rdma-core/efadv
// hardware backend (hw/) implement, and the only thing the EFA provider in api/ talks to.
//
// The shape follows efadv so that the hardware backend is a thin mapping:
//   Backend        -> the set of devices one implementation offers ("emu", "hw")
//   Device         -> ibv_context + efadv_query_device
//   Pd, Mr, Ah     -> ibv_pd, ibv_mr (lkey/rkey), ibv_ah + efadv_query_ah (ahn)
//   Cq             -> efadv_create_cq (optionally external memory) + efadv_query_cq, arm, event fd
//   Qp             -> efadv_create_qp_ex (SRD) or ibv_create_qp (UD) + ibv_modify_qp +
//                     efadv_query_qp_wqs
//   CompCntr       -> efadv_create_comp_cntr (value and error count in caller memory)
//
// Queue bytes (WQEs, RX descriptors, CQEs, doorbell values) are never produced here: callers write
// and read them through the formats in device/ using the buffers and doorbells the queries return.
//
// Error convention: every call returns 0 or a negative errno (-EINVAL, -ENOMEM, -EBUSY, -ENODEV,
// -EOPNOTSUPP, ...). Nothing throws. Out-parameters are written only on success.
// Object lifetime: objects are created and destroyed through their Device; destroying an object
// that others still reference returns -EBUSY (a PD with MRs/QPs/AHs, a CQ bound to a QP, a
// counter attached to a QP). Destroying the Device releases whatever is left.
// Thread safety: all control calls on one Device are serialized internally and may be made from
// any thread. progress() may be called concurrently from any number of threads.
// This header has no libfabric types on purpose.
#ifndef XPUFAB_API_BACKEND_BACKEND_H_
#define XPUFAB_API_BACKEND_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace xpufab {
namespace backend {

// Device capability bits. Bits 0..6 keep efadv's numbering (EFADV_DEVICE_ATTR_CAPS_*) so the
// hardware backend copies efadv_device_attr.device_caps; bits 16 and up are reported by other
// queries on hardware (DATA_POLLING_128 via ibv_query_qp_data_in_order, notifications via the
// uAPI caps, the 128-byte WQE via inline_buf_size_ex) and are collected here for convenience.
enum DeviceCap : uint32_t {
  kCapRdmaRead = 1u << 0,
  kCapRnrRetry = 1u << 1,
  kCapCqWithSgid = 1u << 2,
  kCapRdmaWrite = 1u << 3,
  kCapUnsolicitedWriteRecv = 1u << 4,
  kCapCqWithExtMem = 1u << 5,
  kCapCompCntr = 1u << 6,
  kCapDataPolling128 = 1u << 16,
  kCapCqNotifications = 1u << 17,
  kCapInlineWrite = 1u << 18,  // 128-byte WQE with inline RDMA write
};

// efadv_query_device + the uAPI/admin attributes a provider needs. All sizes in bytes.
struct DeviceAttr {
  std::string name;              // "efa_emu0", "rdmap0s6", ...
  std::string profile;           // emulated generation, "" on hardware
  uint8_t gid[16];               // the device address on the fabric
  uint16_t vendor_part_id;       // 0xefa0.. ; 0xefa0 means sub-CQs on hardware
  uint32_t max_qp;
  uint32_t max_cq;
  uint32_t max_mr;
  uint32_t max_pd;
  uint32_t max_ah;
  uint32_t max_sq_wr;            // per QP, in WQEs
  uint32_t max_rq_wr;            // per QP, in receive WQEs
  uint16_t max_sq_sge;           // SEND buffer descriptors per WQE (<= 2)
  uint16_t max_rq_sge;           // RX descriptors per receive WQE
  uint16_t max_rdma_sge;         // local SGEs of an RDMA WQE (1)
  uint16_t inline_buf_size;      // inline bytes in a 64-byte WQE (32)
  uint16_t inline_buf_size_ex;   // inline bytes in a 128-byte WQE (80), 0 if unsupported
  uint32_t device_caps;          // DeviceCap bits
  uint32_t max_rdma_size;        // largest RDMA read/write
  uint32_t mtu;                  // largest SEND payload
  uint32_t max_tx_batch;         // bytes between two SQ doorbells in 64-byte units, 0 = unlimited
  uint32_t min_sq_wr;            // smallest SQ depth the device accepts
  uint32_t max_cq_depth;
  uint32_t link_speed_gbps;
};

// ---- memory registration ----

enum MrAccess : uint32_t {
  kAccessLocalWrite = 1u << 0,
  kAccessRemoteWrite = 1u << 1,
  kAccessRemoteRead = 1u << 2,
};

// `want` limited to what a device with `device_caps` serves. reg_mr refuses remote write without
// kCapRdmaWrite and remote read without kCapRdmaRead (-EOPNOTSUPP), as EFA's kernel driver does.
inline uint32_t served_access(uint32_t want, uint32_t device_caps) {
  uint32_t a = want & kAccessLocalWrite;
  if (device_caps & kCapRdmaWrite) a |= want & kAccessRemoteWrite;
  if (device_caps & kCapRdmaRead) a |= want & kAccessRemoteRead;
  return a;
}

struct MrInitAttr {
  void* addr = nullptr;          // host virtual address (ignored when dmabuf_fd >= 0)
  size_t length = 0;
  uint64_t iova = 0;             // address the WQEs use; 0 means iova = addr (as ibv_reg_mr)
  uint32_t access = 0;           // MrAccess bits
  int dmabuf_fd = -1;            // >= 0: register [dmabuf_offset, +length) of this dma-buf
  uint64_t dmabuf_offset = 0;
};

// ---- completion queues ----

struct CqInitAttr {
  uint32_t entries = 0;          // rounded up to a power of two
  bool with_sgid = false;        // RX CQEs of unknown-AH senders carry the source GID
  bool with_event_fd = false;    // arm()/event_fd() usable (completion channel)
  // External memory (efadv EXT_MEM_DMABUF): the ring lives in caller memory of at least
  // entries * 32 bytes (after rounding). ext_fd/ext_offset describe it for the hardware;
  // ext_buffer is the CPU/XPU-visible address the device writes (the emulator needs it).
  void* ext_buffer = nullptr;
  size_t ext_length = 0;
  int ext_fd = -1;
  uint64_t ext_offset = 0;
};

// efadv_query_cq (v60 semantics).
struct CqAttr {
  uint8_t* buffer;               // ring of num_entries CQEs
  uint32_t entry_size;           // 32
  uint32_t num_entries;
  uint32_t* doorbell;            // consumer index [15:0], cmd_sn [30:29], arm [31]; may be null
};

// ---- queue pairs ----

enum class QpState : uint8_t { kReset = 0, kInit, kRtr, kRts, kSqd, kSqe, kErr };

// SRD: reliable, unordered, SEND and RDMA. UD: unreliable datagrams, SEND (with immediate) only,
// at most one MTU each; the receiver checks the QKEY and drops silently what it cannot place (no
// receive posted, wrong QKEY), and every receive buffer starts with the 40-byte GRH (kGrhSize),
// which the RX CQE's length includes. The WQE and CQE formats are the same for both.
enum class QpType : uint8_t { kSrd = 0, kUd };
inline constexpr uint32_t kGrhSize = 40;

enum QpCreateFlags : uint32_t {
  kQpUnsolicitedWriteRecv = 1u << 0,  // write-with-imm completes without consuming an RQ entry
  kQpInlineWrite = 1u << 1,           // 128-byte WQEs (inline RDMA write)
};

struct QpInitAttr {
  QpType type = QpType::kSrd;    // UD takes no flags and sl 0 (ibv_create_qp has no room for them)
  class Pd* pd = nullptr;
  class Cq* send_cq = nullptr;
  class Cq* recv_cq = nullptr;
  uint32_t max_send_wr = 0;
  uint32_t max_recv_wr = 0;
  uint32_t max_send_sge = 1;
  uint32_t max_recv_sge = 1;
  uint32_t max_inline_data = 0;  // > 32 selects 128-byte WQEs
  uint32_t flags = 0;            // QpCreateFlags
  uint8_t sl = 0;
};

// ibv_modify_qp attribute mask (only what an SRD or UD QP accepts; UD refuses RNR_RETRY, as the
// kernel's UD state table does).
enum QpAttrMask : uint32_t {
  kQpAttrState = 1u << 0,
  kQpAttrCurState = 1u << 1,
  kQpAttrEnSqdAsyncNotify = 1u << 2,
  kQpAttrPkeyIndex = 1u << 3,
  kQpAttrPort = 1u << 4,
  kQpAttrQkey = 1u << 5,
  kQpAttrSqPsn = 1u << 6,
  kQpAttrRnrRetry = 1u << 7,
};

struct QpAttr {
  QpState state = QpState::kReset;
  QpState cur_state = QpState::kReset;
  uint16_t pkey_index = 0;       // must be 0
  uint8_t port = 1;              // must be 1
  uint32_t qkey = 0;             // bit 31 set is privileged and rejected
  uint32_t sq_psn = 0;
  uint8_t rnr_retry = 7;         // 0..7, 7 = retry forever
  bool en_sqd_async_notify = false;
};

// efadv_query_qp_wqs. For the SQ: buffer = ring of WQEs (64 or 128 bytes), doorbell takes the
// absolute 16-bit producer count, max_batch = WQEs allowed between two doorbells. For the RQ:
// entry_size 16 (one RX descriptor), doorbell takes the absolute 16-bit descriptor count.
struct WqAttr {
  uint8_t* buffer;
  uint32_t entry_size;
  uint32_t num_entries;
  uint32_t* doorbell;
  uint32_t max_batch;
};

// What a completion counter counts (ibv_qp_attach_comp_cntr op mask).
enum CntrOp : uint32_t {
  kCntrSend = 1u << 0,
  kCntrRecv = 1u << 1,
  kCntrRdmaRead = 1u << 2,
  kCntrRdmaWrite = 1u << 3,
  kCntrRemoteRdmaRead = 1u << 4,   // our memory was read by a peer
  kCntrRemoteRdmaWrite = 1u << 5,  // our memory was written by a peer
};

struct CompCntrInitAttr {
  // Caller memory updated by the device with atomic adds: successful completions in *value,
  // error completions in *error. Either may be null. Must stay valid until the counter is
  // destroyed.
  uint64_t* value = nullptr;
  uint64_t* error = nullptr;
};

// ---- objects ----

class Pd {
 public:
  virtual ~Pd() = default;
  virtual uint32_t handle() const = 0;
};

class Mr {
 public:
  virtual ~Mr() = default;
  virtual uint32_t lkey() const = 0;
  virtual uint32_t rkey() const = 0;
  virtual uint64_t iova() const = 0;
  virtual size_t length() const = 0;
};

class Ah {
 public:
  virtual ~Ah() = default;
  virtual uint16_t ahn() const = 0;  // goes into meta.ah of a WQE
};

class Cq {
 public:
  virtual ~Cq() = default;
  virtual int query(CqAttr* attr) const = 0;
  // Requests one notification for the next CQE (same effect as writing the doorbell with the
  // arm bit). -EOPNOTSUPP unless created with_event_fd.
  virtual int arm() = 0;
  // Readable when an armed CQ gets a CQE; read() it (8 bytes) to acknowledge. -1 if none.
  virtual int event_fd() const = 0;
};

class CompCntr {
 public:
  virtual ~CompCntr() = default;
};

class Qp {
 public:
  virtual ~Qp() = default;
  virtual uint32_t qpn() const = 0;
  virtual QpState state() const = 0;
  // ibv_modify_qp for an SRD or UD QP. -EINVAL on an illegal transition or a missing/illegal
  // attribute (reference/efa-queues.md 2.6).
  virtual int modify(const QpAttr& attr, uint32_t attr_mask) = 0;
  virtual int query_wqs(WqAttr* sq, WqAttr* rq) const = 0;
  virtual int attach_comp_cntr(CompCntr* cntr, uint32_t cntr_ops) = 0;
  virtual int detach_comp_cntr(CompCntr* cntr) = 0;
};

// Device-level failures and diagnostics, reported to whoever installed the handler (the
// provider's handle_failure / set_ep_failed). Called from the thread that makes progress, with no
// device lock held; must not block for long.
class EventHandler {
 public:
  virtual ~EventHandler() = default;
  // A QP entered the error state on its own (fatal WQE, flush); status is an efa_io_comp_status.
  virtual void handle_failure(Qp* qp, int status) = 0;
  // A CQ overran (entries written faster than consumed).
  virtual void cq_overrun(Cq* cq) = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual int query(DeviceAttr* attr) const = 0;

  virtual int alloc_pd(Pd** pd_p) = 0;
  virtual int dealloc_pd(Pd* pd) = 0;

  virtual int reg_mr(Pd* pd, const MrInitAttr& attr, Mr** mr_p) = 0;
  virtual int dereg_mr(Mr* mr) = 0;

  virtual int create_cq(const CqInitAttr& attr, Cq** cq_p) = 0;
  virtual int destroy_cq(Cq* cq) = 0;

  virtual int create_qp(const QpInitAttr& attr, Qp** qp_p) = 0;
  // Outstanding work completes with FLUSHED before the QP goes away.
  virtual int destroy_qp(Qp* qp) = 0;

  virtual int create_ah(Pd* pd, const uint8_t gid[16], Ah** ah_p) = 0;
  virtual int destroy_ah(Ah* ah) = 0;

  virtual int create_comp_cntr(const CompCntrInitAttr& attr, CompCntr** cntr_p) = 0;
  virtual int destroy_comp_cntr(CompCntr* cntr) = 0;

  // The address peers use: GID, QPN and QKEY of a QP (QKEY as last set by modify()).
  virtual int local_address(const Qp* qp, uint8_t gid[16], uint32_t* qpn, uint32_t* qkey) const = 0;

  // Moves qp to the error state as if the device had failed it (UCT set_ep_failed); outstanding
  // work is flushed and the handler, if any, is called.
  virtual int set_qp_failed(Qp* qp, int status) = 0;
  virtual void set_event_handler(EventHandler* handler) = 0;

  // Lets the calling thread drive the device (doorbells, packets, completions) for up to
  // `budget` units of work. Returns the number of units done (0 when idle or when another thread
  // is driving it right now), or a negative errno. A hardware device returns 0.
  virtual int progress(int budget) = 0;
  // The calling thread has just written qp's send-queue doorbell. A device that runs in its
  // callers' threads starts that queue's work now, and nothing else (the rest waits for the next
  // progress call); hardware did so at the doorbell write. Returns as progress() does.
  virtual int ring_sq(Qp* qp, int budget) {
    (void)qp;
    return progress(budget);
  }
};

struct DeviceInfo {
  std::string name;
  uint8_t gid[16];
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual int enumerate(std::vector<DeviceInfo>* devices_p) = 0;
  virtual int open_device(const std::string& name, std::unique_ptr<Device>* device_p) = 0;
};

// ---- registry ----

// Where FI_EFA_BACKEND=auto looks first (api/backend/choice.h): higher priorities are tried
// first, equal ones in registration order. A backend registered at kPriorityByNameOnly (test
// and diagnostic backends) is used only when FI_EFA_BACKEND names it.
inline constexpr int kPriorityHardware = 200;
inline constexpr int kPriorityEmulator = 100;
inline constexpr int kPriorityByNameOnly = 0;

// An environment variable a backend reads, so that the provider can declare it to
// fi_getparams (fi_info -e lists it with its value) without knowing which backend it belongs to.
enum class SettingType { kString, kInt, kBool };
struct BackendSetting {
  const char* env_name;  // the full name, "FI_EFA_EMU_PROFILE"
  SettingType type;
  const char* help;
};

// A backend factory. probe() returns 0 when the backend can run here and a negative errno
// (-ENODEV, -ENOENT) when it cannot; it never fails loudly. settings (num_settings entries) are
// the variables the backend reads; none by default.
struct BackendFactory {
  const char* name;
  int (*probe)();
  int (*open)(std::unique_ptr<Backend>* backend_p);
  const BackendSetting* settings = nullptr;
  size_t num_settings = 0;
};

// -EEXIST on a duplicate name; -EINVAL on an incomplete factory (settings counted but absent), a
// negative priority, or the name "auto" (which FI_EFA_BACKEND reserves).
int register_backend(const BackendFactory& factory, int priority = kPriorityByNameOnly);
// Names in registration order.
std::vector<std::string> registered_backends();
// The backends FI_EFA_BACKEND=auto considers, in the order it tries them.
std::vector<std::string> backends_by_priority();
// The settings of every registered backend, in registration order.
std::vector<BackendSetting> backend_settings();
// -ENOENT for an unknown name, or probe()'s error.
int open_backend(const std::string& name, std::unique_ptr<Backend>* backend_p);

// Registers a factory, optionally with a priority, at static-initialization time:
//   XPUFAB_REGISTER_BACKEND(g_registered, kFactory, ::xpufab::backend::kPriorityEmulator);
// The library holding the use must be linked with alwayslink = 1.
#define XPUFAB_REGISTER_BACKEND(var, ...) \
  static const int var = ::xpufab::backend::register_backend(__VA_ARGS__)

}  // namespace backend
}  // namespace xpufab

#endif  // XPUFAB_API_BACKEND_BACKEND_H_
