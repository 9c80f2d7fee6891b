#include "emu/net/wire.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace xpufab {
namespace emu {
namespace net {
namespace {

// Reference vectors of the SipHash paper: key 00..0f, messages 00..(n-1).
TEST(SipHash, ReferenceVectors) {
  MacKey k{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  uint8_t msg[64];
  for (int i = 0; i < 64; ++i) msg[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(siphash24(k, msg, 0), 0x726fdb47dd0e0e31ull);
  EXPECT_EQ(siphash24(k, msg, 15), 0xa129ca6149be45e5ull);
  // Split input hashes like the whole.
  for (size_t cut = 0; cut <= 15; ++cut) {
    EXPECT_EQ(siphash24_2(k, msg, cut, msg + cut, 15 - cut), 0xa129ca6149be45e5ull) << cut;
  }
  EXPECT_NE(derive_key("a").k0, derive_key("b").k0);
}

std::vector<uint8_t> serialize(const Packet& p) {
  std::vector<uint8_t> v(kPacketHeaderSize + p.payload.size());
  encode_header(p, v.data());
  std::copy(p.payload.data(), p.payload.data() + p.payload.size(), v.begin() + kPacketHeaderSize);
  return v;
}

Packet sample(size_t n) {
  Packet p;
  p.type = PacketType::kResponse;
  p.op = 4;
  p.status = 13;
  p.has_imm = true;
  p.may_repeat = true;
  p.attempt = 45;
  p.src_epoch = 0xdeadbeef;
  p.src = Gid{1, 2, 3};
  p.src_qpn = 7;
  p.dst_qpn = 9;
  p.qkey = 0xabcdef;
  p.imm = 42;
  p.token = 0x1122334455667788ull;
  p.remote_addr = 0xdeadbeef000ull;
  p.rkey = 77;
  p.length = static_cast<uint32_t>(n);
  p.payload.resize(n);
  for (size_t i = 0; i < n; ++i) p.payload.data()[i] = static_cast<uint8_t>(i * 13);
  return p;
}

void expect_same(const Packet& a, const Packet& b) {
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.op, b.op);
  EXPECT_EQ(a.status, b.status);
  EXPECT_EQ(a.has_imm, b.has_imm);
  EXPECT_EQ(a.may_repeat, b.may_repeat);
  EXPECT_EQ(a.attempt, b.attempt);
  EXPECT_EQ(a.src_epoch, b.src_epoch);
  EXPECT_EQ(a.src, b.src);
  EXPECT_EQ(a.src_qpn, b.src_qpn);
  EXPECT_EQ(a.dst_qpn, b.dst_qpn);
  EXPECT_EQ(a.qkey, b.qkey);
  EXPECT_EQ(a.imm, b.imm);
  EXPECT_EQ(a.token, b.token);
  EXPECT_EQ(a.remote_addr, b.remote_addr);
  EXPECT_EQ(a.rkey, b.rkey);
  EXPECT_EQ(a.length, b.length);
  ASSERT_EQ(a.payload.size(), b.payload.size());
  EXPECT_EQ(0, std::memcmp(a.payload.data(), b.payload.data(), a.payload.size()));
}

TEST(Reassembler, OneFragmentAndOutOfOrderFragments) {
  Reassembler r;
  Packet in = sample(10);
  auto bytes = serialize(in);
  Packet out;
  ASSERT_EQ(r.add(1, 1, bytes.size(), 0, bytes.data(), bytes.size(), &out), 1);
  expect_same(in, out);

  Packet big = sample(100000);
  auto b = serialize(big);
  const size_t f = 4096;
  std::vector<size_t> offs;
  for (size_t o = 0; o < b.size(); o += f) offs.push_back(o);
  std::reverse(offs.begin(), offs.end());  // the header arrives last
  Packet got;
  int done = 0;
  for (size_t o : offs) {
    size_t n = std::min(f, b.size() - o);
    int rc = r.add(2, 9, b.size(), o, b.data() + o, n, &got);
    ASSERT_GE(rc, 0);
    done += rc;
  }
  EXPECT_EQ(done, 1);
  expect_same(big, got);
  EXPECT_EQ(r.partial(), 0u);
}

// Coalesced answers cross the wire as any packet, their records intact.
TEST(Reassembler, AnswersPacketsKeepTheirRecords) {
  Packet in;
  in.type = PacketType::kAnswers;
  in.src = Gid{4, 5, 6};
  const AnswerRecord recs[2] = {{0x1122334455667788ull, 0x1234, 13, 63, 4}, {7, 1, 0, 0, 0}};
  in.payload.resize(2 * kAnswerBytes);
  for (int i = 0; i < 2; ++i) put_answer(in.payload.data() + i * kAnswerBytes, recs[i]);
  auto bytes = serialize(in);
  Reassembler r;
  Packet out;
  ASSERT_EQ(r.add(1, 1, bytes.size(), 0, bytes.data(), bytes.size(), &out), 1);
  expect_same(in, out);
  for (int i = 0; i < 2; ++i) {
    const AnswerRecord a = get_answer(out.payload.data() + i * kAnswerBytes);
    EXPECT_EQ(a.token, recs[i].token);
    EXPECT_EQ(a.qpn, recs[i].qpn);
    EXPECT_EQ(a.status, recs[i].status);
    EXPECT_EQ(a.attempt, recs[i].attempt);
    EXPECT_EQ(a.op, recs[i].op);
  }
}

TEST(Reassembler, RejectsMalformedInput) {
  Reassembler r;
  Packet out;
  auto b = serialize(sample(100));
  EXPECT_EQ(r.add(1, 1, 10, 0, b.data(), 10, &out), -EBADMSG);             // shorter than a header
  EXPECT_EQ(r.add(1, 1, b.size(), 0, b.data(), 20, &out), -EBADMSG);       // split header
  EXPECT_EQ(r.add(1, 1, b.size(), 100, b.data(), 100, &out), -EBADMSG);    // past the end
  EXPECT_EQ(r.add(1, 1, uint64_t{1} << 40, 0, b.data(), 64, &out), -EBADMSG);  // huge
  b[0] = 9;  // unknown packet type
  EXPECT_EQ(r.add(1, 1, b.size(), 0, b.data(), b.size(), &out), -EBADMSG);
  b[0] = 1;
  b[56] ^= 1;  // payload size disagrees with the message size
  EXPECT_EQ(r.add(1, 1, b.size(), 0, b.data(), b.size(), &out), -EBADMSG);
  // A fragment whose total disagrees with the first one seen drops the partial message.
  auto c = serialize(sample(9000));
  EXPECT_EQ(r.add(3, 1, c.size(), 4096, c.data() + 4096, 4096, &out), 0);
  EXPECT_EQ(r.add(3, 1, c.size() + 1, 0, c.data(), 4096, &out), -EBADMSG);
  EXPECT_EQ(r.partial(), 0u);
  EXPECT_EQ(r.add(4, 1, c.size(), 4096, c.data() + 4096, 4096, &out), 0);
  r.forget(4);
  EXPECT_EQ(r.partial(), 0u);
}

}  // namespace
}  // namespace net
}  // namespace emu
}  // namespace xpufab
