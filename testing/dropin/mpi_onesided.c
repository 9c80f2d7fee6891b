/*
 * An MPI program for the Open MPI test: one-sided communication between two ranks. Each rank puts
 * 1,024 longs into the other's window, then both accumulate (MPI_SUM) 100 times into rank 0's
 * first word, and each gets the other's window back; every value is checked.
 * Prints "onesided: all checks passed".
 */
#include <mpi.h>
#include <stdio.h>

enum { kWords = 1024, kAdds = 100 };

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0, bad = 0;
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
  for (int i = 0; i < kWords; ++i) bad += window[i] != peer * 100000L + i;
  const long one = 1;
  for (int i = 0; i < kAdds; ++i) MPI_Accumulate(&one, 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM, win);
  MPI_Win_fence(0, win);
  if (rank == 0) bad += window[0] != 100000L + 2 * kAdds;
  MPI_Get(back, kWords, MPI_LONG, peer, 0, kWords, MPI_LONG, win);
  MPI_Win_fence(0, win);
  for (int i = 1; i < kWords; ++i) bad += back[i] != rank * 100000L + i;
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
