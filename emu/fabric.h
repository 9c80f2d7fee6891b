// The wire between emulated EFA devices. A Fabric carries SRD packets between attached GIDs; it
// is an interface so that devices in one process (InProcFabric, here), in several processes on
// one host (shared memory) and on several hosts (UDP) share one device model.
//
// Contract: send() either hands the packet to the destination's sink or returns -EHOSTUNREACH
// when no device owns the destination GID. Delivery order between packets is not guaranteed
// (the receiving device reorders on purpose). Reliability and at-most-once are the devices'
// job (SRD runs end to end), so a fabric may drop packets when a fault plan says so.
#ifndef XPUFAB_EMU_FABRIC_H_
#define XPUFAB_EMU_FABRIC_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <shared_mutex>
#include <vector>

namespace xpufab {
namespace emu {

using Gid = std::array<uint8_t, 16>;

enum class PacketType : uint8_t {
  kRequest = 1,   // SEND, RDMA WRITE (payload) or RDMA READ (no payload)
  kResponse = 2,  // ack/nak with a completion status; RDMA READ data as payload
};

// Packet bytes: up to kInline bytes live in the packet itself, so small messages (the common
// case) cost no allocation; larger ones use one heap block.
class Payload {
 public:
  static constexpr size_t kInline = 96;
  Payload() = default;
  Payload(const Payload& o) { assign(o.data(), o.data() + o.size_); }
  Payload(Payload&& o) noexcept { take(std::move(o)); }
  Payload& operator=(const Payload& o) {
    if (this != &o) assign(o.data(), o.data() + o.size_);
    return *this;
  }
  Payload& operator=(Payload&& o) noexcept {
    if (this != &o) take(std::move(o));
    return *this;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  uint8_t* data() { return big_ ? big_.get() : small_; }
  const uint8_t* data() const { return big_ ? big_.get() : small_; }
  // Contents are unspecified after a resize that grows.
  void resize(size_t n) {
    if (n > kInline && (!big_ || n > cap_)) {
      big_.reset(new uint8_t[n]);
      cap_ = n;
    } else if (n <= kInline) {
      big_.reset();
      cap_ = 0;
    }
    size_ = n;
  }
  void assign(const uint8_t* b, const uint8_t* e) {
    size_t n = static_cast<size_t>(e - b);
    resize(n);
    if (n != 0) std::memcpy(data(), b, n);
  }

 private:
  void take(Payload&& o) {
    size_ = o.size_;
    cap_ = o.cap_;
    big_ = std::move(o.big_);
    if (!big_ && size_ != 0) std::memcpy(small_, o.small_, size_);
    o.size_ = 0;
    o.cap_ = 0;
  }
  size_t size_ = 0;
  size_t cap_ = 0;
  std::unique_ptr<uint8_t[]> big_;
  uint8_t small_[kInline];
};

struct Packet {
  PacketType type = PacketType::kRequest;
  uint8_t op = 0;           // efa_io_send_op_type
  uint8_t status = 0;       // response: efa_io_comp_status seen by the requester
  bool has_imm = false;
  Gid src{};
  uint16_t src_qpn = 0;
  uint16_t dst_qpn = 0;
  uint32_t qkey = 0;
  uint32_t imm = 0;
  uint64_t token = 0;       // requester's id of the operation, echoed in the response
  uint64_t remote_addr = 0; // RDMA
  uint32_t rkey = 0;
  uint32_t length = 0;      // RDMA: total bytes; SEND: payload bytes
  Payload payload;
};

// Implemented by a device: receives packets addressed to its GID. Called from any thread; must
// only queue the packet.
class PacketSink {
 public:
  virtual ~PacketSink() = default;
  virtual void deliver(Packet&& pkt) = 0;
};

class Fabric {
 public:
  virtual ~Fabric() = default;
  // -EEXIST if the GID is taken.
  virtual int attach(const Gid& gid, PacketSink* sink) = 0;
  // After detach returns, the sink is never called again.
  virtual void detach(const Gid& gid) = 0;
  // 0, or -EHOSTUNREACH when nothing owns dst.
  virtual int send(const Gid& dst, Packet&& pkt) = 0;
  // True when a packet handed to send() always reaches an attached destination. Devices then
  // skip retransmission copies and duplicate filtering unless a fault plan drops packets.
  virtual bool lossless() const { return false; }
};

// Devices in one process. Delivery is a call into the destination's sink under a shared lock,
// so detach() waits for sends in flight.
class InProcFabric : public Fabric {
 public:
  int attach(const Gid& gid, PacketSink* sink) override;
  void detach(const Gid& gid) override;
  int send(const Gid& dst, Packet&& pkt) override;
  bool lossless() const override { return true; }

  // The process-wide fabric emulated devices opened through the backend registry share.
  static std::shared_ptr<InProcFabric> process_fabric();

 private:
  std::shared_mutex mu_;
  std::map<Gid, PacketSink*> sinks_;  // guarded by mu_
};

}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_FABRIC_H_
