/*
 * atomic.h - libfabric atomics (enum fi_op x enum fi_datatype) executed on
 * target memory, and the validity table fi_query_atomic / fi_atomicvalid
 * answer from. Pure: no I/O; the same code runs in host progress and in
 * device kernels, so host and device answer the same table.
 *
 * Each element is one atomic read-modify-write with the target memory's own
 * atomics (device/xpu_prims.h), so it is atomic against other executions and
 * against the target's own atomics on that word:
 *   4 / 8 bytes   xpu_fetch_add for FI_SUM on integers, otherwise a CAS loop
 *   1 / 2 bytes   a CAS loop on the aligned 32-bit word holding the element
 *                 (no 8/16-bit CAS on GPUs); the neighbours are rewritten with
 *                 the value just read, so they are never lost. That whole word
 *                 is accessed, so it must be addressable: always true of a
 *                 memory region (an aligned word never crosses a page), not
 *                 of a C object whose last byte is the element
 *   16 bytes      a CAS loop on xpu_cas_u128, where XPU_HAVE_CAS_U128 says the
 *                 target has a 16-byte CAS (x86-64 cmpxchg16b, sm_90
 *                 atom.cas.b128): FI_INT128, FI_UINT128, FI_DOUBLE_COMPLEX
 * The whole request is not atomic, only each element (libfabric's rule).
 *
 * Datatypes: FI_INT8..FI_UINT64, FI_FLOAT, FI_DOUBLE, FI_FLOAT_COMPLEX,
 * FI_DOUBLE_COMPLEX and the 128-bit integers (above). Refused with
 * -FI_EOPNOTSUPP: FI_LONG_DOUBLE(_COMPLEX) (10/16-byte x87 on x86, absent on
 * GPUs: no portable layout, no CAS width), FI_FLOAT16/BFLOAT16/FLOAT8_* (no
 * arithmetic in the C subset), FI_VOID.
 *
 * Ops per datatype class (libfabric's definitions):
 *   integers       every op
 *   float, double  all but the bitwise ops (FI_BOR/BAND/BXOR) and FI_MSWAP
 *   complex        FI_SUM, FI_PROD, FI_LOR/LAND/LXOR, FI_ATOMIC_READ/WRITE,
 *                  FI_CSWAP, FI_CSWAP_NE (no order, no bits)
 * Ops per kind:
 *   PLAIN (fi_atomic)           FI_MIN..FI_BXOR, FI_ATOMIC_WRITE
 *   FETCH (fi_fetch_atomic)     FI_MIN..FI_BXOR, FI_ATOMIC_READ, FI_ATOMIC_WRITE
 *   COMPARE (fi_compare_atomic) FI_CSWAP..FI_MSWAP
 *
 * Semantics, with t the target element, a the operand, c the compare value:
 *   MIN/MAX  t = a < t ? a : t / a > t ? a : t      SUM/PROD  t = t + a / t * a
 *   LOR/LAND/LXOR  t = (t != 0) op (a != 0) as 1/0  BOR/BAND/BXOR  bitwise
 *   READ     result only                            WRITE     t = a
 *   CSWAP*   if (c OP t) t = a, OP in == != <= < >= >   MSWAP  t = (a & c) | (t & ~c)
 * FETCH and COMPARE return the value t had before (the one their update
 * replaced, or the one a failed compare saw). Integer SUM/PROD wrap.
 *
 * Operand, compare and result buffers may be unaligned (wire payloads); the
 * target must be aligned to the element size (-FI_EINVAL otherwise, before
 * anything is written). Little-endian targets only (x86, Arm, GPUs).
 */
#ifndef XPUFAB_API_PROTO_ATOMIC_H_
#define XPUFAB_API_PROTO_ATOMIC_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include "device/xpu_func.h"
#include "device/xpu_prims.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "api/proto/atomic.h: sub-word atomics assume a little-endian target"
#endif

enum proto_atomic_kind {
  PROTO_ATOMIC_PLAIN = 0,
  PROTO_ATOMIC_FETCH = 1,
  PROTO_ATOMIC_COMPARE = 2,
};

/* Bytes per element of a datatype this file executes; 0 for any other. */
XPU_FUNC size_t proto_atomic_datatype_size(int datatype) {
  switch (datatype) {
    case FI_INT8:
    case FI_UINT8:
      return 1;
    case FI_INT16:
    case FI_UINT16:
      return 2;
    case FI_INT32:
    case FI_UINT32:
    case FI_FLOAT:
      return 4;
    case FI_INT64:
    case FI_UINT64:
    case FI_DOUBLE:
    case FI_FLOAT_COMPLEX:
      return 8;
#if defined(XPU_HAVE_CAS_U128)
    case FI_INT128:
    case FI_UINT128:
    case FI_DOUBLE_COMPLEX:
      return 16;
#endif
    default:
      return 0;
  }
}

