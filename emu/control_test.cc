// Control path of the emulated device (objects, QP state machine, profiles, registry) and the
// diagnostics for device-code bugs.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include <gtest/gtest.h>

#include "emu/options_env.h"
#include "emu/test_util.h"

namespace xpufab {
namespace emu {
namespace testing {
namespace {

using backend::QpAttr;
using backend::QpState;

TEST(Profiles, NamesAndDefault) {
  EXPECT_STREQ(default_profile().name, "gen4");
  EXPECT_EQ(find_profile("latest"), &default_profile());
  EXPECT_EQ(find_profile("nope"), nullptr);
  EXPECT_EQ(all_profiles().size(), 4u);
  setenv("FI_EFA_EMU_PROFILE", "gen2", 1);
  const Profile* p = nullptr;
  ASSERT_EQ(profile_from_env(&p), 0);
  EXPECT_STREQ(p->name, "gen2");
  setenv("FI_EFA_EMU_PROFILE", "bogus", 1);
  EXPECT_EQ(profile_from_env(&p), -EINVAL);
  DeviceOptions o = inline_options(std::make_shared<InProcFabric>(), "gen4");
  o.profile = nullptr;
  std::string err;
  EXPECT_EQ(device_options_from_env(&o, &err), -EINVAL);
  EXPECT_NE(err.find("bogus"), std::string::npos) << err;
  unsetenv("FI_EFA_EMU_PROFILE");
  ASSERT_EQ(device_options_from_env(&o, &err), 0) << err;
  EXPECT_EQ(o.profile, &default_profile());
  for (const char* bad : {"0", "65536", "12x", ""}) {
    setenv("FI_EFA_EMU_MAX_QP", bad, 1);
    EXPECT_EQ(device_options_from_env(&o, &err), -EINVAL) << bad;
    EXPECT_NE(err.find("FI_EFA_EMU_MAX_QP"), std::string::npos) << err;
  }
  setenv("FI_EFA_EMU_MAX_QP", "12000", 1);
  ASSERT_EQ(device_options_from_env(&o, &err), 0) << err;
  unsetenv("FI_EFA_EMU_MAX_QP");
  EXPECT_EQ(o.max_qp, 12000u);
  {
    std::unique_ptr<EmuDevice> big;
    ASSERT_EQ(create_device(o, &big), 0);
    backend::DeviceAttr a;
    ASSERT_EQ(big->query(&a), 0);
    EXPECT_EQ(a.max_qp, 12000u);
  }
  o.max_qp = DeviceOptions().max_qp;
  o.profile = nullptr;  // create_device itself reads no environment: null is the newest
  setenv("FI_EFA_EMU_PROFILE", "gen1", 1);
  std::unique_ptr<EmuDevice> dev;
  ASSERT_EQ(create_device(o, &dev), 0);
  unsetenv("FI_EFA_EMU_PROFILE");
  backend::DeviceAttr a;
  ASSERT_EQ(dev->query(&a), 0);
  EXPECT_EQ(a.profile, "gen4");
  EXPECT_EQ(a.inline_buf_size, 32);
  EXPECT_EQ(a.inline_buf_size_ex, 80);
  EXPECT_EQ(a.max_sq_sge, 2);
  EXPECT_EQ(a.mtu, 8928u);
  EXPECT_NE(a.device_caps & backend::kCapRdmaWrite, 0u);
  EXPECT_NE(a.device_caps & backend::kCapUnsolicitedWriteRecv, 0u);
}

// FI_EFA_EMU_CAPS_CLEAR: the emulator mirrors a device without external-memory CQs and
// completion counters (rdma-core v44), and then refuses both as such a device does.
TEST(Profiles, CapsClearFromEnv) {
  using backend::kCapCompCntr;
  using backend::kCapCqWithExtMem;
  uint32_t caps = 1;
  EXPECT_EQ(parse_caps("", &caps), 0);
  EXPECT_EQ(caps, 0u);
  ASSERT_EQ(parse_caps("cq_with_ext_mem,comp_cntr", &caps), 0);
  EXPECT_EQ(caps, kCapCqWithExtMem | kCapCompCntr);
  ASSERT_EQ(parse_caps("0x60", &caps), 0);
  EXPECT_EQ(caps, kCapCqWithExtMem | kCapCompCntr);
  EXPECT_EQ(parse_caps("comp_cntr,", &caps), -EINVAL);
  EXPECT_EQ(parse_caps("comp_counter", &caps), -EINVAL);
  EXPECT_EQ(parse_caps("0x60z", &caps), -EINVAL);
  EXPECT_EQ(parse_caps("0x100000000", &caps), -EINVAL);
  EXPECT_EQ(caps_to_string(kCapCqWithExtMem | kCapCompCntr | (1u << 12)),
            "cq_with_ext_mem,comp_cntr,0x1000");
  EXPECT_EQ(caps_to_string(0), "none");

  const Profile* gen2 = find_profile("gen2");
  ASSERT_NE(gen2, nullptr);
  EXPECT_EQ(profile_without_caps(gen2, 0), gen2);
  const Profile* cut = profile_without_caps(gen2, kCapCompCntr);
  EXPECT_NE(cut, gen2);
  EXPECT_EQ(profile_without_caps(gen2, kCapCompCntr), cut);  // stable for live devices
  EXPECT_EQ(cut->device_caps, gen2->device_caps & ~kCapCompCntr);
  EXPECT_NE(gen2->device_caps & kCapCompCntr, 0u);  // the named generation is untouched

  const Profile* p = nullptr;
  setenv("FI_EFA_EMU_PROFILE", "gen2", 1);
  setenv("FI_EFA_EMU_CAPS_CLEAR", "bogus", 1);
  EXPECT_EQ(profile_from_env(&p), -EINVAL);
  setenv("FI_EFA_EMU_CAPS_CLEAR", "cq_with_ext_mem,comp_cntr", 1);
  ASSERT_EQ(profile_from_env(&p), 0);
  EXPECT_STREQ(p->name, "gen2");
  EXPECT_EQ(p->device_caps, gen2->device_caps & ~(kCapCqWithExtMem | kCapCompCntr));

  DeviceOptions o = inline_options(std::make_shared<InProcFabric>(), "gen2");
  o.profile = nullptr;
  std::string err;
  ASSERT_EQ(device_options_from_env(&o, &err), 0) << err;
  std::unique_ptr<EmuDevice> dev;
  ASSERT_EQ(create_device(o, &dev), 0);
  unsetenv("FI_EFA_EMU_CAPS_CLEAR");
  unsetenv("FI_EFA_EMU_PROFILE");
  backend::DeviceAttr a;
  ASSERT_EQ(dev->query(&a), 0);
  EXPECT_EQ(a.device_caps & (kCapCqWithExtMem | kCapCompCntr), 0u);
  EXPECT_NE(a.device_caps & backend::kCapRdmaRead, 0u);

  std::vector<uint8_t> ring(64 * 32);
  backend::CqInitAttr c;
  c.entries = 64;
  c.ext_buffer = ring.data();
  c.ext_length = ring.size();
  backend::Cq* cq = nullptr;
  EXPECT_EQ(dev->create_cq(c, &cq), -EOPNOTSUPP);
  c.ext_buffer = nullptr;
  c.ext_length = 0;
  ASSERT_EQ(dev->create_cq(c, &cq), 0);  // a ring the device allocates still works
  EXPECT_EQ(dev->destroy_cq(cq), 0);
  uint64_t value = 0;
  backend::CompCntrInitAttr ca;
  ca.value = &value;
  backend::CompCntr* cntr = nullptr;
  EXPECT_EQ(dev->create_comp_cntr(ca, &cntr), -EOPNOTSUPP);
  EXPECT_EQ(cntr, nullptr);

  // Without the variable the same generation offers both again.
  std::unique_ptr<EmuDevice> full;
  o.profile = gen2;
  ASSERT_EQ(create_device(o, &full), 0);
  c.ext_buffer = ring.data();
  c.ext_length = ring.size();
  ASSERT_EQ(full->create_cq(c, &cq), 0);
  EXPECT_EQ(full->destroy_cq(cq), 0);
  ASSERT_EQ(full->create_comp_cntr(ca, &cntr), 0);
  EXPECT_EQ(full->destroy_comp_cntr(cntr), 0);
}

TEST(Registry, EmuBackendOpensDevices) {
  std::unique_ptr<backend::Backend> b;
  ASSERT_EQ(backend::open_backend("emu", &b), 0);
  std::vector<backend::DeviceInfo> devs;
  ASSERT_EQ(b->enumerate(&devs), 0);
  ASSERT_GE(devs.size(), 1u);
  std::unique_ptr<backend::Device> d, d2;
  ASSERT_EQ(b->open_device(devs[0].name, &d), 0);
  EXPECT_EQ(b->open_device(devs[0].name, &d2), -EBUSY);
  EXPECT_EQ(b->open_device("efa_emu_nope", &d2), -ENODEV);
  backend::DeviceAttr a;
  ASSERT_EQ(d->query(&a), 0);
  EXPECT_EQ(std::memcmp(a.gid, devs[0].gid, 16), 0);
  EXPECT_EQ(d->progress(16), 0);  // idle
}

class Control : public ::testing::Test {
 protected:
  void SetUp() override { n_.open(inline_options(std::make_shared<InProcFabric>())); }
  Node n_;
};

TEST_F(Control, ObjectLifetimesAndBusy) {
  n_.make_qp();
  EXPECT_EQ(n_.dev->dealloc_pd(n_.pd), -EBUSY);
  EXPECT_EQ(n_.dev->destroy_cq(n_.cq), -EBUSY);
  uint8_t gid[16] = {1};
  backend::Ah* ah = nullptr;
  ASSERT_EQ(n_.dev->create_ah(n_.pd, gid, &ah), 0);
  uint8_t got[16];
  uint32_t qpn = 0, qkey = 1;
  ASSERT_EQ(n_.dev->local_address(n_.qp, got, &qpn, &qkey), 0);
  EXPECT_EQ(qpn, n_.qp->qpn());
  EXPECT_EQ(qkey, 0u);
  Gid g = n_.dev->gid();
  EXPECT_EQ(std::memcmp(got, g.data(), 16), 0);
  ASSERT_EQ(n_.dev->destroy_qp(n_.qp), 0);
  EXPECT_EQ(n_.dev->destroy_qp(n_.qp), -EINVAL);
  ASSERT_EQ(n_.dev->destroy_cq(n_.cq), 0);
  ASSERT_EQ(n_.dev->destroy_ah(ah), 0);
  ASSERT_EQ(n_.dev->dereg_mr(n_.mr), 0);
  ASSERT_EQ(n_.dev->dealloc_pd(n_.pd), 0);
}

TEST_F(Control, MemoryRegistration) {
  backend::Mr* mr = nullptr;
  backend::MrInitAttr m;
  EXPECT_EQ(n_.dev->reg_mr(n_.pd, m, &mr), -EINVAL);  // no address
  m.addr = n_.buf.data();
  m.length = 64;
  m.access = 1u << 7;
  EXPECT_EQ(n_.dev->reg_mr(n_.pd, m, &mr), -EINVAL);  // unknown access bit
  m.access = backend::kAccessLocalWrite;
  EXPECT_EQ(n_.dev->reg_mr(nullptr, m, &mr), -EINVAL);
  ASSERT_EQ(n_.dev->reg_mr(n_.pd, m, &mr), 0);
  EXPECT_EQ(mr->lkey(), mr->rkey());
  EXPECT_EQ(mr->lkey() >> 24, 0u);  // fits the 24-bit WQE lkey field
  EXPECT_NE(mr->lkey(), n_.mr->lkey());
  ASSERT_EQ(n_.dev->dereg_mr(mr), 0);
  // A dma-buf stands in as a memfd.
  int fd = memfd_create("dmabuf", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 8192), 0);
  backend::MrInitAttr d;
  d.dmabuf_fd = fd;
  d.dmabuf_offset = 4096 + 16;
  d.length = 100;
  d.iova = 0x10000;
  d.access = backend::kAccessRemoteRead;
  ASSERT_EQ(n_.dev->reg_mr(n_.pd, d, &mr), 0);
  EXPECT_EQ(mr->iova(), 0x10000u);
  ASSERT_EQ(n_.dev->dereg_mr(mr), 0);
  d.dmabuf_fd = 12345;  // not a file
  EXPECT_EQ(n_.dev->reg_mr(n_.pd, d, &mr), -EINVAL);
  close(fd);
}

// As EFA's kernel driver: remote access a generation cannot serve is refused, not granted.
TEST(Profiles, RemoteAccessFollowsTheGenerationsCapabilities) {
  std::vector<uint8_t> buf(4096);
  for (const char* gen : {"gen1", "gen2", "gen3"}) {
    SCOPED_TRACE(gen);
    DeviceOptions o = inline_options(std::make_shared<InProcFabric>(), gen);
    std::unique_ptr<EmuDevice> dev;
    ASSERT_EQ(create_device(o, &dev), 0);
    backend::DeviceAttr a;
    ASSERT_EQ(dev->query(&a), 0);
    backend::Pd* pd = nullptr;
    ASSERT_EQ(dev->alloc_pd(&pd), 0);
    backend::MrInitAttr m;
    m.addr = buf.data();
    m.length = buf.size();
    for (uint32_t remote : {uint32_t{backend::kAccessRemoteRead}, uint32_t{backend::kAccessRemoteWrite}}) {
      const uint32_t cap = remote == backend::kAccessRemoteRead ? backend::kCapRdmaRead : backend::kCapRdmaWrite;
      m.access = backend::kAccessLocalWrite | remote;
      backend::Mr* mr = nullptr;
      if (a.device_caps & cap) {
        ASSERT_EQ(dev->reg_mr(pd, m, &mr), 0);
        EXPECT_EQ(dev->dereg_mr(mr), 0);
      } else {
        EXPECT_EQ(dev->reg_mr(pd, m, &mr), -EOPNOTSUPP);
        EXPECT_EQ(mr, nullptr);
      }
      EXPECT_EQ(backend::served_access(m.access, a.device_caps) == m.access, (a.device_caps & cap) != 0);
    }
    EXPECT_EQ(dev->dealloc_pd(pd), 0);
  }
}

TEST_F(Control, QueueGeometry) {
  n_.make_qp(0, 100, 100, 2);
  EXPECT_EQ(n_.sq.sq.num_entries, 128u);
  EXPECT_EQ(n_.sq.sq.entry_size, 64u);
  EXPECT_EQ(n_.sq.sq.max_batch, 16u);
  EXPECT_EQ(n_.rq.rq.entry_size, 16u);
  EXPECT_EQ(n_.rq.rq.num_entries, 256u);  // 100 WRs * 2 SGEs, rounded up
  EXPECT_EQ(n_.rq.rq.max_batch, 256u);
  EXPECT_EQ(n_.cqr.attr.num_entries, 128u);
  EXPECT_EQ(n_.cqr.attr.entry_size, 32u);
  EXPECT_NE(n_.cqr.attr.doorbell, nullptr);
  EXPECT_NE(n_.sq.sq.doorbell, n_.rq.rq.doorbell);
  backend::QpInitAttr q;
  q.pd = n_.pd;
  q.send_cq = n_.cq;
  q.recv_cq = n_.cq;
  q.max_send_wr = 8;
  backend::Qp* qp = nullptr;
  q.max_send_sge = 3;
  EXPECT_EQ(n_.dev->create_qp(q, &qp), -EINVAL);
  q.max_send_sge = 1;
  q.max_inline_data = 81;
  EXPECT_EQ(n_.dev->create_qp(q, &qp), -EINVAL);
  q.max_inline_data = 0;
  q.max_send_wr = 40000;
  EXPECT_EQ(n_.dev->create_qp(q, &qp), -EINVAL);
  q.max_send_wr = 8;
  q.flags = 1u << 5;
  EXPECT_EQ(n_.dev->create_qp(q, &qp), -EINVAL);
}

TEST_F(Control, ExternalMemoryCq) {
  std::vector<uint8_t> ring(64 * 32, 0xab);
  backend::CqInitAttr c;
  c.entries = 64;
  c.ext_buffer = ring.data();
  c.ext_length = ring.size() - 1;
  backend::Cq* cq = nullptr;
  EXPECT_EQ(n_.dev->create_cq(c, &cq), -EINVAL);  // too small
  c.ext_length = ring.size();
  ASSERT_EQ(n_.dev->create_cq(c, &cq), 0);
  backend::CqAttr a;
  ASSERT_EQ(cq->query(&a), 0);
  EXPECT_EQ(a.buffer, ring.data());
  EXPECT_EQ(ring[0], 0);  // zeroed: phase 0 is "empty" on the first lap
  EXPECT_EQ(cq->arm(), -EOPNOTSUPP);
  EXPECT_EQ(cq->event_fd(), -1);
  ASSERT_EQ(n_.dev->destroy_cq(cq), 0);
}

TEST_F(Control, QpStateMachine) {
  n_.make_qp();
  backend::Qp* qp = n_.qp;
  using namespace backend;
  QpAttr a;
  EXPECT_EQ(qp->state(), QpState::kReset);
  a.state = QpState::kRtr;
  EXPECT_EQ(qp->modify(a, kQpAttrState), -EINVAL);  // RESET -> RTR
  a.state = QpState::kErr;
  EXPECT_EQ(qp->modify(a, kQpAttrState), -EINVAL);  // RESET -> ERR
  a.state = QpState::kInit;
  EXPECT_EQ(qp->modify(a, kQpAttrState | kQpAttrPort | kQpAttrQkey), -EINVAL);  // PKEY missing
  a.qkey = 0x80000001;
  EXPECT_EQ(qp->modify(a, kQpAttrState | kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey), -EINVAL);
  a.qkey = 5;
  a.port = 2;
  EXPECT_EQ(qp->modify(a, kQpAttrState | kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey), -EINVAL);
  a.port = 1;
  a.pkey_index = 1;
  EXPECT_EQ(qp->modify(a, kQpAttrState | kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey), -EINVAL);
  a.pkey_index = 0;
  ASSERT_EQ(qp->modify(a, kQpAttrState | kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey), 0);
  EXPECT_EQ(qp->state(), QpState::kInit);
  a.qkey = 6;
  ASSERT_EQ(qp->modify(a, kQpAttrState | kQpAttrQkey), 0);  // INIT -> INIT
  a.state = QpState::kRts;
  EXPECT_EQ(qp->modify(a, kQpAttrState | kQpAttrSqPsn), -EINVAL);  // INIT -> RTS
  a.state = QpState::kRtr;
  EXPECT_EQ(qp->modify(a, kQpAttrState | kQpAttrSqPsn), -EINVAL);  // SQ_PSN not allowed here
  ASSERT_EQ(qp->modify(a, kQpAttrState), 0);
  a.state = QpState::kRts;
  EXPECT_EQ(qp->modify(a, kQpAttrState), -EINVAL);  // SQ_PSN required
  a.rnr_retry = 8;
  EXPECT_EQ(qp->modify(a, kQpAttrState | kQpAttrSqPsn | kQpAttrRnrRetry), -EINVAL);
  a.rnr_retry = 3;
  a.cur_state = QpState::kInit;
  EXPECT_EQ(qp->modify(a, kQpAttrState | kQpAttrSqPsn | kQpAttrCurState), -EINVAL);  // wrong current
  a.cur_state = QpState::kRtr;
  ASSERT_EQ(qp->modify(a, kQpAttrState | kQpAttrSqPsn | kQpAttrRnrRetry | kQpAttrCurState), 0);
  EXPECT_EQ(qp->state(), QpState::kRts);
  a.state = QpState::kSqd;
  ASSERT_EQ(qp->modify(a, kQpAttrState), 0);
  a.state = QpState::kRts;
  ASSERT_EQ(qp->modify(a, kQpAttrState | kQpAttrQkey), 0);
  a.state = QpState::kInit;
  EXPECT_EQ(qp->modify(a, kQpAttrState), -EINVAL);  // RTS -> INIT
  a.state = QpState::kErr;
  ASSERT_EQ(qp->modify(a, kQpAttrState), 0);
  a.state = QpState::kRts;
  EXPECT_EQ(qp->modify(a, kQpAttrState | kQpAttrSqPsn), -EINVAL);  // ERR -> RTS
  a.state = QpState::kReset;
  ASSERT_EQ(qp->modify(a, kQpAttrState), 0);
  uint8_t gid[16];
  uint32_t qpn, qkey;
  ASSERT_EQ(n_.dev->local_address(qp, gid, &qpn, &qkey), 0);
  EXPECT_EQ(qkey, 0u);
  EXPECT_EQ(qp->modify(a, 1u << 20), -EINVAL);  // unknown mask bit
  EXPECT_EQ(n_.dev->set_qp_failed(qp, 2), -EINVAL);  // RESET cannot fail
}

class Handler : public backend::EventHandler {
 public:
  void handle_failure(backend::Qp* qp, int status) override {
    failed = qp;
    last_status = status;
  }
  void cq_overrun(backend::Cq* cq) override { overrun = cq; }
  backend::Qp* failed = nullptr;
  int last_status = 0;
  backend::Cq* overrun = nullptr;
};

TEST_F(Control, SetQpFailedFlushesAndCallsHandler) {
  n_.make_qp();
  bring_up(n_.qp, 1);
  Handler h;
  n_.dev->set_event_handler(&h);
  n_.rq.post(4, {{n_.at(0), 8, n_.mr->lkey()}});
  ASSERT_EQ(n_.dev->set_qp_failed(n_.qp, EFA_IO_COMP_STATUS_LOCAL_ERROR_QP_INTERNAL_ERROR), 0);
  EXPECT_EQ(h.failed, n_.qp);
  EXPECT_EQ(n_.qp->state(), QpState::kErr);
  efa_io_rx_cdesc_ex c;
  ASSERT_TRUE(n_.cqr.poll(&c));
  EXPECT_EQ(c.base.common.status, EFA_IO_COMP_STATUS_FLUSHED);
  EXPECT_EQ(c.base.common.req_id, 4);
  n_.dev->set_event_handler(nullptr);
}

// ---- diagnostics ----

class Diag : public ::testing::Test {
 protected:
  void SetUp() override {
    fabric_ = std::make_shared<InProcFabric>();
    DeviceOptions o = inline_options(fabric_);
    o.diagnostic_sink = [this](const Diagnostic& d) { seen_.push_back(d); };
    o.check_batch = true;  // exact here: the test steps after every doorbell
    n_.open(o);
    n_.make_qp(0, 16, 16, 1);
    bring_up(n_.qp, 1);
    uint8_t self[16];
    Gid g = n_.dev->gid();
    std::memcpy(self, g.data(), 16);
    ASSERT_EQ(n_.dev->create_ah(n_.pd, self, &ah_), 0);
  }
  Wqe loop_send(uint16_t id) {
    Wqe w = send_wqe(id, ah_->ahn(), 999, 1);  // to ourselves, a missing QP: no receive needed
    return w;
  }
  size_t count(DiagKind k) const {
    size_t n = 0;
    for (const Diagnostic& d : seen_) n += d.kind == k;
    return n;
  }
  std::shared_ptr<InProcFabric> fabric_;
  Node n_;
  backend::Ah* ah_ = nullptr;
  std::vector<Diagnostic> seen_;
};

TEST_F(Diag, DoorbellBeforeWqeIsWritten) {
  // Ring for slot 0 without writing it: meta_desc is still 0.
  __atomic_store_n(n_.sq.sq.doorbell, 1u, __ATOMIC_RELEASE);
  n_.dev->step(64);
  n_.dev->step(64);
  ASSERT_EQ(count(DiagKind::kStaleWqe), 1u);  // reported once per slot
  EXPECT_EQ(seen_[0].qpn, n_.qp->qpn());
  EXPECT_EQ(seen_[0].slot, 0u);
  EXPECT_NE(seen_[0].message.find("QP"), std::string::npos);
  // The engine waited; once written, the WQE runs.
  n_.sq.write(loop_send(1), 0);
  n_.sq.pc = 1;
  efa_io_rx_cdesc_ex c;
  ASSERT_TRUE(wait_cqe({n_.dev.get()}, &n_.cqr, &c));
  EXPECT_EQ(c.base.common.req_id, 1);
  // Second lap: a slot holding the previous lap's WQE has the wrong phase.
  for (uint16_t i = 2; i <= 16; ++i) {
    n_.sq.post(loop_send(i));
    ASSERT_TRUE(wait_cqe({n_.dev.get()}, &n_.cqr, &c));
  }
  __atomic_store_n(n_.sq.sq.doorbell, 17u, __ATOMIC_RELEASE);
  n_.dev->step(64);
  EXPECT_EQ(count(DiagKind::kStaleWqe), 2u);
  EXPECT_EQ(seen_.back().slot, 0u);
  EXPECT_EQ(n_.dev->stats().diag[static_cast<int>(DiagKind::kStaleWqe)], 2u);
}

TEST_F(Diag, BatchAndOverruns) {
  // 16-entry SQ, max_batch 15: 15 is fine, 16 behind one doorbell is not.
  ASSERT_EQ(n_.sq.sq.max_batch, 15u);
  for (uint16_t i = 0; i < 16; ++i) n_.sq.write(loop_send(i), i);
  __atomic_store_n(n_.sq.sq.doorbell, 16u, __ATOMIC_RELEASE);
  n_.dev->step(1000);
  EXPECT_EQ(count(DiagKind::kBatchExceeded), 1u);
  efa_io_rx_cdesc_ex c;
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(wait_cqe({n_.dev.get()}, &n_.cqr, &c));
  // SQ overrun: 17 WQEs posted with none of them completed.
  n_.dev->step(1000);
  uint32_t base = 16;
  for (uint32_t i = 0; i < 17; ++i) n_.sq.write(loop_send(static_cast<uint16_t>(i)), base + i);
  __atomic_store_n(n_.sq.sq.doorbell, base + 17, __ATOMIC_RELEASE);
  n_.dev->step(0);
  EXPECT_EQ(count(DiagKind::kSqOverrun), 1u);
  // RQ overrun: 17 descriptors into a 16-descriptor RQ.
  for (int i = 0; i < 17; ++i) n_.rq.post(static_cast<uint16_t>(i), {{n_.at(0), 8, n_.mr->lkey()}}, false);
  __atomic_store_n(n_.rq.rq.doorbell, 17u, __ATOMIC_RELEASE);
  n_.dev->step(0);
  EXPECT_EQ(count(DiagKind::kRqOverrun), 1u);
}

TEST_F(Diag, CqOverrunIsReportedNotSilent) {
  Handler h;
  n_.dev->set_event_handler(&h);
  efa_io_rx_cdesc_ex c;
  // The consumer reports its index, then stops polling: 16 CQEs fill the ring, the 17th overruns.
  for (uint16_t i = 0; i < 2; ++i) {
    n_.sq.post(loop_send(i));
    ASSERT_TRUE(wait_cqe({n_.dev.get()}, &n_.cqr, &c));
  }
  for (uint16_t i = 0; i < 17; ++i) {
    n_.sq.write(loop_send(i), n_.sq.pc);
    n_.sq.pc++;
    n_.sq.ring();
    for (int k = 0; k < 4; ++k) n_.dev->step(64);
  }
  EXPECT_EQ(count(DiagKind::kCqOverrun), 1u);
  EXPECT_EQ(h.overrun, n_.cq);
  n_.dev->set_event_handler(nullptr);
}

TEST_F(Diag, MalformedReceiveDescriptors) {
  n_.make_qp(0, 16, 64, 2);  // a second QP with 2 receive SGEs
  bring_up(n_.qp, 1);
  // Three descriptors without "last": longer than max_recv_sge.
  efa_io_rx_desc d;
  std::memset(&d, 0, sizeof(d));
  efa_io_rx_desc_set_lkey(&d, n_.mr->lkey());
  efa_io_rx_desc_set_addr(&d, n_.addr(0));
  d.length = 8;
  efa_io_rx_desc_set_first(&d, 1);
  for (int i = 0; i < 3; ++i) {
    std::memcpy(n_.rq.rq.buffer + i * 16, &d, 16);
    efa_io_rx_desc_set_first(&d, 0);
  }
  __atomic_store_n(n_.rq.rq.doorbell, 3u, __ATOMIC_RELEASE);
  n_.dev->step(64);
  Wqe w = send_wqe(1, ah_->ahn(), static_cast<uint16_t>(n_.qp->qpn()), 1);
  set_inline(&w, "x", 1);
  n_.sq.post(w);
  std::vector<uint8_t> statuses;
  efa_io_rx_cdesc_ex c;
  while (statuses.size() < 2 && wait_cqe({n_.dev.get()}, &n_.cqr, &c)) statuses.push_back(c.base.common.status);
  EXPECT_EQ(count(DiagKind::kRqMalformed), 1u);
  EXPECT_NE(std::find(statuses.begin(), statuses.end(), EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_STATUS),
            statuses.end());
}

TEST(DiagStrict, FatalErrorNamesQpAndSlot) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_DEATH(
      {
        Node n;
        DeviceOptions o = inline_options(std::make_shared<InProcFabric>());
        o.strict = true;
        n.open(o);
        n.make_qp(0, 16, 16, 1);
        bring_up(n.qp, 1);
        __atomic_store_n(n.sq.sq.doorbell, 1u, __ATOMIC_RELEASE);
        n.dev->step(64);
      },
      "fatal: .*unwritten WQE.* on QP [0-9]+ slot 0");
}

}  // namespace
}  // namespace testing
}  // namespace emu
}  // namespace xpufab
