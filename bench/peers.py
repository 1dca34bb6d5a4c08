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


def jax_compile_seconds(fn, *args):
    """Time to trace, lower and compile `fn` for `args` (what the first call pays)."""
    t0 = time.perf_counter()
    jax.jit(fn).lower(*args).compile()
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


JAX = dict(
    neg=jax.jit(jax_neg),
    relax=jax.jit(jax_relax, static_argnums=1),
    matmul=jax.jit(jax_matmul),
    dot=jax.jit(jax_dot),
    mandel=jax.jit(jax_mandel, static_argnums=(0, 1, 2)),
    blackscholes=jax.jit(jax_blackscholes),
    floyd=jax.jit(jax_floyd),
    relax_apl=jax.jit(jax_relax_apl, static_argnums=1),
)
JAX_SOURCE = dict(neg=jax_neg, relax=jax_relax, matmul=jax_matmul, dot=jax_dot, mandel=jax_mandel,
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


NUMBA = dict(neg=numba_neg, relax=numba_relax, matmul=numba_matmul, dot=numba_dot, mandel=numba_mandel,
             blackscholes=numba_blackscholes, floyd=numba_floyd, relax_apl=numba_relax)
