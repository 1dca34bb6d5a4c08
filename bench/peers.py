"""The JIT peers of bench/run.py: JAX (jit, CPU, float64) and Numba (njit).

Each kernel is written the way a user of that tool would write it: JAX as
array operations (with `lax.fori_loop` for iteration), Numba as loops. Both are
compiled before timing (bench/run.py's warm-up call), and their compile times
are measured separately (`jax_compile_seconds`).
"""

import importlib
import subprocess
import sys
import time


def ensure(module, requirement):
    """Imports `module`, installing `requirement` with pip first if needed."""
    try:
        return importlib.import_module(module)
    except ImportError:
        print(f"+ pip install {requirement}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", requirement], check=True)
        return importlib.import_module(module)


jax = ensure("jax", "jax[cpu]")
numba = ensure("numba", "numba")
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from numba import njit  # noqa: E402
import numpy as np  # noqa: E402

VERSIONS = dict(jax=jax.__version__, numba=numba.__version__)


_warm = False


def _warm_up():
    """JAX's first compile in a process also pays for setting up its tracing,
    lowering and XLA's CPU client (10-20 ms on a 2-core Zen 3: dot's compile
    took 41 ms cold, 21 warm). bench/run.py times each kernel in a fresh process, so without this
    every kernel's figure would carry that once-per-process cost, which a
    warm process (and our warm compile service, which gets a warm-up compile
    of its own) does not pay."""
    global _warm
    if not _warm:
        x = jnp.arange(16.0)
        jax.jit(lambda a: jnp.sum(a * 2.0 + 1.0)).lower(x).compile()
        _warm = True


def jax_compile_seconds(fn, *args):
    """Time to trace, lower and compile `fn` for `args` (what the first call
    pays, in a process that has compiled before)."""
    _warm_up()
    t0 = time.perf_counter()
    # A fresh function each time: jit caches traces by function, so a second
    # `jax.jit(fn)` would skip the tracing a first compile pays.
    jax.jit(lambda *a: fn(*a)).lower(*args).compile()
    return time.perf_counter() - t0


# ---------------------------------------------------------------- JAX


def jax_neg(a):
    return -a


def jax_relax(a, iters):
    def step(_, a):
        inner = 0.25 * (a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])
        return a.at[1:-1, 1:-1].set(inner)

    return lax.fori_loop(0, iters, step, a)


def jax_matmul(a, b):
    return a @ b


def jax_dot(a, b):
    return jnp.dot(a, b)


def jax_mandel(h, w, limit):
    j, i = jnp.meshgrid(jnp.arange(w), jnp.arange(h))
    cr = -2.0 + 3.0 * j / w
    ci = -1.5 + 3.0 * i / h

    def step(_, state):
        zr, zi, k = state
        live = zr * zr + zi * zi <= 4.0
        t = zr * zr - zi * zi + cr
        zi = jnp.where(live, 2.0 * zr * zi + ci, zi)
        zr = jnp.where(live, t, zr)
        return zr, zi, k + live.astype(jnp.int32)

    zeros = jnp.zeros((h, w))
    return lax.fori_loop(0, limit, step, (zeros, zeros, jnp.zeros((h, w), jnp.int32)))[2]


def jax_blackscholes(s, x, t, r, v):
    def cnd(d):
        l = jnp.abs(d)
        k = 1.0 / (1.0 + 0.2316419 * l)
        poly = k * (0.31938153 + k * (-0.356563782 + k * (1.781477937 + k * (-1.821255978 + k * 1.330274429))))
        w = 1.0 - 0.3989422804014327 * jnp.exp(-0.5 * l * l) * poly
        return jnp.where(d < 0.0, 1.0 - w, w)

    st = v * jnp.sqrt(t)
    d1 = (jnp.log(s / x) + (r + 0.5 * v * v) * t) / st
    d2 = d1 - st
    return s * cnd(d1) - x * jnp.exp(-r * t) * cnd(d2)


def jax_floyd(d):
    n = d.shape[0]

    def step(k, d):
        return jnp.minimum(d, d[:, k][:, None] + d[k, :][None, :])

    return lax.fori_loop(0, n, step, d)


def jax_relax_apl(a, iters):
    def step(_, a):
        b = 0.25 * (jnp.roll(a, 1, 0) + jnp.roll(a, -1, 0) + jnp.roll(a, 1, 1) + jnp.roll(a, -1, 1))
        middle = jnp.concatenate([a[1:-1, :1], b[1:-1, 1:-1], a[1:-1, -1:]], axis=1)
        return jnp.concatenate([a[:1], middle, a[-1:]], axis=0)

    return lax.fori_loop(0, iters, step, a)


