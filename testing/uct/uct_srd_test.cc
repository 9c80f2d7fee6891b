// The srd transport through Debian's public UCT API only (<uct/api/uct.h>, libuct/libucs), in
// the manner of UCX's test_uct_ep / test_p2p_rma: libuct_xpufab.so is loaded the way a UCX
// program gets it (dlopen before uct_query_components), a second process is the peer (its own
// emulated device on the shared-memory fabric), every row moves data that is checked, and the
// peer's death is seen by ep_check and by outstanding work.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uct/api/uct.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "api/uct/sockaddr_wire.h"
#include "testing/support/process_util.h"

namespace {

constexpr size_t kBuf = 1 << 20;
constexpr uint8_t kAmId = 5;
constexpr size_t kHeadroom = 16;

struct Wire {
  uint8_t dev_addr[64];
  uint8_t iface_addr[64];
  uint64_t buf;
  uint8_t rkey[64];
  uint32_t dev_len, iface_len, rkey_len;
};

// One side: worker, the first xpufab MD, an srd iface on it and a registered buffer.
struct Side {
  ucs_async_context_t* async = nullptr;
  uct_worker_h worker = nullptr;
  uct_component_h comp = nullptr;
  uct_md_h md = nullptr;
  uct_iface_h iface = nullptr;
  uct_iface_attr_t attr{};
  std::vector<uint8_t> buf;
  uct_mem_h memh = nullptr;
  int errors = 0;
  ucs_status_t last_error = UCS_OK;
  std::string dev;

  static ucs_status_t on_error(void* arg, uct_ep_h, ucs_status_t status) {
    auto* s = static_cast<Side*>(arg);
    s->errors++;
    s->last_error = status;
    return UCS_OK;
  }

  // With tag callbacks the interface is opened as UCP opens it, with the tag offload rows on.
  uct_tag_unexp_eager_cb_t eager_cb = nullptr;
  uct_tag_unexp_rndv_cb_t rndv_cb = nullptr;
  void* tag_arg = nullptr;
  const char* tm_list_size = nullptr;
  const char* max_peers = nullptr;
  const char* tx_queue_len = nullptr;

  void open() {
    ASSERT_EQ(UCS_OK, ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async));
    ASSERT_EQ(UCS_OK, uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker));
    uct_component_h* comps;
    unsigned n;
    ASSERT_EQ(UCS_OK, uct_query_components(&comps, &n));
    for (unsigned i = 0; i < n; ++i) {
      uct_component_attr_t a{};
      a.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
      ASSERT_EQ(UCS_OK, uct_component_query(comps[i], &a));
      if (std::string(a.name) == "xpufab") comp = comps[i];
    }
    uct_release_component_list(comps);
    ASSERT_NE(nullptr, comp) << "component xpufab not registered";
    uct_component_attr_t a{};
    std::vector<uct_md_resource_desc_t> res(8);
    a.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    ASSERT_EQ(UCS_OK, uct_component_query(comp, &a));
    ASSERT_GE(a.md_resource_count, 1u);
    res.resize(a.md_resource_count);
    a.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    a.md_resources = res.data();
    ASSERT_EQ(UCS_OK, uct_component_query(comp, &a));
    dev = res[0].md_name;
    uct_md_config_t* mc;
    ASSERT_EQ(UCS_OK, uct_md_config_read(comp, nullptr, nullptr, &mc));
    ASSERT_EQ(UCS_OK, uct_md_open(comp, dev.c_str(), mc, &md));
    uct_config_release(mc);
    uct_iface_config_t* ic;
    ASSERT_EQ(UCS_OK, uct_md_iface_config_read(md, "srd", nullptr, nullptr, &ic));
    if (tm_list_size) {
      ASSERT_EQ(UCS_OK, uct_config_modify(ic, "TM_LIST_SIZE", tm_list_size));
    }
    if (max_peers) {
      ASSERT_EQ(UCS_OK, uct_config_modify(ic, "MAX_PEERS", max_peers));
    }
    if (tx_queue_len) {
      ASSERT_EQ(UCS_OK, uct_config_modify(ic, "TX_QUEUE_LEN", tx_queue_len));
    }
    uct_iface_params_t p{};
    p.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE |
                   UCT_IFACE_PARAM_FIELD_ERR_HANDLER | UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                   UCT_IFACE_PARAM_FIELD_RX_HEADROOM;
    p.rx_headroom = kHeadroom;
    p.open_mode = UCT_IFACE_OPEN_MODE_DEVICE;
    p.mode.device.tl_name = "srd";
    p.mode.device.dev_name = dev.c_str();
    p.err_handler = on_error;
    p.err_handler_arg = this;
    if (eager_cb) {
      p.field_mask |= UCT_IFACE_PARAM_FIELD_HW_TM_EAGER_CB | UCT_IFACE_PARAM_FIELD_HW_TM_EAGER_ARG |
                      UCT_IFACE_PARAM_FIELD_HW_TM_RNDV_CB | UCT_IFACE_PARAM_FIELD_HW_TM_RNDV_ARG;
      p.eager_cb = eager_cb;
      p.eager_arg = tag_arg;
      p.rndv_cb = rndv_cb;
      p.rndv_arg = tag_arg;
    }
    ASSERT_EQ(UCS_OK, uct_iface_open(md, worker, &p, ic, &iface));
    uct_config_release(ic);
    uct_iface_progress_enable(iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    ASSERT_EQ(UCS_OK, uct_iface_query(iface, &attr));
    buf.assign(kBuf, 0);
    ASSERT_EQ(UCS_OK, uct_md_mem_reg(md, buf.data(), buf.size(), UCT_MD_MEM_ACCESS_ALL, &memh));
  }

  void close() {
    if (memh) uct_md_mem_dereg(md, memh);
    if (iface) uct_iface_close(iface);
    if (md) uct_md_close(md);
    if (worker) uct_worker_destroy(worker);
    if (async) ucs_async_context_destroy(async);
  }

  Wire wire() {
    Wire w{};
    w.dev_len = static_cast<uint32_t>(attr.device_addr_len);
    w.iface_len = static_cast<uint32_t>(attr.iface_addr_len);
    EXPECT_EQ(UCS_OK, uct_iface_get_device_address(iface, reinterpret_cast<uct_device_addr_t*>(w.dev_addr)));
    EXPECT_EQ(UCS_OK, uct_iface_get_address(iface, reinterpret_cast<uct_iface_addr_t*>(w.iface_addr)));
    uct_md_attr_t ma;
    EXPECT_EQ(UCS_OK, uct_md_query(md, &ma));
    w.rkey_len = static_cast<uint32_t>(ma.rkey_packed_size);
    EXPECT_EQ(UCS_OK, uct_md_mkey_pack(md, memh, w.rkey));
    w.buf = reinterpret_cast<uintptr_t>(buf.data());
    return w;
  }

  void progress() { uct_worker_progress(worker); }
};

// Commands the peer process obeys.
enum : uint8_t { kQuit = 'q', kSum = 's', kFill = 'f', kAmHash = 'a' };

uint64_t checksum(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

void fill_pattern(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>((i * 131u + seed) ^ (i >> 8));
}

// What the peer's AM handler saw, folded in arrival order; every other descriptor is kept
// (UCS_INPROGRESS) and released later with uct_iface_release_desc.
uint64_t fold(uint64_t h, const void* data, size_t len) {
  return h * 31 + checksum(static_cast<const uint8_t*>(data), len) + len;
}

struct AmSeen {
  uint64_t count = 0, hash = 0;
  std::vector<void*> kept;
};

ucs_status_t peer_am(void* arg, void* data, size_t length, unsigned flags) {
  auto* a = static_cast<AmSeen*>(arg);
  a->count++;
  a->hash = fold(a->hash, data, length);
  if ((flags & UCT_CB_PARAM_FLAG_DESC) && (a->count & 1)) {
    a->kept.push_back(static_cast<uint8_t*>(data) - kHeadroom);
    return UCS_INPROGRESS;
  }
  return UCS_OK;
}

// The peer: opens its side, sends its address, then progresses and answers commands.
[[noreturn]] void peer_main(int fd) {
  Side s;
  s.open();
  AmSeen seen;
  if (uct_iface_set_am_handler(s.iface, kAmId, peer_am, &seen, 0) != UCS_OK) _exit(5);
  Wire w = s.wire();
  if (write(fd, &w, sizeof(w)) != sizeof(w)) _exit(2);
  for (;;) {
    s.progress();
    for (void* d : seen.kept) uct_iface_release_desc(d);
    seen.kept.clear();
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) continue;
    uint8_t cmd;
    if (read(fd, &cmd, 1) != 1 || cmd == kQuit) break;
    uint64_t arg[2];
    if (read(fd, arg, sizeof(arg)) != sizeof(arg)) _exit(3);
    uint64_t reply = 0;
    if (cmd == kSum) reply = checksum(s.buf.data() + arg[0], arg[1]);
    if (cmd == kFill) fill_pattern(s.buf.data(), kBuf, static_cast<uint32_t>(arg[0]));
    if (cmd == kAmHash) {
      // Waits for the number of messages the test sent (they may still be in flight).
      while (seen.count < arg[0]) s.progress();
      reply = seen.hash;
    }
    if (write(fd, &reply, sizeof(reply)) != sizeof(reply)) _exit(4);
  }
  s.close();
  _exit(0);
}

class SrdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pid_ = xpufab::testing::spawn_self("uct_srd_peer", "--uct-peer", &fd_);
    ASSERT_GE(pid_, 0);
    local_.open();
    ASSERT_EQ(sizeof(peer_), static_cast<size_t>(read(fd_, &peer_, sizeof(peer_))));
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(local_.comp, peer_.rkey, &rkey_));
    uct_ep_params_t ep{};
    ep.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR | UCT_EP_PARAM_FIELD_IFACE_ADDR;
    ep.iface = local_.iface;
    ep.dev_addr = reinterpret_cast<const uct_device_addr_t*>(peer_.dev_addr);
    ep.iface_addr = reinterpret_cast<const uct_iface_addr_t*>(peer_.iface_addr);
    ASSERT_EQ(UCS_OK, uct_ep_create(&ep, &ep_));
    // RMA waits until the peer answered the connection request (it then holds an AH for us).
    auto t0 = std::chrono::steady_clock::now();
    while (uct_ep_put_short(ep_, nullptr, 0, peer_.buf, rkey_.rkey) == UCS_ERR_NO_RESOURCE) {
      local_.progress();
      ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << "no answer from the peer";
    }
    // That probe is a write of its own: each test starts with it completed, nothing outstanding.
    while (uct_ep_flush(ep_, 0, nullptr) == UCS_INPROGRESS) {
      local_.progress();
      ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << "the probe never completed";
    }
  }

  void TearDown() override {
    if (ep_) uct_ep_destroy(ep_);
    uct_rkey_release(local_.comp, &rkey_);
    local_.close();
    if (pid_ > 0) {
      uint8_t q = kQuit;
      if (!killed_) {
        EXPECT_EQ(1, write(fd_, &q, 1));
      }
      int st = 0;
      waitpid(pid_, &st, 0);
      if (!killed_) {
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
      }
    }
    ::close(fd_);
  }

  uint64_t ask(uint8_t cmd, uint64_t a, uint64_t b) {
    uint64_t arg[2] = {a, b}, r = 0;
    EXPECT_EQ(1, write(fd_, &cmd, 1));
    EXPECT_EQ(static_cast<ssize_t>(sizeof(arg)), write(fd_, arg, sizeof(arg)));
    EXPECT_EQ(static_cast<ssize_t>(sizeof(r)), read(fd_, &r, sizeof(r)));
    return r;
  }

  void flush_ep() {
    ucs_status_t st;
    auto t0 = std::chrono::steady_clock::now();
    while ((st = uct_ep_flush(ep_, 0, nullptr)) == UCS_INPROGRESS || st == UCS_ERR_NO_RESOURCE) {
      local_.progress();
      ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << "flush hangs";
    }
    ASSERT_EQ(UCS_OK, st);
  }

  // Retries an op returning NO_RESOURCE, as UCT_TEST_CALL_AND_TRY_AGAIN does.
  template <typename F>
  ucs_status_t retry(F f) {
    ucs_status_t st;
    while ((st = f()) == UCS_ERR_NO_RESOURCE) local_.progress();
    return st;
  }

  void wait_comp(uct_completion_t* c) {
    auto t0 = std::chrono::steady_clock::now();
    while (c->count > 0) {
      local_.progress();
      ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << "no completion";
    }
  }

  Side local_;
  Wire peer_{};
  uct_rkey_bundle_t rkey_{};
  uct_ep_h ep_ = nullptr;
  pid_t pid_ = -1;
  int fd_ = -1;
  bool killed_ = false;
};

