/* A/B of two builds of the bench library, in one process.

   The host's speed drifts by tens of percent within minutes, so two builds
   timed in separate runs of bench/run.py cannot show a 3% difference. This
   driver loads both libraries (`python3 bench/run.py --build-for DIR` builds
   one; build the other with the change) with dlopen, calls one kernel of each
   alternately, and reports the minimum time of each over ROUNDS calls and
   their ratio B/A, then the medians and theirs, with one element of each
   result as a cross-check.

     gcc -O2 bench/ab/ab.c -o target/ab -ldl
     target/ab KERNEL THREADS ROUNDS DIR_A/libwlbench.so DIR_B/libwlbench.so [SYMBOL [EXTENT]]

   KERNEL: neg, relax, relax_iv, relax_apl, smooth, mg3, matmul, floyd, implies, det, dot,
   blackscholes or mandel, on the
   bench's sizes and an input of its own (not bench/run.py's); SYMBOL: the C
   function to call without its `wl_` prefix (default: the entry,
   e.g. `relax__d_X_X__i` for the generic instance; `-`: the entry;
   `SYM_A,SYM_B`: a symbol for each library, e.g. `relax_apl 1 9 L L
   relax_apl,relax` for composed against hand-fused); EXTENT:
   the extent of every axis instead of the bench's (e.g. `matmul 1 5 A B -
   2048`: a product of 2048x2048 matrices, which the entry's dispatch sends
   to the generic instance). Run it in both orders: the first library loaded
   can differ by a percent or two. On more than one thread, two different
   libraries bring two copies of the runtime, each with its thread pool,
   whose idle workers spin beside the other's job: a change to the runtime
   showed 8-15% either way depending on the order (session 55, floyd on two
   threads). There, time each library alone (the same path twice: dlopen
   loads it once) and compare the runs' minima. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  void *data;
  int64_t rank;
  int64_t *shape;
  void *owner;
} wl_array;
typedef void *(*ctx_new_fn)(void);
typedef void (*set_threads_fn)(void *, int32_t);
typedef void (*release_fn)(wl_array *);
typedef int32_t (*array_int_fn)(void *, const wl_array *, int32_t, wl_array *);
typedef int32_t (*array_array_fn)(void *, const wl_array *, const wl_array *, wl_array *);
typedef int32_t (*array_fn)(void *, const wl_array *, wl_array *);
typedef int32_t (*array_to_double_fn)(void *, const wl_array *, double *);
typedef int32_t (*arrays_to_double_fn)(void *, const wl_array *, const wl_array *, double *);
typedef int32_t (*mandel_fn)(void *, int32_t, int32_t, int32_t, wl_array *);
typedef int32_t (*blackscholes_fn)(void *, const wl_array *, const wl_array *, const wl_array *, double, double,
                                   wl_array *);
enum kind { ARRAY_INT, ARRAY_ARRAY, ARRAY, ARRAY_TO_DOUBLE, ARRAYS_TO_DOUBLE, BLACKSCHOLES, MANDEL };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: %s KERNEL THREADS ROUNDS LIB_A LIB_B [SYMBOL|SYM_A,SYM_B|- [EXTENT]]\n", argv[0]);
    return 2;
  }
  const char *kernel = argv[1];
  int threads = atoi(argv[2]), rounds = atoi(argv[3]);
  void *lib[2], *ctx[2];
  release_fn release[2];
  for (int i = 0; i < 2; i++) {
    lib[i] = dlopen(argv[4 + i], RTLD_NOW | RTLD_LOCAL);
    if (!lib[i]) {
      fprintf(stderr, "%s\n", dlerror());
      return 1;
    }
    ctx[i] = ((ctx_new_fn)dlsym(lib[i], "wl_ctx_new"))();
    ((set_threads_fn)dlsym(lib[i], "wl_ctx_set_threads"))(ctx[i], threads);
    release[i] = (release_fn)dlsym(lib[i], "wl_array_release");
  }
  int64_t shape[3];
  wl_array a = {0, 2, shape, 0};
  int iters = 10;
  enum kind kind = ARRAY_INT;
  /* Bytes per element: doubles, or bools (implies), one byte each in the ABI. */
  size_t element = sizeof(double);
  if (!strcmp(kernel, "relax") || !strcmp(kernel, "relax_iv") || !strcmp(kernel, "relax_apl")) {
    shape[0] = shape[1] = 2000;
  } else if (!strcmp(kernel, "smooth")) {
    shape[0] = 4000000, a.rank = 1, iters = 20;
  } else if (!strcmp(kernel, "mg3")) {
    shape[0] = shape[1] = shape[2] = 128, a.rank = 3, iters = 4;
  } else if (!strcmp(kernel, "matmul")) {
    shape[0] = shape[1] = 1024, kind = ARRAY_ARRAY;
  } else if (!strcmp(kernel, "neg")) {
    shape[0] = shape[1] = 4000, kind = ARRAY;
  } else if (!strcmp(kernel, "floyd")) {
    shape[0] = shape[1] = 512, kind = ARRAY;
  } else if (!strcmp(kernel, "implies")) {
    shape[0] = shape[1] = 4000, kind = ARRAY_ARRAY, element = 1;
  } else if (!strcmp(kernel, "dot")) {
    shape[0] = 20000000, a.rank = 1, kind = ARRAYS_TO_DOUBLE;
  } else if (!strcmp(kernel, "det")) {
    shape[0] = shape[1] = 10, kind = ARRAY_TO_DOUBLE;
  } else if (!strcmp(kernel, "blackscholes")) {
    shape[0] = 4000000, a.rank = 1, kind = BLACKSCHOLES;
  } else if (!strcmp(kernel, "mandel")) {
    /* No array in (the one made here goes unused): the image's height and width
       (the shape) and 256 steps. */
    shape[0] = shape[1] = 1000, kind = MANDEL, iters = 256;
  } else {
    fprintf(stderr, "unknown kernel %s\n", kernel);
    return 2;
  }
  if (argc > 7) {
    int64_t extent = atoll(argv[7]);
    if (extent <= 0) {
      fprintf(stderr, "EXTENT must be positive\n");
      return 2;
    }
    for (int d = 0; d < a.rank; d++) shape[d] = extent;
  }
  char symbol[2][128];
  const char *wanted = argc > 6 && strcmp(argv[6], "-") ? argv[6] : kernel;
  const char *comma = strchr(wanted, ',');
  if (comma) {
    snprintf(symbol[0], sizeof symbol[0], "wl_%.*s", (int)(comma - wanted), wanted);
    snprintf(symbol[1], sizeof symbol[1], "wl_%s", comma + 1);
  } else {
    snprintf(symbol[0], sizeof symbol[0], "wl_%s", wanted);
    snprintf(symbol[1], sizeof symbol[1], "wl_%s", wanted);
  }
  int64_t n = 1;
  for (int d = 0; d < a.rank; d++) n *= shape[d];
  void *data = malloc(n * element);
  uint64_t lcg = 1;
  for (int64_t i = 0; i < n; i++) {
    if (element == 1)
      ((uint8_t *)data)[i] = i % 3 == 0;
    else if (kind == ARRAY_TO_DOUBLE) { /* pseudo-random: a pattern's rows would be dependent (det 0) */
      lcg = lcg * 6364136223846793005u + 1442695040888963407u;
      ((double *)data)[i] = (double)(lcg >> 33) / 4294967296.0 - 1;
    } else if (kind == BLACKSCHOLES) /* spot prices */
      ((double *)data)[i] = 50 + i % 101;
    else
      ((double *)data)[i] = (i % 13) * 0.25 + 1;
  }
  a.data = data;
  /* A second operand of its own (matmul), as bench/run.py multiplies two
     matrices: the same array twice shares its cache lines between the
     operands, a product no caller has. */
  wl_array b = a;
  if (kind == ARRAY_ARRAY || kind == ARRAYS_TO_DOUBLE) {
    void *data_b = malloc(n * element);
    for (int64_t i = 0; i < n; i++) {
      if (element == 1)
        ((uint8_t *)data_b)[i] = i % 5 == 0;
      else
        ((double *)data_b)[i] = (i % 7) * 0.5 - 1;
    }
    b.data = data_b;
  }
  /* Black–Scholes: strikes and times to expiry beside the spot prices. */
  wl_array strike = a, expiry = a;
  if (kind == BLACKSCHOLES) {
    double *x = malloc(n * sizeof(double)), *t = malloc(n * sizeof(double));
    for (int64_t i = 0; i < n; i++) x[i] = 50 + (i * 7) % 101, t[i] = 0.25 + (i % 8) * 0.25;
    strike.data = x, expiry.data = t;
  }
  void *fn[2];
  for (int i = 0; i < 2; i++) {
    fn[i] = dlsym(lib[i], symbol[i]);
    if (!fn[i]) {
      fprintf(stderr, "no %s in %s\n", symbol[i], argv[4 + i]);
      return 1;
    }
  }
  double best[2] = {1e9, 1e9}, check[2] = {0, 0};
  /* Every call's time, for the medians: on a host whose second CPU is
     sometimes taken by another guest, the minima show the calls it was
     not, the medians what a caller gets. */
  double *times[2] = {malloc(rounds * sizeof(double)), malloc(rounds * sizeof(double))};
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < 2; i++) {
      void *f = fn[i];
      wl_array out;
      double scalar = 0;
      double t0 = now();
      int32_t rc = kind == ARRAY_INT         ? ((array_int_fn)f)(ctx[i], &a, iters, &out)
                   : kind == ARRAY_ARRAY     ? ((array_array_fn)f)(ctx[i], &a, &b, &out)
                   : kind == ARRAY_TO_DOUBLE ? ((array_to_double_fn)f)(ctx[i], &a, &scalar)
                   : kind == ARRAYS_TO_DOUBLE ? ((arrays_to_double_fn)f)(ctx[i], &a, &b, &scalar)
                   : kind == BLACKSCHOLES    ? ((blackscholes_fn)f)(ctx[i], &a, &strike, &expiry, 0.02, 0.3, &out)
                   : kind == MANDEL ? ((mandel_fn)f)(ctx[i], (int32_t)shape[0], (int32_t)shape[1], iters, &out)
                                             : ((array_fn)f)(ctx[i], &a, &out);
      double t = now() - t0;
      if (rc) {
        fprintf(stderr, "%s failed in %s\n", symbol[i], argv[4 + i]);
        return 1;
      }
      if (t < best[i]) best[i] = t;
      times[i][r] = t;
      if (kind == ARRAY_TO_DOUBLE || kind == ARRAYS_TO_DOUBLE) {
        check[i] = scalar;
        continue;
      }
      if (element == 1) {
        /* bools: how many are true (one element of a 0/1 result checks little) */
        int64_t ones = 0;
        for (int64_t k = 0; k < n; k++) ones += ((uint8_t *)out.data)[k] != 0;
        check[i] = (double)ones;
      } else if (kind == MANDEL) {
        /* the image's sum of escape counts */
        int64_t steps = 0;
        for (int64_t k = 0; k < n; k++) steps += ((int32_t *)out.data)[k];
        check[i] = (double)steps;
      } else {
        check[i] = ((double *)out.data)[n / 2 + 7];
      }
      release[i](&out);
    }
  }
  double median[2];
  for (int i = 0; i < 2; i++) {
    qsort(times[i], rounds, sizeof(double), by_value);
    median[i] = rounds % 2 ? times[i][rounds / 2] : (times[i][rounds / 2 - 1] + times[i][rounds / 2]) / 2;
  }
  printf("%s %s/%s threads=%d: A %.2f ms, B %.2f ms, B/A %.3f; medians A %.2f ms, B %.2f ms, B/A %.3f "
         "(check %g %g)\n",
         kernel, symbol[0], symbol[1], threads, best[0] * 1e3, best[1] * 1e3, best[1] / best[0], median[0] * 1e3,
         median[1] * 1e3, median[1] / median[0], check[0], check[1]);
  return check[0] == check[1] ? 0 : 1;
}