enum proto_atomic_class_ {
  PROTO_ATOMIC_INT_ = 1,
  PROTO_ATOMIC_REAL_ = 2,
  PROTO_ATOMIC_COMPLEX_ = 4,
};

XPU_FUNC int proto_atomic_class_of_(int datatype) {
  if (proto_atomic_datatype_size(datatype) == 0) return 0;
  switch (datatype) {
    case FI_FLOAT:
    case FI_DOUBLE:
      return PROTO_ATOMIC_REAL_;
    case FI_FLOAT_COMPLEX:
    case FI_DOUBLE_COMPLEX:
      return PROTO_ATOMIC_COMPLEX_;
    default:
      return PROTO_ATOMIC_INT_;
  }
}

/* The datatype classes an op is defined on, 0 for an op this file does not know. */
XPU_FUNC int proto_atomic_op_classes_(int op) {
  const int all = PROTO_ATOMIC_INT_ | PROTO_ATOMIC_REAL_ | PROTO_ATOMIC_COMPLEX_;
  switch (op) {
    case FI_MIN:
    case FI_MAX:
    case FI_CSWAP_LE:
    case FI_CSWAP_LT:
    case FI_CSWAP_GE:
    case FI_CSWAP_GT:
      return PROTO_ATOMIC_INT_ | PROTO_ATOMIC_REAL_;
    case FI_SUM:
    case FI_PROD:
    case FI_LOR:
    case FI_LAND:
    case FI_LXOR:
    case FI_ATOMIC_READ:
    case FI_ATOMIC_WRITE:
    case FI_CSWAP:
    case FI_CSWAP_NE:
      return all;
    case FI_BOR:
    case FI_BAND:
    case FI_BXOR:
    case FI_MSWAP:
      return PROTO_ATOMIC_INT_;
    default:
      return 0;
  }
}

XPU_FUNC int proto_atomic_kind_has_op_(int kind, int op) {
  switch (kind) {
    case PROTO_ATOMIC_PLAIN:
      return (op >= FI_MIN && op <= FI_BXOR) || op == FI_ATOMIC_WRITE;
    case PROTO_ATOMIC_FETCH:
      return op >= FI_MIN && op <= FI_ATOMIC_WRITE;
    case PROTO_ATOMIC_COMPARE:
      return op >= FI_CSWAP && op <= FI_MSWAP;
    default:
      return 0;
  }
}

/* 1 when (kind, op, datatype) executes here, else 0. */
XPU_FUNC int proto_atomic_supported(int kind, int op, int datatype) {
  return proto_atomic_kind_has_op_(kind, op) && (proto_atomic_op_classes_(op) & proto_atomic_class_of_(datatype));
}

/*
 * The answer of fi_atomicvalid / fi_fetch_atomicvalid / fi_compare_atomicvalid
 * and fi_query_atomic: the most elements one request may carry when its
 * operands travel in max_bytes (a compare request carries operand and compare
 * value), or -FI_EOPNOTSUPP.
 */
XPU_FUNC int64_t proto_atomic_valid(int kind, int op, int datatype, size_t max_bytes) {
  size_t per;
  if (!proto_atomic_supported(kind, op, datatype)) return -FI_EOPNOTSUPP;
  per = proto_atomic_datatype_size(datatype) * (kind == PROTO_ATOMIC_COMPARE ? 2u : 1u);
  return (int64_t)(max_bytes / per);
}

/* One element's bytes, little-endian, in the low bytes of w[0] (then w[1]). */
struct proto_atomic_val_ {
  uint64_t w[2];
};

#define PROTO_ATOMIC_LOGIC_(op, x, y) \
  ((op) == FI_LOR ? ((x) || (y)) : (op) == FI_LAND ? ((x) && (y)) : (!(x) != !(y)))

/*
 * Integer ops on type T, computing SUM/PROD in the unsigned type W (at least
 * as wide as int) so they wrap instead of overflowing.
 */