def laplace_minors(k):
    """Row indices and signs of the first-column expansion of a k×k matrix:
    minor i keeps every row but i (and drops column 0)."""
    rows = np.array([[r for r in range(k) if r != i] for i in range(k)])
    signs = np.where(np.arange(k) % 2 == 1, -1.0, 1.0)
    return rows, signs


def jax_det(a):
    # Kreye's Laplace expansion along the first column, as a JAX user writes a
    # recursion over shrinking static shapes: one level at a time over the
    # whole batch of minors (tracing the recursion call by call would unroll
    # its n! calls). The batch grows to n!/2 2×2 minors (29 MB for n = 10).
    mats, coef = a[None], jnp.ones(1)
    while mats.shape[1] > 2:
        k = mats.shape[1]
        rows, signs = laplace_minors(k)
        coef = (coef[:, None] * signs[None, :] * mats[:, :, 0]).reshape(-1)
        mats = mats[:, rows, 1:].reshape(-1, k - 1, k - 1)
    return coef @ (mats[:, 0, 0] * mats[:, 1, 1] - mats[:, 1, 0] * mats[:, 0, 1])


def jax_det_lu(a):
    # LU (O(n^3)): a different algorithm, timed beside the table's row.
    return jnp.linalg.det(a)


def jax_implies(a, b):
    return jnp.logical_or(jnp.logical_not(a), b)


def jax_smooth(a, iters):
    def step(_, a):
        return a.at[1:-1].set((a[:-2] + a[1:-1] + a[2:]) / 3.0)

    return lax.fori_loop(0, iters, step, a)


MG3_WEIGHTS = (0.5, 1.0 / 24.0, 1.0 / 72.0, 1.0 / 96.0)


def jax_mg3(u, iters):
    def step(_, u):
        n0, n1, n2 = u.shape
        acc = jnp.zeros((n0 - 2, n1 - 2, n2 - 2))
        for o0 in range(3):
            for o1 in range(3):
                for o2 in range(3):
                    w = MG3_WEIGHTS[abs(o0 - 1) + abs(o1 - 1) + abs(o2 - 1)]
                    acc = acc + w * u[o0:n0 - 2 + o0, o1:n1 - 2 + o1, o2:n2 - 2 + o2]
        return u.at[1:-1, 1:-1, 1:-1].set(acc)

    return lax.fori_loop(0, iters, step, u)


JAX = dict(
    det=jax.jit(jax_det),
    det_lu=jax.jit(jax_det_lu),
    implies=jax.jit(jax_implies),
    smooth=jax.jit(jax_smooth, static_argnums=1),
    relax_iv=jax.jit(jax_relax, static_argnums=1),
    mg3=jax.jit(jax_mg3, static_argnums=1),
    neg=jax.jit(jax_neg),
    relax=jax.jit(jax_relax, static_argnums=1),
    matmul=jax.jit(jax_matmul),
    dot=jax.jit(jax_dot),
    mandel=jax.jit(jax_mandel, static_argnums=(0, 1, 2)),
    blackscholes=jax.jit(jax_blackscholes),
    floyd=jax.jit(jax_floyd),
    relax_apl=jax.jit(jax_relax_apl, static_argnums=1),
)
JAX_SOURCE = dict(det=jax_det, implies=jax_implies, smooth=jax_smooth, relax_iv=jax_relax, mg3=jax_mg3,
                  neg=jax_neg, relax=jax_relax, matmul=jax_matmul, dot=jax_dot, mandel=jax_mandel,
                  blackscholes=jax_blackscholes, floyd=jax_floyd, relax_apl=jax_relax_apl)


def ready(x):
    return jax.block_until_ready(x)


# ---------------------------------------------------------------- Numba


@njit(cache=False)
def numba_neg(a):
    out = np.empty_like(a)
    flat_in = a.reshape(-1)
    flat_out = out.reshape(-1)
    for i in range(flat_in.size):
        flat_out[i] = -flat_in[i]
    return out


@njit(cache=False)
def numba_relax(a, iters):
    h, w = a.shape
    for _ in range(iters):
        b = a.copy()
        for i in range(1, h - 1):
            for j in range(1, w - 1):
                b[i, j] = 0.25 * (a[i - 1, j] + a[i + 1, j] + a[i, j - 1] + a[i, j + 1])
        a = b
    return a


