// The hw backend's mapping onto verbs/efadv, driven through a fake rdma-core (an RdmaApi whose
// entries are the functions below): attribute translation, reference tracking (-EBUSY), foreign
// handles (-EINVAL), errno conversion, and that destroying the device releases everything.
#include <infiniband/verbs.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "api/backend/backend.h"
#include "gtest/gtest.h"
#include "hw/hw_backend.h"
#include "hw/rdma_loader.h"

namespace xpufab {
namespace hw {
namespace {

using namespace backend;

struct Fake {
  ibv_device dev;
  ibv_context ctx;
  uint32_t vendor_id = 0x1d0f;
  int efadv_query_rc = 0;
  int live = 0;  // verbs objects not yet destroyed (context included)
  int reg_mr_errno = 0;
  int modify_rc = 0;
  int last_access = -1;
  int last_dmabuf_fd = -1;
  uint32_t last_cq_inlen = 0;
  uint64_t last_cq_flags = 0;
  uint64_t last_wc_flags = 0;
  uint32_t last_qp_inlen = 0;
  uint16_t last_qp_flags = 0;
  int last_modify_mask = 0;
  ibv_qp_attr last_modify_attr;
  int ud_creates = 0;
  ibv_qp_init_attr last_ud_attr;
  ibv_pd* last_ud_pd = nullptr;
  int notify_calls = 0;
  uint8_t sq_ring[4096];
  uint32_t sq_db = 0;
};
Fake* g = nullptr;

ibv_device** get_device_list(int* num) {
  auto** list = new ibv_device*[2]{&g->dev, nullptr};
  *num = 1;
  return list;
}
void free_device_list(ibv_device** list) { delete[] list; }
const char* get_device_name(ibv_device*) { return "rdmap0s6"; }
ibv_context* open_device(ibv_device*) {
  ++g->live;
  return &g->ctx;
}
int close_device(ibv_context*) {
  --g->live;
  return 0;
}
int query_device(ibv_context*, ibv_device_attr* a) {
  std::memset(a, 0, sizeof(*a));
  a->vendor_id = g->vendor_id;
  a->vendor_part_id = 0xefa1;
  a->max_qp = 256;
  a->max_cq = 512;
  a->max_mr = 1024;
  a->max_pd = 64;
  a->max_ah = 128;
  a->max_sge_rd = 1;
  a->max_cqe = 32768;
  return 0;
}
int query_port(ibv_context*, uint8_t port, _compat_ibv_port_attr* compat) {
  if (port != 1) return EINVAL;
  auto* a = reinterpret_cast<ibv_port_attr*>(compat);
  a->max_msg_sz = 8928;
  a->active_speed = 32;  // EDR
  a->active_width = 2;   // 4X
  return 0;
}
int query_gid(ibv_context*, uint8_t, int index, ibv_gid* gid) {
  if (index != 0) return EINVAL;
  for (int i = 0; i < 16; ++i) gid->raw[i] = static_cast<uint8_t>(0xf0 + i);
  return 0;
}
ibv_pd* alloc_pd(ibv_context* ctx) {
  ++g->live;
  auto* pd = new ibv_pd();
  pd->context = ctx;
  pd->handle = 7;
  return pd;
}
int dealloc_pd(ibv_pd* pd) {
  --g->live;
  delete pd;
  return 0;
}
ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t len, int access) {
  if (g->reg_mr_errno != 0) {
    errno = g->reg_mr_errno;
    return nullptr;
  }
  ++g->live;
  g->last_access = access;
  auto* mr = new ibv_mr();
  mr->pd = pd;
  mr->addr = addr;
  mr->length = len;
  mr->lkey = 0x100;
  mr->rkey = 0x200;
  return mr;
}
ibv_mr* reg_dmabuf_mr(ibv_pd* pd, uint64_t, size_t len, uint64_t, int fd, int access) {
  g->last_dmabuf_fd = fd;
  return reg_mr(pd, nullptr, len, access);
}
int dereg_mr(ibv_mr* mr) {
  --g->live;
  delete mr;
  return 0;
}
ibv_comp_channel* create_comp_channel(ibv_context* ctx) {
  ++g->live;
  auto* ch = new ibv_comp_channel();
  ch->context = ctx;
  ch->fd = eventfd(0, 0);
  return ch;
}
int destroy_comp_channel(ibv_comp_channel* ch) {
  --g->live;
  close(ch->fd);
  delete ch;
  return 0;
}
int get_cq_event(ibv_comp_channel*, ibv_cq**, void**) {
  errno = EAGAIN;
  return -1;
}
void ack_cq_events(ibv_cq*, unsigned int) {}
int req_notify_cq(ibv_cq*, int) {
  ++g->notify_calls;
  return 0;
}
ibv_cq_ex* efadv_create_cq(ibv_context* ctx, ibv_cq_init_attr_ex* attr,
                           efadv_compat_cq_init_attr* efa, uint32_t inlen) {
  ++g->live;
  g->last_cq_inlen = inlen;
  g->last_cq_flags = inlen > 16 ? efa->flags : 0;
  g->last_wc_flags = efa->wc_flags;
  auto* cq = new ibv_cq_ex();
  cq->context = ctx;
  cq->channel = attr->channel;
  cq->cqe = static_cast<int>(attr->cqe);
  return cq;
}
int destroy_cq(ibv_cq* cq) {
  --g->live;
  delete reinterpret_cast<ibv_cq_ex*>(cq);
  return 0;
}
ibv_qp* efadv_create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr,
                           efadv_compat_qp_init_attr* efa, uint32_t inlen) {
  if (attr->qp_type != IBV_QPT_DRIVER || efa->driver_qp_type != 0) {
    errno = EINVAL;
    return nullptr;
  }
  ++g->live;
  g->last_qp_inlen = inlen;
  g->last_qp_flags = efa->flags;
  auto* qp = new ibv_qp();
  qp->context = ctx;
  qp->qp_num = 42;
  return qp;
}
ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (attr->qp_type != IBV_QPT_UD) {  // libefa takes SRD only through efadv
    errno = EOPNOTSUPP;
    return nullptr;
  }
  ++g->live;
  ++g->ud_creates;
  g->last_ud_attr = *attr;
  g->last_ud_pd = pd;
  auto* qp = new ibv_qp();
  qp->context = pd->context;
  qp->pd = pd;
  qp->qp_type = IBV_QPT_UD;
  qp->qp_num = 77;
  return qp;
}
int modify_qp(ibv_qp*, ibv_qp_attr* attr, int mask) {
  if (g->modify_rc != 0) return g->modify_rc;
  g->last_modify_mask = mask;
  g->last_modify_attr = *attr;
  return 0;
}
int destroy_qp(ibv_qp* qp) {
  --g->live;
  delete qp;
  return 0;
}
ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (!attr->is_global || attr->port_num != 1) {
    errno = EINVAL;
    return nullptr;
  }
  ++g->live;
  auto* ah = new ibv_ah();
  ah->pd = pd;
  return ah;
}
int destroy_ah(ibv_ah* ah) {
  --g->live;
  delete ah;
  return 0;
}
int efadv_query_device(ibv_context*, efadv_compat_device_attr* a, uint32_t inlen) {
  if (g->efadv_query_rc != 0) return g->efadv_query_rc;
  if (inlen < 32) return EINVAL;
  a->max_sq_wr = 512;
  a->max_rq_wr = 8192;
  a->max_sq_sge = 2;
  a->max_rq_sge = 3;
  a->inline_buf_size = 32;
  a->inline_buf_size_ex = 80;
  a->device_caps = 0x3f;
  a->max_rdma_size = 1u << 30;
  return 0;
}
int efadv_query_ah(ibv_ah*, efadv_compat_ah_attr* a, uint32_t) {
  a->ahn = 5;
  return 0;
}
int efadv_query_qp_wqs(ibv_qp*, efadv_compat_wq_attr* sq, efadv_compat_wq_attr* rq,
                       uint32_t inlen) {
  if (inlen < 36) return EINVAL;
  sq->buffer = g->sq_ring;
  sq->entry_size = 64;
  sq->num_entries = 64;
  sq->doorbell = &g->sq_db;
  sq->max_batch = 16;
  rq->entry_size = 16;
  rq->num_entries = 0;
  return 0;
}
int efadv_query_cq(ibv_cq* cq, efadv_compat_cq_attr* a, uint32_t) {
  a->buffer = nullptr;
  a->entry_size = 32;
  a->num_entries = static_cast<uint32_t>(cq->cqe);
  return 0;
}