struct Comp {
  uct_completion_t c;
  int calls = 0;
  static void cb(uct_completion_t* self) { reinterpret_cast<Comp*>(self)->calls++; }
  explicit Comp(int count = 1) : c{cb, count, UCS_OK} {}
};

TEST_F(SrdTest, AdvertisesWhatTheDeviceDoes) {
  const uint64_t f = local_.attr.cap.flags;
  EXPECT_TRUE(f & UCT_IFACE_FLAG_PENDING);
  EXPECT_TRUE(f & UCT_IFACE_FLAG_CONNECT_TO_IFACE);
  EXPECT_TRUE(f & UCT_IFACE_FLAG_CONNECT_TO_EP);
  EXPECT_TRUE(f & UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE);
  const char* profile = std::getenv("FI_EFA_EMU_PROFILE");
  const bool no_write = profile && (std::string(profile) == "gen1" || std::string(profile) == "gen2");
  EXPECT_EQ(!no_write, !!(f & UCT_IFACE_FLAG_PUT_ZCOPY));
  EXPECT_EQ(!no_write, !!(f & UCT_IFACE_FLAG_PUT_SHORT));
  EXPECT_EQ(local_.attr.device_addr_len, 16u);
  EXPECT_TRUE(uct_iface_is_reachable(local_.iface, reinterpret_cast<uct_device_addr_t*>(peer_.dev_addr),
                                     reinterpret_cast<uct_iface_addr_t*>(peer_.iface_addr)));
  uint8_t junk[64] = {};
  EXPECT_FALSE(uct_iface_is_reachable(local_.iface, reinterpret_cast<uct_device_addr_t*>(peer_.dev_addr),
                                      reinterpret_cast<uct_iface_addr_t*>(junk)));
}

TEST_F(SrdTest, PutShortBcopyZcopyLandAtThePeer) {
  if (!(local_.attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY)) GTEST_SKIP() << "no RDMA write";
  uint8_t* src = local_.buf.data();
  fill_pattern(src, kBuf, 7);
  const size_t sshort = local_.attr.cap.put.max_short;
  ASSERT_EQ(UCS_OK, retry([&] { return uct_ep_put_short(ep_, src, sshort, peer_.buf, rkey_.rkey); }));
  struct Arg {
    const uint8_t* p;
    size_t n;
  } arg{src + 4096, 5000};
  auto pack = [](void* dest, void* a) -> size_t {
    auto* x = static_cast<Arg*>(a);
    std::memcpy(dest, x->p, x->n);
    return x->n;
  };
  ssize_t packed;
  while ((packed = uct_ep_put_bcopy(ep_, pack, &arg, peer_.buf + 4096, rkey_.rkey)) == UCS_ERR_NO_RESOURCE)
    local_.progress();
  ASSERT_EQ(5000, packed);
  Comp c;
  uct_iov_t iov{src + 65536, 300000, local_.memh, 0, 1};
  ucs_status_t st = retry([&] { return uct_ep_put_zcopy(ep_, &iov, 1, peer_.buf + 65536, rkey_.rkey, &c.c); });
  ASSERT_TRUE(st == UCS_OK || st == UCS_INPROGRESS) << ucs_status_string(st);
  if (st == UCS_INPROGRESS) wait_comp(&c.c);
  EXPECT_EQ(UCS_OK, c.c.status);
  flush_ep();
  EXPECT_EQ(checksum(src, sshort), ask(kSum, 0, sshort));
  EXPECT_EQ(checksum(src + 4096, 5000), ask(kSum, 4096, 5000));
  EXPECT_EQ(checksum(src + 65536, 300000), ask(kSum, 65536, 300000));
}

// Zcopy RMAs larger than the chunk size go as several requests in flight; writes over the same
// range still end with the last one (each chunk waits only for the ones its range overlaps).
TEST_F(SrdTest, LargeOverlappingPutsEndWithTheLastOne) {
  if (!(local_.attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY)) GTEST_SKIP() << "no RDMA write";
  constexpr size_t kLen = 200000;
  uint8_t* src = local_.buf.data();
  for (int k = 0; k < 4; ++k) fill_pattern(src + k * kLen, kLen, 40 + k);
  std::vector<Comp> c(4);
  for (int k = 0; k < 4; ++k) {
    uct_iov_t iov{src + k * kLen, kLen, local_.memh, 0, 1};
    ucs_status_t st = retry([&] { return uct_ep_put_zcopy(ep_, &iov, 1, peer_.buf + 4096, rkey_.rkey, &c[k].c); });
    ASSERT_EQ(UCS_INPROGRESS, st);
  }
  for (int k = 0; k < 4; ++k) wait_comp(&c[k].c);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(1, c[k].calls);
    EXPECT_EQ(UCS_OK, c[k].c.status);
  }
  flush_ep();
  EXPECT_EQ(checksum(src + 3 * kLen, kLen), ask(kSum, 4096, kLen));
  // A chunked read of what was written.
  Comp g;
  uct_iov_t back{local_.buf.data() + 4 * kLen, kLen, local_.memh, 0, 1};
  if (local_.attr.cap.flags & UCT_IFACE_FLAG_GET_ZCOPY) {
    ASSERT_EQ(UCS_INPROGRESS, retry([&] { return uct_ep_get_zcopy(ep_, &back, 1, peer_.buf + 4096, rkey_.rkey, &g.c); }));
    wait_comp(&g.c);
    EXPECT_EQ(0, std::memcmp(local_.buf.data() + 4 * kLen, src + 3 * kLen, kLen));
  }
}

TEST_F(SrdTest, GetShortBcopyZcopyReadThePeer) {
  if (!(local_.attr.cap.flags & UCT_IFACE_FLAG_GET_ZCOPY)) GTEST_SKIP() << "no RDMA read";
  ask(kFill, 99, 0);
  std::vector<uint8_t> want(kBuf);
  fill_pattern(want.data(), kBuf, 99);
  uint8_t got[512];
  ASSERT_EQ(UCS_OK, retry([&] { return uct_ep_get_short(ep_, got, sizeof(got), peer_.buf + 100, rkey_.rkey); }));
  EXPECT_EQ(0, std::memcmp(got, want.data() + 100, sizeof(got)));
  struct Arg {
    uint8_t* p;
    size_t n;
  } arg{local_.buf.data(), 0};
  auto unpack = [](void* a, const void* data, size_t len) {
    auto* x = static_cast<Arg*>(a);
    std::memcpy(x->p, data, len);
    x->n = len;
  };
  Comp c1;
  ucs_status_t st = retry([&] {
    return uct_ep_get_bcopy(ep_, unpack, &arg, 6000, peer_.buf + 10000, rkey_.rkey, &c1.c);
  });
  ASSERT_EQ(UCS_INPROGRESS, st);
  wait_comp(&c1.c);
  EXPECT_EQ(6000u, arg.n);
  EXPECT_EQ(0, std::memcmp(local_.buf.data(), want.data() + 10000, 6000));
  Comp c2;
  uct_iov_t iov{local_.buf.data() + 8192, 500000, local_.memh, 0, 1};
  st = retry([&] { return uct_ep_get_zcopy(ep_, &iov, 1, peer_.buf + 20000, rkey_.rkey, &c2.c); });
  ASSERT_EQ(UCS_INPROGRESS, st);
  wait_comp(&c2.c);
  EXPECT_EQ(UCS_OK, c2.c.status);
  EXPECT_EQ(0, std::memcmp(local_.buf.data() + 8192, want.data() + 20000, 500000));
}

// Zcopy put and get with an iov of several entries (and a strided one): the pieces gather into,
// and scatter out of, one contiguous remote range, each as WQEs of its own, with one completion.
TEST_F(SrdTest, ZcopyIovPiecesGatherAndScatter) {
  if (!(local_.attr.cap.flags & UCT_IFACE_FLAG_GET_ZCOPY)) GTEST_SKIP() << "no RDMA read";
  uint8_t* b = local_.buf.data();
  fill_pattern(b, kBuf, 17);
  // 8 B, 4 KiB, then three 1000-byte repeats 3000 bytes apart, then 200 KiB (chunked where the
  // profile cuts large transfers): 4104 + 3000 + 204800 bytes at the peer.
  uct_iov_t iov[4] = {{b, 8, local_.memh, 0, 1},
                      {b + 100, 4096, local_.memh, 0, 1},
                      {b + 10000, 1000, local_.memh, 3000, 3},
                      {b + 300000, 204800, local_.memh, 0, 1}};
  const size_t total = 8 + 4096 + 3000 + 204800;
  std::vector<uint8_t> flat;
  for (const uct_iov_t& v : iov)
    for (size_t k = 0; k < v.count; ++k) {
      const uint8_t* p = static_cast<const uint8_t*>(v.buffer) + k * v.stride;
      flat.insert(flat.end(), p, p + v.length);
    }
  ASSERT_EQ(total, flat.size());
  if (local_.attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY) {
    EXPECT_EQ(16u, local_.attr.cap.put.max_iov);
    Comp c;
    ASSERT_EQ(UCS_INPROGRESS, retry([&] { return uct_ep_put_zcopy(ep_, iov, 4, peer_.buf + 512, rkey_.rkey, &c.c); }));
    wait_comp(&c.c);
    EXPECT_EQ(1, c.calls);
    EXPECT_EQ(UCS_OK, c.c.status);
    flush_ep();
    EXPECT_EQ(checksum(flat.data(), total), ask(kSum, 512, total));
  }
  // Read it back (or, with no RDMA write, what the peer filled) into other places of the same shape.
  if (!(local_.attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY)) {
    ask(kFill, 5, 0);
    std::vector<uint8_t> want(kBuf);
    fill_pattern(want.data(), kBuf, 5);
    flat.assign(want.begin() + 512, want.begin() + 512 + total);
  }
  uint8_t* d = b + 600000;
  std::memset(d, 0, 300000);
  uct_iov_t back[4] = {{d, 8, local_.memh, 0, 1},
                       {d + 100, 4096, local_.memh, 0, 1},
                       {d + 10000, 1000, local_.memh, 3000, 3},
                       {d + 20000, 204800, local_.memh, 0, 1}};
  Comp g;
  ASSERT_EQ(UCS_INPROGRESS, retry([&] { return uct_ep_get_zcopy(ep_, back, 4, peer_.buf + 512, rkey_.rkey, &g.c); }));
  wait_comp(&g.c);
  EXPECT_EQ(1, g.calls);
  EXPECT_EQ(UCS_OK, g.c.status);
  size_t off = 0;
  for (const uct_iov_t& v : back)
    for (size_t k = 0; k < v.count; ++k) {
      EXPECT_EQ(0, std::memcmp(static_cast<uint8_t*>(v.buffer) + k * v.stride, flat.data() + off, v.length))
          << "piece at " << off;
      off += v.length;
    }
  EXPECT_EQ(0, d[8]) << "nothing lands between the pieces";
}

