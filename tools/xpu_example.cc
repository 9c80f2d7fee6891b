// The fi_xpu(3) flow end to end: two XPU endpoints on the emulated EFA device, set up by host code
// in 14 steps, driven by kernels on the host XPU (one work-group of 32 work-items per launch):
//   send with counter completion, receive with XPU CQ polling,
//   RDMA write and read with the data verified,
//   an error completion (RDMA write with a bad key) read through fi_xpu_cq_readerr.
// Prints what moved, how many completions were read and how long each part took (measured).
//   xpu_example [bytes_per_work_item [timed_launches]]   (defaults 4096, at most the MTU, and 20)
// Exit status 0 when every check passed, 2 when the device lacks a capability the example needs
// (RDMA write/read, XPU endpoints, CQs, counters), 1 on any other failure.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_xpu.h>
#include <rdma/fi_xpu_device.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "device/runtime/host_xpu.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kItems = 32;  // work-items per launch (one work-group)

#define CHECK(expr)                                                                            \
  do {                                                                                         \
    long long rc_ = static_cast<long long>(expr);                                              \
    if (rc_ < 0) {                                                                             \
      fprintf(stderr, "%s:%d: %s = %lld (%s)\n", __FILE__, __LINE__, #expr, rc_,               \
              fi_strerror(static_cast<int>(-rc_)));                                            \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

#define EXPECT(cond, ...)            \
  do {                               \
    if (!(cond)) {                   \
      fprintf(stderr, "FAILED: ");   \
      fprintf(stderr, __VA_ARGS__);  \
      fprintf(stderr, "\n");         \
      return 1;                      \
    }                                \
  } while (0)

// "Device memory" for FI_HMEM_SYSTEM: host memory, imports are identity maps. The application
// owns these callbacks (step 4) and uses the same allocator to copy handles to the device.
int dev_alloc(uint64_t, uint64_t size, uint64_t align, uint64_t, void** addr, int* fd, uint64_t* off) {
  void* p = nullptr;
  if (posix_memalign(&p, align < 64 ? 64 : align, size ? size : 1)) return -FI_ENOMEM;
  *addr = p;
  if (fd) *fd = -1;
  if (off) *off = 0;
  return 0;
}
int dev_import(uint64_t, void* host, uint64_t, uint64_t, void** dev) {
  *dev = host;
  return 0;
}
void dev_free(uint64_t, void* p) { free(p); }

template <typename T>
T* copy_to_device(const T& v) {
  void* p = nullptr;
  if (dev_alloc(0, sizeof(T), 64, 0, &p, nullptr, nullptr)) return nullptr;
  memcpy(p, &v, sizeof(T));
  return static_cast<T*>(p);
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// When the parts of one launch ended, as its work-group's leader saw them.
struct Marks {
  Clock::time_point started, posted, counted, reaped;
};

// One timed launch, in milliseconds: from the host's launch() call to the first work-item's
// start, posting (WQEs written, doorbell rung), waiting for the NIC (until the counter said done),
// reading the completions, and from the last work-item's end back to the host.
struct Phases {
  double start, post, nic, reap, exit, total;
};

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double cpu_ms(int who) {
  rusage u{};
  getrusage(who, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

struct Timed {
  std::vector<Phases> runs;
  double cpu_ms_launcher = 0;  // per launch, the launching thread (it runs the whole work-group)
  double cpu_ms_others = 0;    // per launch, every other thread of the process

  double median(double Phases::*part) const {
    std::vector<double> v;
    for (const Phases& p : runs) v.push_back(p.*part);
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
  double slowest() const {
    double m = 0;
    for (const Phases& p : runs) m = std::max(m, p.total);
    return m;
  }
};

// Runs `kernel` `launches` times back to back, timing each and the CPU they took.
template <typename Kernel>
int time_launches(const xpufab::runtime::LaunchConfig& cfg, const Kernel& kernel, uint32_t launches,
                  const Marks* marks, Timed* out) {
  const double thread0 = cpu_ms(RUSAGE_THREAD), self0 = cpu_ms(RUSAGE_SELF);
  for (uint32_t r = 0; r < launches; ++r) {
    const auto called = Clock::now();
    int rc = xpufab::runtime::launch(cfg, kernel);
    const auto returned = Clock::now();
    if (rc != 0) return rc;
    const Marks& m = *marks;
    out->runs.push_back(Phases{ms_between(called, m.started), ms_between(m.started, m.posted),
                               ms_between(m.posted, m.counted), ms_between(m.counted, m.reaped),
                               ms_between(m.reaped, returned), ms_between(called, returned)});
  }
  const double thread = cpu_ms(RUSAGE_THREAD) - thread0, self = cpu_ms(RUSAGE_SELF) - self0;
  out->cpu_ms_launcher = thread / launches;
  out->cpu_ms_others = (self - thread) / launches;
  return 0;
}

// The device-side view of one endpoint.
struct DevEp {
  fid_xpu_ep* ep;
  fid_xpu_cq* cq;
  fid_xpu_cntr* cntr;
};

int run(size_t bytes, uint32_t launches) {
  const int wg = FI_XPU_WORK_GROUP;
  xpufab::runtime::LaunchConfig cfg;
  cfg.grid = 1;
  cfg.workgroup_size = kItems;
  cfg.subgroup_size = 32;
  CHECK(xpufab::runtime::validate_launch(cfg));
  const auto t_setup = Clock::now();

  // 1. Ask for an efa-direct RDM endpoint with FI_XPU and raw MR descriptors.
  fi_info* hints = fi_allocinfo();
  hints->caps = FI_MSG | FI_RMA | FI_XPU;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                FI_MR_XPU_DESC;
  hints->fabric_attr->prov_name = strdup("efa");
  fi_info* info = nullptr;
  CHECK(fi_getinfo(FI_VERSION(2, 7), nullptr, nullptr, 0, hints, &info));
  fi_freeinfo(hints);
  printf("step  1: fi_getinfo: provider %s, fabric %s, domain %s\n", info->fabric_attr->prov_name,
         info->fabric_attr->name, info->domain_attr->name);
  // The hints ask for FI_RMA without directions; the directions the device really has are those
  // left in the transmit caps. Older devices (and rdma-core v44) have RDMA read but no write.
  const uint64_t tx_caps = info->tx_attr ? info->tx_attr->caps : 0;
  for (uint64_t need : {FI_WRITE, FI_READ}) {
    if (!(info->caps & need) && !(tx_caps & need)) {
      fprintf(stderr,
              "xpu_example: domain %s does not offer RDMA %s (fi_getinfo caps lack %s); this "
              "example needs RDMA write and read (emulator: FI_EFA_EMU_PROFILE=gen3 or newer)\n",
              info->domain_attr->name, need == FI_WRITE ? "write" : "read",
              need == FI_WRITE ? "FI_WRITE" : "FI_READ");
      fi_freeinfo(info);
      return 2;
    }
  }
  // 2. Fabric and 3. domain.
  fid_fabric* fabric;
  fid_domain* domain;
  CHECK(fi_fabric(info->fabric_attr, &fabric, nullptr));
  printf("step  2: fi_fabric\n");
  CHECK(fi_domain(fabric, info, &domain, nullptr));
  printf("step  3: fi_domain\n");
  // 4. An XPU context with the application's memory callbacks.
  fi_xpu_ops ops{sizeof(fi_xpu_ops), dev_alloc, dev_import, dev_free};
  fi_xpu_attr xattr{};
  xattr.iface = FI_HMEM_SYSTEM;
  xattr.device = 0;
  xattr.ops = &ops;
  fid_xpu_ctx* ctx;
  CHECK(fi_xpu_ctx(domain, &xattr, &ctx, nullptr));
  printf("step  4: fi_xpu_ctx (FI_HMEM_SYSTEM, host XPU)\n");
  // 5. What the context can export and how big raw addresses and descriptors are.
  fi_xpu_ctx_attr cattr{};
  CHECK(fi_xpu_ctx_query(ctx, &cattr));
  printf("step  5: fi_xpu_ctx_query: caps%s%s%s, av_addr_size %zu, mr_desc_size %zu\n",
         (cattr.caps & FI_XPU_CAP_EP) ? " EP" : "", (cattr.caps & FI_XPU_CAP_CQ) ? " CQ" : "",
         (cattr.caps & FI_XPU_CAP_CNTR) ? " CNTR" : "", cattr.av_addr_size, cattr.mr_desc_size);
  if ((cattr.caps & (FI_XPU_CAP_EP | FI_XPU_CAP_CQ | FI_XPU_CAP_CNTR)) !=
      (FI_XPU_CAP_EP | FI_XPU_CAP_CQ | FI_XPU_CAP_CNTR)) {
    fprintf(stderr,
            "xpu_example: the XPU context lacks%s%s%s (fi_xpu_ctx_query); this example needs XPU "
            "endpoints, CQs and completion counters\n",
            (cattr.caps & FI_XPU_CAP_EP) ? "" : " FI_XPU_CAP_EP",
            (cattr.caps & FI_XPU_CAP_CQ) ? "" : " FI_XPU_CAP_CQ",
            (cattr.caps & FI_XPU_CAP_CNTR) ? "" : " FI_XPU_CAP_CNTR");
    return 2;
  }
  // 6. One AV for both endpoints.
  fi_av_attr aattr{};
  aattr.type = FI_AV_TABLE;
  fid_av* av;
  CHECK(fi_av_open(domain, &aattr, &av, nullptr));
  printf("step  6: fi_av_open\n");
  // 7. XPU CQs and 8. XPU counters (as in the man page, xpu_ctx is set; FI_XPU in flags is optional).
  fid_cq* cq[2];
  fid_cntr* cntr[2];
  for (int i = 0; i < 2; ++i) {
    fi_cq_attr ca{};
    ca.format = FI_CQ_FORMAT_DATA;
    ca.xpu_ctx = ctx;
    CHECK(fi_cq_open(domain, &ca, &cq[i], nullptr));
  }
  printf("step  7: fi_cq_open x2 (FI_CQ_FORMAT_DATA, xpu_ctx)\n");
  for (int i = 0; i < 2; ++i) {
    fi_cntr_attr na{};
    na.events = FI_CNTR_EVENTS_COMP;
    na.xpu_ctx = ctx;
    CHECK(fi_cntr_open(domain, &na, &cntr[i], nullptr));
  }
  printf("step  8: fi_cntr_open x2 (xpu_ctx)\n");
  // 9. XPU endpoints, 10. bound and enabled.
  fid_ep* ep[2];
  fi_info* epinfo = fi_dupinfo(info);
  epinfo->ep_attr->xpu_ctx = ctx;
  for (int i = 0; i < 2; ++i) CHECK(fi_endpoint2(domain, epinfo, &ep[i], FI_XPU, nullptr));
  fi_freeinfo(epinfo);
  printf("step  9: fi_endpoint2(FI_XPU) x2\n");
  for (int i = 0; i < 2; ++i) {
    CHECK(fi_ep_bind(ep[i], &av->fid, 0));
    CHECK(fi_ep_bind(ep[i], &cq[i]->fid, FI_TRANSMIT | FI_RECV));
    CHECK(fi_ep_bind(ep[i], &cntr[i]->fid, FI_SEND | FI_WRITE | FI_READ));
    CHECK(fi_enable(ep[i]));
  }
  printf("step 10: fi_ep_bind (AV, CQ, counter) and fi_enable x2\n");
  // 11. Memory: one buffer per endpoint, registered, with its raw descriptor.
  const size_t total = bytes * kItems;
  std::vector<uint8_t> buf[2] = {std::vector<uint8_t>(total), std::vector<uint8_t>(total)};
  std::vector<uint8_t> back(total);
  fid_mr* mr[3];
  efa_xpu_desc desc[3];
  const uint64_t access = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  uint8_t* bases[3] = {buf[0].data(), buf[1].data(), back.data()};
  for (int i = 0; i < 3; ++i) {
    CHECK(fi_mr_reg(domain, bases[i], total, access, 0, 0, 0, &mr[i], nullptr));
    size_t len = sizeof(desc[i]);
    CHECK(fi_mr_get_xpu_desc(mr[i], &desc[i], &len, FI_XPU, ctx));
  }
  printf("step 11: fi_mr_reg x3 (%zu B each) and fi_mr_get_xpu_desc\n", total);
  // 12. Peer addresses into the AV, and their raw form for the device.
  fi_addr_t addr[2];
  efa_xpu_peer peer[2];
  for (int i = 0; i < 2; ++i) {
    char name[64];
    size_t len = sizeof(name);
    CHECK(fi_getname(&ep[i]->fid, name, &len));
    EXPECT(fi_av_insert(av, name, 1, &addr[i], 0, nullptr) == 1, "fi_av_insert");
  }
  for (int i = 0; i < 2; ++i) {
    size_t len = sizeof(peer[i]);
    CHECK(fi_av_lookup2(av, addr[i], &peer[i], &len, FI_XPU, ctx));
  }
  printf("step 12: fi_av_insert x2 and fi_av_lookup2(FI_XPU)\n");
  // 13. Export EPs, CQs and counters; copy handles, addresses and descriptors to the device.
  DevEp dev[2];
  efa_xpu_peer* dpeer[2];
  efa_xpu_desc* ddesc[3];
  for (int i = 0; i < 2; ++i) {
    fid_xpu_ep he;
    fid_xpu_cq hc;
    fid_xpu_cntr hn;
    CHECK(fi_ep_export_xpu(ep[i], 0, &he));
    CHECK(fi_cq_export_xpu(cq[i], 0, &hc));
    CHECK(fi_cntr_export_xpu(cntr[i], 0, &hn));
    dev[i] = DevEp{copy_to_device(he), copy_to_device(hc), copy_to_device(hn)};
    dpeer[i] = copy_to_device(peer[i]);
    EXPECT(dev[i].ep && dev[i].cq && dev[i].cntr && dpeer[i], "device copies");
  }
  for (int i = 0; i < 3; ++i) ddesc[i] = copy_to_device(desc[i]);
  printf("step 13: fi_{ep,cq,cntr}_export_xpu x2, handles copied to device memory\n");
  printf("         setup took %.3f ms\n", ms_since(t_setup));

  // 14. Kernels on the host XPU.
  printf("step 14: kernels on the host XPU, 1 work-group x %u work-items, scope FI_XPU_WORK_GROUP\n",
         kItems);
  for (size_t i = 0; i < total; ++i) buf[0][i] = static_cast<uint8_t>(i * 31 + (i >> 12));
  std::atomic<int> bad{0};
  std::atomic<uint64_t> completions{0};
  uint64_t moved = 0;
  auto reap = [&](fid_xpu_cq* q, fi_cq_data_entry* entries, uint32_t want, uint64_t flags_want) {
    // Collective: every member gets the same counts, so the loop ends together.
    uint32_t got = 0;
    for (long polls = 0; got < want && polls < 50000000; ++polls) {
      int64_t n = fi_xpu_cq_read(q, entries + got, want - got, wg);
      if (n == -FI_EAGAIN) {
        xpu_relax();
        continue;
      }
      if (n < 0) {
        bad++;
        break;
      }
      got += static_cast<uint32_t>(n);
    }
    if (xpu_scope_is_leader(wg)) {
      completions += got;
      for (uint32_t i = 0; i < got; ++i) bad += (entries[i].flags & flags_want) != flags_want;
      if (got != want) bad++;
    }
  };

  // (a) Send with counter completion, receive with XPU CQ polling.
  std::vector<fi_cq_data_entry> rx_entries(kItems), tx_entries(kItems);
  auto t = Clock::now();
  CHECK(xpufab::runtime::launch(cfg, [&](const xpufab::runtime::WorkItem& it) {
    const uint32_t i = it.local_id;
    if (fi_xpu_recv(dev[1].ep, buf[1].data() + i * bytes, bytes, ddesc[1], nullptr,
                    reinterpret_cast<void*>(uintptr_t{i} + 1), 0, wg) != 0)
      bad++;
  }));
  CHECK(xpufab::runtime::launch(cfg, [&](const xpufab::runtime::WorkItem& it) {
    const uint32_t i = it.local_id;
    const uint64_t before = fi_xpu_cntr_read(dev[0].cntr, wg);
    if (fi_xpu_send(dev[0].ep, buf[0].data() + i * bytes, bytes, ddesc[0], i, dpeer[1], nullptr,
                    FI_REMOTE_CQ_DATA, wg) != 0)
      bad++;
    fi_xpu_cntr_wait(dev[0].cntr, before + kItems, 5000, wg);
    if (fi_xpu_cntr_read(dev[0].cntr, wg) < before + kItems) bad++;
    // The counter said done; reading the CQ gives the SQ slots back.
    reap(dev[0].cq, tx_entries.data(), kItems, FI_MSG | FI_SEND);
  }));
  CHECK(xpufab::runtime::launch(cfg, [&](const xpufab::runtime::WorkItem&) {
    reap(dev[1].cq, rx_entries.data(), kItems, FI_MSG | FI_RECV | FI_REMOTE_CQ_DATA);
  }));
  double ms = ms_since(t);
  int seen[kItems] = {};
  for (const auto& e : rx_entries) {
    if (e.data >= kItems || e.len != bytes) {
      bad++;
      continue;
    }
    seen[e.data]++;
    // The receive buffer of this completion holds the message of sender e.data.
    if (memcmp(e.buf, buf[0].data() + e.data * bytes, bytes) != 0) bad++;
  }
  for (int s : seen) bad += s != 1;
  EXPECT(bad.load() == 0, "send/recv");
  moved += total;
  printf("  send/recv:  %u x %zu B = %zu B, counter reached %llu, %u send + %u receive completions "
         "read on the XPU, data verified, %.3f ms\n",
         kItems, bytes, total, static_cast<unsigned long long>(fi_xpu_cntr_read(dev[0].cntr, FI_XPU_WORK_ITEM)),
         kItems, kItems, ms);

  // (b) RDMA write into endpoint 1's buffer, then RDMA read it back into a third buffer.
  for (size_t i = 0; i < total; ++i) buf[0][i] = static_cast<uint8_t>(i * 17 + 5);
  memset(buf[1].data(), 0, total);
  const uint64_t remote = reinterpret_cast<uintptr_t>(buf[1].data());
  const uint64_t key = fi_mr_key(mr[1]);
  // The group's leader notes when each part of a launch ended (the other work-items are in the
  // same collective calls, so the leader's times are the group's).
  Marks marks;
  auto mark = [&](Clock::time_point* at) {
    if (xpu_scope_is_leader(wg)) *at = Clock::now();
  };
  auto write_kernel = [&](const xpufab::runtime::WorkItem& it) {
    const uint32_t i = it.local_id;
    mark(&marks.started);
    const uint64_t before = fi_xpu_cntr_read(dev[0].cntr, wg);
    if (fi_xpu_write(dev[0].ep, buf[0].data() + i * bytes, bytes, ddesc[0], 0, dpeer[1], remote + i * bytes,
                     key, nullptr, 0, wg) != 0)
      bad++;
    mark(&marks.posted);
    fi_xpu_cntr_wait(dev[0].cntr, before + kItems, 5000, wg);
    mark(&marks.counted);
    reap(dev[0].cq, tx_entries.data(), kItems, FI_RMA | FI_WRITE);
    mark(&marks.reaped);
  };
  auto read_kernel = [&](const xpufab::runtime::WorkItem& it) {
    const uint32_t i = it.local_id;
    mark(&marks.started);
    if (fi_xpu_read(dev[0].ep, back.data() + i * bytes, bytes, ddesc[2], dpeer[1], remote + i * bytes, key,
                    nullptr, 0, wg) != 0)
      bad++;
    mark(&marks.posted);
    marks.counted = marks.posted;  // no counter wait: the reads complete while the CQ is polled
    reap(dev[0].cq, tx_entries.data(), kItems, FI_RMA | FI_READ);
    mark(&marks.reaped);
  };
  t = Clock::now();
  CHECK(xpufab::runtime::launch(cfg, write_kernel));
  const double ms_write = ms_since(t);
  EXPECT(memcmp(buf[0].data(), buf[1].data(), total) == 0, "RDMA write data");
  t = Clock::now();
  CHECK(xpufab::runtime::launch(cfg, read_kernel));
  const double ms_read = ms_since(t);
  EXPECT(bad.load() == 0, "RDMA write/read");
  EXPECT(memcmp(back.data(), buf[1].data(), total) == 0, "RDMA read data");
  moved += 2 * total;
  // The first launch of each kind also pays for the emulated NIC waking from idle (it naps when
  // nothing was posted for a while); back-to-back launches show the steady rate.
  const uint64_t completions_before = completions.load();
  Timed timed_write, timed_read;
  CHECK(time_launches(cfg, write_kernel, launches, &marks, &timed_write));
  CHECK(time_launches(cfg, read_kernel, launches, &marks, &timed_read));
  EXPECT(bad.load() == 0, "repeated RDMA write/read");
  EXPECT(completions.load() - completions_before == 2u * launches * kItems, "repeated completions");
  completions.store(completions_before);
  EXPECT(memcmp(back.data(), buf[0].data(), total) == 0, "repeated RDMA write/read data");
  auto mbps = [&](double ms) { return total / 1e3 / (ms > 0 ? ms : 1e-3); };
  printf("  rdma write: %zu B written, %u completions, data verified, %.3f ms (%.1f MB/s)\n", total, kItems,
         ms_write, mbps(ms_write));
  printf("  rdma read:  %zu B read back, %u completions, data verified, %.3f ms (%.1f MB/s)\n", total, kItems,
         ms_read, mbps(ms_read));
  const double wm = timed_write.median(&Phases::total), rm = timed_read.median(&Phases::total);
  printf("  steady:     %u more launches each, all completions read, data verified; median per %zu B launch: write %.3f ms "
         "(%.1f MB/s), read %.3f ms (%.1f MB/s); the first of each above includes the NIC waking up\n",
         launches, total, wm, mbps(wm), rm, mbps(rm));
  printf("              each timed on the host from launch() to its return: 1 work-group of %u work-items on one "
         "thread, each posting one %zu B operation; the group rings one doorbell\n",
         kItems, bytes);
  printf("              write, medians: to work-item 0 %.3f ms, posting %.3f ms, NIC until the counter reached %u "
         "%.3f ms, reading the completions %.3f ms, back to the host %.3f ms\n",
         timed_write.median(&Phases::start), timed_write.median(&Phases::post), kItems,
         timed_write.median(&Phases::nic), timed_write.median(&Phases::reap), timed_write.median(&Phases::exit));
  printf("              read, medians:  to work-item 0 %.3f ms, posting %.3f ms, NIC and reading the completions "
         "%.3f ms, back to the host %.3f ms\n",
         timed_read.median(&Phases::start), timed_read.median(&Phases::post), timed_read.median(&Phases::reap),
         timed_read.median(&Phases::exit));
  // Means, so a few slow launches (a retransmission timeout, the NIC or the launching thread
  // preempted on a busy machine) weigh in: the slowest launch is shown beside them.
  printf("              CPU per launch (getrusage): write %.3f ms on the launching thread + %.3f ms on the "
         "process's other threads (the emulated NIC), read %.3f ms + %.3f ms; slowest launch: write %.3f ms, "
         "read %.3f ms\n",
         timed_write.cpu_ms_launcher, timed_write.cpu_ms_others, timed_read.cpu_ms_launcher,
         timed_read.cpu_ms_others, timed_write.slowest(), timed_read.slowest());

  // (c) A write with a bad key: the error completion comes out of fi_xpu_cq_readerr.
  void* err_ctx = reinterpret_cast<void*>(uintptr_t{0xe77});
  int64_t first = 0, got_err = 0;
  fi_cq_err_entry err{};
  t = Clock::now();
  CHECK(xpufab::runtime::launch(cfg, [&](const xpufab::runtime::WorkItem& it) {
    // Only work-item 0 posts; the group still reads the CQ together.
    if (it.local_id == 0 &&
        fi_xpu_write(dev[0].ep, buf[0].data(), 64, ddesc[0], 0, dpeer[1], remote, key ^ 0x40404, err_ctx, 0,
                     FI_XPU_WORK_ITEM) != 0)
      bad++;
    fi_cq_data_entry e;
    int64_t n = -FI_EAGAIN;
    for (long polls = 0; n == -FI_EAGAIN && polls < 50000000; ++polls) {
      n = fi_xpu_cq_read(dev[0].cq, &e, 1, wg);
      if (n == -FI_EAGAIN) xpu_relax();
    }
    int64_t r = n == -FI_EAVAIL ? fi_xpu_cq_readerr(dev[0].cq, &err, 0, wg) : 0;
    if (xpu_scope_is_leader(wg)) first = n, got_err = r;
  }));
  ms = ms_since(t);
  EXPECT(first == -FI_EAVAIL, "fi_xpu_cq_read returned %lld, expected -FI_EAVAIL", static_cast<long long>(first));
  EXPECT(got_err == 1, "fi_xpu_cq_readerr returned %lld", static_cast<long long>(got_err));
  EXPECT(err.op_context == err_ctx && err.flags == (FI_RMA | FI_WRITE) && err.err != 0, "error entry");
  completions += 1;
  char why[96];
  printf("  error:      fi_xpu_cq_read -> -FI_EAVAIL; fi_xpu_cq_readerr -> err %d (%s), prov_errno %d (%s), "
         "op_context %p, %.3f ms; error counter %llu\n",
         err.err, fi_strerror(err.err), err.prov_errno,
         fi_cq_strerror(cq[0], err.prov_errno, nullptr, why, sizeof(why)), err.op_context, ms,
         static_cast<unsigned long long>(fi_xpu_cntr_readerr(dev[0].cntr, FI_XPU_WORK_ITEM)));
  printf("total: %llu B moved, %llu completions read on the XPU, all data verified\n",
         static_cast<unsigned long long>(moved), static_cast<unsigned long long>(completions.load()));

  for (int i = 0; i < 2; ++i) {
    dev_free(0, dev[i].ep);
    dev_free(0, dev[i].cq);
    dev_free(0, dev[i].cntr);
    dev_free(0, dpeer[i]);
  }
  for (int i = 0; i < 3; ++i) {
    dev_free(0, ddesc[i]);
    CHECK(fi_close(&mr[i]->fid));
  }
  for (int i = 0; i < 2; ++i) CHECK(fi_close(&ep[i]->fid));
  for (int i = 0; i < 2; ++i) {
    CHECK(fi_close(&cq[i]->fid));
    CHECK(fi_close(&cntr[i]->fid));
  }
  CHECK(fi_close(&av->fid));
  CHECK(fi_close(&ctx->fid));
  CHECK(fi_close(&domain->fid));
  CHECK(fi_close(&fabric->fid));
  fi_freeinfo(info);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? strtoul(argv[1], nullptr, 0) : 4096;
  unsigned long launches = argc > 2 ? strtoul(argv[2], nullptr, 0) : 20;
  if (bytes == 0 || bytes > 8192 || launches == 0 || launches > 1000000) {
    fprintf(stderr, "usage: %s [bytes_per_work_item: 1..8192] [timed_launches: 1..1000000, default 20]\n",
            argv[0]);
    return 2;
  }
  if (!getenv("FI_EFA_BACKEND")) setenv("FI_EFA_BACKEND", "emu", 1);
  return run(bytes, static_cast<uint32_t>(launches));
}
