/* Calls f with an out-of-bounds index n times (each call fails with R0001), then prints RSS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "leak.h"
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 10;
  wl_ctx *ctx = wl_ctx_new();
  static int32_t v[100000]; int64_t s[1] = {100000};
  wl_array a = {v, 1, s, NULL}, r = {0};
  int fails = 0;
  for (int k = 0; k < n; k++) fails += wl_f(ctx, &a, 200000, &r) != 0;
  printf("%d failed calls, last: %s %s\n", fails, wl_error_code(ctx), wl_error_message(ctx));
  FILE *f = fopen("/proc/self/status", "r"); char line[256];
  while (fgets(line, sizeof line, f)) if (!strncmp(line, "VmRSS", 5)) fputs(line, stdout);
  wl_ctx_free(ctx);
  return 0;
}