#define PROTO_ATOMIC_INT_APPLY_(T, W)                                          \
  {                                                                            \
    T t_, a_, c_, r_;                                                          \
    memcpy(&t_, old, sizeof(T));                                               \
    memcpy(&a_, a, sizeof(T));                                                 \
    memcpy(&c_, c, sizeof(T));                                                 \
    r_ = t_;                                                                   \
    switch (op) {                                                              \
      case FI_MIN: r_ = a_ < t_ ? a_ : t_; break;                              \
      case FI_MAX: r_ = a_ > t_ ? a_ : t_; break;                              \
      case FI_SUM: r_ = (T)((W)t_ + (W)a_); break;                             \
      case FI_PROD: r_ = (T)((W)t_ * (W)a_); break;                            \
      case FI_LOR:                                                             \
      case FI_LAND:                                                            \
      case FI_LXOR: r_ = (T)(PROTO_ATOMIC_LOGIC_(op, t_ != 0, a_ != 0) ? 1 : 0); break; \
      case FI_BOR: r_ = (T)(t_ | a_); break;                                   \
      case FI_BAND: r_ = (T)(t_ & a_); break;                                  \
      case FI_BXOR: r_ = (T)(t_ ^ a_); break;                                  \
      case FI_ATOMIC_READ: return 0;                                           \
      case FI_ATOMIC_WRITE: r_ = a_; break;                                    \
      case FI_CSWAP: if (!(c_ == t_)) return 0; r_ = a_; break;                \
      case FI_CSWAP_NE: if (!(c_ != t_)) return 0; r_ = a_; break;             \
      case FI_CSWAP_LE: if (!(c_ <= t_)) return 0; r_ = a_; break;             \
      case FI_CSWAP_LT: if (!(c_ < t_)) return 0; r_ = a_; break;              \
      case FI_CSWAP_GE: if (!(c_ >= t_)) return 0; r_ = a_; break;             \
      case FI_CSWAP_GT: if (!(c_ > t_)) return 0; r_ = a_; break;              \
      case FI_MSWAP: r_ = (T)((a_ & c_) | (t_ & (T)~c_)); break;               \
      default: return 0;                                                       \
    }                                                                          \
    memcpy(out, &r_, sizeof(T));                                               \
    return 1;                                                                  \
  }

#define PROTO_ATOMIC_REAL_APPLY_(T)                                            \
  {                                                                            \
    T t_, a_, c_, r_;                                                          \
    memcpy(&t_, old, sizeof(T));                                               \
    memcpy(&a_, a, sizeof(T));                                                 \
    memcpy(&c_, c, sizeof(T));                                                 \
    r_ = t_;                                                                   \
    switch (op) {                                                              \
      case FI_MIN: r_ = a_ < t_ ? a_ : t_; break;                              \
      case FI_MAX: r_ = a_ > t_ ? a_ : t_; break;                              \
      case FI_SUM: r_ = t_ + a_; break;                                        \
      case FI_PROD: r_ = t_ * a_; break;                                       \
      case FI_LOR:                                                             \
      case FI_LAND:                                                            \
      case FI_LXOR: r_ = PROTO_ATOMIC_LOGIC_(op, t_ != 0, a_ != 0) ? (T)1 : (T)0; break; \
      case FI_ATOMIC_READ: return 0;                                           \
      case FI_ATOMIC_WRITE: r_ = a_; break;                                    \
      case FI_CSWAP: if (!(c_ == t_)) return 0; r_ = a_; break;                \
      case FI_CSWAP_NE: if (!(c_ != t_)) return 0; r_ = a_; break;             \
      case FI_CSWAP_LE: if (!(c_ <= t_)) return 0; r_ = a_; break;             \
      case FI_CSWAP_LT: if (!(c_ < t_)) return 0; r_ = a_; break;              \
      case FI_CSWAP_GE: if (!(c_ >= t_)) return 0; r_ = a_; break;             \
      case FI_CSWAP_GT: if (!(c_ > t_)) return 0; r_ = a_; break;              \
      default: return 0;                                                       \
    }                                                                          \
    memcpy(out, &r_, sizeof(T));                                               \
    return 1;                                                                  \
  }

