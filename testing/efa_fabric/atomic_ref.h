// The tests' own statement of libfabric's atomic operations, written from fi_atomic(3): which
// op x datatype combinations each kind of call takes (every integer width up to 16 bytes,
// float/double and their complex types; no long double or narrow floats), and what one element
// of each does to the target. The provider's answers and results are compared against this.
#ifndef XPUFAB_TESTING_EFA_FABRIC_ATOMIC_REF_H_
#define XPUFAB_TESTING_EFA_FABRIC_ATOMIC_REF_H_

#include <rdma/fi_atomic.h>
#include <rdma/fi_domain.h>

#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace xpufab::efa_fabric {

enum class AtomicKind { kWrite, kFetch, kCompare };

constexpr int kLastOp = FI_MSWAP;             // every fi_op the tests try: FI_MIN..FI_MSWAP
constexpr int kLastDatatype = FI_FLOAT8_E5M2;  // every fi_datatype: FI_INT8..FI_FLOAT8_E5M2

inline size_t datatype_size(int dt) {
  switch (dt) {
    case FI_INT8: case FI_UINT8: return 1;
    case FI_INT16: case FI_UINT16: return 2;
    case FI_INT32: case FI_UINT32: case FI_FLOAT: return 4;
    case FI_INT64: case FI_UINT64: case FI_DOUBLE: case FI_FLOAT_COMPLEX: return 8;
    case FI_INT128: case FI_UINT128: case FI_DOUBLE_COMPLEX: return 16;
    default: return 0;
  }
}

inline bool is_integer(int dt) {
  return (dt >= FI_INT8 && dt <= FI_UINT64) || dt == FI_INT128 || dt == FI_UINT128;
}
inline bool is_real(int dt) { return dt == FI_FLOAT || dt == FI_DOUBLE; }
inline bool is_complex(int dt) { return dt == FI_FLOAT_COMPLEX || dt == FI_DOUBLE_COMPLEX; }

inline bool expected_valid(AtomicKind k, int op, int dt) {
  if (!is_integer(dt) && !is_real(dt) && !is_complex(dt)) return false;
  const bool bitwise = op == FI_BOR || op == FI_BAND || op == FI_BXOR || op == FI_MSWAP;
  if (bitwise && !is_integer(dt)) return false;
  // Complex values have no order.
  const bool ordered = op == FI_MIN || op == FI_MAX || (op >= FI_CSWAP_LE && op <= FI_CSWAP_GT);
  if (ordered && is_complex(dt)) return false;
  switch (k) {
    case AtomicKind::kWrite:
      return op <= FI_BXOR || op == FI_ATOMIC_WRITE;
    case AtomicKind::kFetch:
      return op <= FI_ATOMIC_WRITE;
    case AtomicKind::kCompare:
      return op >= FI_CSWAP && op <= FI_MSWAP;
  }
  return false;
}

namespace ref_internal {

// Integers wrap (the target's instructions do): the reference computes in an unsigned type at
// least as wide as int, so that no promotion overflows.
template <typename T>
struct Arith {
  using type = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;
};
template <>
struct Arith<__int128> {
  using type = unsigned __int128;
};
template <>
struct Arith<unsigned __int128> {
  using type = unsigned __int128;
};

template <typename T>
T wrap_add(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return a + b;
  } else {
    using U = typename Arith<T>::type;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  }
}
template <typename T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return a * b;
  } else {
    using U = typename Arith<T>::type;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  }
}

template <typename T>
void apply_t(int op, T* t, T o, T c) {
  const T v = *t;
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case FI_BOR: case FI_BAND: case FI_BXOR: case FI_MSWAP: return;
      default: break;
    }
  }
  switch (op) {
    case FI_MIN: *t = o < v ? o : v; break;
    case FI_MAX: *t = o > v ? o : v; break;
    case FI_SUM: *t = wrap_add(v, o); break;
    case FI_PROD: *t = wrap_mul(v, o); break;
    case FI_LOR: *t = static_cast<T>((v != T(0)) || (o != T(0))); break;
    case FI_LAND: *t = static_cast<T>((v != T(0)) && (o != T(0))); break;
    case FI_LXOR: *t = static_cast<T>((v != T(0)) != (o != T(0))); break;
    case FI_ATOMIC_READ: break;
    case FI_ATOMIC_WRITE: *t = o; break;
    case FI_CSWAP: if (c == v) *t = o; break;
    case FI_CSWAP_NE: if (c != v) *t = o; break;
    case FI_CSWAP_LE: if (c <= v) *t = o; break;
    case FI_CSWAP_LT: if (c < v) *t = o; break;
    case FI_CSWAP_GE: if (c >= v) *t = o; break;
    case FI_CSWAP_GT: if (c > v) *t = o; break;
    default:
      if constexpr (!std::is_floating_point_v<T>) {
        switch (op) {
          case FI_BOR: *t = v | o; break;
          case FI_BAND: *t = v & o; break;
          case FI_BXOR: *t = v ^ o; break;
          case FI_MSWAP: *t = (o & c) | (v & ~c); break;
          default: break;
        }
      }
  }
}

