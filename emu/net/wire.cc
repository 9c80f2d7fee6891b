#include "emu/net/wire.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace xpufab {
namespace emu {
namespace net {
namespace {

void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
void put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint16_t get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
uint32_t get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Header layout (little-endian host order; both ends of a link are x86-64 or aarch64 LE):
//  0 type, 1 op, 2 status, 3 has_imm | may_repeat << 1 | attempt << 2, 4 src_qpn, 6 dst_qpn, 8 qkey, 12 imm, 16 rkey, 20 length,
//  24 token, 32 remote_addr, 40 src gid (16), 56 payload size (4), 60 src_epoch (4), 64 seq (4),
//  68 ref pid (4), 72 ref identity address (8), 80 ref identity (8), 88 ref_addr (8),
//  96 flags (4: copy_refused), 100 reserved (4, zero).
constexpr size_t kOffSrc = 40;
constexpr size_t kOffPayload = 56;
constexpr size_t kOffEpoch = 60;
constexpr size_t kOffSeq = 64;
constexpr size_t kOffRefPid = 68;
constexpr size_t kOffRefIdAddr = 72;
constexpr size_t kOffRefId = 80;
constexpr size_t kOffRefAddr = 88;
constexpr size_t kOffFlags = 96;
constexpr uint32_t kFlagCopyRefused = 1;
static_assert(kOffFlags + 8 == kPacketHeaderSize, "header layout");
static_assert(kMaxPayload < (uint64_t{1} << 32), "payload size fits 32 bits");

inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

struct SipState {
  uint64_t v0, v1, v2, v3;
  void round() {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
  }
  void block(uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

// Streams bytes into 8-byte words so that two buffers hash like their concatenation.
class SipStream {
 public:
  explicit SipStream(const MacKey& k) {
    s_.v0 = k.k0 ^ 0x736f6d6570736575ull;
    s_.v1 = k.k1 ^ 0x646f72616e646f6dull;
    s_.v2 = k.k0 ^ 0x6c7967656e657261ull;
    s_.v3 = k.k1 ^ 0x7465646279746573ull;
  }
  void update(const uint8_t* p, size_t n) {
    total_ += n;
    if (fill_ != 0) {
      while (n != 0 && fill_ < 8) {
        buf_[fill_++] = *p++;
        --n;
      }
      if (fill_ < 8) return;
      s_.block(get64(buf_));
      fill_ = 0;
    }
    for (; n >= 8; n -= 8, p += 8) s_.block(get64(p));
    std::memcpy(buf_, p, n);
    fill_ = n;
  }
  uint64_t finish() {
    uint64_t last = uint64_t{total_ & 0xff} << 56;
    for (size_t i = 0; i < fill_; ++i) last |= uint64_t{buf_[i]} << (8 * i);
    s_.block(last);
    s_.v2 ^= 0xff;
    for (int i = 0; i < 4; ++i) s_.round();
    return s_.v0 ^ s_.v1 ^ s_.v2 ^ s_.v3;
  }

 private:
  SipState s_;
  uint8_t buf_[8] = {};
  size_t fill_ = 0;
  uint64_t total_ = 0;
};

}  // namespace

void encode_header(const Packet& pkt, uint8_t* out) {
  out[0] = static_cast<uint8_t>(pkt.type);
  out[1] = pkt.op;
  out[2] = pkt.status;
  out[3] = static_cast<uint8_t>((pkt.has_imm ? 1 : 0) | (pkt.may_repeat ? 2 : 0) | (pkt.attempt & 63) << 2);
  put16(out + 4, pkt.src_qpn);
  put16(out + 6, pkt.dst_qpn);
  put32(out + 8, pkt.qkey);
  put32(out + 12, pkt.imm);
  put32(out + 16, pkt.rkey);
  put32(out + 20, pkt.length);
  put64(out + 24, pkt.token);
  put64(out + 32, pkt.remote_addr);
  std::memcpy(out + kOffSrc, pkt.src.data(), 16);
  put32(out + kOffPayload, static_cast<uint32_t>(pkt.payload.size()));
  put32(out + kOffEpoch, pkt.src_epoch);
  put32(out + kOffSeq, pkt.seq);
  put32(out + kOffRefPid, pkt.ref.pid);
  put64(out + kOffRefIdAddr, pkt.ref.id_addr);
  put64(out + kOffRefId, pkt.ref.id);
  put64(out + kOffRefAddr, pkt.ref_addr);
  put32(out + kOffFlags, pkt.copy_refused ? kFlagCopyRefused : 0);
  put32(out + kOffFlags + 4, 0);
}

namespace {

inline int decode_fields(const uint8_t* in, Packet* pkt, uint64_t* payload_size) {
  if (in[0] != static_cast<uint8_t>(PacketType::kRequest) &&
      in[0] != static_cast<uint8_t>(PacketType::kResponse) &&
      in[0] != static_cast<uint8_t>(PacketType::kDatagram) && in[0] != static_cast<uint8_t>(PacketType::kAnswers)) {
    return -EBADMSG;
  }
  uint64_t n = get32(in + kOffPayload);
  if (n > kMaxPayload) return -EBADMSG;
  pkt->type = static_cast<PacketType>(in[0]);
  pkt->op = in[1];
  pkt->status = in[2];
  pkt->src_epoch = get32(in + kOffEpoch);
  pkt->has_imm = (in[3] & 1) != 0;
  pkt->may_repeat = (in[3] & 2) != 0;
  pkt->attempt = static_cast<uint8_t>(in[3] >> 2);
  pkt->src_qpn = get16(in + 4);
  pkt->dst_qpn = get16(in + 6);
  pkt->qkey = get32(in + 8);
  pkt->imm = get32(in + 12);
  pkt->rkey = get32(in + 16);
  pkt->length = get32(in + 20);
  pkt->token = get64(in + 24);
  pkt->remote_addr = get64(in + 32);
  std::memcpy(pkt->src.data(), in + kOffSrc, 16);
  pkt->seq = get32(in + kOffSeq);
  pkt->ref.pid = get32(in + kOffRefPid);
  pkt->ref.id_addr = get64(in + kOffRefIdAddr);
  pkt->ref.id = get64(in + kOffRefId);
  pkt->ref_addr = get64(in + kOffRefAddr);
  pkt->copy_refused = (get32(in + kOffFlags) & kFlagCopyRefused) != 0;
  *payload_size = n;
  return 0;
}

}  // namespace

int decode_header(const uint8_t* in, Packet* pkt, uint64_t* payload_size) {
  return decode_fields(in, pkt, payload_size);
}

int decode_message(const uint8_t* in, size_t len, Packet* pkt) {
  uint64_t n;
  if (len < kPacketHeaderSize || decode_fields(in, pkt, &n) != 0 || n != len - kPacketHeaderSize) {
    return -EBADMSG;
  }
  pkt->payload.assign(in + kPacketHeaderSize, in + len);
  return 0;
}

uint64_t siphash24(const MacKey& key, const void* data, size_t len) {
  SipStream s(key);
  s.update(static_cast<const uint8_t*>(data), len);
  return s.finish();
}

uint64_t siphash24_2(const MacKey& key, const void* a, size_t alen, const void* b, size_t blen) {
  SipStream s(key);
  s.update(static_cast<const uint8_t*>(a), alen);
  s.update(static_cast<const uint8_t*>(b), blen);
  return s.finish();
}

std::string fabric_key_string() {
  const char* env = std::getenv("FI_EFA_EMU_FABRIC_KEY");
  return (env == nullptr || env[0] == '\0') ? std::string("xpufab-default-fabric") : std::string(env);
}

MacKey derive_key(const std::string& key) {
  // Two fixed-key SipHash passes stretch an arbitrary string into 128 key bits.
  MacKey fixed{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  MacKey k;
  k.k0 = siphash24(fixed, key.data(), key.size());
  fixed.k0 ^= 0x5a5a5a5a5a5a5a5aull;
  k.k1 = siphash24(fixed, key.data(), key.size());
  return k;
}

int Reassembler::add(uint64_t sender, uint64_t msg_id, uint64_t total, uint64_t off,
                     const uint8_t* data, size_t len, Packet* out) {
  // Fragments are cut at a fixed size of at least the header, so only the first one may hold
  // header bytes and it holds all of them.
  if (total < kPacketHeaderSize || total - kPacketHeaderSize > kMaxPayload || len == 0 ||
      off > total || len > total - off || (off != 0 && off < kPacketHeaderSize) ||
      (off == 0 && len < kPacketHeaderSize)) {
    return -EBADMSG;
  }
  if (off == 0 && len == total) {  // the common case: one fragment
    return decode_message(data, len, out) == 0 ? 1 : -EBADMSG;
  }
  auto key = std::make_pair(sender, msg_id);
  auto it = parts_.find(key);
  if (it == parts_.end()) {
    it = parts_.emplace(key, Part()).first;
    it->second.total = total;
    it->second.pkt.payload.resize(total - kPacketHeaderSize);
  }
  Part& p = it->second;
  if (p.total != total || p.have + len > total) {
    parts_.erase(it);
    return -EBADMSG;
  }
  if (off == 0) {
    std::memcpy(p.header, data, kPacketHeaderSize);
    p.header_done = true;
    std::memcpy(p.pkt.payload.data(), data + kPacketHeaderSize, len - kPacketHeaderSize);
  } else {
    std::memcpy(p.pkt.payload.data() + (off - kPacketHeaderSize), data, len);
  }
  p.have += len;
  if (p.have < total) return 0;
  int rc = -EBADMSG;
  uint64_t n = 0;
  if (p.header_done && decode_header(p.header, &p.pkt, &n) == 0 && n == total - kPacketHeaderSize) {
    *out = std::move(p.pkt);
    rc = 1;
  }
  parts_.erase(it);
  return rc;
}

void Reassembler::forget(uint64_t sender) {
  auto it = parts_.lower_bound(std::make_pair(sender, uint64_t{0}));
  while (it != parts_.end() && it->first.first == sender) it = parts_.erase(it);
}

}  // namespace net
}  // namespace emu
}  // namespace xpufab
