/*
 * match.h - tag matching with libfabric's FI_TAGGED semantics, as a pure data
 * structure: a posted-receive list and an unexpected-message list sharing one
 * fixed pool of entries in memory the caller provides (host memory for host
 * endpoints, XPU-context memory for device endpoints). No I/O, no allocation.
 *
 * A posted receive (tag, ignore, src) matches a message (mtag, msrc) when
 *   ((tag ^ mtag) & ~ignore) == 0  and  (src == PROTO_ADDR_ANY || src == msrc).
 * Receives match in posting order and messages in arrival order, because both
 * lists are FIFO and every search walks from the oldest entry.
 *
 * Each entry carries a 64-bit cookie the consumer chooses (a pending-receive
 * index, a bounce-buffer slot...); the structure never interprets it.
 *
 * FI_PEEK / FI_CLAIM / FI_DISCARD map onto:
 *   proto_match_peek(PROTO_MATCH_PEEK)          find, leave in place
 *   proto_match_peek(PROTO_MATCH_PEEK_CLAIM)    find and reserve: later receives
 *                                               and peeks skip it
 *   proto_match_peek(PROTO_MATCH_PEEK_DISCARD)  find and remove
 *   proto_match_claim(cookie)                   remove a reserved entry and
 *                                               hand it over (FI_CLAIM)
 *   proto_match_discard(cookie)                 remove a reserved entry
 *                                               (FI_CLAIM | FI_DISCARD)
 * fi_cancel of a posted receive is proto_match_cancel(cookie).
 *
 * Not thread-safe: whoever owns the endpoint's progress serializes calls.
 * Indices, not pointers, link the entries, so a pool built by the host stays
 * valid when device code maps it at another address.
 *
 * The same file compiles as C11, C++17 and under nvcc (host and device).
 */
#ifndef XPUFAB_API_PROTO_MATCH_H_
#define XPUFAB_API_PROTO_MATCH_H_

#include <stdint.h>

#include <rdma/fi_errno.h>

#include "device/xpu_func.h"

/* A receive from any source: the same value as libfabric's FI_ADDR_UNSPEC. */
#ifndef PROTO_ADDR_ANY
#define PROTO_ADDR_ANY ((uint64_t)-1)
#endif

/* No entry (end of list, empty pool, not found). */
#define PROTO_MATCH_NIL 0xffffffffu

enum proto_match_list_id {
  PROTO_MATCH_FREE = 0,
  PROTO_MATCH_POSTED = 1,
  PROTO_MATCH_UNEXPECTED = 2,
};

enum proto_match_peek_mode {
  PROTO_MATCH_PEEK = 0,
  PROTO_MATCH_PEEK_CLAIM = 1,
  PROTO_MATCH_PEEK_DISCARD = 2,
};

struct proto_match_entry {
  uint64_t tag;
  uint64_t ignore; /* posted receives only; 0 for messages */
  uint64_t src;    /* posted: wanted source or PROTO_ADDR_ANY; unexpected: sender */
  uint64_t cookie;
  uint32_t next;
  uint32_t prev;
  uint32_t list;    /* enum proto_match_list_id */
  uint32_t claimed; /* unexpected only: reserved by a FI_PEEK | FI_CLAIM */
};

struct proto_match_queue {
  uint32_t head;
  uint32_t tail;
  uint32_t count;
  uint32_t reserved_;
};

struct proto_match {
  struct proto_match_entry *pool;
  uint32_t capacity;
  uint32_t free_head;
  uint32_t nfree;
  uint32_t reserved_;
  struct proto_match_queue posted;
  struct proto_match_queue unexpected;
};

/* What a match, a peek or a removal hands back: the other side's entry. */
struct proto_match_hit {
  uint64_t tag;
  uint64_t ignore;
  uint64_t src;
  uint64_t cookie;
};

XPU_FUNC int proto_match_tag_matches(uint64_t want_tag, uint64_t ignore, uint64_t want_src, uint64_t tag,
                                     uint64_t src) {
  return ((want_tag ^ tag) & ~ignore) == 0 && (want_src == PROTO_ADDR_ANY || want_src == src);
}