std::shared_ptr<const RdmaApi> fake_api() {
  auto api = std::make_shared<RdmaApi>();
  std::memset(api.get(), 0, sizeof(RdmaApi));
  api->get_device_list = get_device_list;
  api->free_device_list = free_device_list;
  api->get_device_name = get_device_name;
  api->open_device = open_device;
  api->close_device = close_device;
  api->query_device = query_device;
  api->query_port = query_port;
  api->query_gid = query_gid;
  api->alloc_pd = alloc_pd;
  api->dealloc_pd = dealloc_pd;
  api->reg_mr = reg_mr;
  api->reg_dmabuf_mr = reg_dmabuf_mr;
  api->dereg_mr = dereg_mr;
  api->create_comp_channel = create_comp_channel;
  api->destroy_comp_channel = destroy_comp_channel;
  api->get_cq_event = get_cq_event;
  api->ack_cq_events = ack_cq_events;
  api->destroy_cq = destroy_cq;
  api->create_qp = create_qp;
  api->modify_qp = modify_qp;
  api->destroy_qp = destroy_qp;
  api->create_ah = create_ah;
  api->destroy_ah = destroy_ah;
  api->efadv_query_device = efadv_query_device;
  api->efadv_create_qp_ex = efadv_create_qp_ex;
  api->efadv_query_ah = efadv_query_ah;
  api->efadv_create_cq = efadv_create_cq;
  api->efadv_query_qp_wqs = efadv_query_qp_wqs;
  api->efadv_query_cq = efadv_query_cq;
  api->queries_from = "fake";
  return api;
}