@njit(cache=False)
def numba_matmul(a, b):
    n, m = a.shape
    p = b.shape[1]
    out = np.zeros((n, p))
    for i in range(n):
        for j in range(p):
            s = 0.0
            for k in range(m):
                s += a[i, k] * b[k, j]
            out[i, j] = s
    return out


@njit(cache=False)
def numba_dot(a, b):
    s = 0.0
    for i in range(a.size):
        s += a[i] * b[i]
    return s


@njit(cache=False)
def numba_mandel(h, w, limit):
    out = np.empty((h, w), dtype=np.int32)
    for i in range(h):
        for j in range(w):
            cr = -2.0 + 3.0 * j / w
            ci = -1.5 + 3.0 * i / h
            zr = 0.0
            zi = 0.0
            k = 0
            while k < limit and zr * zr + zi * zi <= 4.0:
                t = zr * zr - zi * zi + cr
                zi = 2.0 * zr * zi + ci
                zr = t
                k += 1
            out[i, j] = k
    return out


@njit(cache=False)
def numba_cnd(d):
    l = abs(d)
    k = 1.0 / (1.0 + 0.2316419 * l)
    poly = k * (0.31938153 + k * (-0.356563782 + k * (1.781477937 + k * (-1.821255978 + k * 1.330274429))))
    w = 1.0 - 0.3989422804014327 * np.exp(-0.5 * l * l) * poly
    return 1.0 - w if d < 0.0 else w


@njit(cache=False)
def numba_blackscholes(s, x, t, r, v):
    out = np.empty_like(s)
    for i in range(s.size):
        st = v * np.sqrt(t[i])
        d1 = (np.log(s[i] / x[i]) + (r + 0.5 * v * v) * t[i]) / st
        d2 = d1 - st
        out[i] = s[i] * numba_cnd(d1) - x[i] * np.exp(-r * t[i]) * numba_cnd(d2)
    return out


@njit(cache=False)
def numba_floyd(d0):
    d = d0.copy()
    n = d.shape[0]
    for k in range(n):
        for i in range(n):
            dik = d[i, k]
            for j in range(n):
                via = dik + d[k, j]
                if via < d[i, j]:
                    d[i, j] = via
    return d


@njit(cache=False)
def numba_det_rec(a, scratch, level):
    n = a.shape[0]
    if n == 2:
        return a[0, 0] * a[1, 1] - a[1, 0] * a[0, 1]
    m = n - 1
    b = scratch[level, :m, :m]
    s = 0.0
    for i in range(n):
        rr = 0
        for r in range(n):
            if r != i:
                for c in range(1, n):
                    b[rr, c - 1] = a[r, c]
                rr += 1
        sign = -1.0 if i % 2 else 1.0
        s += sign * a[i, 0] * numba_det_rec(b, scratch, level + 1)
    return s


@njit(cache=False)
def numba_det(a):
    n = a.shape[0]
    return numba_det_rec(a, np.empty((n, n, n)), 0)


@njit(cache=False)
def numba_implies(a, b):
    out = np.empty_like(a)
    fa = a.reshape(-1)
    fb = b.reshape(-1)
    fo = out.reshape(-1)
    for i in range(fa.size):
        fo[i] = (not fa[i]) or fb[i]
    return out


@njit(cache=False)
def numba_smooth(a, iters):
    n = a.size
    for _ in range(iters):
        b = a.copy()
        for i in range(1, n - 1):
            b[i] = (a[i - 1] + a[i] + a[i + 1]) / 3.0
        a = b
    return a


@njit(cache=False)
def numba_mg3(u, iters):
    n0, n1, n2 = u.shape
    w = np.array([0.5, 1.0 / 24.0, 1.0 / 72.0, 1.0 / 96.0])
    for _ in range(iters):
        b = u.copy()
        for i in range(1, n0 - 1):
            for j in range(1, n1 - 1):
                for k in range(1, n2 - 1):
                    s = 0.0
                    for o0 in range(3):
                        for o1 in range(3):
                            for o2 in range(3):
                                s += w[abs(o0 - 1) + abs(o1 - 1) + abs(o2 - 1)] * u[i + o0 - 1, j + o1 - 1, k + o2 - 1]
                    b[i, j, k] = s
        u = b
    return u


NUMBA = dict(det=numba_det, implies=numba_implies, smooth=numba_smooth, relax_iv=numba_relax, mg3=numba_mg3,
             neg=numba_neg, relax=numba_relax, matmul=numba_matmul, dot=numba_dot, mandel=numba_mandel,
             blackscholes=numba_blackscholes, floyd=numba_floyd, relax_apl=numba_relax)