/* 0, or -FI_EINVAL for a missing pool or a capacity the index space cannot hold. */
XPU_FUNC int proto_match_init(struct proto_match *m, struct proto_match_entry *pool, uint32_t capacity) {
  uint32_t i;
  if (m == 0 || (pool == 0 && capacity != 0) || capacity >= PROTO_MATCH_NIL) return -FI_EINVAL;
  m->pool = pool;
  m->capacity = capacity;
  m->reserved_ = 0;
  for (i = 0; i < capacity; i++) {
    pool[i].tag = 0;
    pool[i].ignore = 0;
    pool[i].src = 0;
    pool[i].cookie = 0;
    pool[i].next = i + 1 < capacity ? i + 1 : PROTO_MATCH_NIL;
    pool[i].prev = PROTO_MATCH_NIL;
    pool[i].list = PROTO_MATCH_FREE;
    pool[i].claimed = 0;
  }
  m->free_head = capacity ? 0 : PROTO_MATCH_NIL;
  m->nfree = capacity;
  m->posted.head = m->posted.tail = PROTO_MATCH_NIL;
  m->posted.count = 0;
  m->posted.reserved_ = 0;
  m->unexpected.head = m->unexpected.tail = PROTO_MATCH_NIL;
  m->unexpected.count = 0;
  m->unexpected.reserved_ = 0;
  return 0;
}

XPU_FUNC uint32_t proto_match_posted_count(const struct proto_match *m) { return m->posted.count; }
XPU_FUNC uint32_t proto_match_unexpected_count(const struct proto_match *m) { return m->unexpected.count; }
XPU_FUNC uint32_t proto_match_free_count(const struct proto_match *m) { return m->nfree; }

XPU_FUNC struct proto_match_queue *proto_match_queue_of_(struct proto_match *m, uint32_t list) {
  return list == PROTO_MATCH_POSTED ? &m->posted : &m->unexpected;
}

/* Calls that take *out always write it (zeros when nothing is handed over). */
XPU_FUNC void proto_match_hit_clear_(struct proto_match_hit *out) {
  if (out == 0) return;
  out->tag = out->ignore = out->src = out->cookie = 0;
}

XPU_FUNC void proto_match_hit_of_(const struct proto_match_entry *e, struct proto_match_hit *out) {
  if (out == 0) return;
  out->tag = e->tag;
  out->ignore = e->ignore;
  out->src = e->src;
  out->cookie = e->cookie;
}

/* Appends a new entry to the tail of `list`; its index, or PROTO_MATCH_NIL when the pool is full. */
XPU_FUNC uint32_t proto_match_append_(struct proto_match *m, uint32_t list, uint64_t tag, uint64_t ignore,
                                      uint64_t src, uint64_t cookie) {
  struct proto_match_queue *q = proto_match_queue_of_(m, list);
  struct proto_match_entry *e;
  const uint32_t i = m->free_head;
  if (i == PROTO_MATCH_NIL) return PROTO_MATCH_NIL;
  e = &m->pool[i];
  m->free_head = e->next;
  m->nfree--;
  e->tag = tag;
  e->ignore = ignore;
  e->src = src;
  e->cookie = cookie;
  e->list = list;
  e->claimed = 0;
  e->next = PROTO_MATCH_NIL;
  e->prev = q->tail;
  if (q->tail != PROTO_MATCH_NIL)
    m->pool[q->tail].next = i;
  else
    q->head = i;
  q->tail = i;
  q->count++;
  return i;
}

/*
 * Unlinks entry `i` (on either list) and returns it to the pool; its contents
 * go to *out first (zeros and -FI_EINVAL for an index that is not on a list).
 */
