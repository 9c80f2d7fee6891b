// proto_progress_due, what lets a poller skip an idle endpoint without a lock: 0 only while
// progress would have nothing to do. A tagged message from A to B makes it 1 at B once the
// device wrote the CQE (before B polled), and while a completion waits to be handed out (after
// B polled the CQE with no room for completions); it is 0 again once B handed it out and the
// send's completion reached A.
#include <gtest/gtest.h>

#include <vector>

#include "testing/proto/harness.h"

namespace xpufab::proto_test {
namespace {

struct Due : ::testing::Test {
  Stack stack;
  Node a{&stack}, b{&stack};
  uint32_t a_to_b = 0, b_to_a = 0;

  void SetUp() override {
    ASSERT_EQ(stack.open(), 0);
    proto_config cfg{};
    proto_config_default(&cfg);
    cfg.max_peers = 4;
    cfg.credits = 16;
    ASSERT_EQ(a.open(cfg), 0);
    ASSERT_EQ(b.open(cfg), 0);
    ASSERT_EQ(a.add_peer(b.address(), &a_to_b), 0);
    ASSERT_EQ(b.add_peer(a.address(), &b_to_a), 0);
  }
};

TEST_F(Due, IdleEndpointsHaveNothingDue) {
  EXPECT_EQ(proto_progress_due(a.ep()), 0);
  EXPECT_EQ(proto_progress_due(b.ep()), 0);
  EXPECT_EQ(efa_cq_ready(&b.ep()->cq), 0);
}

TEST_F(Due, ValidCqeAndWaitingCompletionAreDue) {
  std::vector<uint8_t> rx(64), tx(64);
  fill(tx.data(), tx.size(), 5);
  proto_buf rb{rx.data(), rx.size(), PROTO_KEY_NONE, PROTO_KEY_NONE};
  ASSERT_EQ(proto_recv(b.ep(), PROTO_ADDR_ANY, &rb, 7, 0, FI_TAGGED, 11), 0);
  EXPECT_EQ(proto_progress_due(b.ep()), 0);
  proto_buf tb{tx.data(), tx.size(), PROTO_KEY_NONE, PROTO_KEY_NONE};
  ASSERT_EQ(proto_send(a.ep(), a_to_b, &tb, 7, 0, FI_TAGGED, 12), 0);
  // Only the device runs: B's CQE is written, B has not polled it.
  ASSERT_TRUE(pump({}, [&] {
    stack.dev()->progress(64);
    return efa_cq_ready(&b.ep()->cq) != 0;
  }));
  EXPECT_EQ(proto_progress_due(b.ep()), 1);
  // B polls the CQE but takes no completion: the receive's completion waits in the core.
  ASSERT_TRUE(pump({}, [&] {
    stack.dev()->progress(64);
    proto_progress(b.ep(), nullptr, 0);
    return b.ep()->comp_count > 0;
  }));
  EXPECT_EQ(proto_progress_due(b.ep()), 1);
  ASSERT_EQ(b.poll(), 1);
  ASSERT_EQ(b.comps().size(), 1u);
  EXPECT_EQ(b.comps()[0].op_context, 11u);
  EXPECT_TRUE(has_pattern(rx.data(), rx.size(), 5));
  ASSERT_TRUE(pump({&a, &b}, [&] { return !a.comps().empty(); }));
  EXPECT_EQ(a.comps()[0].op_context, 12u);
  // Everything was handed out; what is left (credits owed below half a window) needs no pass.
  ASSERT_TRUE(pump({&a, &b}, [&] {
    return proto_progress_due(a.ep()) == 0 && proto_progress_due(b.ep()) == 0;
  }));
  EXPECT_EQ(efa_cq_ready(&a.ep()->cq), 0);
  EXPECT_EQ(efa_cq_ready(&b.ep()->cq), 0);
}

}  // namespace
}  // namespace xpufab::proto_test