class HwFakeRdma : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = std::make_unique<Fake>();
    g = fake_.get();
    g->ctx.device = &g->dev;
    g->ctx.ops.req_notify_cq = req_notify_cq;
    backend_ = make_hw_backend_for_api(fake_api());
    ASSERT_NE(backend_, nullptr);
  }
  void TearDown() override {
    device_.reset();
    backend_.reset();
    EXPECT_EQ(g->live, 0) << "verbs objects left behind";
    g = nullptr;
  }
  void open() { ASSERT_EQ(backend_->open_device("rdmap0s6", &device_), 0); }

  std::unique_ptr<Fake> fake_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Device> device_;
};

TEST_F(HwFakeRdma, EnumeratesAndQueriesCaps) {
  std::vector<DeviceInfo> devices;
  ASSERT_EQ(backend_->enumerate(&devices), 0);
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].name, "rdmap0s6");
  EXPECT_EQ(devices[0].gid[0], 0xf0);
  EXPECT_EQ(g->live, 0);  // enumerate closes what it opened
  open();
  DeviceAttr a;
  ASSERT_EQ(device_->query(&a), 0);
  EXPECT_EQ(a.name, "rdmap0s6");
  EXPECT_EQ(a.vendor_part_id, 0xefa1);
  EXPECT_EQ(a.max_sq_wr, 512u);
  EXPECT_EQ(a.max_rq_sge, 3u);
  EXPECT_EQ(a.max_rdma_sge, 1u);
  EXPECT_EQ(a.inline_buf_size_ex, 80u);
  EXPECT_EQ(a.device_caps, 0x3fu | kCapInlineWrite);
  EXPECT_EQ(a.mtu, 8928u);
  EXPECT_EQ(a.link_speed_gbps, 100u);
  EXPECT_EQ(a.max_cq_depth, 32768u);
  EXPECT_EQ(a.gid[15], 0xff);
  EXPECT_EQ(backend_->open_device("rdmap9s9", &device_), -ENODEV);
}