TEST_F(SrdTest, BadInputGetsErrorsNotCrashes) {
  if (!(local_.attr.cap.flags & UCT_IFACE_FLAG_GET_ZCOPY)) GTEST_SKIP() << "no RDMA read";
  std::vector<uint8_t> big(local_.attr.cap.get.max_short + 1);
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_get_short(ep_, big.data(), big.size(), peer_.buf, rkey_.rkey));
  ASSERT_EQ(16u, local_.attr.cap.get.max_iov);
  std::vector<uct_iov_t> many(local_.attr.cap.get.max_iov + 1, uct_iov_t{local_.buf.data(), 8, local_.memh, 0, 1});
  Comp c;
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_get_zcopy(ep_, many.data(), many.size(), peer_.buf, rkey_.rkey, &c.c));
  uct_iov_t overlapping{local_.buf.data(), 64, local_.memh, 32, 2};  // repeats over each other
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_get_zcopy(ep_, &overlapping, 1, peer_.buf, rkey_.rkey, &c.c));
  uct_iov_t no_memh[2] = {{local_.buf.data(), 8, local_.memh, 0, 1}, {local_.buf.data() + 64, 8, nullptr, 0, 1}};
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_get_zcopy(ep_, no_memh, 2, peer_.buf, rkey_.rkey, &c.c));
  uct_iov_t nomemh{local_.buf.data(), 8, nullptr, 0, 1};
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_get_zcopy(ep_, &nomemh, 1, peer_.buf, rkey_.rkey, &c.c));
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_check(ep_, 1, nullptr));
  // A bad rkey is an error completion, not a crash or a hang.
  uct_iov_t iov{local_.buf.data(), 64, local_.memh, 0, 1};
  ucs_status_t st = retry([&] { return uct_ep_get_zcopy(ep_, &iov, 1, peer_.buf, rkey_.rkey ^ 0x5555u, &c.c); });
  ASSERT_EQ(UCS_INPROGRESS, st);
  wait_comp(&c.c);
  EXPECT_NE(UCS_OK, c.c.status);
  EXPECT_EQ(1, c.calls);
}

// am_short / am_short_iov / am_bcopy / am_zcopy arrive whole, in order, at the peer's handler,
// which keeps every other descriptor and releases it later.
TEST_F(SrdTest, ActiveMessagesArriveInOrderWithDescriptors) {
  const uint64_t f = local_.attr.cap.flags;
  ASSERT_TRUE(f & UCT_IFACE_FLAG_AM_SHORT);
  ASSERT_TRUE(f & UCT_IFACE_FLAG_AM_BCOPY);
  ASSERT_TRUE(f & UCT_IFACE_FLAG_AM_ZCOPY);
  ASSERT_TRUE(f & UCT_IFACE_FLAG_CB_SYNC);
  uint8_t* src = local_.buf.data();
  fill_pattern(src, kBuf, 3);
  uint64_t want = 0, n = 0;
  for (int round = 0; round < 40; ++round) {
    const uint64_t header = 0x1122334455667700ull + round;
    const unsigned plen = 1 + round * 7;
    ASSERT_EQ(UCS_OK, retry([&] { return uct_ep_am_short(ep_, kAmId, header, src + round, plen); }));
    std::vector<uint8_t> m(8 + plen);
    std::memcpy(m.data(), &header, 8);
    std::memcpy(m.data() + 8, src + round, plen);
    want = fold(want, m.data(), m.size());
    ++n;
    uct_iov_t iov2[2] = {{src + 100, 10u + round, nullptr, 0, 1}, {src + 900, 33, nullptr, 0, 1}};
    ASSERT_EQ(UCS_OK, retry([&] { return uct_ep_am_short_iov(ep_, kAmId, iov2, 2); }));
    std::vector<uint8_t> v(src + 100, src + 110 + round);
    v.insert(v.end(), src + 900, src + 933);
    want = fold(want, v.data(), v.size());
    ++n;
    struct Arg {
      const uint8_t* p;
      size_t len;
    } arg{src + 5000 + round, 3000u + round};
    auto pack = [](void* dest, void* a) -> size_t {
      auto* x = static_cast<Arg*>(a);
      std::memcpy(dest, x->p, x->len);
      return x->len;
    };
    ssize_t packed;
    while ((packed = uct_ep_am_bcopy(ep_, kAmId, pack, &arg, 0)) == UCS_ERR_NO_RESOURCE) local_.progress();
    ASSERT_EQ(static_cast<ssize_t>(arg.len), packed);
    want = fold(want, arg.p, arg.len);
    ++n;
    uint8_t hdr[8];
    std::memcpy(hdr, &header, 8);
    uct_iov_t iov{src + 20000, 2000u + round, local_.memh, 0, 1};
    Comp c;
    ucs_status_t st = retry([&] { return uct_ep_am_zcopy(ep_, kAmId, hdr, 8, &iov, 1, 0, &c.c); });
    ASSERT_TRUE(st == UCS_OK || st == UCS_INPROGRESS);
    if (st == UCS_INPROGRESS) wait_comp(&c.c);
    std::vector<uint8_t> z(hdr, hdr + 8);
    z.insert(z.end(), src + 20000, src + 22000 + round);
    want = fold(want, z.data(), z.size());
    ++n;
  }
  flush_ep();
  EXPECT_EQ(want, ask(kAmHash, n, 0));
  // Bad input: an id past UCT_AM_ID_MAX, a payload past max_short.
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_am_short(ep_, UCT_AM_ID_MAX, 0, src, 8));
  std::vector<uint8_t> big(local_.attr.cap.am.max_short + 1);
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_am_short(ep_, kAmId, 0, big.data(), big.size()));
}

// Atomics run by the peer's core on its registered memory; fetched values come back.
TEST_F(SrdTest, AtomicsExecuteAtThePeer) {
  ASSERT_TRUE(local_.attr.cap.flags & UCT_IFACE_FLAG_ATOMIC_CPU);
  ASSERT_TRUE(local_.attr.cap.atomic64.fop_flags & UCS_BIT(UCT_ATOMIC_OP_CSWAP));
  ask(kFill, 0, 0);  // known contents
  std::vector<uint8_t> init(kBuf);
  fill_pattern(init.data(), kBuf, 0);
  uint64_t v0, v1;
  std::memcpy(&v0, init.data() + 64, 8);
  std::memcpy(&v1, init.data() + 128, 4);
  auto fetch = [&](auto call) {
    Comp c;
    ucs_status_t st = retry([&] { return call(&c.c); });
    EXPECT_EQ(UCS_INPROGRESS, st);
    if (st == UCS_INPROGRESS) wait_comp(&c.c);
    EXPECT_EQ(UCS_OK, c.c.status);
  };
  uint64_t r64 = 0;
  fetch([&](uct_completion_t* c) { return uct_ep_atomic64_fetch(ep_, UCT_ATOMIC_OP_ADD, 5, &r64, peer_.buf + 64, rkey_.rkey, c); });
  EXPECT_EQ(v0, r64);
  ASSERT_EQ(UCS_OK, retry([&] { return uct_ep_atomic64_post(ep_, UCT_ATOMIC_OP_XOR, 0xff, peer_.buf + 64, rkey_.rkey); }));
  // Posts and fetches to one peer are handled in order: the fetch sees the post.
  fetch([&](uct_completion_t* c) { return uct_ep_atomic64_fetch(ep_, UCT_ATOMIC_OP_SWAP, 7, &r64, peer_.buf + 64, rkey_.rkey, c); });
  EXPECT_EQ((v0 + 5) ^ 0xff, r64);
  fetch([&](uct_completion_t* c) { return uct_ep_atomic_cswap64(ep_, 7, 99, peer_.buf + 64, rkey_.rkey, &r64, c); });
  EXPECT_EQ(7u, r64);
  fetch([&](uct_completion_t* c) { return uct_ep_atomic_cswap64(ep_, 7, 123, peer_.buf + 64, rkey_.rkey, &r64, c); });
  EXPECT_EQ(99u, r64);  // compare failed: unchanged
  uint32_t r32 = 0, w32 = static_cast<uint32_t>(v1);
  fetch([&](uct_completion_t* c) { return uct_ep_atomic32_fetch(ep_, UCT_ATOMIC_OP_OR, 0x100, &r32, peer_.buf + 128, rkey_.rkey, c); });
  EXPECT_EQ(w32, r32);
  fetch([&](uct_completion_t* c) { return uct_ep_atomic_cswap32(ep_, w32 | 0x100, 1, peer_.buf + 128, rkey_.rkey, &r32, c); });
  EXPECT_EQ(w32 | 0x100, r32);
  uint64_t want64 = 99;
  EXPECT_EQ(checksum(reinterpret_cast<uint8_t*>(&want64), 8), ask(kSum, 64, 8));
  uint32_t want32 = 1;
  EXPECT_EQ(checksum(reinterpret_cast<uint8_t*>(&want32), 4), ask(kSum, 128, 4));
  // A bad rkey is an error completion.
  Comp bad;
  ASSERT_EQ(UCS_INPROGRESS, retry([&] {
    return uct_ep_atomic64_fetch(ep_, UCT_ATOMIC_OP_ADD, 1, &r64, peer_.buf + 64, rkey_.rkey ^ 0x777u, &bad.c);
  }));
  wait_comp(&bad.c);
  EXPECT_NE(UCS_OK, bad.c.status);
  EXPECT_EQ(UCS_ERR_UNSUPPORTED, uct_ep_atomic64_post(ep_, UCT_ATOMIC_OP_SWAP, 1, peer_.buf + 64, rkey_.rkey));
}

// Fills the SQ: NO_RESOURCE, pending requests then run in order as completions free it.
TEST_F(SrdTest, PendingUnderAFullQueueRunsInOrder) {
  if (!(local_.attr.cap.flags & UCT_IFACE_FLAG_PUT_SHORT)) GTEST_SKIP() << "no RDMA write";
  uint64_t v = 0;
  size_t posted = 0;
  // The filler writes elsewhere: SRD does not order writes, so it could land after a pending one.
  while (uct_ep_put_short(ep_, &v, sizeof(v), peer_.buf + 4096 + 8 * posted, rkey_.rkey) == UCS_OK) ++posted;
  ASSERT_GT(posted, 0u);
  struct Req {
    uct_pending_req_t r;
    uct_ep_h ep;
    uint64_t remote;
    uct_rkey_t rkey;
    uint64_t value;
    int* order;
    int idx;
    int ran;
  };
  static int counter;
  counter = 0;
  int order = 0;
  std::vector<Req> reqs(8);
  for (int i = 0; i < 8; ++i) {
    reqs[i] = Req{{[](uct_pending_req_t* self) -> ucs_status_t {
                     auto* q = reinterpret_cast<Req*>(self);
                     ucs_status_t st = uct_ep_put_short(q->ep, &q->value, sizeof(q->value), q->remote, q->rkey);
                     if (st == UCS_OK) q->ran = ++counter;
                     return st;
                   },
                   {}},
                  ep_, peer_.buf + 8 * i, rkey_.rkey, 1000u + i, &order, i, 0};
    ASSERT_EQ(UCS_OK, uct_ep_pending_add(ep_, &reqs[i].r, 0));
  }
  // A new send must not overtake what is pending.
  EXPECT_EQ(UCS_ERR_NO_RESOURCE, uct_ep_put_short(ep_, &v, sizeof(v), peer_.buf, rkey_.rkey));
  flush_ep();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(i + 1, reqs[i].ran);
  uint64_t want[8];
  for (int i = 0; i < 8; ++i) want[i] = 1000u + i;
  EXPECT_EQ(checksum(reinterpret_cast<uint8_t*>(want), sizeof(want)), ask(kSum, 0, sizeof(want)));
  // With room again, pending_add says "send it yourself".
  uct_pending_req_t r{[](uct_pending_req_t*) { return UCS_OK; }, {}};
  EXPECT_EQ(UCS_ERR_BUSY, uct_ep_pending_add(ep_, &r, 0));
}

