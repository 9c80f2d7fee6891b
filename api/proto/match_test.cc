// Tag matching against a plain reference model: directed cases for each
// libfabric rule, then long random sequences of posts, arrivals, peeks,
// claims, discards and cancels compared step by step.
#include "api/proto/match.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <random>
#include <vector>

#include "api/proto/match_atomic_c11_check.h"

namespace {

class MatchTest : public ::testing::Test {
 protected:
  void SetUp() override { Init(8); }
  void Init(uint32_t cap) {
    pool_.assign(cap, proto_match_entry{});
    ASSERT_EQ(proto_match_init(&m_, pool_.data(), cap), 0);
  }
  std::vector<proto_match_entry> pool_;
  proto_match m_{};
};

TEST_F(MatchTest, InitRejectsBadArguments) {
  EXPECT_EQ(proto_match_init(nullptr, pool_.data(), 8), -FI_EINVAL);
  EXPECT_EQ(proto_match_init(&m_, nullptr, 8), -FI_EINVAL);
  EXPECT_EQ(proto_match_init(&m_, pool_.data(), PROTO_MATCH_NIL), -FI_EINVAL);
  EXPECT_EQ(proto_match_init(&m_, nullptr, 0), 0);
  proto_match_hit h{};
  EXPECT_EQ(proto_match_post_recv(&m_, 1, 0, PROTO_ADDR_ANY, 1, &h), -FI_EAGAIN);
  EXPECT_EQ(proto_match_arrive(&m_, 1, 0, 1, &h), -FI_EAGAIN);
}

TEST_F(MatchTest, ArrivalMatchesOldestPostedReceive) {
  proto_match_hit h{};
  ASSERT_EQ(proto_match_post_recv(&m_, 5, 0, PROTO_ADDR_ANY, 100, &h), 0);
  ASSERT_EQ(proto_match_post_recv(&m_, 5, 0, PROTO_ADDR_ANY, 101, &h), 0);
  ASSERT_EQ(proto_match_post_recv(&m_, 6, 0, PROTO_ADDR_ANY, 102, &h), 0);
  EXPECT_EQ(proto_match_posted_count(&m_), 3u);
  ASSERT_EQ(proto_match_arrive(&m_, 6, 3, 900, &h), 1);
  EXPECT_EQ(h.cookie, 102u);
  ASSERT_EQ(proto_match_arrive(&m_, 5, 3, 901, &h), 1);
  EXPECT_EQ(h.cookie, 100u);
  ASSERT_EQ(proto_match_arrive(&m_, 5, 3, 902, &h), 1);
  EXPECT_EQ(h.cookie, 101u);
  EXPECT_EQ(proto_match_arrive(&m_, 5, 3, 903, &h), 0);
  EXPECT_EQ(proto_match_unexpected_count(&m_), 1u);
  EXPECT_EQ(proto_match_posted_count(&m_), 0u);
}

// What a multi-receive buffer needs: a receive queued past a matching unexpected message, and
// the search for the next matching receive after one the consumer passes over.
TEST_F(MatchTest, PostOnlyQueuesPastUnexpectedAndSearchGoesOnAfterAnEntry) {
  proto_match_hit h{};
  ASSERT_EQ(proto_match_arrive(&m_, 0, 1, 10, &h), 0);
  const uint32_t a = proto_match_post_only(&m_, 0, 0, PROTO_ADDR_ANY, 100);
  ASSERT_NE(a, PROTO_MATCH_NIL);
  EXPECT_EQ(proto_match_unexpected_count(&m_), 1u);
  EXPECT_EQ(proto_match_posted_count(&m_), 1u);
  ASSERT_NE(proto_match_post_only(&m_, 0, 0, 2, 101), PROTO_MATCH_NIL);  // from source 2 only
  ASSERT_NE(proto_match_post_only(&m_, 0, 0, PROTO_ADDR_ANY, 102), PROTO_MATCH_NIL);
  EXPECT_EQ(proto_match_unexpected_count(&m_), 1u);
  EXPECT_EQ(proto_match_find_posted(&m_, 0, 1), a);
  const uint32_t next = proto_match_find_posted_after(&m_, a, 0, 1);
  ASSERT_NE(next, PROTO_MATCH_NIL);
  EXPECT_EQ(pool_[next].cookie, 102u);  // the source-2 receive does not match source 1
  EXPECT_EQ(proto_match_find_posted_after(&m_, next, 0, 1), PROTO_MATCH_NIL);
  const uint32_t from2 = proto_match_find_posted_after(&m_, a, 0, 2);
  ASSERT_NE(from2, PROTO_MATCH_NIL);
  EXPECT_EQ(pool_[from2].cookie, 101u);
  // An entry that is not a posted receive starts no search.
  EXPECT_EQ(proto_match_find_posted_after(&m_, 7, 0, 1), PROTO_MATCH_NIL);
  EXPECT_EQ(proto_match_find_posted_after(&m_, 100, 0, 1), PROTO_MATCH_NIL);
  Init(1);
  ASSERT_NE(proto_match_post_only(&m_, 0, 0, PROTO_ADDR_ANY, 1), PROTO_MATCH_NIL);
  EXPECT_EQ(proto_match_post_only(&m_, 0, 0, PROTO_ADDR_ANY, 2), PROTO_MATCH_NIL);
}

TEST_F(MatchTest, ReceiveTakesOldestUnexpectedMessage) {
  proto_match_hit h{};
  ASSERT_EQ(proto_match_arrive(&m_, 7, 1, 10, &h), 0);
  ASSERT_EQ(proto_match_arrive(&m_, 8, 1, 11, &h), 0);
  ASSERT_EQ(proto_match_arrive(&m_, 7, 2, 12, &h), 0);
  ASSERT_EQ(proto_match_post_recv(&m_, 7, 0, 2, 50, &h), 1);
  EXPECT_EQ(h.cookie, 12u);
  EXPECT_EQ(h.src, 2u);
  ASSERT_EQ(proto_match_post_recv(&m_, 0, ~0ull, PROTO_ADDR_ANY, 51, &h), 1);
  EXPECT_EQ(h.cookie, 10u);
  EXPECT_EQ(h.tag, 7u);
  ASSERT_EQ(proto_match_post_recv(&m_, 0, ~0ull, PROTO_ADDR_ANY, 52, &h), 1);
  EXPECT_EQ(h.cookie, 11u);
  EXPECT_EQ(h.tag, 8u);
  EXPECT_EQ(proto_match_free_count(&m_), 8u);
}

TEST_F(MatchTest, IgnoreMaskAndSource) {
  proto_match_hit h{};
  // Matches any tag whose high 32 bits are 0xab, from source 4 only.
  ASSERT_EQ(proto_match_post_recv(&m_, 0xab00000000ull, 0xffffffffull, 4, 1, &h), 0);
  EXPECT_EQ(proto_match_arrive(&m_, 0xab12345678ull, 5, 20, &h), 0);  // wrong source
  EXPECT_EQ(proto_match_arrive(&m_, 0xac12345678ull, 4, 21, &h), 0);  // wrong high bits
  ASSERT_EQ(proto_match_arrive(&m_, 0xab12345678ull, 4, 22, &h), 1);
  EXPECT_EQ(h.cookie, 1u);
  EXPECT_EQ(h.ignore, 0xffffffffull);
  EXPECT_EQ(proto_match_unexpected_count(&m_), 2u);
  EXPECT_TRUE(proto_match_tag_matches(0, ~0ull, PROTO_ADDR_ANY, 0x1234, 99));
  EXPECT_FALSE(proto_match_tag_matches(1, 0, PROTO_ADDR_ANY, 3, 99));
  EXPECT_TRUE(proto_match_tag_matches(1, 2, PROTO_ADDR_ANY, 3, 99));
}

TEST_F(MatchTest, PeekClaimDiscard) {
  proto_match_hit h{};
  ASSERT_EQ(proto_match_arrive(&m_, 1, 0, 10, &h), 0);
  ASSERT_EQ(proto_match_arrive(&m_, 1, 0, 11, &h), 0);
  ASSERT_EQ(proto_match_arrive(&m_, 1, 0, 12, &h), 0);
  EXPECT_EQ(proto_match_peek(&m_, 2, 0, PROTO_ADDR_ANY, PROTO_MATCH_PEEK, &h), 0);
  EXPECT_EQ(proto_match_peek(&m_, 1, 0, PROTO_ADDR_ANY, 7, &h), -FI_EINVAL);
  ASSERT_EQ(proto_match_peek(&m_, 1, 0, PROTO_ADDR_ANY, PROTO_MATCH_PEEK, &h), 1);
  EXPECT_EQ(h.cookie, 10u);
  EXPECT_EQ(proto_match_unexpected_count(&m_), 3u);
  // Claimed: later peeks and receives skip it.
  ASSERT_EQ(proto_match_peek(&m_, 1, 0, PROTO_ADDR_ANY, PROTO_MATCH_PEEK_CLAIM, &h), 1);
  EXPECT_EQ(h.cookie, 10u);
  ASSERT_EQ(proto_match_peek(&m_, 1, 0, PROTO_ADDR_ANY, PROTO_MATCH_PEEK, &h), 1);
  EXPECT_EQ(h.cookie, 11u);
  EXPECT_EQ(proto_match_claim(&m_, 11, &h), -FI_ENOMSG);  // not claimed
  ASSERT_EQ(proto_match_post_recv(&m_, 1, 0, PROTO_ADDR_ANY, 90, &h), 1);
  EXPECT_EQ(h.cookie, 11u);
  ASSERT_EQ(proto_match_claim(&m_, 10, &h), 0);
  EXPECT_EQ(h.cookie, 10u);
  EXPECT_EQ(proto_match_claim(&m_, 10, &h), -FI_ENOMSG);
  // Peek-and-discard removes at once; claim-and-discard removes a reserved one.
  ASSERT_EQ(proto_match_arrive(&m_, 1, 0, 13, &h), 0);
  ASSERT_EQ(proto_match_peek(&m_, 1, 0, PROTO_ADDR_ANY, PROTO_MATCH_PEEK_DISCARD, &h), 1);
  EXPECT_EQ(h.cookie, 12u);
  ASSERT_EQ(proto_match_peek(&m_, 1, 0, PROTO_ADDR_ANY, PROTO_MATCH_PEEK_CLAIM, &h), 1);
  EXPECT_EQ(h.cookie, 13u);
  EXPECT_EQ(proto_match_peek(&m_, 1, 0, PROTO_ADDR_ANY, PROTO_MATCH_PEEK, &h), 0);
  ASSERT_EQ(proto_match_discard(&m_, 13, &h), 0);
  EXPECT_EQ(proto_match_unexpected_count(&m_), 0u);
  EXPECT_EQ(proto_match_free_count(&m_), 8u);
}

TEST_F(MatchTest, CancelRemovesOnlyThatPostedReceive) {
  proto_match_hit h{};
  ASSERT_EQ(proto_match_post_recv(&m_, 3, 0, PROTO_ADDR_ANY, 1, &h), 0);
  ASSERT_EQ(proto_match_post_recv(&m_, 3, 0, PROTO_ADDR_ANY, 2, &h), 0);
  EXPECT_EQ(proto_match_cancel(&m_, 9, &h), -FI_ENOENT);
  ASSERT_EQ(proto_match_cancel(&m_, 1, &h), 0);
  EXPECT_EQ(h.cookie, 1u);
  EXPECT_EQ(proto_match_cancel(&m_, 1, &h), -FI_ENOENT);
  ASSERT_EQ(proto_match_arrive(&m_, 3, 0, 40, &h), 1);
  EXPECT_EQ(h.cookie, 2u);
  // Cancel does not touch unexpected messages that carry the same cookie.
  ASSERT_EQ(proto_match_arrive(&m_, 3, 0, 40, &h), 0);
  EXPECT_EQ(proto_match_cancel(&m_, 40, &h), -FI_ENOENT);
}

TEST_F(MatchTest, FullPoolRefusesWithoutChange) {
  proto_match_hit h{};
  for (uint64_t i = 0; i < 8; i++) ASSERT_EQ(proto_match_post_recv(&m_, 1, 0, PROTO_ADDR_ANY, i, &h), 0);
  EXPECT_EQ(proto_match_post_recv(&m_, 1, 0, PROTO_ADDR_ANY, 8, &h), -FI_EAGAIN);
  EXPECT_EQ(proto_match_arrive(&m_, 2, 0, 8, &h), -FI_EAGAIN);
  EXPECT_EQ(proto_match_posted_count(&m_), 8u);
  // A match still goes through on a full pool: it frees an entry.
  ASSERT_EQ(proto_match_arrive(&m_, 1, 0, 8, &h), 1);
  EXPECT_EQ(h.cookie, 0u);
  EXPECT_EQ(proto_match_free_count(&m_), 1u);
}

TEST_F(MatchTest, RemoveRejectsFreeOrOutOfRangeIndex) {
  proto_match_hit h{};
  EXPECT_EQ(proto_match_remove(&m_, 0, &h), -FI_EINVAL);
  EXPECT_EQ(proto_match_remove(&m_, 8, &h), -FI_EINVAL);
  EXPECT_EQ(proto_match_remove(&m_, PROTO_MATCH_NIL, &h), -FI_EINVAL);
  ASSERT_EQ(proto_match_post_recv(&m_, 1, 0, PROTO_ADDR_ANY, 5, &h), 0);
  const uint32_t i = proto_match_find_posted(&m_, 1, 0);
  ASSERT_NE(i, PROTO_MATCH_NIL);
  ASSERT_EQ(proto_match_remove(&m_, i, &h), 0);
  EXPECT_EQ(h.cookie, 5u);
  EXPECT_EQ(proto_match_remove(&m_, i, &h), -FI_EINVAL);
}

// ---- Reference model --------------------------------------------------------

struct RefEntry {
  uint64_t tag, ignore, src, cookie;
  bool claimed;
};

bool RefMatches(uint64_t tag, uint64_t ignore, uint64_t want_src, uint64_t mtag, uint64_t msrc) {
  return ((tag ^ mtag) & ~ignore) == 0 && (want_src == PROTO_ADDR_ANY || want_src == msrc);
}

class RefModel {
 public:
  explicit RefModel(size_t cap) : cap_(cap) {}
  size_t Used() const { return posted_.size() + unexpected_.size(); }

