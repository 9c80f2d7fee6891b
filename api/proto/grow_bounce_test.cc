// GrowBounce registers the transmit buffers at set-up and the receive buffers of the peers
// present as the table grows, never the whole reservation, and gives every registration back.
#include "api/proto/grow_bounce.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <map>
#include <memory>

#include "api/backend/unsupported_device.h"

namespace xpufab::proto {
namespace {

class RecordingMr : public backend::Mr {
 public:
  RecordingMr(uint32_t key, const backend::MrInitAttr& a) : key_(key), attr_(a) {}
  uint32_t lkey() const override { return key_; }
  uint32_t rkey() const override { return key_; }
  uint64_t iova() const override { return reinterpret_cast<uintptr_t>(attr_.addr); }
  size_t length() const override { return attr_.length; }

 private:
  uint32_t key_;
  backend::MrInitAttr attr_;
};

// A device that only registers memory, and remembers what is registered.
class RecordingDevice : public backend::UnsupportedDevice {
 public:
  std::map<uint32_t, std::unique_ptr<RecordingMr>> live;
  uint32_t next_key = 100;
  bool refuse = false;

  int reg_mr(backend::Pd*, const backend::MrInitAttr& a, backend::Mr** mr) override {
    if (refuse) return -ENOMEM;
    const uint32_t key = next_key++;
    auto m = std::make_unique<RecordingMr>(key, a);
    *mr = m.get();
    live[key] = std::move(m);
    return 0;
  }
  int dereg_mr(backend::Mr* mr) override { return live.erase(mr->lkey()) ? 0 : -EINVAL; }
};

proto_dev device_with_mtu(uint32_t mtu) {
  proto_dev d{};
  d.mtu = mtu;
  return d;
}

TEST(GrowBounce, RegistersTransmitBuffersAndThePresentPeersReceiveBuffersOnly) {
  RecordingDevice dev;
  proto_config c;
  proto_config_default(&c);
  c.credits = 32;
  c.ntx = 256;
  const proto_dev d = device_with_mtu(8928);
  const size_t buf = proto_buf_size(&d);
  const size_t per_peer = (c.credits + PROTO_CTRL_SLACK) * buf;
  constexpr uint32_t kLimit = 800;
  GrowBounce b;
  ASSERT_EQ(b.init(&dev, nullptr, c, d, kLimit), 0);
  EXPECT_EQ(b.size(), kLimit * per_peer + c.ntx * buf);
  EXPECT_EQ(b.tx_offset(), kLimit * per_peer);
  ASSERT_EQ(dev.live.size(), 1u);
  const RecordingMr& tx = *dev.live.begin()->second;
  EXPECT_EQ(tx.iova(), reinterpret_cast<uintptr_t>(b.base()) + b.tx_offset());
  EXPECT_EQ(tx.length(), c.ntx * buf);
  EXPECT_EQ(b.tx_lkey(), tx.lkey());
  // Each table size: one registration from the start of the region over its peers' buffers.
  for (uint32_t n : {16u, 32u, 64u}) {
    uint32_t key = 0;
    ASSERT_EQ(b.register_rx(n, &key), 0);
    const RecordingMr& rx = *dev.live.at(key);
    EXPECT_EQ(rx.iova(), reinterpret_cast<uintptr_t>(b.base()));
    EXPECT_EQ(rx.length(), n * per_peer);
    EXPECT_EQ(b.rx_bytes(n), n * per_peer);
  }
  // Every registration stays while the region lives (buffers posted under it stay posted).
  EXPECT_EQ(dev.live.size(), 4u);
  // The region is writable where buffers live, at either end.
  b.base()[0] = 1;
  b.base()[b.size() - 1] = 2;
  b.release();
  EXPECT_TRUE(dev.live.empty());
  EXPECT_EQ(b.base(), nullptr);
  b.release();  // twice is harmless
}

TEST(GrowBounce, AFailedRegistrationIsReportedAndNothingLeaks) {
  RecordingDevice dev;
  proto_config c;
  proto_config_default(&c);
  const proto_dev d = device_with_mtu(4096);
  {
    GrowBounce b;
    ASSERT_EQ(b.init(&dev, nullptr, c, d, 8), 0);
    dev.refuse = true;
    uint32_t key = 0;
    EXPECT_EQ(b.register_rx(8, &key), -ENOMEM);
    dev.refuse = false;
  }  // the destructor gives the transmit buffers' registration back
  EXPECT_TRUE(dev.live.empty());
  dev.refuse = true;
  GrowBounce refused;
  EXPECT_EQ(refused.init(&dev, nullptr, c, d, 8), -ENOMEM);
  refused.release();
  EXPECT_TRUE(dev.live.empty());
}

}  // namespace
}  // namespace xpufab::proto
