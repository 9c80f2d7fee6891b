// Applications that register no local memory: hints without FI_MR_LOCAL (Open MPI's transports ask
// this way, with FI_COMPLETION or FI_DELIVERY_COMPLETE as default flags and an FI_AV_MAP), through
// the public API. The protocol fabric copies their buffers: eager payloads through its bounce
// buffers, a rendezvous by a push whichever side gave no descriptor, RMA by packets. Two processes
// over shared memory, UDP, and shared memory with loss and reordering.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "testing/efa_fabric/env.h"
#include "testing/efa_fabric/group_util.h"

namespace xpufab::efa_fabric {
namespace {

constexpr size_t kNodeBuf = 8u << 20;
constexpr size_t kFourMiB = 4u << 20;

fi_info* unregistered_hints() {
  fi_info* h = fi_allocinfo();
  h->caps = FI_MSG | FI_TAGGED | FI_DIRECTED_RECV;
  h->mode = FI_CONTEXT | FI_CONTEXT2;
  h->ep_attr->type = FI_EP_RDM;
  h->tx_attr->op_flags = FI_COMPLETION;
  h->rx_attr->op_flags = FI_COMPLETION;
  h->tx_attr->msg_order = FI_ORDER_SAS;
  h->rx_attr->msg_order = FI_ORDER_SAS;
  h->domain_attr->mr_mode = 0;
  h->domain_attr->av_type = FI_AV_MAP;
  h->domain_attr->resource_mgmt = FI_RM_ENABLED;
  h->fabric_attr->prov_name = strdup("efa");
  return h;
}

TEST(UnregisteredOffer, CarriesMessagesOnlyWithTheFlagsAskedFor) {
  use_wire(Wire::kShm, "UnregisteredOffer");
  fi_info* h = unregistered_hints();
  fi_info* info = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 5), nullptr, nullptr, 0, h, &info), 0);
  EXPECT_STREQ(info->fabric_attr->name, "efa");
  EXPECT_EQ(info->domain_attr->mr_mode, 0);
  EXPECT_EQ(info->mode & FI_LOCAL_MR, 0u);
  EXPECT_EQ(info->caps & (FI_RMA | FI_ATOMIC | FI_XPU), 0u);
  EXPECT_EQ(info->caps & (FI_MSG | FI_TAGGED), FI_MSG | FI_TAGGED);
  EXPECT_EQ(info->tx_attr->op_flags, FI_COMPLETION);
  EXPECT_EQ(info->rx_attr->op_flags, FI_COMPLETION);
  EXPECT_EQ(info->domain_attr->av_type, FI_AV_MAP);
  // API 1.x reads mem_tag_format as the tag bits left to the application: all 64.
  EXPECT_EQ(info->ep_attr->mem_tag_format, 0xaaaaaaaaaaaaaaaaULL);
  fi_freeinfo(info);
  info = nullptr;
  // RMA names memory by its registration: without FI_MR_LOCAL nothing offers it.
  h->caps |= FI_RMA;
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 5), nullptr, nullptr, 0, h, &info), -FI_ENODATA);
  fi_freeinfo(h);
}

// Open MPI's one-sided transport asks this way: RMA and atomics, remote memory named by its
// registration, local buffers unregistered, completions once the data is at the target.
fi_info* one_sided_hints() {
  fi_info* h = unregistered_hints();
  h->caps = FI_RMA | FI_ATOMIC;
  h->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  h->rx_attr->op_flags = 0;
  h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  return h;
}

TEST(UnregisteredOffer, OneSidedKeepsRemoteKeysAndDeliversComplete) {
  use_wire(Wire::kShm, "UnregisteredOneSidedOffer");
  fi_info* h = one_sided_hints();
  fi_info* info = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 5), nullptr, nullptr, 0, h, &info), 0);
  EXPECT_STREQ(info->fabric_attr->name, "efa");
  EXPECT_EQ(info->domain_attr->mr_mode, FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY);
  EXPECT_EQ(info->caps & (FI_RMA | FI_ATOMIC), FI_RMA | FI_ATOMIC);
  EXPECT_EQ(info->caps & (FI_MSG | FI_TAGGED | FI_XPU), 0u);
  EXPECT_EQ(info->tx_attr->op_flags, FI_DELIVERY_COMPLETE);
  // Libfabric's numbering of provider versions: 2.7.0 is 207.0.
  EXPECT_EQ(info->fabric_attr->prov_version, FI_VERSION(207, 0));
  fi_freeinfo(info);
  info = nullptr;
  // Messages complete when sent: FI_DELIVERY_COMPLETE is not offered with them.
  h->caps |= FI_TAGGED;
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 5), nullptr, nullptr, 0, h, &info), -FI_ENODATA);
  fi_freeinfo(h);
}