XPU_FUNC int proto_match_remove(struct proto_match *m, uint32_t i, struct proto_match_hit *out) {
  struct proto_match_entry *e;
  struct proto_match_queue *q;
  proto_match_hit_clear_(out);
  if (i >= m->capacity || m->pool[i].list == PROTO_MATCH_FREE) return -FI_EINVAL;
  e = &m->pool[i];
  q = proto_match_queue_of_(m, e->list);
  proto_match_hit_of_(e, out);
  if (e->prev != PROTO_MATCH_NIL)
    m->pool[e->prev].next = e->next;
  else
    q->head = e->next;
  if (e->next != PROTO_MATCH_NIL)
    m->pool[e->next].prev = e->prev;
  else
    q->tail = e->prev;
  q->count--;
  e->list = PROTO_MATCH_FREE;
  e->claimed = 0;
  e->prev = PROTO_MATCH_NIL;
  e->next = m->free_head;
  m->free_head = i;
  m->nfree++;
  return 0;
}

/* The oldest posted receive a message (tag, src) matches, or PROTO_MATCH_NIL. */
XPU_FUNC uint32_t proto_match_find_posted(const struct proto_match *m, uint64_t tag, uint64_t src) {
  uint32_t i;
  for (i = m->posted.head; i != PROTO_MATCH_NIL; i = m->pool[i].next) {
    const struct proto_match_entry *e = &m->pool[i];
    if (proto_match_tag_matches(e->tag, e->ignore, e->src, tag, src)) return i;
  }
  return PROTO_MATCH_NIL;
}

/*
 * The oldest posted receive after entry `from` that a message (tag, src)
 * matches, or PROTO_MATCH_NIL: the search goes on past a receive the consumer
 * passes over (a multi-receive buffer without room for the message).
 */
XPU_FUNC uint32_t proto_match_find_posted_after(const struct proto_match *m, uint32_t from, uint64_t tag,
                                                uint64_t src) {
  uint32_t i;
  if (from >= m->capacity || m->pool[from].list != PROTO_MATCH_POSTED) return PROTO_MATCH_NIL;
  for (i = m->pool[from].next; i != PROTO_MATCH_NIL; i = m->pool[i].next) {
    const struct proto_match_entry *e = &m->pool[i];
    if (proto_match_tag_matches(e->tag, e->ignore, e->src, tag, src)) return i;
  }
  return PROTO_MATCH_NIL;
}

/* The oldest unclaimed unexpected message a receive (tag, ignore, src) matches, or PROTO_MATCH_NIL. */
XPU_FUNC uint32_t proto_match_find_unexpected(const struct proto_match *m, uint64_t tag, uint64_t ignore,
                                              uint64_t src) {
  uint32_t i;
  for (i = m->unexpected.head; i != PROTO_MATCH_NIL; i = m->pool[i].next) {
    const struct proto_match_entry *e = &m->pool[i];
    if (!e->claimed && proto_match_tag_matches(tag, ignore, src, e->tag, e->src)) return i;
  }
  return PROTO_MATCH_NIL;
}

/*
 * A receive is posted: the oldest matching unexpected message is removed and
 * handed over (returns 1, *out = the message's entry), or the receive joins the
 * posted list (returns 0). -FI_EAGAIN when it would have to be queued and the
 * pool is full; nothing changes then.
 */
XPU_FUNC int proto_match_post_recv(struct proto_match *m, uint64_t tag, uint64_t ignore, uint64_t src,
                                   uint64_t cookie, struct proto_match_hit *out) {
  const uint32_t u = proto_match_find_unexpected(m, tag, ignore, src);
  proto_match_hit_clear_(out);
  if (u != PROTO_MATCH_NIL) {
    proto_match_remove(m, u, out);
    return 1;
  }
  return proto_match_append_(m, PROTO_MATCH_POSTED, tag, ignore, src, cookie) == PROTO_MATCH_NIL ? -FI_EAGAIN : 0;
}

/*
 * Queues a receive at the tail of the posted list without looking at the
 * unexpected messages (a consumer that takes several of them itself); its
 * entry's index, or PROTO_MATCH_NIL when the pool is full.
 */
XPU_FUNC uint32_t proto_match_post_only(struct proto_match *m, uint64_t tag, uint64_t ignore, uint64_t src,
                                        uint64_t cookie) {
  return proto_match_append_(m, PROTO_MATCH_POSTED, tag, ignore, src, cookie);
}