template <typename T>
void apply_complex(int op, std::complex<T>* t, std::complex<T> o, std::complex<T> c) {
  const std::complex<T> v = *t, zero(0, 0), one(1, 0);
  switch (op) {
    case FI_SUM: *t = v + o; break;
    case FI_PROD: *t = v * o; break;
    case FI_LOR: *t = ((v != zero) || (o != zero)) ? one : zero; break;
    case FI_LAND: *t = ((v != zero) && (o != zero)) ? one : zero; break;
    case FI_LXOR: *t = ((v != zero) != (o != zero)) ? one : zero; break;
    case FI_ATOMIC_WRITE: *t = o; break;
    case FI_CSWAP: if (c == v) *t = o; break;
    case FI_CSWAP_NE: if (c != v) *t = o; break;
    default: break;
  }
}

template <typename T>
void apply_elem(int op, void* target, const void* operand, const void* compare) {
  T t, o, c{};
  memcpy(&t, target, sizeof(T));
  memcpy(&o, operand, sizeof(T));
  if (compare) memcpy(&c, compare, sizeof(T));
  apply_t<T>(op, &t, o, c);
  memcpy(target, &t, sizeof(T));
}

template <typename T>
void apply_complex_elem(int op, void* target, const void* operand, const void* compare) {
  std::complex<T> t, o, c;
  memcpy(&t, target, sizeof(t));
  memcpy(&o, operand, sizeof(o));
  if (compare) memcpy(&c, compare, sizeof(c));
  apply_complex<T>(op, &t, o, c);
  memcpy(target, &t, sizeof(t));
}

template <typename T>
void set_elem(void* p, int64_t v) {
  const T t = static_cast<T>(v);
  memcpy(p, &t, sizeof(T));
}

// A complex element: v in the real part, 1 - v in the imaginary one.
template <typename T>
void set_complex(void* p, int64_t v) {
  const std::complex<T> t(static_cast<T>(v), static_cast<T>(1 - v));
  memcpy(p, &t, sizeof(t));
}

}  // namespace ref_internal

// One element: *target becomes what `op` makes of it with `operand` (and `compare`).
inline void apply_atomic(int op, int dt, void* target, const void* operand, const void* compare) {
  using namespace ref_internal;
  switch (dt) {
    case FI_INT8: apply_elem<int8_t>(op, target, operand, compare); break;
    case FI_UINT8: apply_elem<uint8_t>(op, target, operand, compare); break;
    case FI_INT16: apply_elem<int16_t>(op, target, operand, compare); break;
    case FI_UINT16: apply_elem<uint16_t>(op, target, operand, compare); break;
    case FI_INT32: apply_elem<int32_t>(op, target, operand, compare); break;
    case FI_UINT32: apply_elem<uint32_t>(op, target, operand, compare); break;
    case FI_INT64: apply_elem<int64_t>(op, target, operand, compare); break;
    case FI_UINT64: apply_elem<uint64_t>(op, target, operand, compare); break;
    case FI_FLOAT: apply_elem<float>(op, target, operand, compare); break;
    case FI_DOUBLE: apply_elem<double>(op, target, operand, compare); break;
    case FI_INT128: apply_elem<__int128>(op, target, operand, compare); break;
    case FI_UINT128: apply_elem<unsigned __int128>(op, target, operand, compare); break;
    case FI_FLOAT_COMPLEX: apply_complex_elem<float>(op, target, operand, compare); break;
    case FI_DOUBLE_COMPLEX: apply_complex_elem<double>(op, target, operand, compare); break;
    default: break;
  }
}

// Writes the small integer `v` as one element of `dt` (values tests use stay exact in floats).
inline void set_element(int dt, void* p, int64_t v) {
  using namespace ref_internal;
  switch (dt) {
    case FI_INT8: set_elem<int8_t>(p, v); break;
    case FI_UINT8: set_elem<uint8_t>(p, v); break;
    case FI_INT16: set_elem<int16_t>(p, v); break;
    case FI_UINT16: set_elem<uint16_t>(p, v); break;
    case FI_INT32: set_elem<int32_t>(p, v); break;
    case FI_UINT32: set_elem<uint32_t>(p, v); break;
    case FI_INT64: set_elem<int64_t>(p, v); break;
    case FI_UINT64: set_elem<uint64_t>(p, v); break;
    case FI_FLOAT: set_elem<float>(p, v); break;
    case FI_DOUBLE: set_elem<double>(p, v); break;
    case FI_INT128: set_elem<__int128>(p, v); break;
    case FI_UINT128: set_elem<unsigned __int128>(p, v); break;
    case FI_FLOAT_COMPLEX: set_complex<float>(p, v); break;
    case FI_DOUBLE_COMPLEX: set_complex<double>(p, v); break;
    default: break;
  }
}

}  // namespace xpufab::efa_fabric

#endif  // XPUFAB_TESTING_EFA_FABRIC_ATOMIC_REF_H_
