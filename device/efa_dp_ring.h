/*
 * efa_dp_ring.h - the producer side of an EFA work queue, shared by the SQ and
 * the RQ, and the request-id table. Host and nvcc; valid C11 and C++17.
 *
 * Concurrency contract (many posters on one queue, any mix of CPU threads and
 * GPU work-items; one or more pollers giving space back):
 *
 *   claim    A poster reserves n consecutive entries with one CAS on
 *            `claimed`, refused with -FI_EAGAIN when claimed + n - completed
 *            would exceed the depth. Entries come back only through
 *            efa_dp_ring_give_back, i.e. when their completion is consumed, so
 *            a queue never overruns and its CQ never overflows.
 *   write    The poster fills its entries (no lock; entries are its own).
 *   publish  Posters publish in claim order: a poster waits until `published`
 *            equals its first entry, then release-stores first + n. A claim
 *            never fails after it succeeded, so every claim is published.
 *   ring     The doorbell takes the absolute 16-bit producer count, written as
 *            one 32-bit store after a system fence. Ringing happens under a
 *            small spin lock (`db_lock`) so that doorbell values are monotonic
 *            and each one covers at most max_batch new entries (longer runs go
 *            out as several doorbells). Only published entries are covered.
 *            A deferred post (FI_MORE) rings only whole max_batch chunks;
 *            efa_dp_ring_flush rings the rest.
 *
 * Request ids (efa_dp_reqs): completions arrive out of order, so the 16-bit
 * req_id a WQE carries is an index into a per-queue context table, not a slot
 * number. Free indices sit on a lock-free stack (Treiber, with a 32-bit ABA tag
 * in the 64-bit head). The bits of req_id above log2(depth) carry a generation
 * that changes on every reuse of an index, so a stale or duplicated completion
 * is detected (-FI_EINVAL) instead of completing someone else's request. The
 * table has one index per queue entry and an index is freed before the entry
 * is given back, so an allocation after a successful claim always finds one.
 * Indices never used yet are handed out from a high-water mark, not from the
 * stack, so init writes nothing per index: a deep queue costs only the pages
 * its busiest moment touched (a 16K-entry RQ's table is 320 KiB of scratch).
 *
 * Every shared field is accessed only through xpu_* atomics; configuration is
 * written once by init and read-only afterwards.
 *
 * NIC side (what an emulator or hardware may assume): load the doorbell with
 * acquire; every entry below the new producer count is fully written; an SQ
 * entry carries phase = efa_dp_lap_phase(index, log2 depth).
 *
 * Limit: max_batch bounds the entries one doorbell covers. The kernel also
 * describes max_tx_batch as the bytes written to the LLQ between two
 * doorbells; with many concurrent posters more entries than that can be
 * written (not yet rung) at once. Hardware tolerance of that is unverified.
 */
#ifndef XPUFAB_DEVICE_EFA_DP_RING_H_
#define XPUFAB_DEVICE_EFA_DP_RING_H_

#include <stddef.h>
#include <stdint.h>

#include <rdma/fi_errno.h>

#include "device/xpu_prims.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest queue depth: 16-bit producer counts must stay unambiguous. */
#define EFA_DP_MAX_ENTRIES 32768u

/*
 * A work queue as efadv_query_qp_wqs reports it (struct efadv_wq_attr):
 * the ring, its entry size, its number of entries, its 32-bit doorbell and the
 * most entries one doorbell may cover.
 */
struct efa_dp_wq_attr {
  uint8_t *buffer;
  uint32_t entry_size;
  uint32_t num_entries; /* power of two */
  uint32_t *doorbell;
  uint32_t max_batch;
};