// A flush issued while requests are pending is in progress (not "no resource") and completes
// only once those requests have gone out and what they posted has completed.
TEST_F(SrdTest, FlushWithPendingRequestsCompletesAfterThem) {
  if (!(local_.attr.cap.flags & UCT_IFACE_FLAG_PUT_SHORT)) GTEST_SKIP() << "no RDMA write";
  uint64_t v = 0;
  size_t posted = 0;
  while (uct_ep_put_short(ep_, &v, sizeof(v), peer_.buf + 4096 + 8 * posted, rkey_.rkey) == UCS_OK) ++posted;
  ASSERT_GT(posted, 0u);
  struct Req {
    uct_pending_req_t r;
    uct_ep_h ep;
    uint64_t remote;
    uct_rkey_t rkey;
    uint64_t value;
    int ran;
  };
  std::vector<Req> reqs(4);
  for (int i = 0; i < 4; ++i) {
    reqs[i] = Req{{[](uct_pending_req_t* self) -> ucs_status_t {
                     auto* q = reinterpret_cast<Req*>(self);
                     ucs_status_t st = uct_ep_put_short(q->ep, &q->value, sizeof(q->value), q->remote, q->rkey);
                     if (st == UCS_OK) q->ran = 1;
                     return st;
                   },
                   {}},
                  ep_, peer_.buf + 8 * i, rkey_.rkey, 5000u + i, 0};
    ASSERT_EQ(UCS_OK, uct_ep_pending_add(ep_, &reqs[i].r, 0));
  }
  EXPECT_EQ(UCS_INPROGRESS, uct_ep_flush(ep_, 0, nullptr));
  Comp ec, ic;
  ASSERT_EQ(UCS_INPROGRESS, uct_ep_flush(ep_, 0, &ec.c));
  ASSERT_EQ(UCS_INPROGRESS, uct_iface_flush(local_.iface, 0, &ic.c));
  auto t0 = std::chrono::steady_clock::now();
  while (ec.calls == 0 || ic.calls == 0) {
    local_.progress();
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << "flush never completed";
    // Neither flush may complete before the last pending request has run.
    if (ec.calls || ic.calls) {
      for (const Req& r : reqs) ASSERT_EQ(1, r.ran);
    }
  }
  EXPECT_EQ(1, ec.calls);
  EXPECT_EQ(1, ic.calls);
  EXPECT_EQ(UCS_OK, ec.c.status);
  uint64_t want[4] = {5000, 5001, 5002, 5003};
  EXPECT_EQ(checksum(reinterpret_cast<uint8_t*>(want), sizeof(want)), ask(kSum, 0, sizeof(want)));
  EXPECT_EQ(UCS_OK, uct_ep_flush(ep_, 0, nullptr));
  EXPECT_EQ(UCS_OK, uct_iface_flush(local_.iface, 0, nullptr));
}

TEST_F(SrdTest, FlushWithCompletionAndFence) {
  if (!(local_.attr.cap.flags & UCT_IFACE_FLAG_PUT_BCOPY)) GTEST_SKIP() << "no RDMA write";
  EXPECT_EQ(UCS_OK, uct_ep_flush(ep_, 0, nullptr));  // nothing outstanding
  uint64_t a = 0x1111, b = 0x2222;
  ASSERT_EQ(UCS_OK, retry([&] { return uct_ep_put_short(ep_, &a, 8, peer_.buf, rkey_.rkey); }));
  EXPECT_EQ(UCS_OK, uct_ep_fence(ep_, 0));
  // After the fence the second write waits for the first: the peer ends with b.
  ASSERT_EQ(UCS_OK, retry([&] { return uct_ep_put_short(ep_, &b, 8, peer_.buf, rkey_.rkey); }));
  Comp c;
  ucs_status_t st = uct_ep_flush(ep_, 0, &c.c);
  if (st == UCS_INPROGRESS) {
    wait_comp(&c.c);
  } else {
    EXPECT_EQ(UCS_OK, st);
  }
  EXPECT_EQ(checksum(reinterpret_cast<uint8_t*>(&b), 8), ask(kSum, 0, 8));
  Comp ic;
  ASSERT_EQ(UCS_OK, retry([&] { return uct_ep_put_short(ep_, &a, 8, peer_.buf + 64, rkey_.rkey); }));
  st = uct_iface_flush(local_.iface, 0, &ic.c);
  if (st == UCS_INPROGRESS) wait_comp(&ic.c);
  EXPECT_EQ(checksum(reinterpret_cast<uint8_t*>(&a), 8), ask(kSum, 64, 8));
  EXPECT_EQ(UCS_OK, uct_iface_fence(local_.iface, 0));
}

// The event fd is a real fd: it becomes readable when a send completes after arming.
TEST_F(SrdTest, EventFdWakesOnSendCompletion) {
  if (!(local_.attr.cap.event_flags & UCT_IFACE_FLAG_EVENT_FD)) GTEST_SKIP() << "no CQ events";
  if (!(local_.attr.cap.flags & UCT_IFACE_FLAG_PUT_SHORT)) GTEST_SKIP() << "no RDMA write";
  int fd = -1;
  ASSERT_EQ(UCS_OK, uct_iface_event_fd_get(local_.iface, &fd));
  ASSERT_GE(fd, 0);
  ucs_status_t st;
  while ((st = uct_iface_event_arm(local_.iface, UCT_EVENT_SEND_COMP)) == UCS_ERR_BUSY) local_.progress();
  ASSERT_EQ(UCS_OK, st);
  uint64_t v = 42;
  ASSERT_EQ(UCS_OK, uct_ep_put_short(ep_, &v, 8, peer_.buf, rkey_.rkey));
  pollfd p{fd, POLLIN, 0};
  int n = 0;
  for (int i = 0; i < 200 && n == 0; ++i) n = poll(&p, 1, 100);  // the emulator's engine thread
  EXPECT_EQ(1, n);
  EXPECT_EQ(UCS_ERR_BUSY, uct_iface_event_arm(local_.iface, UCT_EVENT_SEND_COMP));
  flush_ep();
  EXPECT_EQ(UCS_ERR_UNSUPPORTED, uct_iface_event_arm(local_.iface, UCT_EVENT_RECV_SIG));
}

// Kills the peer: the keep-alive and outstanding work report it through the error handler.
TEST_F(SrdTest, PeerDeathSeenByEpCheckAndOutstandingWork) {
  if (!(local_.attr.cap.flags & UCT_IFACE_FLAG_EP_CHECK)) GTEST_SKIP() << "no keep-alive";
  ASSERT_EQ(UCS_OK, uct_ep_check(ep_, 0, nullptr));
  flush_ep();
  EXPECT_EQ(0, local_.errors);
  kill(pid_, SIGKILL);
  int st = 0;
  waitpid(pid_, &st, 0);
  killed_ = true;
  Comp c;
  uct_iov_t iov{local_.buf.data(), 64, local_.memh, 0, 1};
  ASSERT_EQ(UCS_INPROGRESS, retry([&] { return uct_ep_get_zcopy(ep_, &iov, 1, peer_.buf, rkey_.rkey, &c.c); }));
  ASSERT_EQ(UCS_OK, uct_ep_check(ep_, 0, nullptr));
  auto t0 = std::chrono::steady_clock::now();
  while ((local_.errors == 0 || c.c.count > 0) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30))
    local_.progress();
  EXPECT_EQ(1, local_.errors);
  EXPECT_NE(UCS_OK, local_.last_error);
  EXPECT_EQ(0, c.c.count);
  EXPECT_NE(UCS_OK, c.c.status);
  // The failed endpoint refuses new work instead of hanging.
  uint64_t v = 1;
  EXPECT_NE(UCS_OK, uct_ep_put_short(ep_, &v, 8, peer_.buf, rkey_.rkey));
}

// ---- tag offload: two interfaces of this process, one sending, one receiving ----

// What the receiving interface's unexpected callbacks saw.
struct Unexp {
  int eager = 0, rndv = 0;
  uint64_t stag = 0, imm = 0, raddr = 0;
  unsigned flags = 0;
  size_t length = 0;
  std::vector<uint8_t> data, hdr;
  uint8_t rkey[64] = {};
  size_t rkey_len = 0;  // the MD's packed rkey size

  static ucs_status_t on_eager(void* arg, void* data, size_t length, unsigned flags, uct_tag_t stag, uint64_t imm,
                               void**) {
    auto* u = static_cast<Unexp*>(arg);
    u->eager++;
    u->stag = stag;
    u->imm = imm;
    u->flags = flags;
    u->data.assign(static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + length);
    return UCS_OK;
  }
  static ucs_status_t on_rndv(void* arg, unsigned flags, uint64_t stag, const void* header, unsigned hlen,
                              uint64_t raddr, size_t length, const void* rkey_buf) {
    auto* u = static_cast<Unexp*>(arg);
    u->rndv++;
    u->stag = stag;
    u->flags = flags;
    u->raddr = raddr;
    u->length = length;
    u->hdr.assign(static_cast<const uint8_t*>(header), static_cast<const uint8_t*>(header) + hlen);
    if (rkey_buf) std::memcpy(u->rkey, rkey_buf, u->rkey_len);
    return UCS_OK;
  }
};

// A posted receive and what its callbacks reported.
struct TagRecv {
  uct_tag_context_t ctx;  // first: the callbacks cast back
  int consumed = 0, completed = 0, rndv = 0;
  ucs_status_t status = UCS_OK;
  uint64_t stag = 0, imm = 0;
  size_t length = 0;
  std::vector<uint8_t> hdr;

  TagRecv() {
    std::memset(&ctx, 0, sizeof(ctx));
    ctx.tag_consumed_cb = [](uct_tag_context_t* self) { reinterpret_cast<TagRecv*>(self)->consumed++; };
    ctx.completed_cb = [](uct_tag_context_t* self, uct_tag_t stag, uint64_t imm, size_t length, void*,
                          ucs_status_t status) {
      auto* r = reinterpret_cast<TagRecv*>(self);
      r->completed++;
      r->stag = stag;
      r->imm = imm;
      r->length = length;
      r->status = status;
    };
    ctx.rndv_cb = [](uct_tag_context_t* self, uct_tag_t stag, const void* header, unsigned hlen,
                     ucs_status_t status, unsigned) {
      auto* r = reinterpret_cast<TagRecv*>(self);
      r->rndv++;
      r->stag = stag;
      r->status = status;
      r->hdr.assign(static_cast<const uint8_t*>(header), static_cast<const uint8_t*>(header) + hlen);
    };
  }
};

class SrdTagTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (Side* s : {&tx_, &rx_}) {
      s->eager_cb = Unexp::on_eager;
      s->rndv_cb = Unexp::on_rndv;
      s->tag_arg = s == &rx_ ? &unexp_ : &tx_unexp_;
      s->tm_list_size = "4";
      s->open();
    }
    if (!(rx_.attr.cap.flags & UCT_IFACE_FLAG_TAG_RNDV_ZCOPY)) GTEST_SKIP() << "no tag offload (no RDMA read)";
    uct_md_attr_t ma;
    ASSERT_EQ(UCS_OK, uct_md_query(rx_.md, &ma));
    ASSERT_LE(ma.rkey_packed_size, sizeof(unexp_.rkey));
    unexp_.rkey_len = ma.rkey_packed_size;
    Wire w = rx_.wire();
    uct_ep_params_t ep{};
    ep.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR | UCT_EP_PARAM_FIELD_IFACE_ADDR;
    ep.iface = tx_.iface;
    ep.dev_addr = reinterpret_cast<const uct_device_addr_t*>(w.dev_addr);
    ep.iface_addr = reinterpret_cast<const uct_iface_addr_t*>(w.iface_addr);
    ASSERT_EQ(UCS_OK, uct_ep_create(&ep, &ep_));
  }

  void TearDown() override {
    if (ep_) uct_ep_destroy(ep_);
    tx_.close();
    rx_.close();
  }

  void progress() {
    tx_.progress();
    rx_.progress();
  }

  // Progresses both sides until `done` holds.
  template <typename F>
  void until(F done) {
    auto t0 = std::chrono::steady_clock::now();
    while (!done()) {
      progress();
      ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << "never happened";
    }
  }

  template <typename F>
  ucs_status_t retry(F f) {
    ucs_status_t st;
    while ((st = f()) == UCS_ERR_NO_RESOURCE) progress();
    return st;
  }

  ucs_status_t post(TagRecv* r, uct_tag_t tag, uct_tag_t mask, void* buf, size_t len) {
    uct_iov_t iov{buf, len, rx_.memh, 0, 1};
    return uct_iface_tag_recv_zcopy(rx_.iface, tag, mask, &iov, 1, &r->ctx);
  }

  Side tx_, rx_;
  Unexp unexp_, tx_unexp_;
  uct_ep_h ep_ = nullptr;
};

