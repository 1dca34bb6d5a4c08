/* Calls kernels.sac through the generated header and shared library. */
#include <stdio.h>
#include <string.h>
#include "kernels.h"

static int failures = 0;
#define CHECK(cond, what) do { if (!(cond)) { printf("FAIL %s (line %d)\n", what, __LINE__); failures++; } else { printf("ok %s\n", what); } } while (0)

int main(void) {
  wl_ctx *ctx = wl_ctx_new();

  /* The generic entry on a 2x3 matrix. */
  double m[6] = {1, 2, 3, 4, 5, 6};
  int64_t shape23[2] = {2, 3};
  wl_array a = {m, 2, shape23, NULL};
  wl_array r;
  CHECK(wl_scale(ctx, &a, 2.0, &r) == 0, "scale returns 0");
  CHECK(r.rank == 2 && r.shape[0] == 2 && r.shape[1] == 3, "scale keeps the shape");
  const double *rd = (const double *)r.data;
  CHECK(rd[0] == 2 && rd[5] == 12, "scale doubles");
  CHECK(m[0] == 1, "scale leaves its argument alone");
  wl_array_release(&r);
  CHECK(r.owner == NULL, "release clears the descriptor");

  /* The context's tuning (threads, the smallest part split, the footprint
     from which a loop's steps stream their stores) changes no result. */
  wl_ctx_set_threads(ctx, 2);
  wl_ctx_set_parallel_min(ctx, 1);
  wl_ctx_set_stream_min(ctx, 0);
  CHECK(wl_scale(ctx, &a, 2.0, &r) == 0 && ((const double *)r.data)[5] == 12, "scale on a tuned context");
  wl_array_release(&r);

  /* The AKS variant. */
  double m33[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  int64_t shape33[2] = {3, 3};
  wl_array a33 = {m33, 2, shape33, NULL};
  CHECK(wl_scale__d_3_3__d(ctx, &a33, 3.0, &r) == 0, "the double[3,3] variant returns 0");
  CHECK(((double *)r.data)[8] == 3.0, "the double[3,3] variant computes");
  wl_array_release(&r);
  CHECK(wl_scale__d_3_3__d(ctx, &a, 3.0, &r) == 1, "the double[3,3] variant refuses a 2x3 matrix");
  CHECK(strcmp(wl_error_code(ctx), "R0004") == 0, "refusal code R0004");
  printf("message: %s\n", wl_error_message(ctx));

  /* Rank-generic: a scalar (rank 0) and a rank-3 array. */
  double one = 7.5, sum;
  wl_array s0 = {&one, 0, NULL, NULL};
  CHECK(wl_total(ctx, &s0, &sum) == 0 && sum == 7.5, "total of a scalar");
  double cube[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int64_t shape222[3] = {2, 2, 2};
  wl_array c = {cube, 3, shape222, NULL};
  CHECK(wl_total(ctx, &c, &sum) == 0 && sum == 36, "total of a cube");

  /* A run-time error with its source location. */
  int32_t v[3] = {10, 20, 30}, x;
  int64_t shape3[1] = {3};
  wl_array vv = {v, 1, shape3, NULL};
  CHECK(wl_pick(ctx, &vv, 1, &x) == 0 && x == 20, "pick in bounds");
  CHECK(wl_pick(ctx, &vv, 5, &x) == 1, "pick out of bounds fails");
  int32_t line = 0, column = 0;
  const char *file = wl_error_location(ctx, &line, &column);
  printf("error %s at %s:%d:%d: %s\n", wl_error_code(ctx), file ? file : "?", line, column, wl_error_message(ctx));
  CHECK(wl_pick(ctx, &vv, 2, &x) == 0 && x == 30, "the context is usable after an error");

  /* Results the callee allocates; arguments returned or updated. */
  CHECK(wl_squares(ctx, 5, &r) == 0 && r.rank == 1 && r.shape[0] == 5 && ((int32_t *)r.data)[4] == 16, "squares");
  wl_array_release(&r);
  CHECK(wl_same(ctx, &vv, &r) == 0 && r.data != (void *)v && ((int32_t *)r.data)[2] == 30, "an argument returned is a copy");
  wl_array_release(&r);
  CHECK(wl_bump(ctx, &vv, &r) == 0 && ((int32_t *)r.data)[0] == 99 && v[0] == 10, "an update copies the argument");
  wl_array_release(&r);

  /* bool crosses as a byte. */
  float f[3] = {1.0f, -2.0f, 3.0f};
  wl_array fa = {f, 1, shape3, NULL};
  bool neg = false;
  CHECK(wl_anyneg(ctx, &fa, &neg) == 0 && neg, "anyneg");

  /* Malformed descriptors are errors, not crashes. */
  CHECK(wl_total(ctx, NULL, &sum) == 1, "a null descriptor fails");
  printf("null descriptor: %s %s\n", wl_error_code(ctx), wl_error_message(ctx));
  int64_t bad[1] = {-4};
  wl_array neg_shape = {v, 1, bad, NULL};
  CHECK(wl_pick(ctx, &neg_shape, 0, &x) == 1, "a negative extent fails");
  CHECK(wl_total(NULL, &c, &sum) == -1, "a null context returns -1");
  CHECK(wl_total(ctx, &c, NULL) == 1 && strcmp(wl_error_code(ctx), "R0013") == 0, "a null result pointer fails");
  printf("null result: %s\n", wl_error_message(ctx));
  CHECK(wl_squares(ctx, 3, NULL) == 1, "a null array result pointer fails");
  int64_t wide[2] = {0, 5000000000LL};
  wl_array too_wide = {NULL, 2, wide, NULL};
  CHECK(wl_total(ctx, &too_wide, &sum) == 1 && strcmp(wl_error_code(ctx), "R0013") == 0, "an extent past int fails");
  printf("wide extent: %s\n", wl_error_message(ctx));
  /* The accessors take a null context. */
  wl_ctx_set_threads(NULL, 2);
  CHECK(strcmp(wl_error_code(NULL), "") == 0 && strcmp(wl_error_message(NULL), "") == 0, "null context accessors");
  CHECK(wl_error_location(NULL, NULL, NULL) == NULL, "null context location");

  /* A function named like a runtime symbol, parameters named like keywords. */
  CHECK(wl_inc_(ctx, &vv, &r) == 0 && ((int32_t *)r.data)[0] == 11, "inc, exported as wl_inc_");
  wl_array_release(&r);
  CHECK(wl_keywords(ctx, 1, 2, 3, 4, &x) == 0 && x == 10, "keywords as parameter names");

  /* One array returned twice comes back as two (they once shared their data). */
  wl_array t0 = {0}, t1 = {0};
  CHECK(wl_twice(ctx, &vv, &t0, &t1) == 0 && t0.data != t1.data && t0.owner != t1.owner, "twice: two arrays");
  ((int32_t *)t0.data)[0] = 100;
  CHECK(((int32_t *)t1.data)[0] == 11, "twice: writing one leaves the other alone");
  wl_array_release(&t0);
  wl_array_release(&t1);

  int32_t status = -1;
  CHECK(wl_main(ctx, &status) == 0 && status == 0, "main");
  wl_ctx_free(ctx);
  printf("%d failure(s)\n", failures);
  return failures != 0;
}
