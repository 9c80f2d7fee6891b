/*
 * An MPI program for the Open MPI test: one-sided communication between two ranks. Each rank puts
 * 1,024 longs into the other's window, then both accumulate (MPI_SUM) 100 times into rank 0's
 * first word, and each gets the other's window back; every value is checked.
 * Prints "onesided: all checks passed"; a rank that reads a wrong value names the first one.
 */
#include <mpi.h>
#include <stdio.h>

enum { kWords = 1024, kAdds = 100 };

static int rank = 0, bad = 0;

/* Counts a wrong value, naming the first this rank read. */
static void check(const char* what, int index, long got, long want) {
  if (got == want) return;
  if (bad++ == 0)
    printf("onesided: rank %d %s[%d] = %ld, expected %ld\n", rank, what, index, got, want);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) MPI_Abort(MPI_COMM_WORLD, 2);
  const int peer = 1 - rank;
  static long window[kWords], mine[kWords], back[kWords];
  MPI_Win win;
  MPI_Win_create(window, sizeof(window), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  for (int i = 0; i < kWords; ++i) mine[i] = rank * 100000L + i;
  MPI_Win_fence(0, win);
  MPI_Put(mine, kWords, MPI_LONG, peer, 0, kWords, MPI_LONG, win);
  MPI_Win_fence(0, win);
  for (int i = 0; i < kWords; ++i) check("put", i, window[i], peer * 100000L + i);
  /* The peer's accumulates may reach this window only once this rank has read it: a fence's
   * RMA waits for the target to call the fence, and nothing else orders them after the read. */
  MPI_Win_fence(0, win);
  const long one = 1;
  for (int i = 0; i < kAdds; ++i)
    MPI_Accumulate(&one, 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM, win);
  MPI_Win_fence(0, win);
  if (rank == 0) check("accumulated", 0, window[0], 100000L + 2 * kAdds);
  MPI_Get(back, kWords, MPI_LONG, peer, 0, kWords, MPI_LONG, win);
  MPI_Win_fence(0, win);
  for (int i = 1; i < kWords; ++i) check("got", i, back[i], rank * 100000L + i);
  MPI_Win_free(&win);
  int total = 0;
  MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    if (total == 0)
      printf("onesided: all checks passed\n");
    else
      printf("onesided: %d values wrong\n", total);
  }
  MPI_Finalize();
  return total != 0;
}
