// A PacketSink that keeps what it receives, for fabric tests.
#ifndef XPUFAB_EMU_NET_TEST_SINK_H_
#define XPUFAB_EMU_NET_TEST_SINK_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "emu/fabric.h"

namespace xpufab {
namespace emu {
namespace net {

class TestSink : public PacketSink {
 public:
  void deliver(Packet&& pkt) override {
    std::lock_guard<std::mutex> lock(mu_);
    got_.push_back(std::move(pkt));
    cv_.notify_all();
  }
  // Waits until at least n packets arrived (or ms passed); returns how many there are.
  size_t wait_for(size_t n, int ms) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return got_.size() >= n; });
    return got_.size();
  }
  std::vector<Packet> take() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Packet> v;
    v.swap(got_);
    return v;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Packet> got_;
};

// A request whose payload and token identify it, so that a receiver can check content.
inline Packet make_packet(const Gid& src, uint64_t token, size_t size) {
  Packet p;
  p.type = PacketType::kRequest;
  p.op = 1;
  p.src = src;
  p.src_qpn = 3;
  p.dst_qpn = 4;
  p.qkey = 0x1234;
  p.token = token;
  p.length = static_cast<uint32_t>(size);
  p.payload.resize(size);
  for (size_t i = 0; i < size; ++i) p.payload.data()[i] = static_cast<uint8_t>(token * 31 + i * 7);
  return p;
}

inline bool packet_ok(const Packet& p) {
  if (p.payload.size() != p.length || p.qkey != 0x1234 || p.src_qpn != 3 || p.dst_qpn != 4) return false;
  for (size_t i = 0; i < p.payload.size(); ++i) {
    if (p.payload.data()[i] != static_cast<uint8_t>(p.token * 31 + i * 7)) return false;
  }
  return true;
}

}  // namespace net
}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_NET_TEST_SINK_H_