/* Complex values as (re, im) pairs of T; C and C++ complex types differ, the layout does not. */
#define PROTO_ATOMIC_COMPLEX_APPLY_(T)                                         \
  {                                                                            \
    T t_[2], a_[2], c_[2], r_[2];                                              \
    memcpy(t_, old, sizeof(t_));                                               \
    memcpy(a_, a, sizeof(a_));                                                 \
    memcpy(c_, c, sizeof(c_));                                                 \
    r_[0] = t_[0];                                                             \
    r_[1] = t_[1];                                                             \
    switch (op) {                                                              \
      case FI_SUM:                                                             \
        r_[0] = t_[0] + a_[0];                                                 \
        r_[1] = t_[1] + a_[1];                                                 \
        break;                                                                 \
      case FI_PROD:                                                            \
        r_[0] = t_[0] * a_[0] - t_[1] * a_[1];                                 \
        r_[1] = t_[0] * a_[1] + t_[1] * a_[0];                                 \
        break;                                                                 \
      case FI_LOR:                                                             \
      case FI_LAND:                                                            \
      case FI_LXOR:                                                            \
        r_[0] = PROTO_ATOMIC_LOGIC_(op, t_[0] != 0 || t_[1] != 0, a_[0] != 0 || a_[1] != 0) ? (T)1 : (T)0; \
        r_[1] = 0;                                                             \
        break;                                                                 \
      case FI_ATOMIC_READ: return 0;                                           \
      case FI_ATOMIC_WRITE:                                                    \
        r_[0] = a_[0];                                                         \
        r_[1] = a_[1];                                                         \
        break;                                                                 \
      case FI_CSWAP:                                                           \
      case FI_CSWAP_NE:                                                        \
        if ((c_[0] == t_[0] && c_[1] == t_[1]) != (op == FI_CSWAP)) return 0;  \
        r_[0] = a_[0];                                                         \
        r_[1] = a_[1];                                                         \
        break;                                                                 \
      default: return 0;                                                       \
    }                                                                          \
    memcpy(out, r_, sizeof(r_));                                               \
    return 1;                                                                  \
  }

#if defined(XPU_HAVE_CAS_U128)
__extension__ typedef __int128 proto_atomic_i128_;
#endif

/*
 * The new value of one element: 1 with *out set when the target must be
 * written, 0 when it keeps its value (FI_ATOMIC_READ, a failed compare).
 * old, a and c hold datatype_size bytes each; (op, datatype) is supported.
 */
XPU_FUNC int proto_atomic_apply_(int op, int datatype, const void *old, const void *a, const void *c, void *out) {
  switch (datatype) {
    case FI_INT8: PROTO_ATOMIC_INT_APPLY_(int8_t, uint32_t)
    case FI_UINT8: PROTO_ATOMIC_INT_APPLY_(uint8_t, uint32_t)
    case FI_INT16: PROTO_ATOMIC_INT_APPLY_(int16_t, uint32_t)
    case FI_UINT16: PROTO_ATOMIC_INT_APPLY_(uint16_t, uint32_t)
    case FI_INT32: PROTO_ATOMIC_INT_APPLY_(int32_t, uint32_t)
    case FI_UINT32: PROTO_ATOMIC_INT_APPLY_(uint32_t, uint32_t)
    case FI_INT64: PROTO_ATOMIC_INT_APPLY_(int64_t, uint64_t)
    case FI_UINT64: PROTO_ATOMIC_INT_APPLY_(uint64_t, uint64_t)
#if defined(XPU_HAVE_CAS_U128)
    case FI_INT128: PROTO_ATOMIC_INT_APPLY_(proto_atomic_i128_, xpu_u128)
    case FI_UINT128: PROTO_ATOMIC_INT_APPLY_(xpu_u128, xpu_u128)
    case FI_DOUBLE_COMPLEX: PROTO_ATOMIC_COMPLEX_APPLY_(double)
#endif
    case FI_FLOAT: PROTO_ATOMIC_REAL_APPLY_(float)
    case FI_DOUBLE: PROTO_ATOMIC_REAL_APPLY_(double)
    case FI_FLOAT_COMPLEX: PROTO_ATOMIC_COMPLEX_APPLY_(float)
    default:
      return 0;
  }
}

