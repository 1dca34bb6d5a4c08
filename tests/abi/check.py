"""Calls kernels.sac's shared library through ctypes with NumPy arrays."""
import ctypes
import sys

import numpy as np


class WlArray(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("rank", ctypes.c_int64),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("owner", ctypes.c_void_p),
    ]


lib = ctypes.CDLL(sys.argv[1])
lib.wl_ctx_new.restype = ctypes.c_void_p
lib.wl_error_code.restype = ctypes.c_char_p
lib.wl_error_message.restype = ctypes.c_char_p
lib.wl_error_location.restype = ctypes.c_char_p
for name in ["wl_scale", "wl_total", "wl_pick", "wl_squares"]:
    getattr(lib, name).restype = ctypes.c_int32
lib.wl_scale.argtypes = [ctypes.c_void_p, ctypes.POINTER(WlArray), ctypes.c_double, ctypes.POINTER(WlArray)]
lib.wl_total.argtypes = [ctypes.c_void_p, ctypes.POINTER(WlArray), ctypes.POINTER(ctypes.c_double)]
lib.wl_pick.argtypes = [ctypes.c_void_p, ctypes.POINTER(WlArray), ctypes.c_int32, ctypes.POINTER(ctypes.c_int32)]
lib.wl_squares.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(WlArray)]
lib.wl_array_release.argtypes = [ctypes.POINTER(WlArray)]
lib.wl_ctx_free.argtypes = [ctypes.c_void_p]
lib.wl_error_code.argtypes = [ctypes.c_void_p]
lib.wl_error_message.argtypes = [ctypes.c_void_p]
lib.wl_error_location.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32)]

CTYPES = {np.dtype(np.float64): ctypes.c_double, np.dtype(np.int32): ctypes.c_int32}


def describe(a):
    """A borrowed descriptor of a C-contiguous NumPy array (keep `a` alive)."""
    shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
    d = WlArray(a.ctypes.data, a.ndim, shape, None)
    d._keep = (a, shape)
    return d


def take(r, dtype):
    """A NumPy copy of a result; the result is released."""
    shape = tuple(r.shape[k] for k in range(r.rank))
    n = int(np.prod(shape)) if shape else 1
    buf = ctypes.cast(r.data, ctypes.POINTER(CTYPES[np.dtype(dtype)] * n)).contents
    out = np.frombuffer(buf, dtype=dtype, count=n).reshape(shape).copy()
    lib.wl_array_release(ctypes.byref(r))
    return out


ctx = lib.wl_ctx_new()
m = np.arange(12, dtype=np.float64).reshape(3, 4)
r = WlArray()
assert lib.wl_scale(ctx, describe(m), 0.5, ctypes.byref(r)) == 0
scaled = take(r, np.float64)
assert np.array_equal(scaled, m * 0.5), scaled
print("scale", scaled.shape, scaled.sum())

t = ctypes.c_double()
cube = np.random.default_rng(7).random((4, 5, 6))
assert lib.wl_total(ctx, describe(cube), ctypes.byref(t)) == 0
assert abs(t.value - cube.sum()) < 1e-9, (t.value, cube.sum())
print("total ok")

assert lib.wl_squares(ctx, 6, ctypes.byref(r)) == 0
sq = take(r, np.int32)
assert list(sq) == [0, 1, 4, 9, 16, 25], sq
print("squares", sq.tolist())

v = np.array([1, 2, 3], dtype=np.int32)
x = ctypes.c_int32()
assert lib.wl_pick(ctx, describe(v), 3, ctypes.byref(x)) == 1
line, col = ctypes.c_int32(), ctypes.c_int32()
where = lib.wl_error_location(ctx, ctypes.byref(line), ctypes.byref(col))
print("error", lib.wl_error_code(ctx).decode(), f"{where.decode()}:{line.value}:{col.value}",
      lib.wl_error_message(ctx).decode())
lib.wl_ctx_free(ctx)
