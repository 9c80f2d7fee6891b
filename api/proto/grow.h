/*
 * grow.h - a protocol endpoint whose peer table grows at run time. It starts
 * with cfg.max_peers entries and their receive buffers posted; each
 * proto_grow_peers adds entries, in a table the consumer allocates, and posts
 * their receive buffers, up to a limit fixed at set-up. Memory is then spent
 * per peer present, not per peer possible.
 *
 * Set-up differs from proto.h's in three places:
 *   the QP's receive queue needs proto_grow_rx_limit(&cfg, limit) entries;
 *   the bounce region is proto_grow_bounce_size(&cfg, &dev, limit) bytes:
 *   receive buffers for the limit, then the transmit buffers (from
 *   proto_grow_tx_offset). Only the buffers of peers present are posted, so a
 *   region whose pages are committed when first touched (anonymous mmap) costs
 *   what the peers present use;
 *   proto_grow_reserve(&ep, limit, tx_lkey) right after proto_ep_init, before
 *   anything is sent.
 * Then, when proto_peer_add says -FI_ENOSPC:
 *   mem = proto_grow_mem_size(&ep.cfg, n) bytes (8-byte aligned, kept while the
 *   endpoint lives, as is the memory proto_ep_init was given);
 *   proto_grow_peers(&ep, n, mem, len, rx_lkey), and proto_peer_add again.
 * Registrations: register the whole region once and pass its lkey to each
 * call, or, where registering pins memory, register the transmit buffers
 * apart (tx_lkey) and only the receive buffers of the peers present: the
 * first proto_grow_rx_bytes(&cfg, &dev, cfg.max_peers) bytes for
 * proto_ep_init, the first proto_grow_rx_bytes(&cfg, &dev, n) for each growth
 * (rx_lkey). Keep every registration while the endpoint lives: buffers posted
 * under an earlier one stay posted.
 * Peer indices stay as they were. Host code, in the C subset of the core.
 */
#ifndef XPUFAB_API_PROTO_GROW_H_
#define XPUFAB_API_PROTO_GROW_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "api/proto/proto.h"

#ifdef __cplusplus
extern "C" {
#endif

XPU_FUNC uint32_t proto_grow_rx_limit(const struct proto_config *c, uint32_t limit) {
  return limit * (c->credits + PROTO_CTRL_SLACK);
}

XPU_FUNC size_t proto_grow_bounce_size(const struct proto_config *c, const struct proto_dev *d, uint32_t limit) {
  return (size_t)(proto_grow_rx_limit(c, limit) + c->ntx) * proto_buf_size(d);
}

/* Where the transmit buffers start in the bounce region of a table that may grow to `limit`. */
XPU_FUNC size_t proto_grow_tx_offset(const struct proto_config *c, const struct proto_dev *d, uint32_t limit) {
  return (size_t)proto_grow_rx_limit(c, limit) * proto_buf_size(d);
}

/* Bytes at the start of the bounce region that the receive buffers of `n` peers take. */
XPU_FUNC size_t proto_grow_rx_bytes(const struct proto_config *c, const struct proto_dev *d, uint32_t n) {
  return (size_t)proto_grow_rx_limit(c, n) * proto_buf_size(d);
}

/* The pieces of a grown table, carved by the same code that sizes them. */
XPU_FUNC void proto_grow_layout(struct proto_carve *k, const struct proto_config *c, uint32_t n,
                                struct proto_peer **peers, uint32_t **held, struct proto_orphan **orphans) {
  *peers = (struct proto_peer *)proto_carve_take(k, sizeof(struct proto_peer) * n);
  *held = (uint32_t *)proto_carve_take(k, sizeof(uint32_t) * n * c->credits);
  *orphans = (struct proto_orphan *)proto_carve_take(k, sizeof(struct proto_orphan) * proto_grow_rx_limit(c, n));
}

XPU_FUNC size_t proto_grow_mem_size(const struct proto_config *c, uint32_t n) {
  struct proto_carve k = {0, 0};
  struct proto_peer *p;
  uint32_t *h;
  struct proto_orphan *o;
  proto_grow_layout(&k, c, n, &p, &h, &o);
  return (size_t)k.off + 64;
}

/*
 * Places the transmit buffers after the receive buffers of `limit` peers, so
 * that later receive buffers never move them, registered with `tx_lkey`. 0;
 * -FI_EINVAL for a limit below the table's size, beyond the receive queue, or
 * once a packet was sent.
 */
XPU_FUNC int proto_grow_reserve(struct proto_ep *ep, uint32_t limit, uint32_t tx_lkey) {
  if (!ep || limit < ep->cfg.max_peers || limit > 0xfffeu) return -FI_EINVAL;
  if (proto_grow_rx_limit(&ep->cfg, limit) > ep->dev.rq.num_entries) return -FI_EINVAL;
  if (ep->tx_free_count != ep->cfg.ntx || ep->txq.count) return -FI_EINVAL;
  ep->nrx = proto_grow_rx_limit(&ep->cfg, limit);
  ep->bounce_lkey = tx_lkey;
  return 0;
}

/*
 * Makes the peer table n entries (n > the current size, within the reserved
 * limit) in `mem`, and posts the new entries' receive buffers under `rx_lkey`
 * (which covers the first proto_grow_rx_bytes(cfg, dev, n) bytes of the
 * region; buffers reposted later take it too). 0; -FI_ENOSPC beyond the
 * limit; -FI_EINVAL for memory too short; a post's error.
 */
XPU_FUNC int proto_grow_peers(struct proto_ep *ep, uint32_t n, void *mem, size_t mem_len, uint32_t rx_lkey) {
  if (!ep || !mem || ((uintptr_t)mem & 7u)) return -FI_EINVAL;
  const uint32_t old = ep->cfg.max_peers;
  if (n <= old) return 0;
  if (proto_grow_rx_limit(&ep->cfg, n) > ep->nrx) return -FI_ENOSPC;
  if (mem_len < proto_grow_mem_size(&ep->cfg, n)) return -FI_EINVAL;
  struct proto_carve k = {(uint8_t *)mem, 0};
  k.off = proto_align_up((uintptr_t)mem, 64) - (uintptr_t)mem;
  struct proto_peer *peers;
  uint32_t *held;
  struct proto_orphan *orphans;
  proto_grow_layout(&k, &ep->cfg, n, &peers, &held, &orphans);
  const uint32_t credits = ep->cfg.credits;
  memcpy(peers, ep->peers, sizeof(struct proto_peer) * old);
  memcpy(held, ep->held_pool, sizeof(uint32_t) * old * credits);
  memset(held + (size_t)old * credits, 0, sizeof(uint32_t) * (n - old) * credits);
  for (uint32_t i = 0; i < n; ++i) {
    if (i >= old) {
      memset(&peers[i], 0, sizeof(peers[i]));
      peers[i].q.head = peers[i].q.tail = PROTO_NONE;
    }
    peers[i].held = held + (size_t)i * credits;
  }
  memcpy(orphans, ep->orphans, sizeof(struct proto_orphan) * ep->norphans);
  const uint32_t first = proto_rx_buffers(&ep->cfg);
  ep->peers = peers;
  ep->held_pool = held;
  ep->orphans = orphans;
  ep->cfg.max_peers = n;
  ep->rx_lkey = rx_lkey;
  const uint32_t last = proto_rx_buffers(&ep->cfg);
  for (uint32_t b = first; b < last; ++b) {
    const int rc = proto_rx_post(ep, b);
    if (rc) return rc;
  }
  return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_API_PROTO_GROW_H_ */