  int PostRecv(uint64_t tag, uint64_t ignore, uint64_t src, uint64_t cookie, uint64_t* got) {
    for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
      if (!it->claimed && RefMatches(tag, ignore, src, it->tag, it->src)) {
        *got = it->cookie;
        unexpected_.erase(it);
        return 1;
      }
    }
    if (Used() == cap_) return -FI_EAGAIN;
    posted_.push_back({tag, ignore, src, cookie, false});
    return 0;
  }
  int Arrive(uint64_t tag, uint64_t src, uint64_t cookie, uint64_t* got) {
    for (auto it = posted_.begin(); it != posted_.end(); ++it) {
      if (RefMatches(it->tag, it->ignore, it->src, tag, src)) {
        *got = it->cookie;
        posted_.erase(it);
        return 1;
      }
    }
    if (Used() == cap_) return -FI_EAGAIN;
    unexpected_.push_back({tag, 0, src, cookie, false});
    return 0;
  }
  int Peek(uint64_t tag, uint64_t ignore, uint64_t src, int mode, uint64_t* got) {
    for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
      if (!it->claimed && RefMatches(tag, ignore, src, it->tag, it->src)) {
        *got = it->cookie;
        if (mode == PROTO_MATCH_PEEK_CLAIM) it->claimed = true;
        if (mode == PROTO_MATCH_PEEK_DISCARD) unexpected_.erase(it);
        return 1;
      }
    }
    return 0;
  }
  int Claim(uint64_t cookie) {
    for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
      if (it->claimed && it->cookie == cookie) {
        unexpected_.erase(it);
        return 0;
      }
    }
    return -FI_ENOMSG;
  }
  int Cancel(uint64_t cookie) {
    for (auto it = posted_.begin(); it != posted_.end(); ++it) {
      if (it->cookie == cookie) {
        posted_.erase(it);
        return 0;
      }
    }
    return -FI_ENOENT;
  }
  const std::deque<RefEntry>& posted() const { return posted_; }
  const std::deque<RefEntry>& unexpected() const { return unexpected_; }

 private:
  size_t cap_;
  std::deque<RefEntry> posted_, unexpected_;
};

