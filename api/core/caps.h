/*
 * api/core/caps.h - capability classes used by fi_getinfo matching (from
 * fi_getinfo(3)).  Primary capabilities are returned only when requested
 * (or all, when the hints ask for none); secondary ones may be returned
 * unrequested.  Opt-in capabilities (FI_XPU) are returned only when asked
 * for, even to hints that request no capabilities at all.
 */
#ifndef XPUFAB_API_CORE_CAPS_H_
#define XPUFAB_API_CORE_CAPS_H_

#include <rdma/fabric.h>

#include <cstdint>

namespace xpufab::core {

inline constexpr uint64_t kCapModifiers = FI_READ | FI_WRITE | FI_RECV | FI_SEND |
                                          FI_REMOTE_READ | FI_REMOTE_WRITE;

inline constexpr uint64_t kPrimaryCaps =
    FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_MULTICAST | FI_NAMED_RX_CTX |
    FI_DIRECTED_RECV | FI_TAGGED_DIRECTED_RECV | FI_EXACT_DIRECTED_RECV |
    FI_HMEM | FI_COLLECTIVE | FI_XPU | kCapModifiers;

inline constexpr uint64_t kSecondaryCaps =
    FI_MULTI_RECV | FI_TAGGED_MULTI_RECV | FI_SOURCE | FI_RMA_EVENT |
    FI_SHARED_AV | FI_TRIGGER | FI_FENCE | FI_LOCAL_COMM | FI_REMOTE_COMM |
    FI_SOURCE_ERR | FI_RMA_PMEM | FI_AV_USER_ID | FI_PEER;

inline constexpr uint64_t kOptInCaps = FI_XPU;

inline constexpr uint64_t kAllCaps = kPrimaryCaps | kSecondaryCaps;

// fi_getinfo flags the core understands.
inline constexpr uint64_t kGetinfoFlags =
    FI_NUMERICHOST | FI_SOURCE | FI_PROV_ATTR_ONLY | FI_RESCAN;

// Transfer operation flags valid in tx_attr/rx_attr op_flags.
inline constexpr uint64_t kOpFlags =
    FI_MULTI_RECV | FI_REMOTE_CQ_DATA | FI_MORE | FI_PEEK | FI_TRIGGER |
    FI_FENCE | FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE |
    FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_AFFINITY |
    FI_COMMIT_COMPLETE | FI_MATCH_COMPLETE | FI_CLAIM | FI_DISCARD |
    FI_AUTH_KEY | FI_PEER_TRANSFER | FI_XPU;

// API 1.x's FI_TAG_GENERIC mem_tag_format: every tag bit free for the application.
inline constexpr uint64_t kGenericTagFormat1x = 0xaaaaaaaaaaaaaaaaULL;

// Operation flags every endpoint honours whatever its offer lists: FI_COMPLETION asks for the
// completions an endpoint bound with FI_SELECTIVE_COMPLETION would not otherwise report.
inline constexpr uint64_t kAlwaysOpFlags = FI_COMPLETION;

// The modifiers refine one class of primary capability each (fi_getinfo(3)): FI_SEND/FI_RECV
// the message-style operations, FI_READ/FI_WRITE/FI_REMOTE_* the RMA and atomic ones.
inline constexpr uint64_t kMsgClassCaps = FI_MSG | FI_TAGGED | FI_COLLECTIVE | FI_MULTICAST;
inline constexpr uint64_t kMsgModifiers = FI_SEND | FI_RECV;
inline constexpr uint64_t kRmaClassCaps = FI_RMA | FI_ATOMIC;
inline constexpr uint64_t kRmaModifiers = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

// A class of primary capability with none of its modifiers means every direction of that class,
// whatever modifiers the other class carries: FI_MSG|FI_RMA|FI_WRITE still sends and receives.
inline uint64_t expand_modifiers(uint64_t caps) {
  uint64_t out = caps;
  if ((caps & kMsgClassCaps) && !(caps & kMsgModifiers)) out |= kMsgModifiers;
  if ((caps & kRmaClassCaps) && !(caps & kRmaModifiers)) out |= kRmaModifiers;
  if (!(caps & (kMsgClassCaps | kRmaClassCaps)) && !(caps & kCapModifiers)) out |= kCapModifiers;
  return out;
}

// `caps` with the modifiers of each class it names but leaves unrefined taken from `offered`:
// what a request for that class is granted.
inline uint64_t grant_modifiers(uint64_t caps, uint64_t offered) {
  const uint64_t avail = expand_modifiers(offered);
  uint64_t out = caps;
  if ((caps & kMsgClassCaps) && !(caps & kMsgModifiers)) out |= avail & kMsgModifiers;
  if ((caps & kRmaClassCaps) && !(caps & kRmaModifiers)) out |= avail & kRmaModifiers;
  return out;
}

}  // namespace xpufab::core

#endif  // XPUFAB_API_CORE_CAPS_H_