struct efa_dp_ring {
  /* Configuration (read-only after init). */
  uint8_t *buf;
  uint32_t *db;
  uint32_t entry_size;
  uint32_t num_entries;
  uint32_t mask;
  uint32_t log2_entries;
  uint32_t max_batch;
  /* Shared counters (absolute, 32-bit, wrapping). */
  uint32_t claimed;   /* CAS by posters */
  uint32_t published; /* advanced in claim order by posters */
  uint32_t rung;      /* last producer count rung; under db_lock */
  uint32_t completed; /* fetch_add by pollers */
  uint32_t db_lock;   /* 0 free, 1 held */
};

XPU_FUNC int efa_dp_is_pow2(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

XPU_FUNC uint32_t efa_dp_log2(uint32_t v) {
  uint32_t l = 0;
  while ((1u << l) < v) ++l;
  return l;
}

/* 0, or -FI_EINVAL for a NULL buffer/doorbell, a depth that is not a power of
 * two in [2, EFA_DP_MAX_ENTRIES], or max_batch 0. max_batch is capped at the depth. */
XPU_FUNC int efa_dp_ring_init(struct efa_dp_ring *r, const struct efa_dp_wq_attr *a, uint32_t entry_size) {
  if (!r || !a || !a->buffer || !a->doorbell) return -FI_EINVAL;
  if (a->entry_size != entry_size) return -FI_EINVAL;
  if (!efa_dp_is_pow2(a->num_entries) || a->num_entries < 2 || a->num_entries > EFA_DP_MAX_ENTRIES)
    return -FI_EINVAL;
  if (a->max_batch == 0) return -FI_EINVAL;
  r->buf = a->buffer;
  r->db = a->doorbell;
  r->entry_size = a->entry_size;
  r->num_entries = a->num_entries;
  r->mask = a->num_entries - 1;
  r->log2_entries = efa_dp_log2(a->num_entries);
  r->max_batch = a->max_batch < a->num_entries ? a->max_batch : a->num_entries;
  r->claimed = 0;
  r->published = 0;
  r->rung = 0;
  r->completed = 0;
  r->db_lock = 0;
  return 0;
}

/* The ring entry of absolute index i. */
XPU_FUNC uint8_t *efa_dp_ring_entry(const struct efa_dp_ring *r, uint32_t i) {
  return r->buf + (size_t)(i & r->mask) * r->entry_size;
}

/* Lap parity of absolute index i in a ring of 2^log2_entries: 0 on the first pass. */
XPU_FUNC uint32_t efa_dp_lap_phase(uint32_t i, uint32_t log2_entries) { return (i >> log2_entries) & 1u; }

/* Lap parity of absolute index i: 0 on the first pass over the ring. */
XPU_FUNC uint32_t efa_dp_ring_phase(const struct efa_dp_ring *r, uint32_t i) {
  return (i >> r->log2_entries) & 1u;
}

/* Entries claimed and not yet given back. */
XPU_FUNC uint32_t efa_dp_ring_inflight(struct efa_dp_ring *r) {
  uint32_t done = xpu_load_acquire_u32(&r->completed);
  return xpu_load_acquire_u32(&r->claimed) - done;
}

/*
 * Reserves n consecutive entries; *first_p = the absolute index of the first.
 * 0; -FI_EAGAIN when the queue lacks n free entries; -FI_EINVAL when n is 0 or
 * larger than the depth.
 */
XPU_FUNC int efa_dp_ring_claim(struct efa_dp_ring *r, uint32_t n, uint32_t *first_p) {
  if (n == 0 || n > r->num_entries) return -FI_EINVAL;
  for (;;) {
    /* completed first: claimed read later is never behind it. */
    uint32_t done = xpu_load_acquire_u32(&r->completed);
    uint32_t c = xpu_load_relaxed_u32(&r->claimed);
    if (c + n - done > r->num_entries) return -FI_EAGAIN;
    if (xpu_cas_u32(&r->claimed, &c, c + n)) {
      *first_p = c;
      return 0;
    }
    xpu_relax();
  }
}

/*
 * Rings the doorbell up to `target` (never past what is published), in steps
 * of at most max_batch entries. With whole_chunks_only, a final step shorter
 * than max_batch is left for later (FI_MORE).
 */
XPU_FUNC void efa_dp_ring_doorbell(struct efa_dp_ring *r, uint32_t target, int whole_chunks_only) {
  uint32_t unlocked = 0;
  while (!xpu_cas_u32(&r->db_lock, &unlocked, 1)) {
    unlocked = 0;
    xpu_relax();
  }
  uint32_t rung = xpu_load_relaxed_u32(&r->rung);
  const uint32_t published = xpu_load_acquire_u32(&r->published);
  if ((int32_t)(target - published) > 0) target = published;
  while ((int32_t)(target - rung) > 0) {
    uint32_t step = target - rung;
    if (step > r->max_batch) step = r->max_batch;
    if (whole_chunks_only && step < r->max_batch) break;
    rung += step;
    /* Every entry below `rung` is written (and, for write-combined SQ memory, flushed). */
    xpu_fence_doorbell();
    xpu_mmio_write_u32(r->db, rung & 0xffffu);
    xpu_store_relaxed_u32(&r->rung, rung);
  }
  xpu_store_release_u32(&r->db_lock, 0);
}

/*
 * Publishes the n entries from `first` (all written by the caller) once every
 * earlier claim is published, then rings them unless `defer` (FI_MORE), in
 * which case only whole max_batch chunks are rung.
 */
XPU_FUNC void efa_dp_ring_publish(struct efa_dp_ring *r, uint32_t first, uint32_t n, int defer) {
  while (xpu_load_acquire_u32(&r->published) != first) xpu_relax();
  xpu_store_release_u32(&r->published, first + n);
  if (!defer) {
    efa_dp_ring_doorbell(r, first + n, 0);
  } else if (first + n - xpu_load_relaxed_u32(&r->rung) >= r->max_batch) {
    efa_dp_ring_doorbell(r, first + n, 1);
  }
}

/* Rings every published entry (ends an FI_MORE sequence). */
XPU_FUNC void efa_dp_ring_flush(struct efa_dp_ring *r) {
  efa_dp_ring_doorbell(r, xpu_load_acquire_u32(&r->published), 0);
}

/* Returns n entries to the queue after their completion was consumed. */
XPU_FUNC void efa_dp_ring_give_back(struct efa_dp_ring *r, uint32_t n) {
  xpu_fetch_add_u32(&r->completed, n);
}

/* ---- Request ids ------------------------------------------------------------ */

#define EFA_DP_REQ_NONE 0xffffffffu
#define EFA_DP_REQ_IN_USE 0x80000000u

struct efa_dp_reqs {
  /* Configuration. */
  uint64_t *ctx;   /* caller context per index */
  uint32_t *aux;   /* per index: entries the request holds */
  uint32_t *state; /* per index: EFA_DP_REQ_IN_USE | req_id, or the last req_id when free */
  uint32_t *link;  /* free-stack successor */
  uint32_t count;
  uint32_t idx_bits;
  /* Shared: (tag << 32) | top index of the freed indices, EFA_DP_REQ_NONE when empty. */
  uint64_t head;
  /* Shared: indices below it have been handed out at least once. */
  uint32_t fresh;
  uint32_t pad_;
};

/* Scratch bytes a table of `count` ids needs (8-byte aligned). */
XPU_FUNC size_t efa_dp_reqs_scratch_size(uint32_t count) { return (size_t)count * 20u; }

XPU_FUNC int efa_dp_reqs_init(struct efa_dp_reqs *t, uint32_t count, void *scratch, size_t scratch_len) {
  if (!efa_dp_is_pow2(count) || count > 65536u || !scratch || ((uintptr_t)scratch & 7u) != 0 ||
      scratch_len < efa_dp_reqs_scratch_size(count))
    return -FI_EINVAL;
  t->ctx = (uint64_t *)scratch;
  t->aux = (uint32_t *)(t->ctx + count);
  t->state = t->aux + count;
  t->link = t->state + count;
  t->count = count;
  t->idx_bits = efa_dp_log2(count);
  t->head = EFA_DP_REQ_NONE; /* tag 0, nothing freed yet */
  t->fresh = 0;
  t->pad_ = 0;
  return 0;
}

/* The next never-used index, or EFA_DP_REQ_NONE when all have been used. */
XPU_FUNC uint32_t efa_dp_reqs_take_fresh(struct efa_dp_reqs *t) {
  uint32_t f = xpu_load_relaxed_u32(&t->fresh);
  while (f < t->count)
    if (xpu_cas_u32(&t->fresh, &f, f + 1)) return f;
  return EFA_DP_REQ_NONE;
}

/* A free req_id bound to (ctx, aux), or -FI_EAGAIN when none is free. */
XPU_FUNC int efa_dp_reqs_alloc(struct efa_dp_reqs *t, uint64_t ctx, uint32_t aux) {
  uint64_t h = xpu_load_acquire_u64(&t->head);
  uint32_t idx;
  uint32_t old;
  for (;;) {
    idx = (uint32_t)h;
    if (idx == EFA_DP_REQ_NONE) break;
    const uint32_t next = xpu_load_relaxed_u32(&t->link[idx]);
    const uint64_t nh = (((h >> 32) + 1) << 32) | next;
    if (xpu_cas_u64(&t->head, &h, nh)) break;
  }
  if (idx == EFA_DP_REQ_NONE) {
    idx = efa_dp_reqs_take_fresh(t);
    if (idx == EFA_DP_REQ_NONE) return -FI_EAGAIN;
    old = idx; /* generation 0 */
  } else {
    old = xpu_load_relaxed_u32(&t->state[idx]) & 0xffffu;
  }
  const uint32_t gen = (old >> t->idx_bits) + 1;
  const uint32_t req_id = (idx | (gen << t->idx_bits)) & 0xffffu;
  xpu_store_relaxed_u64(&t->ctx[idx], ctx);
  xpu_store_relaxed_u32(&t->aux[idx], aux);
  xpu_store_release_u32(&t->state[idx], EFA_DP_REQ_IN_USE | req_id);
  return (int)req_id;
}

/*
 * Frees req_id, returning its context and aux. 0; -FI_EINVAL when req_id is
 * not outstanding (unknown index, stale generation, or already completed).
 */
XPU_FUNC int efa_dp_reqs_free(struct efa_dp_reqs *t, uint32_t req_id, uint64_t *ctx_p, uint32_t *aux_p) {
  if (req_id > 0xffffu) return -FI_EINVAL;
  const uint32_t idx = req_id & (t->count - 1);
  /* A never-used index's state is whatever the scratch held. */
  if (idx >= xpu_load_acquire_u32(&t->fresh)) return -FI_EINVAL;
  uint32_t s = xpu_load_acquire_u32(&t->state[idx]);
  if (s != (EFA_DP_REQ_IN_USE | req_id)) return -FI_EINVAL;
  const uint64_t ctx = xpu_load_relaxed_u64(&t->ctx[idx]);
  const uint32_t aux = xpu_load_relaxed_u32(&t->aux[idx]);
  if (!xpu_cas_u32(&t->state[idx], &s, req_id)) return -FI_EINVAL;
  uint64_t h = xpu_load_acquire_u64(&t->head);
  for (;;) {
    xpu_store_relaxed_u32(&t->link[idx], (uint32_t)h);
    const uint64_t nh = (((h >> 32) + 1) << 32) | idx;
    if (xpu_cas_u64(&t->head, &h, nh)) break;
  }
  if (ctx_p) *ctx_p = ctx;
  if (aux_p) *aux_p = aux;
  return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_DEVICE_EFA_DP_RING_H_ */
