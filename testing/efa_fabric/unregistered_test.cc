// Applications that register nothing: hints without FI_MR_LOCAL (Open MPI's tagged transport asks
// this way, with FI_COMPLETION as default flags and an FI_AV_MAP), through the public API. The
// protocol fabric offers them messages and tagged messages and copies their buffers: eager
// payloads through its bounce buffers, and a rendezvous by a push whichever side gave no
// descriptor. Two processes over shared memory, UDP, and shared memory with loss and reordering.
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

class Unregistered : public ::testing::TestWithParam<Wire> {
 protected:
  // Runs `fn` in two processes; rank 0 receives, rank 1 sends.
  template <typename Fn>
  void pair(Fn fn) {
    use_wire(GetParam(), ::testing::UnitTest::GetInstance()->current_test_info()->name());
    const std::vector<int> st = run_group(2, 120, [&](Member& m) {
      Node n(kNodeBuf, unregistered_hints());
      GROUP_CHECK(n.info()->domain_attr->mr_mode == 0);
      Peers p = connect(m, n);
      m.set_idle([&n] { fi_cq_read(n.cq(), nullptr, 0); });
      fn(m, n, p.addr[1 - m.rank()]);
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
  pair([](Member& m, Node& n, fi_addr_t peer) {
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
  pair([](Member& m, Node& n, fi_addr_t peer) {
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

INSTANTIATE_TEST_SUITE_P(Wire, Unregistered,
                         ::testing::Values(Wire::kShm, Wire::kUdp, Wire::kShmFaults),
                         [](const ::testing::TestParamInfo<Wire>& i) { return wire_name(i.param); });

}  // namespace
}  // namespace xpufab::efa_fabric