TEST_F(SrdTagTest, AdvertisesTagRowsAndLimits) {
  const uint64_t f = rx_.attr.cap.flags;
  EXPECT_TRUE(f & UCT_IFACE_FLAG_TAG_EAGER_SHORT);
  EXPECT_TRUE(f & UCT_IFACE_FLAG_TAG_EAGER_BCOPY);
  EXPECT_TRUE(f & UCT_IFACE_FLAG_TAG_EAGER_ZCOPY);
  EXPECT_TRUE(f & UCT_IFACE_FLAG_GET_ZCOPY);  // what UCP also needs for a tag lane
  EXPECT_EQ(4u, rx_.attr.cap.tag.recv.max_outstanding);
  EXPECT_GE(rx_.attr.cap.tag.eager.max_bcopy, 1024u);
  EXPECT_GE(rx_.attr.cap.tag.rndv.max_hdr, 24u);  // UCP's unexpected-rendezvous header
  EXPECT_GE(rx_.attr.cap.tag.rndv.max_zcopy, size_t{1} << 20);
  EXPECT_EQ(rx_.attr.cap.tag.rndv.max_zcopy, rx_.attr.cap.tag.recv.max_zcopy);
}

TEST_F(SrdTagTest, EagerMatchesPostedReceivesOrGoesUnexpected) {
  uint8_t* src = tx_.buf.data();
  fill_pattern(src, 65536, 11);
  uint8_t* dst = rx_.buf.data();
  TagRecv a, b, c;
  ASSERT_EQ(UCS_OK, post(&a, 0x1234, ~0ull, dst, 4096));
  ASSERT_EQ(UCS_OK, post(&b, 0xab00, 0xff00, dst + 4096, 4096));  // low byte ignored
  ASSERT_EQ(UCS_OK, post(&c, 0x77, ~0ull, dst + 8192, 16));       // too small for what comes
  ASSERT_EQ(UCS_OK, retry([&] { return uct_ep_tag_eager_short(ep_, 0x1234, src, 100); }));
  struct Arg {
    const uint8_t* p;
    size_t n;
  } arg{src + 1000, 3000};
  auto pack = [](void* dest, void* x) -> size_t {
    auto* q = static_cast<Arg*>(x);
    std::memcpy(dest, q->p, q->n);
    return q->n;
  };
  ssize_t packed;
  while ((packed = uct_ep_tag_eager_bcopy(ep_, 0xab42, 7, pack, &arg, 0)) == UCS_ERR_NO_RESOURCE) progress();
  ASSERT_EQ(3000, packed);
  uct_iov_t two[2] = {{src + 5000, 40, tx_.memh, 0, 1}, {src + 9000, 60, tx_.memh, 0, 1}};
  Comp zc;
  ucs_status_t st = retry([&] { return uct_ep_tag_eager_zcopy(ep_, 0x77, 0, two, 2, 0, &zc.c); });
  ASSERT_TRUE(st == UCS_OK || st == UCS_INPROGRESS);
  // No receive for this one: the unexpected callback gets it, with its imm.
  ASSERT_EQ(UCS_OK, retry([&] { return uct_ep_tag_eager_zcopy(ep_, 0x999, 5, two, 1, 0, &zc.c); }));
  until([&] { return a.completed && b.completed && c.completed && unexp_.eager; });
  EXPECT_EQ(1, a.consumed);
  EXPECT_EQ(UCS_OK, a.status);
  EXPECT_EQ(0x1234u, a.stag);
  EXPECT_EQ(100u, a.length);
  EXPECT_EQ(0, std::memcmp(dst, src, 100));
  EXPECT_EQ(UCS_OK, b.status);
  EXPECT_EQ(0xab42u, b.stag);
  EXPECT_EQ(7u, b.imm);
  EXPECT_EQ(3000u, b.length);
  EXPECT_EQ(0, std::memcmp(dst + 4096, src + 1000, 3000));
  EXPECT_EQ(UCS_ERR_MESSAGE_TRUNCATED, c.status);
  EXPECT_EQ(100u, c.length);
  EXPECT_EQ(0, std::memcmp(dst + 8192, src + 5000, 16));
  EXPECT_EQ(1, unexp_.eager);
  EXPECT_EQ(0x999u, unexp_.stag);
  EXPECT_EQ(5u, unexp_.imm);
  EXPECT_TRUE(unexp_.flags & UCT_CB_PARAM_FLAG_FIRST);
  EXPECT_FALSE(unexp_.flags & UCT_CB_PARAM_FLAG_MORE);
  ASSERT_EQ(40u, unexp_.data.size());
  EXPECT_EQ(0, std::memcmp(unexp_.data.data(), src + 5000, 40));
  // Matched receives are gone: the same tag now arrives unexpected.
  ASSERT_EQ(UCS_OK, retry([&] { return uct_ep_tag_eager_short(ep_, 0x1234, src, 8); }));
  until([&] { return unexp_.eager == 2; });
  EXPECT_EQ(1, a.completed);
}

TEST_F(SrdTagTest, RendezvousIsReadIntoThePostedReceive) {
  constexpr size_t kLen = 300000;
  uint8_t* src = tx_.buf.data();
  fill_pattern(src, kLen, 21);
  TagRecv r;
  ASSERT_EQ(UCS_OK, post(&r, 0x55, ~0ull, rx_.buf.data(), kLen + 100));
  uct_iov_t iov{src, kLen, tx_.memh, 0, 1};
  Comp c;
  const uint8_t hdr[24] = {1, 2, 3};
  ucs_status_ptr_t op;
  while ((op = uct_ep_tag_rndv_zcopy(ep_, 0x55, hdr, sizeof(hdr), &iov, 1, 0, &c.c)) ==
         UCS_STATUS_PTR(UCS_ERR_NO_RESOURCE))
    progress();
  ASSERT_FALSE(UCS_PTR_IS_ERR(op)) << ucs_status_string(UCS_PTR_STATUS(op));
  until([&] { return r.completed && c.calls; });
  EXPECT_EQ(1, r.consumed);
  EXPECT_EQ(UCS_OK, r.status);
  EXPECT_EQ(kLen, r.length);
  EXPECT_EQ(0, std::memcmp(rx_.buf.data(), src, kLen));
  EXPECT_EQ(UCS_OK, c.c.status);
  EXPECT_EQ(0, unexp_.rndv);  // the header is seen only by an unexpected receiver
}

TEST_F(SrdTagTest, UnexpectedRendezvousCarriesWhatASoftwareReadNeeds) {
  constexpr size_t kLen = 70000;
  uint8_t* src = tx_.buf.data();
  fill_pattern(src, kLen, 31);
  uct_iov_t iov{src, kLen, tx_.memh, 0, 1};
  Comp c;
  const uint8_t hdr[24] = {9, 8, 7, 6};
  ucs_status_ptr_t op;
  while ((op = uct_ep_tag_rndv_zcopy(ep_, 0x66, hdr, sizeof(hdr), &iov, 1, 0, &c.c)) ==
         UCS_STATUS_PTR(UCS_ERR_NO_RESOURCE))
    progress();
  ASSERT_FALSE(UCS_PTR_IS_ERR(op));
  until([&] { return unexp_.rndv == 1; });
  EXPECT_EQ(0x66u, unexp_.stag);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(src), unexp_.raddr);
  EXPECT_EQ(kLen, unexp_.length);
  ASSERT_EQ(sizeof(hdr), unexp_.hdr.size());
  EXPECT_EQ(0, std::memcmp(unexp_.hdr.data(), hdr, sizeof(hdr)));
  // The receiver reads the data itself with the key it was given (UCP's software rendezvous).
  uct_rkey_bundle_t rk;
  ASSERT_EQ(UCS_OK, uct_rkey_unpack(rx_.comp, unexp_.rkey, &rk));
  Wire w = tx_.wire();
  uct_ep_params_t p{};
  p.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR | UCT_EP_PARAM_FIELD_IFACE_ADDR;
  p.iface = rx_.iface;
  p.dev_addr = reinterpret_cast<const uct_device_addr_t*>(w.dev_addr);
  p.iface_addr = reinterpret_cast<const uct_iface_addr_t*>(w.iface_addr);
  uct_ep_h back;
  ASSERT_EQ(UCS_OK, uct_ep_create(&p, &back));
  uct_iov_t dst{rx_.buf.data(), kLen, rx_.memh, 0, 1};
  Comp g;
  ucs_status_t st;
  while ((st = uct_ep_get_zcopy(back, &dst, 1, unexp_.raddr, rk.rkey, &g.c)) == UCS_ERR_NO_RESOURCE) progress();
  ASSERT_EQ(UCS_INPROGRESS, st);
  until([&] { return g.calls == 1; });
  EXPECT_EQ(0, std::memcmp(rx_.buf.data(), src, kLen));
  uct_ep_destroy(back);
  uct_rkey_release(rx_.comp, &rk);
  // The sender's operation ends by cancel, without its completion.
  EXPECT_EQ(UCS_OK, uct_ep_tag_rndv_cancel(ep_, op));
  for (int i = 0; i < 100; ++i) progress();
  EXPECT_EQ(0, c.calls);
}

TEST_F(SrdTagTest, SoftwareRendezvousRequestReachesTheReceiveOrTheCallback) {
  const uint8_t hdr[40] = {4, 4, 4, 4, 4};
  TagRecv r;
  ASSERT_EQ(UCS_OK, post(&r, 0x88, ~0ull, rx_.buf.data(), 4096));
  ASSERT_EQ(UCS_OK, retry([&] { return uct_ep_tag_rndv_request(ep_, 0x88, hdr, sizeof(hdr), 0); }));
  ASSERT_EQ(UCS_OK, retry([&] { return uct_ep_tag_rndv_request(ep_, 0x89, hdr, 20, 0); }));
  until([&] { return r.rndv && unexp_.rndv; });
  EXPECT_EQ(1, r.consumed);
  EXPECT_EQ(0, r.completed);
  EXPECT_EQ(UCS_OK, r.status);
  ASSERT_EQ(sizeof(hdr), r.hdr.size());
  EXPECT_EQ(0, std::memcmp(r.hdr.data(), hdr, sizeof(hdr)));
  EXPECT_EQ(0x89u, unexp_.stag);
  EXPECT_EQ(0u, unexp_.raddr);  // a software request: no remote buffer
  EXPECT_EQ(20u, unexp_.hdr.size());
}

