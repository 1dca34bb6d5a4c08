/* Host for 01_parallel_fold_failure_leaks_partials.sac: calls wl_total K times
   (usage: fold_host K THREADS BAD; BAD = an index in 0..49999 makes every call fail). */
#include "fold.h"
#include <stdio.h>
#include <stdlib.h>
#define N 50000
static int32_t data[N];
int main(int argc, char **argv) {
  int k = atoi(argv[1]), threads = atoi(argv[2]), bad = atoi(argv[3]);
  wl_ctx *ctx = wl_ctx_new();
  wl_ctx_set_threads(ctx, threads);
  int64_t shp[1] = {N};
  wl_array a = {data, 1, shp, NULL};
  int fails = 0;
  for (int i = 0; i < k; i++) { int32_t r; if (wl_total(ctx, &a, bad, &r)) fails++; }
  printf("%d calls, %d failed (%s)\n", k, fails, fails ? wl_error_code(ctx) : "-");
  wl_ctx_free(ctx);
  return 0;
}
