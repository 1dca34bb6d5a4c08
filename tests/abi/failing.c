/* Calls failing.sac's functions, each failing with R0001 after allocating
   arrays of 100000 ints, 300 times each, and prints how much the resident
   set grew: a function that lost what it allocated would lose 400 kB or more
   per call, 100 MB or more in all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "failing.h"

static long resident_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) kb = atol(line + 6);
  if (f) fclose(f);
  return kb;
}

int main(void) {
  wl_ctx *ctx = wl_ctx_new();
  static int32_t v[100000];
  int64_t shape[1] = {100000};
  wl_array a = {v, 1, shape, NULL}, r = {0}, s = {0};
  int fails = 0, calls = 0;
  long before = 0;
  /* A fold split over 64 threads (256 chunks, 2 kB of partial results
     per call) that fails in its first chunk, 20000 times: 40 MB when a
     failure did not free the partials. */
  wl_ctx *par = wl_ctx_new();
  wl_ctx_set_threads(par, 64);
  wl_ctx_set_parallel_min(par, 1);
  int32_t total = 0;
  for (int round = 0; round < 301; round++) {
    /* The first round warms the runtime's caches and threads up. */
    if (round == 1) before = resident_kb();
    fails += wl_late(ctx, &a, 200000, &r) != 0;
    fails += wl_pair(ctx, &a, 200000, &r, &s) != 0;
    fails += wl_deep(ctx, &a, 3, &r) != 0;
    fails += wl_carried(ctx, &a, -1, &r) != 0;
    fails += wl_cells(ctx, &a, 1, &r) != 0;
    calls += 5;
  }
  for (int k = 0; k < 20000; k++) {
    fails += wl_total(par, &a, 0, &total) != 0;
    calls++;
  }
  long grown = resident_kb() - before;
  printf("%d of %d calls failed (%s); resident set grew by %ld kB\n", fails, calls, wl_error_code(ctx), grown);
  wl_ctx_free(ctx);
  wl_ctx_free(par);
  return 0;
}