TEST_F(SrdTagTest, CancelLimitsAndBadInput) {
  TagRecv r[5];
  for (int i = 0; i < 4; ++i) ASSERT_EQ(UCS_OK, post(&r[i], 0x100 + i, ~0ull, rx_.buf.data() + 64 * i, 64));
  EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT, post(&r[4], 0x200, ~0ull, rx_.buf.data(), 64));
  EXPECT_EQ(UCS_OK, uct_iface_tag_recv_cancel(rx_.iface, &r[0].ctx, 0));
  EXPECT_EQ(UCS_OK, uct_iface_tag_recv_cancel(rx_.iface, &r[1].ctx, 1));
  EXPECT_EQ(UCS_ERR_NO_ELEM, uct_iface_tag_recv_cancel(rx_.iface, &r[1].ctx, 0));  // already gone
  until([&] { return r[0].completed == 1; });
  EXPECT_EQ(UCS_ERR_CANCELED, r[0].status);
  for (int i = 0; i < 50; ++i) progress();
  EXPECT_EQ(0, r[1].completed);
  // Canceled receives match nothing: their tag is unexpected now.
  ASSERT_EQ(UCS_OK, retry([&] { return uct_ep_tag_eager_short(ep_, 0x100, rx_.buf.data(), 8); }));
  until([&] { return unexp_.eager == 1; });
  // The slots are free again.
  EXPECT_EQ(UCS_OK, post(&r[4], 0x200, ~0ull, rx_.buf.data(), 64));
  EXPECT_EQ(UCS_OK, uct_iface_tag_recv_cancel(rx_.iface, &r[4].ctx, 1));
  uct_iov_t two[2] = {{rx_.buf.data(), 8, rx_.memh, 0, 1}, {rx_.buf.data(), 8, rx_.memh, 0, 1}};
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_iface_tag_recv_zcopy(rx_.iface, 1, ~0ull, two, 2, &r[4].ctx));
  std::vector<uint8_t> big(tx_.attr.cap.tag.eager.max_short + 1);
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_tag_eager_short(ep_, 1, big.data(), big.size()));
  std::vector<uint8_t> bighdr(tx_.attr.cap.tag.rndv.max_hdr + 1);
  uct_iov_t iov{tx_.buf.data(), 64, tx_.memh, 0, 1};
  Comp c;
  EXPECT_EQ(UCS_STATUS_PTR(UCS_ERR_INVALID_PARAM),
            uct_ep_tag_rndv_zcopy(ep_, 1, bighdr.data(), bighdr.size(), &iov, 1, 0, &c.c));
  // A bad key is an error at the receiver and at the sender, not a hang.
  TagRecv bad;
  ASSERT_EQ(UCS_OK, post(&bad, 0x300, ~0ull, rx_.buf.data(), 4096));
  std::vector<uint8_t> scratch(4096);
  ucs_status_ptr_t op;
  // The rkey travels in the request: one of a deregistered region makes the read fail.
  uct_mem_h gone;
  ASSERT_EQ(UCS_OK, uct_md_mem_reg(tx_.md, scratch.data(), scratch.size(), UCT_MD_MEM_ACCESS_ALL, &gone));
  uct_iov_t g{scratch.data(), 64, gone, 0, 1};
  while ((op = uct_ep_tag_rndv_zcopy(ep_, 0x300, nullptr, 0, &g, 1, 0, &c.c)) == UCS_STATUS_PTR(UCS_ERR_NO_RESOURCE))
    progress();
  ASSERT_FALSE(UCS_PTR_IS_ERR(op));
  ASSERT_EQ(UCS_OK, uct_md_mem_dereg(tx_.md, gone));
  until([&] { return bad.completed && c.calls; });
  EXPECT_NE(UCS_OK, bad.status);
  EXPECT_NE(UCS_OK, c.c.status);
}

// ---- connection by socket address: a server process and this one as client ----

struct SaServer {
  int requests = 0, accepted = 0, rejected = 0;
  std::string last_priv;
  uint64_t ams = 0;

  static ucs_status_t on_am(void* arg, void*, size_t, unsigned) {
    static_cast<SaServer*>(arg)->ams++;
    return UCS_OK;
  }
};

enum : uint8_t { kSaCounts = 'c', kSaPriv = 'p' };

// One client's request off the side channel (sockaddr_wire.h), answered with this process's
// srd addresses (accept) or UCS_ERR_REJECTED when the private data starts with "reject".
void sa_answer(Side* s, SaServer* srv, int c) {
  xpufab::uct::SaRequest rq;
  if (recv(c, &rq, sizeof(rq), MSG_WAITALL) != static_cast<ssize_t>(sizeof(rq)) || rq.magic != xpufab::uct::kSaMagic ||
      rq.priv_len > xpufab::uct::kSaMaxPriv)
    return;
  std::string priv(rq.priv_len, '\0');
  if (rq.priv_len && recv(c, &priv[0], rq.priv_len, MSG_WAITALL) != static_cast<ssize_t>(rq.priv_len)) return;
  srv->requests++;
  srv->last_priv = priv;
  xpufab::uct::SaReply r{};
  r.magic = xpufab::uct::kSaMagic;
  r.status = priv.rfind("reject", 0) == 0 ? UCS_ERR_REJECTED : UCS_OK;
  (r.status == UCS_OK ? srv->accepted : srv->rejected)++;
  uct_iface_get_device_address(s->iface, reinterpret_cast<uct_device_addr_t*>(r.dev));
  uct_iface_get_address(s->iface, reinterpret_cast<uct_iface_addr_t*>(r.iface));
  if (send(c, &r, sizeof(r), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(r))) srv->requests += 1000;
}

// The server: an srd interface and a listener on 127.0.0.1 (any port); sends the port, then
// progresses, answers clients and count queries.
[[noreturn]] void sa_server_main(int fd) {
  SaServer srv;
  Side s;
  s.open();
  if (uct_iface_set_am_handler(s.iface, kAmId, SaServer::on_am, &srv, 0) != UCS_OK) _exit(5);
  const int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof(a);
  if (l < 0 || bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(l, 8) != 0 ||
      getsockname(l, reinterpret_cast<sockaddr*>(&a), &alen) != 0)
    _exit(6);
  const uint16_t port = ntohs(a.sin_port);
  if (write(fd, &port, sizeof(port)) != sizeof(port)) _exit(2);
  for (;;) {
    s.progress();
    const int c = accept(l, nullptr, nullptr);
    if (c >= 0) {
      sa_answer(&s, &srv, c);
      ::close(c);
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) continue;
    uint8_t cmd;
    if (read(fd, &cmd, 1) != 1 || cmd == kQuit) break;
    if (cmd == kSaCounts) {
      uint64_t r[4] = {static_cast<uint64_t>(srv.requests), static_cast<uint64_t>(srv.accepted),
                       static_cast<uint64_t>(srv.rejected), srv.ams};
      if (write(fd, r, sizeof(r)) != sizeof(r)) _exit(4);
    } else if (cmd == kSaPriv) {
      char b[64] = {};
      std::memcpy(b, srv.last_priv.data(), std::min(srv.last_priv.size(), sizeof(b) - 1));
      if (write(fd, b, sizeof(b)) != sizeof(b)) _exit(4);
    }
  }
  ::close(l);
  s.close();
  _exit(0);
}

class SrdSockaddrTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pid_ = xpufab::testing::spawn_self("uct_srd_sa_server", "--uct-sa-server", &fd_);
    ASSERT_GE(pid_, 0);
    local_.open();
    uint16_t port = 0;
    ASSERT_EQ(static_cast<ssize_t>(sizeof(port)), read(fd_, &port, sizeof(port)));
    server_.sin_family = AF_INET;
    server_.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    server_.sin_port = htons(port);
  }

  void TearDown() override {
    for (uct_ep_h ep : eps_) uct_ep_destroy(ep);
    local_.close();
    uint8_t q = kQuit;
    EXPECT_EQ(1, write(fd_, &q, 1));
    int st = 0;
    waitpid(pid_, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
    ::close(fd_);
  }

  struct Client {
    const char* priv;
    int connected = 0;
    ucs_status_t status = UCS_ERR_LAST;
    size_t dev_len = 0;
  };

  static ssize_t pack(void* arg, const uct_cm_ep_priv_data_pack_args_t* args, void* out) {
    auto* c = static_cast<Client*>(arg);
    if (!(args->field_mask & UCT_CM_EP_PRIV_DATA_PACK_ARGS_FIELD_DEVICE_NAME)) return UCS_ERR_INVALID_PARAM;
    std::strcpy(static_cast<char*>(out), c->priv);
    return static_cast<ssize_t>(std::strlen(c->priv));
  }
  static void on_connect(uct_ep_h, void* arg, const uct_cm_ep_client_connect_args_t* a) {
    auto* c = static_cast<Client*>(arg);
    c->connected++;
    c->status = a->status;
    if (a->field_mask & UCT_CM_EP_CLIENT_CONNECT_ARGS_FIELD_REMOTE_DATA) c->dev_len = a->remote_data->dev_addr_length;
  }

  ucs_status_t connect(Client* c, const sockaddr_in* to, uct_ep_h* ep_p) {
    ucs_sock_addr_t sa{reinterpret_cast<const sockaddr*>(to), sizeof(*to)};
    uct_ep_params_t p{};
    p.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_SOCKADDR | UCT_EP_PARAM_FIELD_USER_DATA |
                   UCT_EP_PARAM_FIELD_SOCKADDR_PACK_CB | UCT_EP_PARAM_FIELD_SOCKADDR_CONNECT_CB_CLIENT |
                   UCT_EP_PARAM_FIELD_SOCKADDR_CB_FLAGS;
    p.iface = local_.iface;
    p.sockaddr = &sa;
    p.user_data = c;
    p.sockaddr_pack_cb = pack;
    p.sockaddr_cb_client = on_connect;
    p.sockaddr_cb_flags = 0;
    ucs_status_t st = uct_ep_create(&p, ep_p);
    if (st == UCS_OK) eps_.push_back(*ep_p);
    return st;
  }

  std::vector<uint64_t> counts() {
    uint8_t c = kSaCounts;
    std::vector<uint64_t> r(4);
    EXPECT_EQ(1, write(fd_, &c, 1));
    EXPECT_EQ(static_cast<ssize_t>(sizeof(uint64_t) * 4), read(fd_, r.data(), sizeof(uint64_t) * 4));
    return r;
  }

  Side local_;
  sockaddr_in server_{};
  std::vector<uct_ep_h> eps_;
  pid_t pid_ = -1;
  int fd_ = -1;
};

TEST_F(SrdSockaddrTest, MdAndIfaceAdvertiseSockaddr) {
  uct_md_attr_t ma;
  ASSERT_EQ(UCS_OK, uct_md_query(local_.md, &ma));
  EXPECT_TRUE(ma.cap.flags & UCT_MD_FLAG_SOCKADDR);
  EXPECT_TRUE(local_.attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_SOCKADDR);
  EXPECT_GE(local_.attr.max_conn_priv, 64u);
  // The server side of UCT's sockaddr model is not a transport interface on UCX 1.13.
  EXPECT_EQ(UCS_ERR_UNSUPPORTED, uct_iface_accept(local_.iface, nullptr));
  EXPECT_EQ(UCS_ERR_UNSUPPORTED, uct_iface_reject(local_.iface, nullptr));
  ucs_sock_addr_t lo{reinterpret_cast<const sockaddr*>(&server_), sizeof(server_)};
  EXPECT_TRUE(uct_md_is_sockaddr_accessible(local_.md, &lo, UCT_SOCKADDR_ACC_LOCAL));
  EXPECT_TRUE(uct_md_is_sockaddr_accessible(local_.md, &lo, UCT_SOCKADDR_ACC_REMOTE));
  sockaddr_in far = server_;
  far.sin_addr.s_addr = htonl(0xc0000201);  // 192.0.2.1, TEST-NET-1: not an address of this host
  ucs_sock_addr_t f{reinterpret_cast<const sockaddr*>(&far), sizeof(far)};
  EXPECT_FALSE(uct_md_is_sockaddr_accessible(local_.md, &f, UCT_SOCKADDR_ACC_LOCAL));
  EXPECT_TRUE(uct_md_is_sockaddr_accessible(local_.md, &f, UCT_SOCKADDR_ACC_REMOTE));
  sockaddr un{};
  un.sa_family = AF_UNIX;
  ucs_sock_addr_t u{&un, sizeof(un)};
  EXPECT_FALSE(uct_md_is_sockaddr_accessible(local_.md, &u, UCT_SOCKADDR_ACC_REMOTE));
}

