/*
 * An MPI program for the Open MPI test, on three or more ranks: what MPI's matching asks of the
 * tagged transport below it. Each check ends the job with a message when it fails.
 *   1. MPI_Iprobe with MPI_ANY_SOURCE / MPI_ANY_TAG, then a receive of the probed count.
 *   2. MPI_Improbe + MPI_Mrecv of a 1 MiB message (the transport's peek and claim).
 *   3. 64 nonblocking sends each way of sizes up to 70,000 bytes, received by tag in the
 *      reverse of their sending order, each count and its bytes checked.
 *   4. A message longer than its receive: MPI_ERR_TRUNCATE.
 *   5. MPI_Allreduce and a 400 KB-per-rank MPI_Allgather.
 * Prints "matching: all checks passed on N ranks".
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

#define CHECK(c)                                                                 \
  do {                                                                           \
    if (!(c)) {                                                                  \
      fprintf(stderr, "rank %d: line %d: check failed: %s\n", rank, __LINE__, #c); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                              \
    }                                                                            \
  } while (0)

static void probe_any(void) {
  if (rank != 0) {
    const int n = 1000 * rank;
    int* b = malloc(sizeof(int) * n);
    for (int i = 0; i < n; ++i) b[i] = rank + i;
    MPI_Send(b, n, MPI_INT, 0, 40 + rank, MPI_COMM_WORLD);
    free(b);
    return;
  }
  for (int k = 1; k < size; ++k) {
    MPI_Status st;
    int flag = 0, n = 0;
    while (!flag) MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
    MPI_Get_count(&st, MPI_INT, &n);
    CHECK(n == 1000 * st.MPI_SOURCE && st.MPI_TAG == 40 + st.MPI_SOURCE);
    int* b = malloc(sizeof(int) * n);
    MPI_Recv(b, n, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int i = 0; i < n; ++i) CHECK(b[i] == st.MPI_SOURCE + i);
    free(b);
  }
}

static void matched_probe(void) {
  const int n = 1 << 20;
  char* b = malloc(n);
  if (rank == 1) {
    memset(b, 7, n);
    MPI_Send(b, n, MPI_CHAR, 0, 99, MPI_COMM_WORLD);
  } else if (rank == 0) {
    MPI_Message msg;
    MPI_Status st;
    int flag = 0, got = 0;
    while (!flag) MPI_Improbe(1, 99, MPI_COMM_WORLD, &flag, &msg, &st);
    MPI_Get_count(&st, MPI_CHAR, &got);
    CHECK(got == n);
    memset(b, 0, n);
    MPI_Mrecv(b, n, MPI_CHAR, &msg, MPI_STATUS_IGNORE);
    for (int i = 0; i < n; i += 4093) CHECK(b[i] == 7);
    CHECK(b[n - 1] == 7);
  }
  free(b);
}

enum { kWindow = 64, kMax = 70000 };
static char sendbuf[kWindow][kMax], recvbuf[kWindow][kMax];

static int window_len(int i) { return (i * 997) % kMax; }

static void reverse_window(void) {
  const int peer = rank ^ 1;
  if (peer >= size) return;
  MPI_Request rq[2 * kWindow];
  MPI_Status st[2 * kWindow];
  for (int j = kWindow - 1; j >= 0; --j)
    MPI_Irecv(recvbuf[j], kMax, MPI_CHAR, peer, j, MPI_COMM_WORLD, &rq[j]);
  for (int i = 0; i < kWindow; ++i) {
    memset(sendbuf[i], (char)(i + rank), window_len(i));
    MPI_Isend(sendbuf[i], window_len(i), MPI_CHAR, peer, i, MPI_COMM_WORLD, &rq[kWindow + i]);
  }
  MPI_Waitall(2 * kWindow, rq, st);
  for (int j = 0; j < kWindow; ++j) {
    int got = 0;
    MPI_Get_count(&st[j], MPI_CHAR, &got);
    CHECK(got == window_len(j));
    for (int k = 0; k < got; k += 101) CHECK(recvbuf[j][k] == (char)(j + peer));
  }
}

static void truncation(void) {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  char b[5000];
  if (rank == 1) {
    memset(b, 1, sizeof(b));
    MPI_Send(b, 5000, MPI_CHAR, 0, 5, MPI_COMM_WORLD);
  } else if (rank == 0) {
    MPI_Status st;
    int cls = 0;
    MPI_Error_class(MPI_Recv(b, 100, MPI_CHAR, 1, 5, MPI_COMM_WORLD, &st), &cls);
    CHECK(cls == MPI_ERR_TRUNCATE);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

static void collectives(void) {
  long mine = rank + 1, sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  CHECK(sum == (long)size * (size + 1) / 2);
  enum { kEach = 100000 };
  int* part = malloc(sizeof(int) * kEach);
  int* all = malloc(sizeof(int) * kEach * size);
  for (int i = 0; i < kEach; ++i) part[i] = rank * 7 + i;
  MPI_Allgather(part, kEach, MPI_INT, all, kEach, MPI_INT, MPI_COMM_WORLD);
  for (int r = 0; r < size; ++r)
    for (int i = 0; i < kEach; i += 333) CHECK(all[r * kEach + i] == r * 7 + i);
  free(part);
  free(all);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(size >= 3);
  void (*steps[])(void) = {probe_any, matched_probe, reverse_window, truncation, collectives};
  for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); ++s) {
    steps[s]();
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (rank == 0) printf("matching: all checks passed on %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