/* One element at t (aligned to size): atomic read-modify-write; the value it replaced goes to *old. */
XPU_FUNC void proto_atomic_element_(int op, int datatype, size_t size, void *t, const void *a, const void *c,
                                    struct proto_atomic_val_ *old) {
  struct proto_atomic_val_ nv;
  nv.w[0] = nv.w[1] = 0;
  old->w[0] = old->w[1] = 0;
  if (size == 4) {
    uint32_t *p = (uint32_t *)t;
    uint32_t cur;
    if (op == FI_SUM && (datatype == FI_INT32 || datatype == FI_UINT32)) {
      uint32_t v;
      memcpy(&v, a, 4);
      old->w[0] = xpu_fetch_add_u32(p, v);
      return;
    }
    cur = xpu_load_acquire_u32(p);
    for (;;) {
      uint32_t next;
      old->w[0] = cur;
      if (!proto_atomic_apply_(op, datatype, old->w, a, c, nv.w)) return;
      next = (uint32_t)nv.w[0];
      if (xpu_cas_u32(p, &cur, next)) return;
    }
  }
  if (size == 8) {
    uint64_t *p = (uint64_t *)t;
    uint64_t cur;
    if (op == FI_SUM && (datatype == FI_INT64 || datatype == FI_UINT64)) {
      uint64_t v;
      memcpy(&v, a, 8);
      old->w[0] = xpu_fetch_add_u64(p, v);
      return;
    }
    cur = xpu_load_acquire_u64(p);
    for (;;) {
      old->w[0] = cur;
      if (!proto_atomic_apply_(op, datatype, old->w, a, c, nv.w)) return;
      if (xpu_cas_u64(p, &cur, nv.w[0])) return;
    }
  }
  if (size == 1 || size == 2) {
    const uintptr_t addr = (uintptr_t)t;
    uint32_t *word = (uint32_t *)(addr & ~(uintptr_t)3);
    const unsigned shift = (unsigned)(addr & 3u) * 8u;
    const uint32_t mask = (size == 1 ? 0xffu : 0xffffu) << shift;
    uint32_t cur = xpu_load_acquire_u32(word);
    for (;;) {
      old->w[0] = (cur & mask) >> shift;
      if (!proto_atomic_apply_(op, datatype, old->w, a, c, nv.w)) return;
      if (xpu_cas_u32(word, &cur, (cur & ~mask) | (((uint32_t)nv.w[0] << shift) & mask))) return;
    }
  }
#if defined(XPU_HAVE_CAS_U128)
  if (size == 16) {
    xpu_u128 *p = (xpu_u128 *)t;
    xpu_u128 cur = 0;
    /* A CAS of 0 by 0 reads the word atomically (there is no 16-byte load). */
    (void)xpu_cas_u128(p, &cur, 0);
    for (;;) {
      xpu_u128 next;
      memcpy(old->w, &cur, 16);
      if (!proto_atomic_apply_(op, datatype, old->w, a, c, nv.w)) return;
      memcpy(&next, nv.w, 16);
      if (xpu_cas_u128(p, &cur, next)) return;
    }
  }
#endif
}

/*
 * Executes count elements of (kind, op, datatype) on target: operand holds
 * count values (unused by FI_ATOMIC_READ, may be NULL then), compare holds
 * count values for the COMPARE kind, result receives count prior values for
 * FETCH and COMPARE. 0, or before any element is touched:
 *   -FI_EOPNOTSUPP  kind/op/datatype not in the table
 *   -FI_EINVAL      target not aligned to the element size, or a buffer the
 *                   kind needs is missing
 */
XPU_FUNC int proto_atomic_execute(int kind, int op, int datatype, void *target, const void *operand,
                                  const void *compare, void *result, size_t count) {
  const size_t size = proto_atomic_datatype_size(datatype);
  const uint64_t zero[2] = {0, 0};
  uint8_t *t = (uint8_t *)target;
  const uint8_t *a = (const uint8_t *)operand;
  const uint8_t *c = (const uint8_t *)compare;
  uint8_t *r = (uint8_t *)result;
  size_t i;
  if (!proto_atomic_supported(kind, op, datatype)) return -FI_EOPNOTSUPP;
  if (count == 0) return 0;
  if (target == 0 || ((uintptr_t)target & (size - 1)) != 0) return -FI_EINVAL;
  if (operand == 0 && op != FI_ATOMIC_READ) return -FI_EINVAL;
  if (kind == PROTO_ATOMIC_COMPARE && compare == 0) return -FI_EINVAL;
  if (kind != PROTO_ATOMIC_PLAIN && result == 0) return -FI_EINVAL;
  for (i = 0; i < count; i++) {
    struct proto_atomic_val_ old;
    proto_atomic_element_(op, datatype, size, t + i * size, a ? a + i * size : (const uint8_t *)zero,
                          c ? c + i * size : (const uint8_t *)zero, &old);
    if (r) memcpy(r + i * size, old.w, size);
  }
  return 0;
}

#undef PROTO_ATOMIC_LOGIC_
#undef PROTO_ATOMIC_INT_APPLY_
#undef PROTO_ATOMIC_REAL_APPLY_
#undef PROTO_ATOMIC_COMPLEX_APPLY_

#endif /* XPUFAB_API_PROTO_ATOMIC_H_ */