// Walks both lists of the structure and checks they equal the model's, in order.
void ExpectSameLists(const proto_match& m, const RefModel& ref) {
  auto walk = [&](const proto_match_queue& q, const std::deque<RefEntry>& want, uint32_t list) {
    ASSERT_EQ(q.count, want.size());
    uint32_t i = q.head, prev = PROTO_MATCH_NIL;
    for (const RefEntry& w : want) {
      ASSERT_NE(i, PROTO_MATCH_NIL);
      const proto_match_entry& e = m.pool[i];
      EXPECT_EQ(e.list, list);
      EXPECT_EQ(e.prev, prev);
      EXPECT_EQ(e.tag, w.tag);
      EXPECT_EQ(e.src, w.src);
      EXPECT_EQ(e.cookie, w.cookie);
      EXPECT_EQ(e.claimed != 0, w.claimed);
      prev = i;
      i = e.next;
    }
    EXPECT_EQ(i, PROTO_MATCH_NIL);
    EXPECT_EQ(q.tail, prev);
  };
  walk(m.posted, ref.posted(), PROTO_MATCH_POSTED);
  walk(m.unexpected, ref.unexpected(), PROTO_MATCH_UNEXPECTED);
  EXPECT_EQ(m.nfree + m.posted.count + m.unexpected.count, m.capacity);
}

class MatchRandomTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(MatchRandomTest, AgreesWithReferenceModel) {
  const uint32_t seed = GetParam();
  std::mt19937_64 rng(seed);
  const uint32_t cap = 4 + seed % 29;
  std::vector<proto_match_entry> pool(cap);
  proto_match m{};
  ASSERT_EQ(proto_match_init(&m, pool.data(), cap), 0);
  RefModel ref(cap);
  uint64_t next_cookie = 1;
  std::vector<uint64_t> claimed_cookies, posted_cookies;
  // Few tags, sources and masks so that matches, misses and ties all happen.
  auto tag = [&] { return rng() % 6 | ((rng() % 3) << 40); };
  auto src = [&] { return rng() % 3; };
  auto want_src = [&] { return rng() % 4 == 0 ? PROTO_ADDR_ANY : src(); };
  auto ignore = [&] {
    switch (rng() % 4) {
      case 0: return ~0ull;
      case 1: return 1ull;
      case 2: return 0xffull << 40;
      default: return 0ull;
    }
  };
  for (int step = 0; step < 4000; step++) {
    proto_match_hit h{};
    uint64_t got = 0;
    const int op = static_cast<int>(rng() % 10);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " step " << step << " op " << op);
    if (op < 3) {
      const uint64_t t = tag(), ig = ignore(), s = want_src(), c = next_cookie++;
      const int want = ref.PostRecv(t, ig, s, c, &got);
      ASSERT_EQ(proto_match_post_recv(&m, t, ig, s, c, &h), want);
      if (want == 1) {
        EXPECT_EQ(h.cookie, got);
      }
      if (want == 0) posted_cookies.push_back(c);
    } else if (op < 6) {
      const uint64_t t = tag(), s = src(), c = next_cookie++;
      const int want = ref.Arrive(t, s, c, &got);
      ASSERT_EQ(proto_match_arrive(&m, t, s, c, &h), want);
      if (want == 1) {
        EXPECT_EQ(h.cookie, got);
        EXPECT_TRUE(proto_match_tag_matches(h.tag, h.ignore, h.src, t, s));
      }
    } else if (op < 8) {
      const uint64_t t = tag(), ig = ignore(), s = want_src();
      const int mode = static_cast<int>(rng() % 3);
      const int want = ref.Peek(t, ig, s, mode, &got);
      ASSERT_EQ(proto_match_peek(&m, t, ig, s, mode, &h), want);
      if (want == 1) {
        EXPECT_EQ(h.cookie, got);
        if (mode == PROTO_MATCH_PEEK_CLAIM) claimed_cookies.push_back(got);
      }
    } else if (op == 8) {
      // Claim or discard a reserved message, or one that was never reserved.
      uint64_t c = next_cookie + 1000;
      if (!claimed_cookies.empty() && rng() % 4 != 0) {
        const size_t k = rng() % claimed_cookies.size();
        c = claimed_cookies[k];
        claimed_cookies.erase(claimed_cookies.begin() + static_cast<long>(k));
      }
      const int want = ref.Claim(c);
      ASSERT_EQ(rng() % 2 ? proto_match_claim(&m, c, &h) : proto_match_discard(&m, c, &h), want);
      if (want == 0) {
        EXPECT_EQ(h.cookie, c);
      }
    } else {
      uint64_t c = next_cookie + 1000;
      if (!posted_cookies.empty() && rng() % 4 != 0) c = posted_cookies[rng() % posted_cookies.size()];
      const int want = ref.Cancel(c);
      ASSERT_EQ(proto_match_cancel(&m, c, &h), want);
      if (want == 0) {
        EXPECT_EQ(h.cookie, c);
      }
    }
    if (step % 16 == 0 || HasFailure()) ExpectSameLists(m, ref);
    if (HasFailure()) return;
  }
  ExpectSameLists(m, ref);
}

INSTANTIATE_TEST_SUITE_P(Seeds, MatchRandomTest, ::testing::Range(1u, 41u));

TEST(MatchC11, HeaderBuildsAsStrictC11) { EXPECT_EQ(proto_c11_check_match(), 0); }

}  // namespace