TEST_F(HwFakeRdma, NonEfaDevicesAreSkipped) {
  g->vendor_id = 0x15b3;
  g->efadv_query_rc = EOPNOTSUPP;
  std::vector<DeviceInfo> devices;
  ASSERT_EQ(backend_->enumerate(&devices), 0);
  EXPECT_TRUE(devices.empty());
  EXPECT_EQ(backend_->open_device("rdmap0s6", &device_), -ENODEV);
  EXPECT_EQ(g->live, 0);
}

TEST_F(HwFakeRdma, ObjectsTrackDependents) {
  open();
  Pd* pd = nullptr;
  ASSERT_EQ(device_->alloc_pd(&pd), 0);
  EXPECT_EQ(pd->handle(), 7u);
  char buf[64];
  MrInitAttr mattr;
  mattr.addr = buf;
  mattr.length = sizeof(buf);
  mattr.access = kAccessLocalWrite | kAccessRemoteRead;
  Mr* mr = nullptr;
  ASSERT_EQ(device_->reg_mr(pd, mattr, &mr), 0);
  EXPECT_EQ(g->last_access, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  EXPECT_EQ(mr->lkey(), 0x100u);
  EXPECT_EQ(mr->iova(), reinterpret_cast<uintptr_t>(buf));
  EXPECT_EQ(device_->dealloc_pd(pd), -EBUSY);

  CqInitAttr cattr;
  cattr.entries = 100;
  cattr.with_sgid = true;
  cattr.with_event_fd = true;
  Cq* cq = nullptr;
  ASSERT_EQ(device_->create_cq(cattr, &cq), 0);
  EXPECT_EQ(g->last_cq_inlen, 16u);
  EXPECT_EQ(g->last_wc_flags, 1u);
  EXPECT_GE(cq->event_fd(), 0);
  EXPECT_EQ(cq->arm(), 0);
  EXPECT_EQ(g->notify_calls, 1);

  QpInitAttr qattr;
  qattr.pd = pd;
  qattr.send_cq = cq;
  qattr.recv_cq = cq;
  qattr.max_send_wr = 64;
  qattr.flags = kQpUnsolicitedWriteRecv;
  Qp* qp = nullptr;
  ASSERT_EQ(device_->create_qp(qattr, &qp), 0);
  EXPECT_EQ(g->last_qp_flags, 1u);
  EXPECT_EQ(g->last_qp_inlen, 16u);
  EXPECT_EQ(qp->qpn(), 42u);
  EXPECT_EQ(device_->destroy_cq(cq), -EBUSY);

  QpAttr init;
  init.state = QpState::kInit;
  init.qkey = 0x1234;
  ASSERT_EQ(qp->modify(init, kQpAttrState | kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey), 0);
  EXPECT_EQ(g->last_modify_mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  EXPECT_EQ(g->last_modify_attr.qp_state, IBV_QPS_INIT);
  EXPECT_EQ(g->last_modify_attr.port_num, 1);
  EXPECT_EQ(qp->state(), QpState::kInit);
  g->modify_rc = EINVAL;
  QpAttr rts;
  rts.state = QpState::kRts;
  EXPECT_EQ(qp->modify(rts, kQpAttrState), -EINVAL);
  EXPECT_EQ(qp->state(), QpState::kInit);
  EXPECT_EQ(qp->modify(rts, 1u << 20), -EINVAL);
  g->modify_rc = 0;

  uint8_t gid[16];
  uint32_t qpn = 0, qkey = 0;
  ASSERT_EQ(device_->local_address(qp, gid, &qpn, &qkey), 0);
  EXPECT_EQ(qpn, 42u);
  EXPECT_EQ(qkey, 0x1234u);
  EXPECT_EQ(gid[0], 0xf0);

  WqAttr sq, rq;
  ASSERT_EQ(qp->query_wqs(&sq, &rq), 0);
  EXPECT_EQ(sq.buffer, g->sq_ring);
  EXPECT_EQ(sq.doorbell, &g->sq_db);
  EXPECT_EQ(sq.max_batch, 16u);
  CqAttr cqa;
  ASSERT_EQ(cq->query(&cqa), 0);
  EXPECT_EQ(cqa.entry_size, 32u);
  EXPECT_EQ(cqa.num_entries, 100u);

  Ah* ah = nullptr;
  ASSERT_EQ(device_->create_ah(pd, gid, &ah), 0);
  EXPECT_EQ(ah->ahn(), 5u);

  CompCntr* cntr = nullptr;
  EXPECT_EQ(device_->create_comp_cntr(CompCntrInitAttr(), &cntr), -EOPNOTSUPP);
  EXPECT_EQ(qp->detach_comp_cntr(nullptr), -EOPNOTSUPP);

  ASSERT_EQ(device_->destroy_qp(qp), 0);
  EXPECT_EQ(device_->destroy_cq(cq), 0);
  EXPECT_EQ(device_->destroy_ah(ah), 0);
  EXPECT_EQ(device_->dereg_mr(mr), 0);
  EXPECT_EQ(device_->dealloc_pd(pd), 0);
  EXPECT_EQ(device_->dealloc_pd(pd), -EINVAL);  // already gone
}

// UD goes through core verbs' ibv_create_qp (efadv has no UD attributes) and then behaves like
// any other QP: the same modify mapping, references and destruction.
TEST_F(HwFakeRdma, UdQpMapsToIbvCreateQp) {
  open();
  Pd* pd = nullptr;
  ASSERT_EQ(device_->alloc_pd(&pd), 0);
  CqInitAttr cattr;
  cattr.entries = 64;
  Cq *scq = nullptr, *rcq = nullptr;
  ASSERT_EQ(device_->create_cq(cattr, &scq), 0);
  ASSERT_EQ(device_->create_cq(cattr, &rcq), 0);
  QpInitAttr q;
  q.type = QpType::kUd;
  q.pd = pd;
  q.send_cq = scq;
  q.recv_cq = rcq;
  q.max_send_wr = 128;
  q.max_recv_wr = 256;
  q.max_send_sge = 1;
  q.max_recv_sge = 2;
  q.max_inline_data = 32;
  Qp* qp = nullptr;
  q.flags = kQpUnsolicitedWriteRecv;
  EXPECT_EQ(device_->create_qp(q, &qp), -EINVAL);
  q.flags = kQpInlineWrite;
  EXPECT_EQ(device_->create_qp(q, &qp), -EINVAL);
  q.flags = 0;
  q.sl = 3;
  EXPECT_EQ(device_->create_qp(q, &qp), -EINVAL);
  q.sl = 0;
  q.type = static_cast<QpType>(7);
  EXPECT_EQ(device_->create_qp(q, &qp), -EOPNOTSUPP);
  EXPECT_EQ(g->ud_creates, 0);
  q.type = QpType::kUd;
  ASSERT_EQ(device_->create_qp(q, &qp), 0);
  EXPECT_EQ(g->ud_creates, 1);
  EXPECT_EQ(g->last_ud_attr.qp_type, IBV_QPT_UD);
  EXPECT_EQ(g->last_ud_attr.cap.max_send_wr, 128u);
  EXPECT_EQ(g->last_ud_attr.cap.max_recv_wr, 256u);
  EXPECT_EQ(g->last_ud_attr.cap.max_send_sge, 1u);
  EXPECT_EQ(g->last_ud_attr.cap.max_recv_sge, 2u);
  EXPECT_EQ(g->last_ud_attr.cap.max_inline_data, 32u);
  EXPECT_NE(g->last_ud_attr.send_cq, nullptr);
  EXPECT_NE(g->last_ud_attr.send_cq, g->last_ud_attr.recv_cq);
  EXPECT_NE(g->last_ud_pd, nullptr);
  EXPECT_EQ(qp->qpn(), 77u);
  EXPECT_EQ(device_->destroy_cq(rcq), -EBUSY);
  EXPECT_EQ(device_->dealloc_pd(pd), -EBUSY);

  QpAttr a;
  a.state = QpState::kInit;
  a.qkey = 0x4321;
  ASSERT_EQ(qp->modify(a, kQpAttrState | kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey), 0);
  EXPECT_EQ(g->last_modify_mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  EXPECT_EQ(g->last_modify_attr.qkey, 0x4321u);
  uint8_t gid[16];
  uint32_t qpn = 0, qkey = 0;
  ASSERT_EQ(device_->local_address(qp, gid, &qpn, &qkey), 0);
  EXPECT_EQ(qpn, 77u);
  EXPECT_EQ(qkey, 0x4321u);
  EXPECT_EQ(device_->destroy_qp(qp), 0);
  EXPECT_EQ(device_->destroy_cq(rcq), 0);
  EXPECT_EQ(device_->destroy_cq(scq), 0);
  EXPECT_EQ(device_->dealloc_pd(pd), 0);
}

TEST_F(HwFakeRdma, RejectsBadInput) {
  open();
  Pd* pd = nullptr;
  ASSERT_EQ(device_->alloc_pd(&pd), 0);
  char buf[16];
  MrInitAttr m;
  m.addr = buf;
  m.length = sizeof(buf);
  Mr* mr = nullptr;
  EXPECT_EQ(device_->reg_mr(nullptr, m, &mr), -EINVAL);
  m.access = 1u << 9;
  EXPECT_EQ(device_->reg_mr(pd, m, &mr), -EINVAL);
  m.access = 0;
  m.length = 0;
  EXPECT_EQ(device_->reg_mr(pd, m, &mr), -EINVAL);
  m.length = sizeof(buf);
  g->reg_mr_errno = EFAULT;
  EXPECT_EQ(device_->reg_mr(pd, m, &mr), -EFAULT);
  g->reg_mr_errno = 0;
  m.addr = nullptr;
  m.dmabuf_fd = 9;
  ASSERT_EQ(device_->reg_mr(pd, m, &mr), 0);
  EXPECT_EQ(g->last_dmabuf_fd, 9);

  CqInitAttr c;
  Cq* cq = nullptr;
  EXPECT_EQ(device_->create_cq(c, &cq), -EINVAL);  // no entries
  c.entries = 64;
  c.ext_buffer = buf;
  EXPECT_EQ(device_->create_cq(c, &cq), -EINVAL);  // no dma-buf fd
  c.ext_fd = 3;
  c.ext_length = 64 * 32 - 1;
  EXPECT_EQ(device_->create_cq(c, &cq), -EINVAL);  // too small
  c.ext_length = 64 * 32;
  ASSERT_EQ(device_->create_cq(c, &cq), 0);
  EXPECT_EQ(g->last_cq_inlen, sizeof(efadv_compat_cq_init_attr));
  EXPECT_EQ(g->last_cq_flags, 1u);
  EXPECT_EQ(cq->arm(), -EOPNOTSUPP);
  EXPECT_EQ(cq->event_fd(), -1);

  Qp* qp = nullptr;
  QpInitAttr q;
  q.pd = pd;
  q.send_cq = cq;
  q.recv_cq = nullptr;
  EXPECT_EQ(device_->create_qp(q, &qp), -EINVAL);
  q.recv_cq = cq;
  q.flags = 1u << 7;
  EXPECT_EQ(device_->create_qp(q, &qp), -EINVAL);

  int not_ours = 0;
  EXPECT_EQ(device_->destroy_cq(reinterpret_cast<Cq*>(&not_ours)), -EINVAL);
  EXPECT_EQ(device_->destroy_qp(nullptr), -EINVAL);
  EXPECT_EQ(device_->set_qp_failed(nullptr, 1), -EINVAL);
  EXPECT_EQ(device_->progress(8), 0);
  // Objects still alive here are released by the device's destructor (checked in TearDown).
}

}  // namespace
}  // namespace hw
}  // namespace xpufab