class Unregistered : public ::testing::TestWithParam<Wire> {
 protected:
  // Runs `fn` in two processes; rank 0 receives, rank 1 sends.
  template <typename Fn>
  void pair(Fn fn, fi_info* (*hints)() = unregistered_hints) {
    use_wire(GetParam(), ::testing::UnitTest::GetInstance()->current_test_info()->name());
    const std::vector<int> st = run_group(2, 120, [&](Member& m) {
      Node n(kNodeBuf, hints());
      GROUP_CHECK(!(n.info()->domain_attr->mr_mode & FI_MR_LOCAL));
      Peers p = connect(m, n);
      m.set_idle([&n] { fi_cq_read(n.cq(), nullptr, 0); });
      fn(m, n, p.addr[1 - m.rank()], p.remote[1 - m.rank()]);
      m.barrier();
      m.set_idle(nullptr);
    });
    ASSERT_EQ(st.size(), 2u);
    EXPECT_EQ(st[0], 0) << "receiver";
    EXPECT_EQ(st[1], 0) << "sender";
  }
};

// Sizes on both sides of the eager limit; for each, which side gives a descriptor.
constexpr size_t kSizes[] = {1, 64, 8192, 65536, 1u << 20, kFourMiB};
enum Side { kNeither, kSenderOnly, kReceiverOnly };
constexpr Side kSides[] = {kNeither, kSenderOnly, kReceiverOnly};

TEST_P(Unregistered, EverySizeLandsWhicheverSideGaveNoDescriptor) {
  pair([](Member& m, Node& n, fi_addr_t peer, const Remote&) {
    // Heap memory no registration covers, and the node's registered buffer.
    std::vector<uint8_t> plain(kFourMiB);
    int ctx = 0;
    uint32_t seed = 1;
    for (Side side : kSides) {
      for (size_t len : kSizes) {
        const uint64_t tag = 0x100 + seed;
        if (m.rank() == 0) {
          const bool reg = side == kReceiverOnly;
          uint8_t* buf = reg ? n.at(0) : plain.data();
          memset(buf, 0, len);
          GROUP_CHECK(fi_trecv(n.ep(), buf, len, reg ? n.desc() : nullptr, FI_ADDR_UNSPEC, tag, 0,
                               &ctx) == 0);
          m.barrier();
          const fi_cq_tagged_entry e = n.expect(60000);
          GROUP_CHECK((e.flags & (FI_TAGGED | FI_RECV)) == (FI_TAGGED | FI_RECV));
          GROUP_CHECK(e.tag == tag && e.len == len && e.op_context == &ctx);
          GROUP_CHECK(has_pattern(buf, len, seed));
        } else {
          const bool reg = side == kSenderOnly;
          uint8_t* buf = reg ? n.at(0) : plain.data();
          fill(buf, len, seed);
          m.barrier();
          GROUP_CHECK(fi_tsend(n.ep(), buf, len, reg ? n.desc() : nullptr, peer, tag, &ctx) == 0);
          const fi_cq_tagged_entry e = n.expect(60000);
          GROUP_CHECK((e.flags & (FI_TAGGED | FI_SEND)) == (FI_TAGGED | FI_SEND));
        }
        ++seed;
      }
    }
  });
}

