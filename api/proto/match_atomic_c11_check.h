/* match.h and atomic.h compiled as strict C11 (match_atomic_c11_check.c), called from the C++ tests. */
#ifndef XPUFAB_API_PROTO_MATCH_ATOMIC_C11_CHECK_H_
#define XPUFAB_API_PROTO_MATCH_ATOMIC_C11_CHECK_H_

#ifdef __cplusplus
extern "C" {
#endif

/* A short matching script run through the C build of match.h: 0 when every step gave what it should. */
int proto_c11_check_match(void);

/* A few atomics (sub-word, 64-bit, 128-bit, complex) run through the C build of atomic.h: 0 when all agree. */
int proto_c11_check_atomic(void);

#ifdef __cplusplus
}
#endif

#endif /* XPUFAB_API_PROTO_MATCH_ATOMIC_C11_CHECK_H_ */
