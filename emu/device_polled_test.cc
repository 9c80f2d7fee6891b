// A device whose CQ lives in external memory is polled by device code that never calls in: its
// engine thread keeps the short idle sleep and the short park, so such code's doorbell after a
// lull waits at most idle_sleep_max_us (a host-driven device may sleep four times longer).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "emu/test_util.h"

namespace xpufab {
namespace emu {
namespace {

using testing::inline_options;

constexpr uint32_t kSleepMaxUs = 2000;
constexpr uint32_t kParkUs = 200;
constexpr uint32_t kEntries = 64;

DeviceOptions threaded_options() {
  DeviceOptions o = inline_options(std::make_shared<InProcFabric>(), "gen4");
  o.engine_thread = true;
  o.idle_spin_us = 50;
  o.idle_sleep_max_us = kSleepMaxUs;
  o.park_us = kParkUs;
  return o;
}

struct PolledDevice {
  std::unique_ptr<EmuDevice> dev;
  std::vector<uint8_t> ring = std::vector<uint8_t>(kEntries * 32);
  backend::Cq* cq = nullptr;
  backend::CqAttr attr{};

  void open(bool external) {
    ASSERT_EQ(create_device(threaded_options(), &dev), 0);
    backend::CqInitAttr c;
    c.entries = kEntries;
    if (external) {
      c.ext_buffer = ring.data();
      c.ext_length = ring.size();
    }
    ASSERT_EQ(dev->create_cq(c, &cq), 0);
    ASSERT_EQ(cq->query(&attr), 0);
    ASSERT_NE(attr.doorbell, nullptr);
  }
  // What device code does: a new consumer index in the CQ doorbell, and no call.
  void ring_doorbell(uint32_t ci) {
    __atomic_store_n(attr.doorbell, ci & 0xffff, __ATOMIC_RELEASE);
  }
};

bool wait_doorbells(EmuDevice* dev, uint64_t n) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (dev->stats().doorbells < n) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

TEST(DevicePolled, AnIdleDeviceWithAnExternalMemoryCqKeepsTheShortSleep) {
  PolledDevice ext, host;
  ext.open(true);
  host.open(false);
  // Past a second idle: a host-driven device's sleeps now grow past idle_sleep_max_us.
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  ext.ring_doorbell(1);
  host.ring_doorbell(1);
  ASSERT_TRUE(wait_doorbells(ext.dev.get(), 1));
  ASSERT_TRUE(wait_doorbells(host.dev.get(), 1));
  EXPECT_LE(ext.dev->stats().longest_sleep_us, kSleepMaxUs);
  EXPECT_GT(host.dev->stats().longest_sleep_us, kSleepMaxUs);  // what the bound prevents
  ASSERT_EQ(ext.dev->destroy_cq(ext.cq), 0);
  ASSERT_EQ(host.dev->destroy_cq(host.cq), 0);
}

TEST(DevicePolled, ACallerDrivingADevicePolledByDeviceCodeDoesNotLengthenTheEnginesPark) {
  PolledDevice ext, host;
  ext.open(true);
  host.open(false);
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(150);
  while (std::chrono::steady_clock::now() < until) {
    ext.dev->progress(16);
    host.dev->progress(16);
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  EXPECT_EQ(ext.dev->stats().longest_park_us, kParkUs);
  EXPECT_GT(host.dev->stats().longest_park_us, kParkUs);  // parks grow while a caller drives
  // Once the external-memory CQ is gone the device is host-driven again: its sleeps may deepen.
  ASSERT_EQ(ext.dev->destroy_cq(ext.cq), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  EXPECT_GT(ext.dev->stats().longest_sleep_us, kSleepMaxUs);
  ASSERT_EQ(host.dev->destroy_cq(host.cq), 0);
}

}  // namespace
}  // namespace emu
}  // namespace xpufab