TEST_F(SrdSockaddrTest, AcceptedClientTalksOverSrd) {
  Client c{"hello server"};
  uct_ep_h ep;
  ASSERT_EQ(UCS_OK, connect(&c, &server_, &ep));
  // Until the server answers, sends wait (no resource), as on any endpoint short of resources.
  uint64_t payload = 7;
  auto t0 = std::chrono::steady_clock::now();
  ucs_status_t st;
  while ((st = uct_ep_am_short(ep, kAmId, 1, &payload, sizeof(payload))) == UCS_ERR_NO_RESOURCE) {
    local_.progress();
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << "never connected";
  }
  ASSERT_EQ(UCS_OK, st);
  EXPECT_EQ(1, c.connected);
  EXPECT_EQ(UCS_OK, c.status);
  EXPECT_EQ(16u, c.dev_len);
  std::vector<uint64_t> n;
  t0 = std::chrono::steady_clock::now();
  do {
    local_.progress();
    n = counts();
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << "AM never arrived";
  } while (n[3] < 1);
  EXPECT_EQ(1u, n[0]);
  EXPECT_EQ(1u, n[1]);
  EXPECT_EQ(0u, n[2]);
  uint8_t cmd = kSaPriv;
  char priv[64];
  ASSERT_EQ(1, write(fd_, &cmd, 1));
  ASSERT_EQ(static_cast<ssize_t>(sizeof(priv)), read(fd_, priv, sizeof(priv)));
  EXPECT_STREQ("hello server", priv);
  EXPECT_EQ(0, local_.errors);
}

TEST_F(SrdSockaddrTest, RejectedClientSeesItsErrorHandler) {
  Client c{"reject me"};
  uct_ep_h ep;
  ASSERT_EQ(UCS_OK, connect(&c, &server_, &ep));
  auto t0 = std::chrono::steady_clock::now();
  while (local_.errors == 0) {
    local_.progress();
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << "no rejection seen";
  }
  EXPECT_EQ(1, local_.errors);
  EXPECT_EQ(UCS_ERR_REJECTED, local_.last_error);
  EXPECT_EQ(0, c.connected);
  uint64_t v = 1;
  EXPECT_EQ(UCS_ERR_REJECTED, uct_ep_am_short(ep, kAmId, 1, &v, sizeof(v)));
  std::vector<uint64_t> n = counts();
  EXPECT_EQ(1u, n[0]);
  EXPECT_EQ(0u, n[1]);
  EXPECT_EQ(1u, n[2]);
}

TEST_F(SrdSockaddrTest, NobodyListeningAndBadAddresses) {
  // A port nobody listens on: bound and closed here.
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in dead = server_;
  dead.sin_port = 0;
  ASSERT_EQ(0, bind(s, reinterpret_cast<sockaddr*>(&dead), sizeof(dead)));
  socklen_t l = sizeof(dead);
  ASSERT_EQ(0, getsockname(s, reinterpret_cast<sockaddr*>(&dead), &l));
  ::close(s);
  Client c{"anyone?"};
  uct_ep_h ep;
  ucs_status_t st = connect(&c, &dead, &ep);
  if (st == UCS_OK) {
    auto t0 = std::chrono::steady_clock::now();
    while (local_.errors == 0) {
      local_.progress();
      ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << "no error seen";
    }
    EXPECT_EQ(UCS_ERR_UNREACHABLE, local_.last_error);
  } else {
    EXPECT_EQ(UCS_ERR_UNREACHABLE, st);
  }
  sockaddr un{};
  un.sa_family = AF_UNIX;
  ucs_sock_addr_t u{&un, sizeof(un)};
  uct_ep_params_t p{};
  p.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_SOCKADDR;
  p.iface = local_.iface;
  p.sockaddr = &u;
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_create(&p, &ep));
  p.sockaddr = nullptr;
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_create(&p, &ep));
}

// ---- limits: registrations and peers ----

// Atomics reach memory registered after hundreds of other registrations (the core's own table
// holds 64), and the peer table's size is what max_num_eps reports, with a clean error past it.
TEST(SrdLimits, ManyRegistrationsAndAPeerTableThatSaysItsSize) {
  Side tx, rx;
  tx.open();
  rx.open();
  EXPECT_GE(rx.attr.max_num_eps, 128u);
  std::vector<std::vector<uint64_t>> bufs(300, std::vector<uint64_t>(8, 0));
  std::vector<uct_mem_h> memh(bufs.size());
  for (size_t i = 0; i < bufs.size(); ++i) {
    bufs[i][0] = 1000 + i;
    ASSERT_EQ(UCS_OK, uct_md_mem_reg(rx.md, bufs[i].data(), 64, UCT_MD_MEM_ACCESS_ALL, &memh[i]));
  }
  Wire w = rx.wire();
  uct_ep_params_t p{};
  p.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR | UCT_EP_PARAM_FIELD_IFACE_ADDR;
  p.iface = tx.iface;
  p.dev_addr = reinterpret_cast<const uct_device_addr_t*>(w.dev_addr);
  p.iface_addr = reinterpret_cast<const uct_iface_addr_t*>(w.iface_addr);
  uct_ep_h ep;
  ASSERT_EQ(UCS_OK, uct_ep_create(&p, &ep));
  for (size_t i : {size_t{0}, size_t{150}, size_t{299}}) {
    uint8_t packed[64];
    ASSERT_EQ(UCS_OK, uct_md_mkey_pack(rx.md, memh[i], packed));
    uct_rkey_bundle_t rk;
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(tx.comp, packed, &rk));
    Comp c;
    uint64_t old = 0;
    ucs_status_t st;
    while ((st = uct_ep_atomic64_fetch(ep, UCT_ATOMIC_OP_ADD, 5, &old, reinterpret_cast<uintptr_t>(bufs[i].data()),
                                       rk.rkey, &c.c)) == UCS_ERR_NO_RESOURCE) {
      tx.progress();
      rx.progress();
    }
    ASSERT_EQ(UCS_INPROGRESS, st);
    auto t0 = std::chrono::steady_clock::now();
    while (c.calls == 0) {
      tx.progress();
      rx.progress();
      ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << "no atomic reply";
    }
    EXPECT_EQ(UCS_OK, c.c.status) << "region " << i;
    EXPECT_EQ(1000 + i, old);
    EXPECT_EQ(1005 + i, bufs[i][0]);
    uct_rkey_release(tx.comp, &rk);
  }
  uct_ep_destroy(ep);
  for (uct_mem_h m : memh) uct_md_mem_dereg(rx.md, m);
  tx.close();
  rx.close();
}

TEST(SrdLimits, PastThePeerTableEndpointCreationFailsCleanly) {
  Side tx;
  tx.max_peers = "2";
  tx.open();
  EXPECT_EQ(2u, tx.attr.max_num_eps);
  Side peers[3];
  std::vector<uct_ep_h> eps;
  ucs_status_t last = UCS_OK;
  for (Side& s : peers) {
    s.open();
    Wire w = s.wire();
    uct_ep_params_t p{};
    p.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR | UCT_EP_PARAM_FIELD_IFACE_ADDR;
    p.iface = tx.iface;
    p.dev_addr = reinterpret_cast<const uct_device_addr_t*>(w.dev_addr);
    p.iface_addr = reinterpret_cast<const uct_iface_addr_t*>(w.iface_addr);
    uct_ep_h ep;
    last = uct_ep_create(&p, &ep);
    if (last == UCS_OK) eps.push_back(ep);
  }
  EXPECT_EQ(2u, eps.size());
  EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT, last);
  for (uct_ep_h ep : eps) uct_ep_destroy(ep);
  for (Side& s : peers) s.close();
  tx.close();
}

// ---- one process, two interfaces ----

// An endpoint from a to b, once b answered its connection request (RDMA may go).
uct_ep_h connect_pair(Side* a, Side* b) {
  const Wire w = b->wire();
  uct_ep_params_t p{};
  p.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR | UCT_EP_PARAM_FIELD_IFACE_ADDR;
  p.iface = a->iface;
  p.dev_addr = reinterpret_cast<const uct_device_addr_t*>(w.dev_addr);
  p.iface_addr = reinterpret_cast<const uct_iface_addr_t*>(w.iface_addr);
  uct_ep_h ep = nullptr;
  EXPECT_EQ(UCS_OK, uct_ep_create(&p, &ep));
  auto t0 = std::chrono::steady_clock::now();
  while (ep && uct_ep_put_short(ep, nullptr, 0, w.buf, 0) == UCS_ERR_NO_RESOURCE) {
    a->progress();
    b->progress();
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20)) {
      ADD_FAILURE() << "no answer to the connection request";
      break;
    }
  }
  return ep;
}

// A zcopy put goes as one RDMA request, up to the device's largest: as many puts are in flight
// together as the send queue has entries, each completing once.
TEST(SrdRma, ZcopyPutsAreOneRequestEachAndGoTogether) {
  const char* chunk = std::getenv("UCX_SRD_RMA_CHUNK");
  if (chunk && std::strcmp(chunk, "inf") != 0) GTEST_SKIP() << "cut into chunks by configuration";
  Side tx, rx;
  tx.tx_queue_len = "4";
  tx.open();
  rx.open();
  if (!(tx.attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY)) GTEST_SKIP() << "no RDMA write";
  uct_ep_h ep = connect_pair(&tx, &rx);
  ASSERT_NE(nullptr, ep);
  const Wire w = rx.wire();
  uct_rkey_bundle_t rk;
  ASSERT_EQ(UCS_OK, uct_rkey_unpack(tx.comp, w.rkey, &rk));
  constexpr size_t kLen = 256 << 10;
  fill_pattern(tx.buf.data(), kBuf, 3);
  std::vector<Comp> c(4);
  for (size_t k = 0; k < c.size(); ++k) {
    uct_iov_t iov{tx.buf.data() + k * kLen, kLen, tx.memh, 0, 1};
    ASSERT_EQ(UCS_INPROGRESS, uct_ep_put_zcopy(ep, &iov, 1, w.buf + k * kLen, rk.rkey, &c[k].c)) << "put " << k;
  }
  uint64_t v = 1;
  EXPECT_EQ(UCS_ERR_NO_RESOURCE, uct_ep_put_short(ep, &v, sizeof(v), w.buf, rk.rkey)) << "four requests fill the queue";
  auto t0 = std::chrono::steady_clock::now();
  while (std::any_of(c.begin(), c.end(), [](const Comp& x) { return x.calls == 0; })) {
    tx.progress();
    rx.progress();
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << "puts never complete";
  }
  for (const Comp& x : c) {
    EXPECT_EQ(1, x.calls);
    EXPECT_EQ(UCS_OK, x.c.status);
  }
  EXPECT_EQ(0, std::memcmp(tx.buf.data(), rx.buf.data(), kBuf));
  uct_rkey_release(tx.comp, &rk);
  uct_ep_destroy(ep);
  tx.close();
  rx.close();
}