TEST_P(Unregistered, UnexpectedLargeMessagesAndUntaggedOnesArrive) {
  pair([](Member& m, Node& n, fi_addr_t peer, const Remote&) {
    std::vector<uint8_t> plain(2 * kFourMiB);
    int ctx[2];
    if (m.rank() == 1) {
      fill(plain.data(), kFourMiB, 21);
      fill(plain.data() + kFourMiB, kFourMiB, 22);
      GROUP_CHECK(fi_tsend(n.ep(), plain.data(), kFourMiB, nullptr, peer, 9, &ctx[0]) == 0);
      GROUP_CHECK(fi_send(n.ep(), plain.data() + kFourMiB, kFourMiB, nullptr, peer, &ctx[1]) == 0);
      m.barrier();  // both sent before the receiver posts anything: they arrive unexpected
      for (int i = 0; i < 2; ++i) GROUP_CHECK(n.expect(60000).flags & FI_SEND);
    } else {
      m.barrier();
      GROUP_CHECK(fi_recv(n.ep(), plain.data() + kFourMiB, kFourMiB, nullptr, FI_ADDR_UNSPEC,
                          &ctx[1]) == 0);
      GROUP_CHECK(fi_trecv(n.ep(), plain.data(), kFourMiB, nullptr, FI_ADDR_UNSPEC, 9, 0, &ctx[0]) ==
                  0);
      for (int i = 0; i < 2; ++i) {
        const fi_cq_tagged_entry e = n.expect(60000);
        GROUP_CHECK(e.len == kFourMiB && (e.flags & FI_RECV));
        GROUP_CHECK(e.op_context == &ctx[0] ? (e.flags & FI_TAGGED) && e.tag == 9
                                             : e.op_context == &ctx[1] && (e.flags & FI_MSG));
      }
      GROUP_CHECK(has_pattern(plain.data(), kFourMiB, 21));
      GROUP_CHECK(has_pattern(plain.data() + kFourMiB, kFourMiB, 22));
    }
  });
}

// Writes from and reads into unregistered memory go by packets; the peer's memory is named by
// its key. Each completion means the data is at the target (FI_DELIVERY_COMPLETE).
TEST_P(Unregistered, RmaAndAtomicsFromUnregisteredBuffers) {
  pair(
      [](Member& m, Node& n, fi_addr_t peer, const Remote& r) {
        constexpr size_t kSizes[] = {8, 4096, 65536, 1u << 20};
        std::vector<uint8_t> plain(1u << 20), back(1u << 20);
        if (m.rank() == 0) {
          memset(n.at(0), 0, 2u << 20);
          uint64_t zero = 0;
          memcpy(n.at(4u << 20), &zero, 8);
        }
        m.barrier();
        if (m.rank() == 1) {
          uint32_t seed = 50;
          size_t off = 0;
          for (size_t len : kSizes) {
            fill(plain.data(), len, seed);
            GROUP_CHECK(fi_write(n.ep(), plain.data(), len, nullptr, peer, r.addr + off, r.key,
                                 nullptr) == 0);
            GROUP_CHECK((n.expect(60000).flags & (FI_RMA | FI_WRITE)) == (FI_RMA | FI_WRITE));
            memset(back.data(), 0, len);
            GROUP_CHECK(fi_read(n.ep(), back.data(), len, nullptr, peer, r.addr + off, r.key,
                                nullptr) == 0);
            GROUP_CHECK((n.expect(60000).flags & (FI_RMA | FI_READ)) == (FI_RMA | FI_READ));
            GROUP_CHECK(has_pattern(back.data(), len, seed));
            off += len;
            ++seed;
          }
          uint64_t add = 5, old = 1;
          for (int i = 0; i < 3; ++i) {
            GROUP_CHECK(fi_fetch_atomic(n.ep(), &add, 1, nullptr, &old, nullptr, peer,
                                        r.addr + (4u << 20), r.key, FI_UINT64, FI_SUM, nullptr) == 0);
            GROUP_CHECK(n.expect(60000).flags & FI_ATOMIC);
            GROUP_CHECK(old == 5u * i);
          }
        }
        m.barrier();
        if (m.rank() == 0) {
          uint32_t seed = 50;
          size_t off = 0;
          for (size_t len : kSizes) {
            GROUP_CHECK(has_pattern(n.at(off), len, seed++));
            off += len;
          }
          uint64_t total = 0;
          memcpy(&total, n.at(4u << 20), 8);
          GROUP_CHECK(total == 15);
        }
      },
      one_sided_hints);
}

INSTANTIATE_TEST_SUITE_P(Wire, Unregistered,
                         ::testing::Values(Wire::kShm, Wire::kUdp, Wire::kShmFaults),
                         [](const ::testing::TestParamInfo<Wire>& i) { return wire_name(i.param); });

}  // namespace
}  // namespace xpufab::efa_fabric
