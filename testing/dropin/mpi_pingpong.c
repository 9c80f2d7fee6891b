/*
 * An MPI program for the Open MPI test: a ping-pong between ranks 0 and 1 of sizes from 8 bytes
 * to 2 MiB (each 8 times the last), each message's bytes checked on arrival, an MPI_Allreduce,
 * and the one-way time per size. Prints "size N one-way T us" lines and "allreduce S"; exits
 * non-zero on bad data.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check(const unsigned char* b, int n, unsigned char want) {
  for (int k = 0; k < n; k += 61)
    if (b[k] != want) return 0;
  return n == 0 || b[n - 1] == want;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) fprintf(stderr, "mpi_pingpong: run with 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int peer = 1 - rank;
  for (int n = 8; n <= (4 << 20); n *= 8) {
    unsigned char* b = malloc((size_t)n);
    const int iters = n > 65536 ? 10 : 200;
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
      const unsigned char ping = (unsigned char)(2 * i + 1), pong = (unsigned char)(2 * i + 2);
      if (rank == 0) {
        memset(b, ping, (size_t)n);
        MPI_Send(b, n, MPI_BYTE, peer, i, MPI_COMM_WORLD);
        MPI_Recv(b, n, MPI_BYTE, peer, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (!check(b, n, pong)) {
          fprintf(stderr, "mpi_pingpong: bad data, size %d iteration %d\n", n, i);
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
      } else {
        MPI_Recv(b, n, MPI_BYTE, peer, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (!check(b, n, ping)) {
          fprintf(stderr, "mpi_pingpong: bad data, size %d iteration %d\n", n, i);
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
        memset(b, pong, (size_t)n);
        MPI_Send(b, n, MPI_BYTE, peer, i, MPI_COMM_WORLD);
      }
    }
    const double t = MPI_Wtime() - t0;
    if (rank == 0) printf("size %d one-way %.2f us\n", n, t / iters / 2 * 1e6);
    free(b);
  }
  long mine = rank + 1, sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("allreduce %ld\n", sum);
  MPI_Finalize();
  return 0;
}