// Buffers a UCT user allocates through the interface (as ucx_perftest does) come from the MD:
// shared file mappings, registered, that zcopy RMA moves in both directions; they are released
// with uct_iface_mem_free, never by deregistration.
TEST(SrdMemAlloc, InterfaceBuffersComeFromTheMdAndCarryZcopyRma) {
  Side tx, rx;
  tx.open();
  rx.open();
  uct_md_attr_t ma;
  ASSERT_EQ(UCS_OK, uct_md_query(tx.md, &ma));
  EXPECT_TRUE(ma.cap.flags & UCT_MD_FLAG_ALLOC);
  EXPECT_TRUE(ma.cap.alloc_mem_types & UCS_BIT(UCS_MEMORY_TYPE_HOST));
  constexpr size_t kLen = (1 << 20) + 100;  // not a page multiple: the MD rounds up
  uct_allocated_memory_t a{}, b{};
  ASSERT_EQ(UCS_OK, uct_iface_mem_alloc(tx.iface, kLen, UCT_MD_MEM_ACCESS_ALL, "test", &a));
  ASSERT_EQ(UCS_OK, uct_iface_mem_alloc(rx.iface, kLen, UCT_MD_MEM_ACCESS_ALL, "test", &b));
  EXPECT_EQ(UCT_ALLOC_METHOD_MD, a.method);
  EXPECT_EQ(UCT_ALLOC_METHOD_MD, b.method);
  EXPECT_GE(a.length, kLen);
  ASSERT_NE(nullptr, a.memh);
  auto* src = static_cast<uint8_t*>(a.address);
  auto* dst = static_cast<uint8_t*>(b.address);
  fill_pattern(src, kLen, 11);
  std::memset(dst, 0, kLen);
  uct_ep_h ep = connect_pair(&tx, &rx);
  ASSERT_NE(nullptr, ep);
  std::vector<uint8_t> packed(ma.rkey_packed_size);
  ASSERT_EQ(UCS_OK, uct_md_mkey_pack(rx.md, b.memh, packed.data()));
  uct_rkey_bundle_t rk;
  ASSERT_EQ(UCS_OK, uct_rkey_unpack(tx.comp, packed.data(), &rk));
  auto wait = [&](Comp* c) {
    auto t0 = std::chrono::steady_clock::now();
    while (c->calls == 0) {
      tx.progress();
      rx.progress();
      ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << "no completion";
    }
    EXPECT_EQ(UCS_OK, c->c.status);
  };
  uct_iov_t iov{src, kLen, a.memh, 0, 1};
  if (tx.attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY) {
    Comp c;
    ucs_status_t st;
    while ((st = uct_ep_put_zcopy(ep, &iov, 1, reinterpret_cast<uintptr_t>(dst), rk.rkey, &c.c)) ==
           UCS_ERR_NO_RESOURCE)
      tx.progress();
    ASSERT_EQ(UCS_INPROGRESS, st);
    wait(&c);
    EXPECT_EQ(0, std::memcmp(src, dst, kLen));
  }
  if (tx.attr.cap.flags & UCT_IFACE_FLAG_GET_ZCOPY) {
    fill_pattern(dst, kLen, 29);
    Comp c;
    ucs_status_t st;
    while ((st = uct_ep_get_zcopy(ep, &iov, 1, reinterpret_cast<uintptr_t>(dst), rk.rkey, &c.c)) ==
           UCS_ERR_NO_RESOURCE)
      tx.progress();
    ASSERT_EQ(UCS_INPROGRESS, st);
    wait(&c);
    EXPECT_EQ(0, std::memcmp(src, dst, kLen));
  }
  // Allocated memory is freed, not deregistered; registered memory is not the MD's to free.
  EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_md_mem_dereg(tx.md, a.memh));
  uct_rkey_release(tx.comp, &rk);
  uct_ep_destroy(ep);
  uct_iface_mem_free(&a);
  uct_iface_mem_free(&b);
  tx.close();
  rx.close();
}

// uct_iface_progress counts the active messages it delivered, as UCT's progress contract says
// (a caller that progresses while the count is non-zero, or sleeps once it is zero, relies on it).
TEST(SrdProgress, ProgressCountsTheActiveMessagesItDelivers) {
  Side tx, rx;
  tx.open();
  rx.open();
  AmSeen seen;
  ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(rx.iface, kAmId, peer_am, &seen, 0));
  uct_ep_h ep = connect_pair(&tx, &rx);
  ASSERT_NE(nullptr, ep);
  constexpr uint64_t kAms = 5;
  for (uint64_t i = 0; i < kAms; ++i) {
    ucs_status_t st;
    while ((st = uct_ep_am_short(ep, kAmId, i, nullptr, 0)) == UCS_ERR_NO_RESOURCE) tx.progress();
    ASSERT_EQ(UCS_OK, st);
  }
  unsigned counted = 0;
  auto t0 = std::chrono::steady_clock::now();
  while (seen.count < kAms) {
    tx.progress();
    counted += uct_iface_progress(rx.iface);
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << "AMs not delivered";
  }
  EXPECT_GE(counted, kAms);
  for (void* d : seen.kept) uct_iface_release_desc(d);
  uct_ep_destroy(ep);
  tx.close();
  rx.close();
}

// Resident memory of this process, in bytes.
size_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<size_t>(sysconf(_SC_PAGESIZE)) : 0;
}

struct Hello {  // what each sender puts in its AM, and the hub's answer
  uint32_t index;
  uint32_t magic;
};

struct HubSeen {
  std::vector<int> from;  // AMs seen per sender index
  uint32_t bad = 0;
};

ucs_status_t hub_am(void* arg, void* data, size_t length, unsigned) {
  auto* h = static_cast<HubSeen*>(arg);
  Hello m{};
  if (length != sizeof(m)) return h->bad++, UCS_OK;
  std::memcpy(&m, data, sizeof(m));
  if (m.magic != 0x48454c4fu || m.index >= h->from.size()) return h->bad++, UCS_OK;
  h->from[m.index]++;
  return UCS_OK;
}

ucs_status_t leaf_am(void* arg, void* data, size_t length, unsigned) {
  Hello m{};
  if (length == sizeof(m)) std::memcpy(&m, data, sizeof(m));
  *static_cast<uint32_t*>(arg) = m.magic == 0x57454c43u ? m.index + 1 : 0xffffffffu;
  return UCS_OK;
}

// More peers than the table had room for at first (and than the 128 it used to be fixed at):
// 200 interfaces of this process each connect to one hub and send it an AM, and the hub answers
// each over its own endpoint. The hub's table grows as the senders come; each interface costs
// little resident memory until it is used, since buffers are reserved, not filled.
TEST(SrdLimits, PeerTableGrowsPastItsStartFor200Peers) {
  constexpr uint32_t kLeaves = 200;
  Side hub;
  hub.open();
  ASSERT_GE(hub.attr.max_num_eps, kLeaves);
  HubSeen seen;
  seen.from.assign(kLeaves, 0);
  ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(hub.iface, kAmId, hub_am, &seen, 0));
  const Wire hw = hub.wire();
  uct_iface_config_t* ic;
  ASSERT_EQ(UCS_OK, uct_md_iface_config_read(hub.md, "srd", nullptr, nullptr, &ic));
  std::vector<uct_iface_h> leaves(kLeaves, nullptr);
  std::vector<uct_ep_h> to_hub(kLeaves, nullptr), to_leaf(kLeaves, nullptr);
  std::vector<uint32_t> answered(kLeaves, 0);
  const size_t rss0 = rss_bytes();
  size_t per_iface = 0;
  for (uint32_t i = 0; i < kLeaves; ++i) {
    uct_iface_params_t p{};
    p.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE;
    p.open_mode = UCT_IFACE_OPEN_MODE_DEVICE;
    p.mode.device.tl_name = "srd";
    p.mode.device.dev_name = hub.dev.c_str();
    ASSERT_EQ(UCS_OK, uct_iface_open(hub.md, hub.worker, &p, ic, &leaves[i])) << "interface " << i;
    uct_iface_progress_enable(leaves[i], UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(leaves[i], kAmId, leaf_am, &answered[i], 0));
    uct_ep_params_t ep{};
    ep.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR | UCT_EP_PARAM_FIELD_IFACE_ADDR;
    ep.iface = leaves[i];
    ep.dev_addr = reinterpret_cast<const uct_device_addr_t*>(hw.dev_addr);
    ep.iface_addr = reinterpret_cast<const uct_iface_addr_t*>(hw.iface_addr);
    ASSERT_EQ(UCS_OK, uct_ep_create(&ep, &to_hub[i]));
    if (i + 1 == 16) {
      per_iface = (rss_bytes() - rss0) / 16;
      std::printf("resident memory per interface (16 opened, connected, idle): %zu KiB\n", per_iface >> 10);
      // A fixed table of 128 peers filled ~40 MiB of receive buffers per interface.
      EXPECT_LT(per_iface, size_t{8} << 20);
    }
  }
  uct_config_release(ic);
  // Every leaf says hello; the hub, whose table grows as they come, sees each once.
  auto t0 = std::chrono::steady_clock::now();
  for (uint32_t i = 0; i < kLeaves; ++i) {
    const Hello m{i, 0x48454c4fu};
    uint64_t hdr;
    std::memcpy(&hdr, &m, sizeof(hdr));
    ucs_status_t st;
    while ((st = uct_ep_am_short(to_hub[i], kAmId, hdr, nullptr, 0)) == UCS_ERR_NO_RESOURCE) {
      hub.progress();
      ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60)) << "leaf " << i << " cannot send";
    }
    ASSERT_EQ(UCS_OK, st) << "leaf " << i;
  }
  auto all_seen = [&] {
    return std::all_of(seen.from.begin(), seen.from.end(), [](int n) { return n == 1; });
  };
  while (!all_seen()) {
    hub.progress();
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60))
        << std::count(seen.from.begin(), seen.from.end(), 0) << " leaves not heard";
  }
  EXPECT_EQ(0u, seen.bad);
  // The hub answers each leaf: its endpoints use the peers the table grew to hold.
  for (uint32_t i = 0; i < kLeaves; ++i) {
    Wire lw{};
    uct_iface_attr_t la;
    ASSERT_EQ(UCS_OK, uct_iface_query(leaves[i], &la));
    ASSERT_EQ(UCS_OK, uct_iface_get_device_address(leaves[i], reinterpret_cast<uct_device_addr_t*>(lw.dev_addr)));
    ASSERT_EQ(UCS_OK, uct_iface_get_address(leaves[i], reinterpret_cast<uct_iface_addr_t*>(lw.iface_addr)));
    uct_ep_params_t ep{};
    ep.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR | UCT_EP_PARAM_FIELD_IFACE_ADDR;
    ep.iface = hub.iface;
    ep.dev_addr = reinterpret_cast<const uct_device_addr_t*>(lw.dev_addr);
    ep.iface_addr = reinterpret_cast<const uct_iface_addr_t*>(lw.iface_addr);
    ASSERT_EQ(UCS_OK, uct_ep_create(&ep, &to_leaf[i])) << "hub endpoint " << i;
    const Hello m{i, 0x57454c43u};
    uint64_t hdr;
    std::memcpy(&hdr, &m, sizeof(hdr));
    ucs_status_t st;
    while ((st = uct_ep_am_short(to_leaf[i], kAmId, hdr, nullptr, 0)) == UCS_ERR_NO_RESOURCE) {
      hub.progress();
      ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60)) << "hub cannot answer " << i;
    }
    ASSERT_EQ(UCS_OK, st) << "answer " << i;
  }
  for (uint32_t i = 0; i < kLeaves; ++i) {
    while (answered[i] == 0) {
      hub.progress();
      ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60)) << "leaf " << i << " not answered";
    }
    EXPECT_EQ(i + 1, answered[i]);
  }
  for (uct_ep_h e : to_leaf) uct_ep_destroy(e);
  for (uct_ep_h e : to_hub) uct_ep_destroy(e);
  for (uct_iface_h l : leaves) uct_iface_close(l);
  hub.close();
}

}  // namespace

int main(int argc, char** argv) {
  // Both processes share the emulated fabric; a key of this run keeps parallel tests apart.
  setenv("FI_EFA_EMU_FABRIC", "shm", 0);
  setenv("FI_EFA_EMU_FABRIC_KEY", ("uct-" + std::to_string(getpid())).c_str(), 0);
  const char* lib = std::getenv("XPUFAB_UCT_LIB");
  if (lib == nullptr || dlopen(lib, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    std::fprintf(stderr, "cannot load %s: %s\n", lib ? lib : "(XPUFAB_UCT_LIB unset)", dlerror());
    return 1;
  }
  if (argc == 3 && std::string(argv[1]) == "--uct-peer") peer_main(std::atoi(argv[2]));
  if (argc == 3 && std::string(argv[1]) == "--uct-sa-server") sa_server_main(std::atoi(argv[2]));
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