/*
 * A message (tag, src) arrives: the oldest matching posted receive is removed
 * and handed over (returns 1, *out = the receive's entry), or the message joins
 * the unexpected list (returns 0). -FI_EAGAIN when the pool is full.
 */
XPU_FUNC int proto_match_arrive(struct proto_match *m, uint64_t tag, uint64_t src, uint64_t cookie,
                                struct proto_match_hit *out) {
  const uint32_t p = proto_match_find_posted(m, tag, src);
  proto_match_hit_clear_(out);
  if (p != PROTO_MATCH_NIL) {
    proto_match_remove(m, p, out);
    return 1;
  }
  return proto_match_append_(m, PROTO_MATCH_UNEXPECTED, tag, 0, src, cookie) == PROTO_MATCH_NIL ? -FI_EAGAIN : 0;
}

/*
 * FI_PEEK: 1 with *out = the oldest unclaimed matching message (claimed or
 * removed as `mode` says), or 0 when there is none (the consumer reports
 * FI_ENOMSG). -FI_EINVAL for an unknown mode.
 */
XPU_FUNC int proto_match_peek(struct proto_match *m, uint64_t tag, uint64_t ignore, uint64_t src, int mode,
                              struct proto_match_hit *out) {
  uint32_t u;
  proto_match_hit_clear_(out);
  if (mode != PROTO_MATCH_PEEK && mode != PROTO_MATCH_PEEK_CLAIM && mode != PROTO_MATCH_PEEK_DISCARD)
    return -FI_EINVAL;
  u = proto_match_find_unexpected(m, tag, ignore, src);
  if (u == PROTO_MATCH_NIL) return 0;
  if (mode == PROTO_MATCH_PEEK_DISCARD) {
    proto_match_remove(m, u, out);
  } else {
    proto_match_hit_of_(&m->pool[u], out);
    if (mode == PROTO_MATCH_PEEK_CLAIM) m->pool[u].claimed = 1;
  }
  return 1;
}

/* The claimed unexpected message whose cookie is `cookie`, or PROTO_MATCH_NIL. */
XPU_FUNC uint32_t proto_match_find_claimed(const struct proto_match *m, uint64_t cookie) {
  uint32_t i;
  for (i = m->unexpected.head; i != PROTO_MATCH_NIL; i = m->pool[i].next)
    if (m->pool[i].claimed && m->pool[i].cookie == cookie) return i;
  return PROTO_MATCH_NIL;
}

/* FI_CLAIM: removes the message a FI_PEEK | FI_CLAIM reserved; 0, or -FI_ENOMSG when none has that cookie. */
XPU_FUNC int proto_match_claim(struct proto_match *m, uint64_t cookie, struct proto_match_hit *out) {
  const uint32_t u = proto_match_find_claimed(m, cookie);
  proto_match_hit_clear_(out);
  if (u == PROTO_MATCH_NIL) return -FI_ENOMSG;
  proto_match_remove(m, u, out);
  return 0;
}

/* FI_CLAIM | FI_DISCARD: as proto_match_claim; the consumer drops the data instead of delivering it. */
XPU_FUNC int proto_match_discard(struct proto_match *m, uint64_t cookie, struct proto_match_hit *out) {
  return proto_match_claim(m, cookie, out);
}

/* fi_cancel: removes the oldest posted receive with `cookie`; 0, or -FI_ENOENT when none is posted. */
XPU_FUNC int proto_match_cancel(struct proto_match *m, uint64_t cookie, struct proto_match_hit *out) {
  uint32_t i;
  proto_match_hit_clear_(out);
  for (i = m->posted.head; i != PROTO_MATCH_NIL; i = m->pool[i].next) {
    if (m->pool[i].cookie == cookie) {
      proto_match_remove(m, i, out);
      return 0;
    }
  }
  return -FI_ENOENT;
}

#endif /* XPUFAB_API_PROTO_MATCH_H_ */
