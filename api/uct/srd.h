// The UCT transport "srd" of component "xpufab": its memory domain, interface and endpoint
// objects, shared by the files of this package. Everything below the UCT ops goes through the
// backend interface (api/backend/backend.h) and the one data path of device/ (efa_sq.h, efa_cq.h).
#ifndef XPUFAB_API_UCT_SRD_H_
#define XPUFAB_API_UCT_SRD_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <map>
#include <mutex>

#include "api/backend/backend.h"
#include "api/proto/grow_bounce.h"
#include "api/proto/match.h"
#include "api/proto/proto.h"
#include "api/uct/ucx_compat.h"
#include "device/efa_dp.h"

namespace xpufab {
namespace uct {

inline constexpr const char* kComponentName = "xpufab";
inline constexpr const char* kTlName = "srd";

// ---- devices (devices.cc) ----

// A backend device shared by the MDs and interfaces of the process opened on it.
struct SharedDevice {
  std::string backend;
  std::string name;
  std::unique_ptr<backend::Device> dev;
  backend::Pd* pd = nullptr;
  backend::DeviceAttr attr{};
  int refs = 0;
  struct Region {
    uint64_t addr, len;
    uint32_t key;
  };
  std::mutex mr_lock;  // guards mrs and ifaces
  std::vector<Region> mrs;
  std::vector<struct SrdIface*> ifaces;
  // One AH per remote GID for the whole device (its one PD), whichever interface made it: an RX
  // completion names the AH the device has for the sender, so interfaces of one process must
  // agree on it. refs counts the interfaces holding it.
  std::mutex ah_lock;
  std::map<std::vector<uint8_t>, std::pair<backend::Ah*, int>> ahs;
};

// The devices of the backend FI_EFA_BACKEND chooses (auto: hardware first, else the emulator).
// 0 or a negative errno; *why says what failed.
int list_devices(std::string* backend_p, std::vector<backend::DeviceInfo>* devices_p,
                 std::string* why);
int acquire_device(const std::string& name, SharedDevice** dev_p);
void release_device(SharedDevice* dev);

// ---- memory domain (md.cc) ----

struct SrdMd {
  uct_md_t super;
  SharedDevice* dev;
};

struct SrdMemh {
  backend::Mr* mr;
  // Memory the MD allocated (mem_alloc): a shared mapping of a memfd, unmapped by mem_free.
  void* alloc_addr = nullptr;
  size_t alloc_len = 0;
};

// What mkey_pack writes and rkey_unpack reads.
struct PackedRkey {
  uint32_t magic;
  uint32_t rkey;
};
inline constexpr uint32_t kRkeyMagic = 0x53524431u;  // "SRD1"

extern uct_component_t g_component;
extern uct_tl_t g_tl;

// ---- interface and endpoints (iface.cc, ep.cc) ----

struct SrdIface;
struct SrdEp;

// The address an endpoint connects to: the remote QP and its keep-alive word (device address:
// the 16-byte GID).
struct __attribute__((packed)) IfaceAddr {
  uint8_t magic;
  uint32_t qpn;     // RDMA QP
  uint32_t am_qpn;  // the protocol core's QP (AM, handshake)
  uint32_t qkey;
  uint32_t ka_rkey;
  uint64_t ka_addr;
};
inline constexpr uint8_t kAddrMagic = 0xe5;

enum class OpKind : uint8_t {
  kFree = 0,
  kPutShort,
  kPutBcopy,
  kPutZcopy,
  kGetShort,
  kGetBcopy,
  kGetZcopy,
  kKeepAlive,
  kTagRead,  // the RDMA read of a matched rendezvous (tag.cc)
};

// One outstanding SQ entry; index i owns bounce slot i.
struct Op {
  OpKind kind = OpKind::kFree;
  SrdEp* ep = nullptr;
  uct_completion_t* comp = nullptr;
  uct_unpack_callback_t unpack = nullptr;
  void* arg = nullptr;
  size_t length = 0;
  uint64_t seq = 0;  // position in the interface's posting order
  uint64_t raddr = 0;   // RDMA writes: the remote range, for the overlap rule of ep.cc
  uint32_t rlen = 0;
  int* done = nullptr;  // get_short waits on it
  ucs_status_t* status = nullptr;
  struct Chunked* chunked = nullptr;  // the zcopy RMA this op is one chunk of
};

// A zcopy put or get larger than the chunk size, cut into chunks that are posted as the SQ and
// the overlap rule allow: a chunk waits only for the outstanding writes its own range overlaps,
// so a write over the range of the previous one starts as soon as that one's first chunk is done.
// An iov of several pieces goes the same way, one WQE (or more) per piece, into one contiguous
// remote range.
struct RmaPiece {
  uint64_t laddr, len;
  uint32_t lkey;
};
inline constexpr size_t kMaxRmaIov = 16;

struct Chunked {
  SrdEp* ep;
  OpKind kind;
  uint32_t efa_op;
  uint64_t laddr, raddr, len;
  uint32_t lkey;
  uct_rkey_t rkey;
  uct_completion_t* comp;
  uint64_t next = 0;         // offset of the first chunk not posted yet
  uint32_t outstanding = 0;  // chunks posted, not completed
  ucs_status_t status = UCS_OK;
  bool dead = false;  // its endpoint is gone: no completion
  std::vector<RmaPiece> pieces;  // empty: the one buffer laddr/lkey
  size_t piece = 0;              // the piece offset `next` lies in ...
  uint64_t piece_start = 0;      // ... and that piece's offset in the transfer
};

struct FlushReq {
  uint64_t upto;  // every op with seq < upto must have completed
  uct_completion_t* comp;
  // A flush issued while requests were pending covers them too: it is armed (upto set) once
  // they have all been dispatched, ep flushes counting them by pending_target.
  bool armed = true;
  uint64_t pending_target = 0;
};

enum class Dir : uint8_t { kTx = 0, kRx = 1 };

// In the role of UCX's uct_ib_iface_ops (v1.6 shape): the device-specific steps of an interface,
// here mapped onto the backend interface. ib_ops.cc holds the one table.
struct IbIfaceOps {
  int (*create_cq)(SrdIface* iface, Dir dir, uint32_t entries, backend::Cq** cq_p);
  int (*arm_cq)(SrdIface* iface, Dir dir, int solicited_only);
  void (*event_cq)(SrdIface* iface, Dir dir);
  void (*handle_failure)(SrdIface* iface, Op* op, ucs_status_t status);
  void (*set_ep_failed)(SrdIface* iface, SrdEp* ep, ucs_status_t status);
  int (*create_qp)(SrdIface* iface, backend::QpInitAttr* attr, backend::Qp** qp_p);
  int (*init_res_domain)(SrdIface* iface);
  void (*cleanup_res_domain)(SrdIface* iface);
};
extern const IbIfaceOps kIbIfaceOps;

struct SrdIfaceConfig {
  uct_iface_config_t super;
  unsigned tx_queue_len;
  size_t seg_size;
  size_t rma_chunk;
  unsigned max_peers;
  unsigned credits;
  int tm_enable;
  unsigned tm_list_size;
};

// In the role of UCX's uct_rc_iface_ops flow-control hooks: receive buffers and AM credits, each
// a call into the protocol core (api/proto), which owns credit accounting.
struct RcIfaceOps {
  int (*init_rx)(SrdIface* iface);
  void (*fc_ctrl)(SrdIface* iface, uint32_t peer);  // give a peer its credits back
  void (*fc_handler)(SrdIface* iface);              // send what credits now allow
};
extern const RcIfaceOps kRcIfaceOps;

// One AH per remote GID, shared by the endpoints and the core's peer table (EFA reports one AH
// per source in RX completions, so two AHs for one GID would split a peer in two).
struct AhRef {
  backend::Ah* ah;
  int refs;
};

// Control messages on core AM id kCtlAmId: a connecting endpoint's request, the peer's answer
// (it then holds an AH for us, which RDMA at the peer requires).
inline constexpr uint32_t kUctAmId = 0;
inline constexpr uint32_t kCtlAmId = 1;
inline constexpr uint32_t kTagAmId = 2;  // tag offload messages (tag.cc)
inline constexpr uint32_t kQkey = 0x11235813u;
enum : uint8_t { kCtlConnReq = 1, kCtlConnAck = 2 };
extern ucs_config_field_t g_iface_config_table[];

// ---- tag offload state (tag.cc) ----

struct TagRecv {  // one posted receive
  uct_tag_context_t* ctx = nullptr;
  void* buffer = nullptr;
  uint64_t length = 0;
  uint32_t lkey = 0;
  uint32_t gen = 0;     // bumped on every reuse of the slot
  bool busy = false;    // matched by a rendezvous whose data is still being read
  bool forced = false;  // canceled with force while busy: no callback
};

struct TagSend {  // an outstanding rendezvous, the handle uct_ep_tag_rndv_zcopy returns
  uint64_t id;
  SrdEp* ep;
  uct_completion_t* comp;
};

struct TagRead {  // a matched rendezvous: what to read from whom, and whom to tell
  uint32_t slot;
  uint32_t peer;  // in the core's peer table
  uint64_t op_id;
  uint64_t tag;
  uint64_t raddr;
  uint64_t msg_length;
  uint32_t length;  // what fits the receive
  uint32_t rkey;
  uint32_t qpn, qkey;
  uint64_t posted = 0;        // bytes whose read is posted (in chunks of RMA_CHUNK)
  uint32_t outstanding = 0;   // chunks posted, not completed
  ucs_status_t status = UCS_OK;
};

struct TagFin {
  uint32_t peer;
  uint64_t op_id;
  ucs_status_t status;
};

struct TagStats {
  uint64_t eager_tx = 0, rndv_tx = 0, sw_rndv_tx = 0, posted = 0, matched_eager = 0, matched_rndv = 0,
           matched_sw_rndv = 0, unexp_eager = 0, unexp_rndv = 0, rdma_reads = 0, canceled = 0;
};

struct TagState {
  bool enabled = false;
  bool stats_on = false;  // XPUFAB_UCT_TAG_STATS: print the counters when the interface closes
  uct_tag_unexp_eager_cb_t eager_cb = nullptr;
  void* eager_arg = nullptr;
  uct_tag_unexp_rndv_cb_t rndv_cb = nullptr;
  void* rndv_arg = nullptr;
  proto_match match{};
  std::vector<proto_match_entry> pool;
  std::vector<TagRecv> recvs;
  std::vector<uint32_t> free_slots;
  std::map<uint64_t, TagSend*> sends;
  uint64_t next_send_id = 1;
  std::list<TagRead> active;       // matched rendezvous being read
  std::vector<TagRead*> op_reads;  // by op index: the read that op is a chunk of
  std::deque<TagRead*> reads;      // not all posted yet: waiting for SQ slots
  std::deque<TagFin> fins;        // waiting for a core transmit buffer
  std::deque<uct_tag_context_t*> canceled;  // completed_cb(UCS_ERR_CANCELED) due
  std::vector<uint8_t> pack;
  TagStats stats;
};

// ---- connection by socket address (sockaddr.cc) ----

struct SaClient {  // client: an endpoint created with a sockaddr
  enum State : uint8_t { kConnecting, kWaitReply, kDone };
  int fd = -1;
  State state = kConnecting;
  std::vector<uint8_t> out, in;
  uct_cm_ep_client_connect_callback_t cb = nullptr;
  void* arg = nullptr;
};

// What the transport itself did (XPUFAB_UCT_STATS: printed when the interface closes), to tell
// its work per operation from the device's.
struct IfaceStats {
  uint64_t progress = 0, progress_idle = 0;  // iface_progress calls, and those that found nothing
  uint64_t rma_ops = 0;                       // zcopy puts and gets accepted
  uint64_t rdma_wqes = 0, rdma_cqes = 0;      // RDMA WQEs posted, their completions
  uint64_t am_tx = 0, am_rx = 0;              // UCT AMs sent / delivered
  uint64_t tag_rx = 0;                        // tagged messages delivered (matched or unexpected)
  uint64_t am_copy_bytes = 0;                 // bytes copied on the AM paths (gather, descriptors)
};

struct SrdIface {
  uct_base_iface_t super;  // first: UCX casts uct_iface_h to it
  SrdMd* md = nullptr;
  SharedDevice* dev = nullptr;
  const IbIfaceOps* ib_ops = &kIbIfaceOps;
  backend::Cq* cq = nullptr;
  backend::Qp* qp = nullptr;
  uint32_t qpn = 0, qkey = 0;
  uint8_t gid[16] = {};
  efa_sq sq{};
  efa_cq pcq{};
  std::vector<uint64_t> sq_scratch;
  uint32_t sq_depth = 0;
  bool inline_write = false;
  uint32_t inline_max = 0;
  size_t seg_size = 0;
  // Bounce buffers (one per op) and the keep-alive word peers read, in one registration.
  uint8_t* bounce = nullptr;  // mmap, bounce_len bytes
  size_t bounce_len = 0;
  uint64_t* ka_word = nullptr;
  backend::Mr* bounce_mr = nullptr;
  std::vector<Op> ops;
  std::vector<uint32_t> free_ops;
  uint64_t next_seq = 0;
  std::set<uint64_t> outstanding;
  std::deque<FlushReq> flushes;
  std::list<SrdEp*> eps;
  bool in_progress = false;
  bool fence = false;
  uint64_t fence_upto = 0;
  bool fence_deferred = false;  // fenced while chunks were queued: takes effect once they are posted
  bool ep_fence_deferred = false;  // some endpoint's fence is deferred (chunks_progress clears it)
  uint32_t pending_reqs = 0;       // requests in the endpoints' pending queues
  struct DescPool* descs = nullptr;  // AM receive descriptors (am.cc)
  size_t rma_chunk = 0;
  std::list<Chunked> chunked;   // zcopy RMAs in progress by chunks
  std::vector<SrdEp*> failed;  // error handlers to call once polling is done
  const RcIfaceOps* rc_ops = &kRcIfaceOps;
  // The protocol core on its own SRD QP and CQ: active messages and the handshake.
  backend::Cq* am_cq = nullptr;
  backend::Qp* am_qp = nullptr;
  uint32_t am_qpn = 0;
  proto_ep* core = nullptr;
  // The core polls a relay of its CQ: senders new to us get their AH before the core sees them.
  efa_cq am_pcq{};
  uint8_t* relay = nullptr;  // mmap (zeroed, committed as used), relay_len bytes
  size_t relay_len = 0;
  uint32_t relay_prod = 0;
  std::vector<uint64_t> core_mem;
  // The core's packet buffers for up to peer_limit peers, registered as its table grows.
  proto::GrowBounce core_bounce;
  uint32_t peer_limit = 0;  // the core's peer table grows on demand up to this (MAX_PEERS)
  std::vector<std::vector<uint64_t>> peer_tables;  // the tables it grew into
  proto_config core_cfg{};
  std::vector<uint8_t> scratch;  // one AM payload, gathered
  size_t rx_headroom = 0;
  std::map<std::vector<uint8_t>, AhRef> ahs;
  int epfd = -1;
  uint32_t amo_outstanding = 0;  // fetching atomics waiting for their reply
  std::vector<proto_mr> core_mrs;  // the core's MR table once it outgrew its own (amo.cc)
  TagState tag;
  uint32_t sa_clients = 0;  // endpoints connecting by sockaddr (sockaddr.cc)
  IfaceStats stats;
  bool stats_on = false;
};

struct SrdEp {
  uct_base_ep_t super;  // first: UCX casts uct_ep_h to it
  SrdIface* iface = nullptr;
  bool connected = false;
  bool failed = false;
  ucs_status_t fail_status = UCS_OK;
  backend::Ah* ah = nullptr;
  uint16_t ahn = 0;
  uint8_t peer_gid[16] = {};
  IfaceAddr peer{};
  std::set<uint64_t> outstanding;
  std::deque<FlushReq> flushes;
  bool fence = false;
  uint64_t fence_upto = 0;
  bool fence_deferred = false;
  std::deque<Chunked*> chunk_queue;  // partly posted chunked RMAs, in posting order
  std::deque<uct_pending_req_t*> pending;
  uint64_t pending_done = 0;  // requests that left the pending queue (dispatched or purged)
  bool dispatching = false;
  bool canceled = false;  // flushed with UCT_FLUSH_FLAG_CANCEL
  uint32_t peer_idx = PROTO_NONE;  // in the core's peer table
  bool acked = false;              // the peer holds an AH for us: RDMA may go
  bool req_due = false;            // the connection request still has to be sent
  uint32_t writes = 0;             // RDMA writes outstanding
  bool core_wait = false;          // an AM or atomic found the core's transmit pool full
  bool write_wait = false;         // a write waits for an overlapping one: no resource until
                                   // one of ours completes
  std::unique_ptr<SaClient> sa;    // created with a sockaddr
  bool sa_connecting = false;      // ... and not answered yet: ops wait (no resource)
};

// What an op on an endpoint that is not connected (yet) gets.
inline ucs_status_t not_connected_status(const SrdEp* ep) {
  return ep->sa_connecting ? UCS_ERR_NO_RESOURCE : UCS_ERR_NOT_CONNECTED;
}

inline SrdIface* iface_of(uct_iface_h tl) { return reinterpret_cast<SrdIface*>(tl); }
inline SrdEp* ep_of(uct_ep_h tl) { return reinterpret_cast<SrdEp*>(tl); }

// iface.cc
ucs_status_t iface_open(uct_md_h md, uct_worker_h worker, const uct_iface_params_t* params,
                        const uct_iface_config_t* config, uct_iface_h* iface_p);
ucs_status_t query_devices(uct_md_h md, uct_tl_device_resource_t** devices_p, unsigned* num_p);
unsigned iface_progress(uct_iface_h tl);
// The UCS status an EFA completion status reports.
ucs_status_t status_of(uint8_t efa_status);
// Whether a failed completion means the peer is gone (the ep fails) rather than a bad request.
bool is_peer_failure(uint8_t efa_status);
void invoke_completion(uct_completion_t* comp, ucs_status_t status);
void iface_flushes_progress(SrdIface* iface);
void ep_flushes_progress(SrdEp* ep);

// ep.cc: the endpoint ops, their data path, and completion of what they posted.
void fill_ep_ops(uct_iface_ops_t* ops);
void complete_op(SrdIface* iface, uint32_t index, ucs_status_t status);
void dispatch_pending(SrdIface* iface);
void ep_fail(SrdIface* iface, SrdEp* ep, ucs_status_t status);
// Connects an endpoint to a peer interface's device and interface addresses.
ucs_status_t ep_connect_addr(SrdEp* ep, const uct_device_addr_t* dev_addr, const void* iface_addr);
bool ep_can_post(const SrdEp* ep);
unsigned chunks_progress(SrdIface* iface);
bool any_chunk_queued(const SrdIface* iface);

// am.cc: the core's QP, AMs over it, the handshake, AH sharing.
int core_setup(SrdIface* iface, const SrdIfaceConfig* cfg);
void core_teardown(SrdIface* iface);
unsigned core_progress(SrdIface* iface);
bool core_idle(const SrdIface* iface);
int ah_get(SrdIface* iface, const uint8_t gid[16], backend::Ah** ah_p);
void ah_put(SrdIface* iface, const uint8_t gid[16]);
ucs_status_t ep_core_connect(SrdEp* ep);
// proto_peer_add, growing the core's peer table when it is full (up to peer_limit).
int core_peer_add(SrdIface* iface, uint16_t ahn, uint16_t qpn, uint32_t* idx_p);
inline constexpr uint32_t kInitialPeers = 8;
void fill_am_ops(uct_iface_ops_t* ops);
// AM receive descriptors allocated so far (the rest were reused).
uint64_t desc_allocs(const SrdIface* iface);
// A UCT_CB_PARAM_FLAG_DESC descriptor of the interface's pool for a received payload (at most
// proto_am_max bytes; rx_headroom before it): its data pointer, or null. desc_drop returns one
// the handler did not keep; one it kept returns with uct_iface_release_desc.
uint8_t* desc_new(SrdIface* iface);
void desc_drop(SrdIface* iface, uint8_t* data);

// amo.cc: atomics on the core, and the registrations its MR table mirrors.
void fill_amo_ops(uct_iface_ops_t* ops);
void amo_complete(const proto_comp& c);
void mr_publish(SharedDevice* dev, uint64_t addr, uint64_t len, uint32_t key);
void mr_withdraw(SharedDevice* dev, uint32_t key);
void iface_attach(SharedDevice* dev, SrdIface* iface);
void iface_detach(SharedDevice* dev, SrdIface* iface);

// tag.cc: tag offload rows.
int tag_setup(SrdIface* iface, const uct_iface_params_t* params, const SrdIfaceConfig* cfg);
void tag_teardown(SrdIface* iface);
void tag_query(const SrdIface* iface, uct_iface_attr_t* attr);
unsigned tag_progress(SrdIface* iface);
bool tag_idle(const SrdIface* iface);
void tag_op_done(SrdIface* iface, uint32_t idx, ucs_status_t status);
void tag_read_done(SrdIface* iface, const TagRead& rd, ucs_status_t status);
void tag_ep_gone(SrdIface* iface, SrdEp* ep);
void fill_tag_ops(uct_iface_ops_t* ops);

// sockaddr.cc: client-server connection by socket address.
void sockaddr_query(const SrdIface* iface, uct_iface_attr_t* attr);
unsigned sockaddr_progress(SrdIface* iface);
ucs_status_t sockaddr_ep_start(SrdEp* ep, const uct_ep_params_t* params);
void sockaddr_ep_gone(SrdEp* ep);
int sockaddr_accessible(const ucs_sock_addr_t* sockaddr, uct_sockaddr_accessibility_t mode);
void fill_sockaddr_ops(uct_iface_ops_t* ops);

// cm.cc: the component's connection manager (uct_cm_open).
ucs_status_t cm_open(uct_component_t* component, uct_worker_h worker, const uct_cm_config_t* config,
                     uct_cm_h* cm_p);

// The ops table and caps of a live interface, for the support-table tool.
const uct_iface_ops_t& srd_iface_ops();

}  // namespace uct
}  // namespace xpufab

#endif  // XPUFAB_API_UCT_SRD_H_
