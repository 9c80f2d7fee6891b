// Byte encoding of emulated SRD packets for fabrics that cross a process boundary (shared
// memory, UDP), plus the keyed MAC that keeps foreign packets out.
//
// A packet travels as one "message": a fixed 104-byte header followed by the payload. Fabrics cut
// a message into fragments and a Reassembler puts it back together; fragments of different
// messages may interleave and arrive in any order.
#ifndef XPUFAB_EMU_NET_WIRE_H_
#define XPUFAB_EMU_NET_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "emu/fabric.h"

namespace xpufab {
namespace emu {
namespace net {

constexpr size_t kPacketHeaderSize = 104;
// The largest payload a message may carry: an RDMA of max_rdma_size (1 GiB) plus slack.
constexpr uint64_t kMaxPayload = (uint64_t{1} << 30) + 4096;

// Writes the header of `pkt` (payload excluded) into out[kPacketHeaderSize].
void encode_header(const Packet& pkt, uint8_t* out);
// Parses a header; on success fills every field of *pkt except the payload and returns the
// payload size in *payload_size. -EBADMSG for an unknown type or an oversized payload.
int decode_header(const uint8_t* in, Packet* pkt, uint64_t* payload_size);
// A whole message of `len` bytes (header and payload) into *pkt, payload included: what a
// message that fits one fragment needs, without a Reassembler. -EBADMSG when malformed.
int decode_message(const uint8_t* in, size_t len, Packet* pkt);

// SipHash-2-4 (Aumasson & Bernstein), a keyed 64-bit MAC.
struct MacKey {
  uint64_t k0 = 0, k1 = 0;
};
uint64_t siphash24(const MacKey& key, const void* data, size_t len);
// Continues a MAC over two pieces as if they were one buffer.
uint64_t siphash24_2(const MacKey& key, const void* a, size_t alen, const void* b, size_t blen);

// The fabric key: FI_EFA_EMU_FABRIC_KEY (any string; unset means a fixed default) turned into a
// MAC key. Processes with different keys neither see nor accept each other's packets.
std::string fabric_key_string();
MacKey derive_key(const std::string& key);

// Collects fragments of messages keyed by (sender, message id). Not thread-safe.
class Reassembler {
 public:
  // Adds bytes [off, off+len) of a message of `total` bytes. Returns 1 and fills *out when the
  // message is complete, 0 when more is needed, -EBADMSG for inconsistent or malformed input
  // (the partial message is discarded). Duplicate fragments must be filtered by the caller.
  int add(uint64_t sender, uint64_t msg_id, uint64_t total, uint64_t off, const uint8_t* data,
          size_t len, Packet* out);
  // Drops partial messages of `sender` (a peer that restarted or died).
  void forget(uint64_t sender);
  size_t partial() const { return parts_.size(); }

 private:
  struct Part {
    Packet pkt;
    uint8_t header[kPacketHeaderSize];
    uint64_t total = 0;
    uint64_t have = 0;
    bool header_done = false;
  };
  std::map<std::pair<uint64_t, uint64_t>, Part> parts_;
};

}  // namespace net
}  // namespace emu
}  // namespace xpufab

#endif  // XPUFAB_EMU_NET_WIRE_H_
