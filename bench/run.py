#!/usr/bin/env python3
"""withloop's benchmark suite: compiled SaC against hand-written C, NumPy, JAX and Numba.

    python3 bench/run.py [--quick] [--reps N] [--out bench/results] [--no-peers]
    python3 bench/run.py --only implies,det [--no-peers]   # a few kernels, no table written
    python3 bench/run.py --build-for DIR --cpu sapphirerapids   # for another machine's CPU
    python3 bench/run.py --prebuilt DIR --rows rows.json   # libraries built elsewhere

JAX (jit on CPU, float64) and Numba are installed with pip when missing
(bench/peers.py); `--no-peers` leaves them out.

Builds bench/kernels.sac into a shared library with `withloop compile --emit so`
(AKS variants from shape hints, plus the generic AKD/AUD instances), the L0
versions of seed 004's programs (bench/kernels.l0) into another, one more SaC
library per optimisation switched off (ABLATIONS), builds
bench/c/kernels.c with `gcc -O3 -march=native`, and times every kernel through
ctypes, each kernel's implementations in a Python process of their own (no
figure inherits an earlier kernel's heap or threads) and in rounds (each round
runs every implementation once, so the machine's drift falls on all alike):
the same inputs, outputs cross-checked before timing, min/median/max over
repetitions. Writes a markdown table and JSON to
bench/results/ with the machine, the commands and the figures.

`--prebuilt DIR` times libwlbench.so and libwll0.so from DIR instead of
building them (compiled elsewhere by `--build-for DIR`, which builds them with
the commands `build` uses for the CPU `--cpu`/`--features` name, and stops),
on a machine without Rust or LLVM —
one lent for a measurement; the C kernels are built here with gcc unless DIR
holds libcbench.so and libcbench_omp.so too.
With `--only` or `--prebuilt`, no results are written: the ratio table, the
generic/AKS line, the peer table (with peers) and a summary of one and two
threads go to standard output, and with `--rows FILE` the figures to FILE
after each kernel (a run cut short keeps what it measured).

Ratios are time / time of the C version (lower is better; < 1 means faster
than C). "2 threads" is the compiled SaC code with two threads; its speed-up is
against the same code on one thread.
"""

import argparse
import ctypes
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"


class WlArray(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("rank", ctypes.c_int64),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("owner", ctypes.c_void_p),
    ]


def timed_build(cmd):
    """Runs a build command; its wall time in seconds."""
    t0 = time.perf_counter()
    run(cmd)
    return time.perf_counter() - t0


def timed_median(cmd, n=3):
    """The median wall time of `n` runs of a build command (this host's noise)."""
    return sorted(timed_build(cmd) for _ in range(n))[n // 2]


def startup_seconds(wl, work, n=9):
    """What a CLI compile pays before compiling anything, medians of `n`
    runs: `withloop --version`; an empty C program linked against the
    libLLVM withloop links (the dynamic loader maps and relocates it, and the
    libraries it needs, at every start); the same program without it."""
    empty = work / "empty.c"
    empty.write_text("int main(void) { return 0; }\n")
    config = shutil.which("llvm-config-19") or "/usr/lib/llvm-19/bin/llvm-config"
    libdir = subprocess.run([config, "--libdir"], check=True, capture_output=True, text=True).stdout.strip()
    run(["gcc", "-O2", empty, "-o", work / "empty"])
    # (A machine whose LLVM has no libLLVM-19 to link leaves that line out.)
    linked = subprocess.run(["gcc", "-O2", empty, "-o", work / "empty-llvm", "-Wl,--no-as-needed", f"-L{libdir}",
                             "-lLLVM-19", f"-Wl,-rpath,{libdir}"], capture_output=True).returncode == 0

    def median(cmd):
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            times.append(time.perf_counter() - t0)
        return sorted(times)[n // 2]

    times = {"withloop --version": median([wl, "--version"])}
    if linked:
        times["empty C program linked against libLLVM"] = median([work / "empty-llvm"])
    times["empty C program"] = median([work / "empty"])
    return times


def run(cmd, **kw):
    print("+", " ".join(str(c) for c in cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, **kw)


def withloop_binary():
    # Always built: a stale binary would measure yesterday's compiler.
    run(["cargo", "build", "--release", "-p", "withloop-cli", "-p", "withloop-rt"], cwd=ROOT)
    return ROOT / "target" / "release" / "withloop"


def sizes(quick):
    if quick:
        return dict(neg=(1000, 1000), relax=(500, 500, 5), matmul=128, dot=1_000_000, mandel=(200, 200, 64),
                    blackscholes=200_000, floyd=128, det=7, smooth=(100_000, 5), mg3=(32, 2))
    return dict(neg=(4000, 4000), relax=(2000, 2000, 10), matmul=1024, dot=20_000_000, mandel=(1000, 1000, 256),
                blackscholes=4_000_000, floyd=512, det=10, smooth=(4_000_000, 20), mg3=(128, 4))


# The SaC entry function of each kernel (JAX's functions carry the same names).
KERNEL_ENTRIES = ["neg", "implies", "relax", "relax_apl", "relax_iv", "smooth", "mg3", "matmul", "dot", "mandel",
                  "blackscholes", "floyd", "det"]


def against_jax(times, label, title, note):
    """Markdown lines: per kernel, our compile time against JAX's, and the geometric mean."""
    if not times:
        return []
    lines = ["", title, "", f"| kernel | {label} ms | JAX ms | {label} / JAX |", "|---|---|---|---|"]
    for k, t in times.items():
        j = JAX_COMPILE.get(k)
        cells = f"{j * 1e3:.0f} | {t / j:.2f}" if j else "– | –"
        lines.append(f"| {k} | {t * 1e3:.0f} | {cells} |")
    both = [k for k in times if k in JAX_COMPILE]
    if both:
        ratio = float(np.exp(np.mean([np.log(times[k] / JAX_COMPILE[k]) for k in both])))
        lines += ["", f"Geometric mean {label} / JAX over {len(both)} kernels: {ratio:.2f}× (target ≤ 0.5×).{note}", ""]
    return lines


# The smallest program: what warms a compile service up (and what
# bench/ab/service_ab.py times as `trivial`).
TRIVIAL_PROGRAM = "int main() { return 0; }"


class CompileService:
    """The compile service (`withloop-server`, embedded: in-memory cache,
    in-process workers), started for the run: `compile_seconds(kernel)` is
    one compile of a kernel alone, `POST /v1/compile` with `entry`, the
    kernel's first shape hint per parameter, `emit: [object]` and
    `bypass_cache`, as the `compile_ms` the service reports (the compile
    itself, not the HTTP exchange). The kernels' processes reach the
    running service by `address` (`CompileService(address, shapes)`)."""

    def __init__(self, address, shapes):
        self.address, self.shapes = address, shapes
        self.source = (BENCH / "kernels.sac").read_text()
        self.proc = None

    @classmethod
    def start(cls, hints, server=None):
        """Builds and starts this checkout's service, or starts `server` (a
        `withloop-server` binary, as it is)."""
        import re
        if server is None:
            run(["cargo", "build", "--release", "-p", "withloop-server", "-p", "withloop-rt"], cwd=ROOT)
            server = ROOT / "target" / "release" / "withloop-server"
        env = dict(os.environ, WITHLOOP_LISTEN="127.0.0.1:0", RUST_LOG="warn")
        env.pop("DATABASE_URL", None)
        proc = subprocess.Popen([server], env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        m = re.search(r"http://(\S+)", proc.stderr.readline())
        if not m:
            proc.terminate()
            proc.wait()
            raise RuntimeError("withloop-server did not say where it listens")
        service = cls(m.group(1), service_shapes(hints))
        service.proc = proc
        # A first compile loads what a warm service has loaded (the library, LLVM's targets).
        service.post(dict(source=TRIVIAL_PROGRAM, emit=["object"], bypass_cache=True))
        return service

    def post(self, body):
        import urllib.request
        req = urllib.request.Request(f"http://{self.address}/v1/compile", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.load(r)

    def compile_seconds(self, kernel, generic=True):
        """One compile of `kernel`; `generic=False`: its hinted instance only
        (`options.generic: false`: no generic code, as JAX compiles one shape)."""
        body = dict(source=self.source, file_name="kernels.sac", entry=[kernel], shapes=self.shapes,
                    emit=["object"], bypass_cache=True)
        if not generic:
            body["options"] = dict(generic=False)
        return self.post(body)["compile_ms"] / 1e3

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()


def service_shapes(hints):
    """The shape hints a service compile gets: per function and parameter, the
    first of `hints` (`{fn: {param: type}}`)."""
    shapes = {}
    for h in hints:
        target, ty = h.split("=", 1)
        fn, param = target.split(".", 1)
        shapes.setdefault(fn, {}).setdefault(param, ty)
    return shapes


def hint_list(sz):
    """The shape hints the benchmark library is compiled with."""
    return [
        f"neg.a=double[{sz['neg'][0]},{sz['neg'][1]}]",
        "neg.a=double[.,.]",
        f"relax.a=double[{sz['relax'][0]},{sz['relax'][1]}]",
        f"matmul.a=double[{sz['matmul']},{sz['matmul']}]",
        f"matmul.b=double[{sz['matmul']},{sz['matmul']}]",
        f"dot.a=double[{sz['dot']}]",
        f"dot.b=double[{sz['dot']}]",
        f"blackscholes.s=double[{sz['blackscholes']}]",
        f"blackscholes.x=double[{sz['blackscholes']}]",
        f"blackscholes.t=double[{sz['blackscholes']}]",
        f"floyd.d=double[{sz['floyd']},{sz['floyd']}]",
        f"relax_apl.a=double[{sz['relax'][0]},{sz['relax'][1]}]",
        f"det.a=double[{sz['det']},{sz['det']}]",
        "det.a=double[.,.]",
        f"implies.a=bool[{sz['neg'][0]},{sz['neg'][1]}]",
        f"implies.b=bool[{sz['neg'][0]},{sz['neg'][1]}]",
        "implies.a=bool[.,.]",
        "implies.b=bool[.,.]",
        f"smooth.a=double[{sz['smooth'][0]}]",
        f"relax_iv.a=double[{sz['relax'][0]},{sz['relax'][1]}]",
        f"mg3.u=double[{sz['mg3'][0]},{sz['mg3'][0]},{sz['mg3'][0]}]",
    ]


def library_commands(wl, out, sz, target=()):
    """The commands that build the suite's SaC library (libwlbench.so: the
    shape hints, then `target`'s options) and its L0 library (libwll0.so) into `out`."""
    cmd = [wl, "compile", BENCH / "kernels.sac", "--emit", "so", "-o", out / "libwlbench.so"]
    for h in hint_list(sz):
        cmd += ["--shape", h]
    l0_cmd = [wl, "compile", BENCH / "kernels.l0", "--emit", "so", "-o", out / "libwll0.so"]
    return cmd + list(target), l0_cmd + list(target)


def build(work, sz, ablations=True):
    wl = withloop_binary()
    cmd, l0_cmd = library_commands(wl, work, sz)
    compile_times = dict(so=timed_build(cmd))
    obj_cmd = cmd[:3] + ["--emit", "obj", "-o", work / "wlbench.o"] + cmd[7:]
    compile_times["obj"] = timed_median(obj_cmd)
    compile_times["phases"] = phase_times(obj_cmd)
    # The thirteen kernels JAX compiles, in one process: each `--entry` brings
    # what it calls (its AKS variants, its generic instance, the wrappers), not
    # the file's other functions (`elim`, `Det`'s and the helpers' own exports).
    kernels_cmd = obj_cmd + [a for k in KERNEL_ENTRIES for a in ("--entry", k)]
    compile_times["kernels"] = timed_median(kernels_cmd)
    compile_times["kernels_phases"] = phase_times(kernels_cmd)
    if ablations:
        # Each kernel alone (`--entry`: only it and what it calls), as JAX compiles one function.
        # Medians of five: one run of a 50 ms compile on a noisy guest was
        # seen at 2.4x its median (session 54: neg 111 ms, its median 45).
        compile_times["per_kernel"] = {k: timed_median(obj_cmd + ["--entry", k], 5) for k in KERNEL_ENTRIES}
        compile_times["startup"] = startup_seconds(wl, work)
    header_cmd = cmd[:3] + ["--emit", "header", "-o", work / "wlbench.h"] + cmd[7:]
    run(header_cmd)
    # The L0 versions of seed 004's programs (generic shapes: L0 has no shape hints).
    compile_times["l0_so"] = timed_build(l0_cmd)
    compile_times["l0_phases"] = phase_times(l0_cmd[:3] + ["--emit", "obj", "-o", work / "wll0.o"])
    # One library per optimisation switched off (the ablation table).
    for pass_name in ABLATIONS if ablations else []:
        off = cmd[:5] + ["-o", work / f"libwlbench-no-{pass_name}.so", "--disable", pass_name] + cmd[7:]
        run(off)
    cc, omp, compile_times["gcc"] = build_c(work)
    return [" ".join(map(str, x)) for x in (cmd, cc, omp, l0_cmd)], compile_times


def build_for(out, sz, cpu, features):
    """The benchmark's two libraries, built for another machine's CPU into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    target = (["--cpu", cpu] if cpu else []) + (["--features", features] if features else [])
    for cmd in library_commands(withloop_binary(), out, sz, target):
        run(cmd)


def build_c(work):
    """The C kernels, for one thread and with their OpenMP pragmas on (the
    two-thread reference): the two commands and the first's build time."""
    cc = ["gcc", "-O3", "-march=native", "-shared", "-fPIC", "-o", work / "libcbench.so", BENCH / "c" / "kernels.c",
          "-lm"]
    omp = ["gcc", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-o", work / "libcbench_omp.so",
           BENCH / "c" / "kernels.c", "-lm"]
    seconds = timed_build(cc)
    run(omp)
    return cc, omp, seconds


def threads_summary(rows):
    """A markdown table of one against two threads, SaC AKS and C, from `rows`."""
    lines = ["| benchmark | SaC AKS 1 thread (ms) | 2 threads (ms) | speed-up | C -O3 (ms) | C OpenMP 2 threads (ms) "
             "| speed-up |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        fig = r["figures"]
        f = {k: v["median"] * 1e3 for k, v in fig.items()}
        one, two, c1, c2 = f["SaC AKS"], f["SaC AKS, 2 threads"], f["C -O3"], f["C -O3, 2 threads"]
        lines.append(f"| {r['benchmark']} | {one:.1f} | {two:.1f} | {speedups(fig, 'SaC AKS', 'SaC AKS, 2 threads')} "
                     f"| {c1:.1f} | {c2:.1f} | {speedups(fig, 'C -O3', 'C -O3, 2 threads')} |")
    return "\n".join(lines)


class CLib:
    """The C kernels through one of two builds (`use`): one thread, or OpenMP.
    The benchmarks' C callables look the function up on each call."""

    def __init__(self, single, parallel):
        self.single, self.parallel, self.lib = single, parallel, single

    def use(self, parallel):
        self.lib = self.parallel if parallel else self.single

    def __getattr__(self, name):
        return getattr(self.lib, name)


# The optimisations switched off one at a time (`withloop compile --disable PASS`).
ABLATIONS = ["wlf", "fusion", "ive", "licm", "reuse"]


def phase_times(cmd):
    """Runs a compile with `--time-phases`; its phases' wall times in seconds."""
    out = subprocess.run([*cmd, "--time-phases"], check=True, capture_output=True, text=True).stderr
    phases = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "phase" and parts[3] == "ms":
            phases[parts[1]] = float(parts[2]) / 1e3
    return phases


def describe(a):
    shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
    d = WlArray(a.ctypes.data, a.ndim, shape, None)
    d._keep = (a, shape)
    return d


# Seconds to wait before timing anything: OpenBLAS's and XLA's worker threads
# spin for a while after a NumPy/JAX call, and on a 2-core machine a spinning
# peer thread took the core our second thread needed (blackscholes on two
# threads: 1.9x alone, 1.0x right after a NumPy matmul; 50 ms was not enough).
SETTLE = 0.3


# Issue 8's rule: every timed run lasts at least this long. A call shorter
# than that is repeated within one run, and the run's time is divided by its
# calls: the figures stay per call, and a 1 ms kernel is not timed at the
# timer's and the scheduler's granularity.
RUN_MIN = 0.1


def timed(fn, reps, min_total=1.0, slow=5.0):
    """Times `fn` alone: `timed_together` with one implementation, one
    settle pause before it (no other implementation's threads to wait out
    between its runs)."""
    return timed_together({"": (fn, lambda: None)}, reps, min_total, slow, round_settle=0.0)[""]


def timed_together(impls, reps, min_total=1.0, slow=5.0, round_settle=SETTLE, tail=()):
    """Times every callable of `impls` (name -> (fn, setup)) in rounds: each
    round runs each implementation once (`setup()` first: the threads it
    runs on), so a slow drift of the machine (another tenant of the VM, the
    host's clock) falls on every implementation alike and their ratios hold:
    timed one after the other, seconds apart, two figures of the same code
    could differ by a third on a noisy VM. Per implementation: at least
    `reps` runs, more while they total under `min_total` seconds (at most
    50), each of `calls` calls lasting at least `RUN_MIN` (a warm-up call and
    one more decide `calls`); a warm-up call over `slow` seconds is its one
    (cold) figure, the table says so by its size. Each round starts after
    `round_settle` seconds. The implementations named in `tail` (those that
    leave threads spinning: two-thread runs, the peers) run last in every
    round, in their order; the others take turns at going first, as the
    first run after the pause was slower (this host: a shape-specialised
    relaxation 7% behind its generic twin in three tables, where timed
    alternately the two were equal), and every other round runs them in
    reverse, so that each follows either neighbour as often: a call after
    the C kernel (which leaves the caches full of its own buffers) was 25%
    slower than after another SaC call, whose freed blocks the next call
    reuses warm (a Rocket Lake host: the composed relaxation, which always
    came after C, 1.08-1.13x the hand-fused one, which never did; equal
    when either order comes as often)."""
    figures, calls, live = {}, {}, []
    for name, (fn, setup) in impls.items():
        time.sleep(SETTLE)
        setup()
        t0 = time.perf_counter()
        fn()  # warm-up (page faults, thread pool start)
        first = time.perf_counter() - t0
        if first > slow:
            figures[name] = dict(min=first, median=first, max=first, n=1, calls=1)
            continue
        t0 = time.perf_counter()
        fn()
        calls[name] = max(1, math.ceil(RUN_MIN / max(min(first, time.perf_counter() - t0), 1e-6)))
        live.append(name)
    times = {name: [] for name in live}

    def wanted(name):
        t = times[name]
        return len(t) < reps or (sum(t) * calls[name] < min_total and len(t) < 50)

    rotating = [name for name in live if name not in tail]
    fixed = [name for name in live if name in tail]
    turn = 0
    while any(wanted(name) for name in live):
        time.sleep(round_settle)
        first = (turn // 2) % len(rotating) if rotating else 0
        order = rotating[first:] + rotating[:first]
        if turn % 2:
            order.reverse()
        turn += 1
        for name in order + fixed:
            if not wanted(name):
                continue
            fn, setup = impls[name]
            setup()
            t0 = time.perf_counter()
            for _ in range(calls[name]):
                fn()
            times[name].append((time.perf_counter() - t0) / calls[name])
    for name in live:
        t = times[name]
        figures[name] = dict(min=min(t), median=statistics.median(t), max=max(t), n=len(t), calls=calls[name])
    return {name: figures[name] for name in impls}


class Wl:
    def __init__(self, path):
        self.lib = ctypes.CDLL(str(path))
        self.lib.wl_ctx_new.restype = ctypes.c_void_p
        self.lib.wl_ctx_set_threads.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        self.lib.wl_error_message.restype = ctypes.c_char_p
        self.lib.wl_error_message.argtypes = [ctypes.c_void_p]
        self.lib.wl_array_release.argtypes = [ctypes.POINTER(WlArray)]
        self.ctx = self.lib.wl_ctx_new()

    def threads(self, n):
        self.lib.wl_ctx_set_threads(self.ctx, n)

    def call(self, name, *args, out="array", dtype=np.float64):
        f = getattr(self.lib, name)
        f.restype = ctypes.c_int32
        conv = [describe(a) if isinstance(a, np.ndarray) else a for a in args]
        cargs = [ctypes.byref(c) if isinstance(c, WlArray) else c for c in conv]
        if out == "array":
            r = WlArray()
            rc = f(ctypes.c_void_p(self.ctx), *cargs, ctypes.byref(r))
            self.check(rc, name)
            return r
        r = ctypes.c_double()
        rc = f(ctypes.c_void_p(self.ctx), *cargs, ctypes.byref(r))
        self.check(rc, name)
        return r.value

    def check(self, rc, name):
        if rc != 0:
            raise RuntimeError(f"{name}: {self.lib.wl_error_message(ctypes.c_void_p(self.ctx)).decode()}")

    def to_numpy(self, r, dtype):
        shape = tuple(r.shape[k] for k in range(r.rank))
        n = int(np.prod(shape)) if shape else 1
        ctype = {np.float64: ctypes.c_double, np.int32: ctypes.c_int32, np.bool_: ctypes.c_bool}[dtype]
        buf = ctypes.cast(r.data, ctypes.POINTER(ctype * n)).contents
        out = np.frombuffer(buf, dtype=dtype, count=n).reshape(shape).copy()
        self.lib.wl_array_release(ctypes.byref(r))
        return out

    def release(self, r):
        self.lib.wl_array_release(ctypes.byref(r))


def numpy_relax(a, iters):
    for _ in range(iters):
        b = a.copy()
        b[1:-1, 1:-1] = 0.25 * (a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])
        a = b
    return a


def numpy_mandel(h, w, limit):
    j, i = np.meshgrid(np.arange(w), np.arange(h))
    cr = -2.0 + 3.0 * j / w
    ci = -1.5 + 3.0 * i / h
    zr = np.zeros((h, w))
    zi = np.zeros((h, w))
    k = np.zeros((h, w), dtype=np.int32)
    for _ in range(limit):
        live = zr * zr + zi * zi <= 4.0
        if not live.any():
            break
        t = zr * zr - zi * zi + cr
        zi = np.where(live, 2.0 * zr * zi + ci, zi)
        zr = np.where(live, t, zr)
        k += live
    return k


def benchmark(name, wl, c, sz):
    """Benchmark `name`: (size, {implementation: callable}), on inputs drawn
    from a generator seeded by the benchmark's place in BENCHMARKS (the same
    inputs whichever benchmarks run, and in whichever process)."""
    names = [f.__name__.removeprefix("bench_") for f in BENCHMARKS]
    k = names.index(name)
    _, size, impls = BENCHMARKS[k](wl, c, sz, np.random.default_rng([2026, k]))
    return size, impls


def in_fresh_process(job):
    """Runs one block of timings (`child`) in a new Python process and returns
    its result. No figure inherits an earlier kernel's heap, threads or caches:
    in one process, after the kernels before it and their JAX versions, mg3's
    C -O3 and generic SaC ran 1.6-2x slower than alone (session 27), and which
    version was hit depended on the process's history."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        subprocess.run([sys.executable, __file__, "--child", json.dumps(dict(job, out=str(out)))], check=True)
        return json.loads(out.read_text())


def child(job):
    """One block of timings, in a process of its own (`in_fresh_process`):
    kind "kernel" times every implementation of benchmark `name` (and SaC AKS
    and C on two threads), kind "ablation" its SaC AKS version in the library
    built with pass `disabled` off. Writes the result as JSON to `out`."""
    global PEERS, L0
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    sz = sizes(job["quick"])
    libs, c_libs, name = Path(job["libs"]), Path(job["c_libs"]), job["name"]
    c = CLib(ctypes.CDLL(str(c_libs / "libcbench.so")), ctypes.CDLL(str(c_libs / "libcbench_omp.so")))
    if job["kind"] == "ablation":
        off = Wl(libs / f"libwlbench-no-{job['disabled']}.so")
        off.threads(1)
        _, impls = benchmark(name, off, c, sz)
        result = dict(figure=timed(impls["SaC AKS"], 3, min_total=0.3))
    else:
        if job["peers"]:
            sys.path.insert(0, str(BENCH))
            import peers

            PEERS = peers
        wl = Wl(libs / "libwlbench.so")
        L0 = Wl(libs / "libwll0.so")
        L0.threads(1)
        size, impls = benchmark(name, wl, c, sz)
        service = CompileService(**job["service"]) if job.get("service") else None
        jax_compile, service_compile, service_hinted = compile_rounds(name, service)

        def threads(sac, c_parallel):
            def setup():
                wl.threads(sac)
                c.use(parallel=c_parallel)
            return setup

        one = threads(1, False)
        # Ours and C first, the peers last (see `timed_together`).
        peer_impls = {"NumPy", "NumPy LU", "JAX", "JAX LU", "Numba"}
        plan = {k: (fn, one) for k, fn in impls.items() if k not in peer_impls}
        plan["SaC AKS, 2 threads"] = (impls["SaC AKS"], threads(2, False))
        plan["C -O3, 2 threads"] = (impls["C -O3"], threads(1, True))
        plan.update({k: (fn, one) for k, fn in impls.items() if k in peer_impls})
        # The two-thread runs and the peers leave threads spinning: last.
        tail = [k for k in plan if k.endswith("2 threads") or k in peer_impls]
        figures = timed_together(plan, job["reps"], tail=tail)
        one()
        for impl, f in figures.items():
            print(f"{name:8} {impl:18} {f['median'] * 1e3:9.2f} ms", file=sys.stderr)
        result = dict(row=dict(benchmark=name, size=size, figures=figures), jax_compile=jax_compile,
                      service_compile=service_compile, service_hinted=service_hinted,
                      peer_versions=PEERS.VERSIONS if PEERS is not None else None)
    Path(job["out"]).write_text(json.dumps(result))


def p(a):
    return a.ctypes.data_as(ctypes.c_void_p)


L0 = None  # the L0 library (bench/kernels.l0), a Wl


PEERS = None  # bench/peers.py, when used
JAX_COMPILE = {}  # kernel -> seconds
JAX_COMPILE_ONCE = {}  # kernel -> a function that jit-compiles it afresh, its seconds


# Rounds of compile_rounds: the host's drift moved single compiles by tens of
# percent (session 36's Zen 4 host), and three left the medians at its mercy.
COMPILE_ROUNDS = 5


def compile_rounds(name, service, rounds=COMPILE_ROUNDS):
    """JAX's jit compile of kernel `name`, our compile service's, and the
    service's of the hinted instance only (`generic: false`), taken in turns
    (`rounds` of each, so the machine's drift falls on all alike): the median
    seconds of each, None where that side is not measured."""
    theirs, ours, hinted = [], [], []
    for _ in range(rounds):
        # Each after `SETTLE`, as every timed run (peer threads may spin on
        # after a call; our compile runs its parts on both cores).
        if name in JAX_COMPILE_ONCE:
            time.sleep(SETTLE)
            theirs.append(JAX_COMPILE_ONCE[name]())
        if service is not None:
            time.sleep(SETTLE)
            ours.append(service.compile_seconds(name))
            time.sleep(SETTLE)
            hinted.append(service.compile_seconds(name, generic=False))
    median = lambda xs: statistics.median(xs) if xs else None
    return median(theirs), median(ours), median(hinted)


def peers_for(name, check, args):
    """The JAX and Numba versions of kernel `name` on `args` (NumPy arrays or
    Python scalars), after checking their outputs with `check`."""
    if PEERS is None:
        return {}
    jargs = tuple(PEERS.jnp.asarray(x) if isinstance(x, np.ndarray) else x for x in args)
    static = {"relax": (1,), "relax_apl": (1,), "relax_iv": (1,), "smooth": (1,), "mg3": (1,),
              "mandel": (0, 1, 2)}.get(name, ())
    dynamic = [x for i, x in enumerate(jargs) if i not in static]
    src = PEERS.JAX_SOURCE[name]
    if static:
        fixed = {i: jargs[i] for i in static}

        def partial(*dyn):
            it = iter(dyn)
            return src(*[fixed[i] if i in fixed else next(it) for i in range(len(jargs))])

        JAX_COMPILE_ONCE[name] = lambda: PEERS.jax_compile_seconds(partial, *dynamic)
    else:
        JAX_COMPILE_ONCE[name] = lambda: PEERS.jax_compile_seconds(src, *jargs)
    jfn, nfn = PEERS.JAX[name], PEERS.NUMBA[name]
    assert check(PEERS.ready(jfn(*jargs))), f"JAX {name} disagrees"
    assert check(nfn(*args)), f"Numba {name} disagrees"
    return {"JAX": lambda: PEERS.ready(jfn(*jargs)), "Numba": lambda: nfn(*args)}


def l0_for(call, check):
    """The L0 column of a benchmark: `call` (an L0 library call returning an
    array), after checking its output."""
    if L0 is None:
        return {}
    assert check(L0.to_numpy(call(), np.float64)), "L0 disagrees"
    return {"L0": lambda: L0.release(call())}


def det_close(x, want):
    """A determinant within rounding of `want` (the expansion's order differs)."""
    return abs(float(x) - want) <= 1e-9 + 1e-6 * abs(want)


def numpy_det(a):
    """Kreye's Laplace expansion along the first column in NumPy: one level at
    a time over the whole batch of minors (n!/2 2×2 minors at the last)."""
    mats, coef = a[None], np.ones(1)
    while mats.shape[1] > 2:
        k = mats.shape[1]
        rows = np.array([[r for r in range(k) if r != i] for i in range(k)])
        signs = np.where(np.arange(k) % 2 == 1, -1.0, 1.0)
        coef = (coef[:, None] * signs[None, :] * mats[:, :, 0]).reshape(-1)
        mats = mats[:, rows, 1:].reshape(-1, k - 1, k - 1)
    return coef @ (mats[:, 0, 0] * mats[:, 1, 1] - mats[:, 1, 0] * mats[:, 0, 1])


def bench_det(wl, c, sz, rng):
    """Kreye's determinant (seed 003): Laplace expansion, recursive over
    shrinking shapes (O(n!)), by every implementation. NumPy and JAX are also
    timed with their LU (`linalg.det`, O(n³)), a different algorithm, reported
    beside the table ("NumPy LU", "JAX LU")."""
    n = sz["det"]
    a = rng.random((n, n))
    c.c_det.restype = ctypes.c_double
    want = float(np.linalg.det(a))

    def close(x):
        return det_close(x, want)

    assert close(c.c_det(p(a), ctypes.c_long(n)))
    assert close(numpy_det(a))
    lu = {}
    if PEERS is not None:
        jlu = PEERS.JAX["det_lu"]
        ja = PEERS.jnp.asarray(a)
        assert close(PEERS.ready(jlu(ja)))
        lu["JAX LU"] = lambda: PEERS.ready(jlu(ja))
    for name in [f"wl_det__d_{n}_{n}", "wl_det__d_X_X", "wl_det__d_S"]:
        assert close(wl.call(name, a, out="double")), name
    return ("det", f"{n}x{n}", {
        "C -O3": lambda: c.c_det(p(a), ctypes.c_long(n)),
        "NumPy": lambda: numpy_det(a),
        "NumPy LU": lambda: np.linalg.det(a),
        "SaC AKS": lambda: wl.call(f"wl_det__d_{n}_{n}", a, out="double"),
        "SaC AKD": lambda: wl.call("wl_det__d_X_X", a, out="double"),
        "SaC AUD": lambda: wl.call("wl_det__d_S", a, out="double"),
        **peers_for("det", close, (a,)),
        **lu,
    })


def bench_implies(wl, c, sz, rng):
    """Logical implication composed of negation and disjunction (seed 000's
    case study): AKS vs AKD vs AUD."""
    h, w = sz["neg"]
    a = rng.random((h, w)) < 0.5
    b = rng.random((h, w)) < 0.5
    want = ~a | b
    out = np.empty_like(a)
    c.c_implies(p(a), p(b), p(out), ctypes.c_long(a.size))
    assert np.array_equal(out, want)
    for name in [f"wl_implies__b_{h}_{w}__b_{h}_{w}", "wl_implies__b_X_X__b_X_X", "wl_implies__b_S__b_S"]:
        assert np.array_equal(wl.to_numpy(wl.call(name, a, b), np.bool_), want), name
    return ("implies", f"{h}x{w}", {
        "C -O3": lambda: c.c_implies(p(a), p(b), p(out), ctypes.c_long(a.size)),
        "NumPy": lambda: ~a | b,
        "SaC AKS": lambda: wl.release(wl.call(f"wl_implies__b_{h}_{w}__b_{h}_{w}", a, b)),
        "SaC AKD": lambda: wl.release(wl.call("wl_implies__b_X_X__b_X_X", a, b)),
        "SaC AUD": lambda: wl.release(wl.call("wl_implies__b_S__b_S", a, b)),
        **peers_for("implies", lambda o: np.array_equal(np.asarray(o), want), (a, b)),
    })


def numpy_smooth(a, iters):
    for _ in range(iters):
        b = a.copy()
        b[1:-1] = (a[:-2] + a[1:-1] + a[2:]) / 3.0
        a = b
    return a


def bench_smooth(wl, c, sz, rng):
    """A rank-1 index-vector stencil (seed 001's style: a[iv - 1] + a[iv] + a[iv + 1])."""
    n, iters = sz["smooth"]
    a = rng.random(n)
    r = np.empty_like(a)
    c.c_smooth(p(a), p(r), ctypes.c_long(n), iters)
    want = numpy_smooth(a, iters)
    got = wl.to_numpy(wl.call("wl_smooth", a, iters), np.float64)
    assert np.allclose(r, want) and np.allclose(got, want)
    return ("smooth", f"{n}, {iters} steps", {
        "C -O3": lambda: c.c_smooth(p(a), p(r), ctypes.c_long(n), iters),
        "NumPy": lambda: numpy_smooth(a, iters),
        "SaC AKS": lambda: wl.release(wl.call(f"wl_smooth__d_{n}__i", a, iters)),
        "SaC AKD": lambda: wl.release(wl.call("wl_smooth__d_X__i", a, iters)),
        **peers_for("smooth", lambda out: np.allclose(np.asarray(out), want), (a, iters)),
    })


def bench_relax_iv(wl, c, sz, rng):
    """The relaxation with index-vector selections (a[iv - [1, 0]] …), seed 001's
    rank-2 case: IVE must make it the scalar-indexed `relax`."""
    return relaxation("relax_iv", numpy_relax, wl, c, sz, rng)


def numpy_mg3(u, iters):
    weights = (0.5, 1.0 / 24.0, 1.0 / 72.0, 1.0 / 96.0)
    n0, n1, n2 = u.shape
    for _ in range(iters):
        acc = np.zeros((n0 - 2, n1 - 2, n2 - 2))
        for o0 in range(3):
            for o1 in range(3):
                for o2 in range(3):
                    wgt = weights[abs(o0 - 1) + abs(o1 - 1) + abs(o2 - 1)]
                    acc += wgt * u[o0:n0 - 2 + o0, o1:n1 - 2 + o1, o2:n2 - 2 + o2]
        b = u.copy()
        b[1:-1, 1:-1, 1:-1] = acc
        u = b
    return u


def bench_mg3(wl, c, sz, rng):
    """A NAS-MG-like 27-point 3-D smoother (weights by distance class)."""
    n, iters = sz["mg3"]
    u = rng.random((n, n, n))
    r = np.empty_like(u)
    nl = ctypes.c_long(n)
    c.c_mg3(p(u), p(r), nl, nl, nl, iters)
    want = numpy_mg3(u, iters)
    got = wl.to_numpy(wl.call("wl_mg3", u, iters), np.float64)
    assert np.allclose(r, want) and np.allclose(got, want)
    return ("mg3", f"{n}^3, {iters} steps", {
        "C -O3": lambda: c.c_mg3(p(u), p(r), nl, nl, nl, iters),
        "NumPy": lambda: numpy_mg3(u, iters),
        "SaC AKS": lambda: wl.release(wl.call(f"wl_mg3__d_{n}_{n}_{n}__i", u, iters)),
        "SaC AKD": lambda: wl.release(wl.call("wl_mg3__d_X_X_X__i", u, iters)),
        **peers_for("mg3", lambda out: np.allclose(np.asarray(out), want), (u, iters)),
    })


def bench_neg(wl, c, sz, rng):
    """Negation (seed 000's case study): AKS vs AKD vs AUD."""
    h, w = sz["neg"]
    a = rng.random((h, w))
    got = wl.to_numpy(wl.call("wl_neg", a), np.float64)
    assert np.array_equal(got, -a)
    return ("neg", f"{h}x{w}", {
        "C -O3": lambda: c.c_neg(p(a), ctypes.c_long(a.size)),
        "NumPy": lambda: -a,
        "SaC AKS": lambda: wl.release(wl.call(f"wl_neg__d_{h}_{w}", a)),
        "SaC AKD": lambda: wl.release(wl.call("wl_neg__d_X_X", a)),
        "SaC AUD": lambda: wl.release(wl.call("wl_neg__d_S", a)),
        **peers_for("neg", lambda out: np.array_equal(np.asarray(out), -a), (a,)),
    })


def relaxation(kernel, numpy_version, wl, c, sz, rng):
    """A relaxation benchmark: SaC `kernel` against the hand-written C stencil and
    `numpy_version`, all checked against `numpy_relax`."""
    h, w, iters = sz["relax"]
    a = rng.random((h, w))
    r = np.empty_like(a)
    c.c_relax(p(a), p(r), ctypes.c_long(h), ctypes.c_long(w), iters)
    want = numpy_relax(a, iters)
    got = wl.to_numpy(wl.call(f"wl_{kernel}", a, iters), np.float64)
    assert np.allclose(r, want) and np.allclose(got, want) and np.allclose(numpy_version(a, iters), want)
    return (kernel, f"{h}x{w}, {iters} steps", {
        "C -O3": lambda: c.c_relax(p(a), p(r), ctypes.c_long(h), ctypes.c_long(w), iters),
        "NumPy": lambda: numpy_version(a, iters),
        "SaC AKS": lambda: wl.release(wl.call(f"wl_{kernel}__d_{h}_{w}__i", a, iters)),
        "SaC AKD": lambda: wl.release(wl.call(f"wl_{kernel}__d_X_X__i", a, iters)),
        # The composed relaxation's yardstick, timed in the same rounds.
        **({"SaC AKS, hand-fused": lambda: wl.release(wl.call(f"wl_relax__d_{h}_{w}__i", a, iters))}
           if kernel == "relax_apl" else {}),
        **peers_for(kernel, lambda out: np.allclose(np.asarray(out), want), (a, iters)),
    })


def bench_relax(wl, c, sz, rng):
    """Jacobi relaxation (a 5-point stencil, iterated)."""
    return relaxation("relax", numpy_relax, wl, c, sz, rng)


def bench_matmul(wl, c, sz, rng):
    """Matrix multiplication (naive i, j, k in both SaC and C)."""
    n = sz["matmul"]
    a = rng.random((n, n))
    b = rng.random((n, n))
    r = np.empty_like(a)
    nl = ctypes.c_long(n)
    c.c_matmul(p(a), p(b), p(r), nl, nl, nl)
    got = wl.to_numpy(wl.call("wl_matmul", a, b), np.float64)
    assert np.allclose(r, a @ b) and np.allclose(got, a @ b)
    return ("matmul", f"{n}x{n}", {
        "C -O3": lambda: c.c_matmul(p(a), p(b), p(r), nl, nl, nl),
        "NumPy": lambda: a @ b,
        "SaC AKS": lambda: wl.release(wl.call(f"wl_matmul__d_{n}_{n}__d_{n}_{n}", a, b)),
        "SaC AKD": lambda: wl.release(wl.call("wl_matmul__d_X_X__d_X_X", a, b)),
        **l0_for(lambda: L0.call("wl_matmul", a, b), lambda out: np.allclose(out, a @ b)),
        **peers_for("matmul", lambda out: np.allclose(np.asarray(out), a @ b), (a, b)),
    })


def bench_dot(wl, c, sz, rng):
    """Dot product (a fold over a fused element-wise product)."""
    n = sz["dot"]
    a = rng.random(n)
    b = rng.random(n)
    c.c_dot.restype = ctypes.c_double
    want = float(np.dot(a, b))
    assert abs(c.c_dot(p(a), p(b), ctypes.c_long(n)) - want) < 1e-6 * abs(want)
    assert abs(wl.call("wl_dot", a, b, out="double") - want) < 1e-6 * abs(want)
    return ("dot", f"{n}", {
        "C -O3": lambda: c.c_dot(p(a), p(b), ctypes.c_long(n)),
        "NumPy": lambda: np.dot(a, b),
        "SaC AKS": lambda: wl.call(f"wl_dot__d_{n}__d_{n}", a, b, out="double"),
        "SaC AKD": lambda: wl.call("wl_dot__d_X__d_X", a, b, out="double"),
        **peers_for("dot", lambda out: abs(float(out) - want) < 1e-6 * abs(want), (a, b)),
    })


def bench_mandel(wl, c, sz, rng):
    """Mandelbrot (a while loop per element)."""
    h, w, limit = sz["mandel"]
    r = np.empty((h, w), dtype=np.int32)
    c.c_mandel(p(r), h, w, limit)
    got = wl.to_numpy(wl.call("wl_mandel", h, w, limit), np.int32)
    assert np.array_equal(got, r), (got[:3, :3], r[:3, :3])
    assert np.array_equal(numpy_mandel(h, w, limit), r)
    return ("mandel", f"{h}x{w}, {limit} steps", {
        "C -O3": lambda: c.c_mandel(p(r), h, w, limit),
        "NumPy": lambda: numpy_mandel(h, w, limit),
        "SaC AKS": lambda: wl.release(wl.call("wl_mandel", h, w, limit)),
        # XLA may contract `zr * zr - zi * zi + cr` into fused multiply-adds, so a
        # few boundary pixels can escape one step apart: allow 0.1% of them.
        **peers_for("mandel", lambda out: np.mean(np.asarray(out) != r) < 1e-3, (h, w, limit)),
    })


def numpy_relax_apl(a, iters):
    for _ in range(iters):
        b = 0.25 * (np.roll(a, 1, 0) + np.roll(a, -1, 0) + np.roll(a, 1, 1) + np.roll(a, -1, 1))
        middle = np.concatenate([a[1:-1, :1], b[1:-1, 1:-1], a[1:-1, -1:]], axis=1)
        a = np.concatenate([a[:1], middle, a[-1:]], axis=0)
    return a


def bench_relax_apl(wl, c, sz, rng):
    """Seed 002's relaxation composed from rotate/take/drop/cat (with-loop folding
    must turn it into the hand-fused `relax`)."""
    return relaxation("relax_apl", numpy_relax_apl, wl, c, sz, rng)


def numpy_blackscholes(s, x, t, r, v):
    def cnd(d):
        l = np.abs(d)
        k = 1.0 / (1.0 + 0.2316419 * l)
        poly = k * (0.31938153 + k * (-0.356563782 + k * (1.781477937 + k * (-1.821255978 + k * 1.330274429))))
        w = 1.0 - 0.3989422804014327 * np.exp(-0.5 * l * l) * poly
        return np.where(d < 0.0, 1.0 - w, w)

    st = v * np.sqrt(t)
    d1 = (np.log(s / x) + (r + 0.5 * v * v) * t) / st
    d2 = d1 - st
    return s * cnd(d1) - x * np.exp(-r * t) * cnd(d2)


def bench_blackscholes(wl, c, sz, rng):
    """Seed 004's P0: Black–Scholes call prices (element-wise, transcendental)."""
    n = sz["blackscholes"]
    s, x, t = rng.uniform(50, 150, n), rng.uniform(50, 150, n), rng.uniform(0.25, 2.0, n)
    r, v = 0.02, 0.3
    out = np.empty(n)
    cr, cv = ctypes.c_double(r), ctypes.c_double(v)
    c.c_blackscholes(p(s), p(x), p(t), cr, cv, p(out), ctypes.c_long(n))
    want = numpy_blackscholes(s, x, t, r, v)
    got = wl.to_numpy(wl.call("wl_blackscholes", s, x, t, cr, cv), np.float64)
    assert np.allclose(out, want) and np.allclose(got, want)
    return ("blackscholes", f"{n} options", {
        "C -O3": lambda: c.c_blackscholes(p(s), p(x), p(t), cr, cv, p(out), ctypes.c_long(n)),
        "NumPy": lambda: numpy_blackscholes(s, x, t, r, v),
        "SaC AKS": lambda: wl.release(wl.call(f"wl_blackscholes__d_{n}__d_{n}__d_{n}__d__d", s, x, t, cr, cv)),
        "SaC AKD": lambda: wl.release(wl.call("wl_blackscholes__d_X__d_X__d_X__d__d", s, x, t, cr, cv)),
        **l0_for(lambda: L0.call("wl_blackscholes", s, x, t, cr, cv), lambda o: np.allclose(o, want)),
        **peers_for("blackscholes", lambda o: np.allclose(np.asarray(o), want), (s, x, t, r, v)),
    })


def numpy_floyd(d):
    for k in range(d.shape[0]):
        d = np.minimum(d, d[:, k:k + 1] + d[k:k + 1, :])
    return d


def bench_floyd(wl, c, sz, rng):
    """Seed 004's P2: Floyd–Warshall all-pairs shortest paths."""
    n = sz["floyd"]
    d = rng.random((n, n)) * 100.0
    np.fill_diagonal(d, 0.0)
    out = np.empty_like(d)
    c.c_floyd(p(d), p(out), ctypes.c_long(n))
    want = numpy_floyd(d)
    got = wl.to_numpy(wl.call("wl_floyd", d), np.float64)
    assert np.array_equal(out, want) and np.array_equal(got, want)
    return ("floyd", f"{n}x{n}", {
        "C -O3": lambda: c.c_floyd(p(d), p(out), ctypes.c_long(n)),
        "NumPy": lambda: numpy_floyd(d),
        "SaC AKS": lambda: wl.release(wl.call(f"wl_floyd__d_{n}_{n}", d)),
        "SaC AKD": lambda: wl.release(wl.call("wl_floyd__d_X_X", d)),
        **l0_for(lambda: L0.call("wl_floyd", d), lambda o: np.array_equal(o, want)),
        **peers_for("floyd", lambda o: np.array_equal(np.asarray(o), want), (d,)),
    })


# Seed 003 §5.3: the determinant under specialisation strategies. "generic"
# builds no instance beyond the two user-defined ones; "generic k" adds the
# specialisations of `Det` for [3,3] … [k,k] (as the thesis's program
# annotations did); "specific" specialises det for the argument's shape, and
# with it every Det from [n,n] down. Every strategy is a library of its own,
# called through det's generic entry (`wl_det`, the dispatch wrapper), so the
# dispatch at run time picks what the library has.
DET_STRATEGIES = [("generic", []), ("generic 3", [3]), ("generic 4", [3, 4]), ("generic 5", [3, 4, 5]),
                  ("specific", None)]


def det_strategies(work, c, sz, reps):
    """Times det's generic entry in one library per strategy; ms per strategy."""
    n = sz["det"]
    a = np.random.default_rng([2026, len(BENCHMARKS)]).random((n, n))
    want = float(np.linalg.det(a))
    wl = withloop_binary()
    out = {}
    for label, sizes_ in DET_STRATEGIES:
        lib = work / f"libwldet-{label.replace(' ', '')}.so"
        hints = [f"det.a=double[{n},{n}]"] if sizes_ is None else [f"Det.a=double[{k},{k}]" for k in sizes_]
        cmd = [wl, "compile", BENCH / "kernels.sac", "--entry", "det", "--emit", "so", "-o", lib]
        for h in hints:
            cmd += ["--shape", h]
        run(cmd)
        lib_ = Wl(lib)
        lib_.threads(1)
        assert det_close(lib_.call("wl_det", a, out="double"), want), label
        out[label] = timed(lambda: lib_.call("wl_det", a, out="double"), reps, min_total=0.3)
        print(f"det      {label:10} {out[label]['median'] * 1e3:9.2f} ms", file=sys.stderr)
    c.c_det.restype = ctypes.c_double
    out["C -O3"] = timed(lambda: c.c_det(p(a), ctypes.c_long(n)), reps, min_total=0.3)
    return out


BENCHMARKS = (bench_det, bench_neg, bench_implies, bench_relax, bench_relax_iv, bench_smooth, bench_relax_apl,
              bench_mg3, bench_matmul, bench_dot, bench_mandel, bench_blackscholes, bench_floyd)


def table_impls(peer_versions):
    """The implementations the ratio table has a column for (JAX and Numba when the peers ran)."""
    return ["SaC AKS", "SaC AKD", "SaC AUD", "L0", "NumPy"] + (["JAX", "Numba"] if peer_versions else [])


def ratio_table(rows, impls):
    """Markdown lines: each benchmark's C time, every implementation of
    `impls` as a ratio to it, and the two-thread speed-ups of SaC and C."""
    lines = ["| benchmark | size | C -O3 (ms) | " + " | ".join(f"{i} (×C)" for i in impls)
             + " | SaC AKS 2 threads: speed-up | C OpenMP 2 threads: speed-up |",
             "|---|---|---|" + "---|" * len(impls) + "---|---|"]
    for row in rows:
        f = row["figures"]
        cbase = f["C -O3"]["median"]
        cells = [f"{f[i]['median'] / cbase:.2f}" if i in f else "–" for i in impls]
        speedup = speedups(f, "SaC AKS", "SaC AKS, 2 threads")
        c_speedup = speedups(f, "C -O3", "C -O3, 2 threads")
        lines.append(f"| {row['benchmark']} | {row['size']} | {cbase * 1e3:.1f} | " + " | ".join(cells)
                     + f" | {speedup} | {c_speedup} |")
    return lines


def speedups(figures, one, two):
    """The speed-up of `two` threads over `one`, of the medians and, in
    parentheses, of the minima: a virtual machine's second CPU is slowed
    for minutes at a time when the host runs another guest on it, which the
    medians of a run caught in such a phase show and the best runs do not."""
    median = figures[one]["median"] / figures[two]["median"]
    best = figures[one]["min"] / figures[two]["min"]
    return f"{median:.2f}× ({best:.2f}×)"



def generic_line(by_name):
    """The generic (AKD, AUD) instances' times over the AKS-specialised one's, as one line."""
    generic = []
    for name, f in by_name.items():
        for i in ["SaC AKD", "SaC AUD"]:
            if i in f:
                generic.append(f"{name} {i[4:]} {f[i]['median'] / f['SaC AKS']['median']:.2f}")
    return "Generic / AKS-specialised (target ≤ 1.3): " + ", ".join(generic) + "."


def peer_summary(by_name):
    """Markdown lines: each peer's time over ours, each side at its best on
    this machine (ours: SaC AKS on one thread or two, whichever is faster;
    the peers as installed, on every core)."""
    peers = ["NumPy", "JAX", "Numba"]
    lines = ["## Against the peers", "",
             "Each side at its best on this machine: ours is SaC AKS on one thread or on two, whichever is faster "
             "(the peers run as installed: NumPy's BLAS and XLA use every core). Figure: the peer's time / ours "
             "(above 1: we are faster).", "",
             "| benchmark | ours (ms) | threads | " + " | ".join(peers) + " |", "|---|---|---|" + "---|" * len(peers)]
    losses, vs_jax = [], []
    for name, f in by_name.items():
        one, two = f["SaC AKS"]["median"], f["SaC AKS, 2 threads"]["median"]
        ours, threads = (one, 1) if one <= two else (two, 2)
        cells = []
        for peer in peers:
            if peer not in f:
                cells.append("–")
                continue
            ratio = f[peer]["median"] / ours
            cells.append(f"{ratio:.2f}")
            if ratio < 1:
                losses.append(f"{name} to {peer} ({ratio:.2f})")
            if peer == "JAX":
                vs_jax.append(ratio)
        lines.append(f"| {name} | {ours * 1e3:.1f} | {threads} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Where we lose: " + (", ".join(losses) if losses else "nowhere") + ".")
    det = by_name.get("det", {})
    lu = [(peer, det[f"{peer} LU"]["median"]) for peer in ["NumPy", "JAX"] if f"{peer} LU" in det]
    if lu:
        one, two = det["SaC AKS"]["median"], det["SaC AKS, 2 threads"]["median"]
        ours = min(one, two)
        cells = ", ".join(f"{peer} {t * 1e3:.3f} ms ({t / ours:.3f})" for peer, t in lu)
        lines.append(f"det by LU instead (`linalg.det`, O(n³): a different algorithm from the Laplace expansion "
                     f"all the row's columns run): {cells} against our {ours * 1e3:.3f} ms. We have no LU "
                     "determinant; against one, we lose.")
    if vs_jax:
        geomean = math.exp(sum(math.log(r) for r in vs_jax) / len(vs_jax))
        lines.append(f"Geometric mean JAX time / ours over {len(vs_jax)} kernels: {geomean:.2f}× (target ≥ 2×).")
    return lines + [""]


def machine_facts():
    """The CPU's model name, the cores this process may use, and the versions of Python, NumPy and gcc."""
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return dict(cpu=cpu, cores=os.cpu_count(), usable_cores=len(os.sched_getaffinity(0)),
                python=platform.python_version(), numpy=np.__version__,
                gcc=subprocess.run(["gcc", "-dumpfullversion"], capture_output=True, text=True).stdout.strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test, not figures)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=BENCH / "results")
    ap.add_argument("--no-peers", action="store_true", help="leave out JAX and Numba")
    ap.add_argument("--build-for", type=Path, help="only build libwlbench.so and libwll0.so into this directory "
                    "for the CPU given by --cpu/--features (to time them on another machine with --prebuilt)")
    ap.add_argument("--cpu", help="with --build-for: the target CPU (withloop compile --cpu)")
    ap.add_argument("--features", help="with --build-for: the target features (withloop compile --features)")
    ap.add_argument("--prebuilt", type=Path, help="time libwlbench.so and libwll0.so from this directory "
                    "(built elsewhere for this CPU) instead of building them; implies no results written")
    ap.add_argument("--only", help="comma-separated benchmarks (det, implies, mg3, …): time just these, "
                    "no ablation, no results written (for working on one kernel)")
    ap.add_argument("--rows", type=Path, help="also write the figures as JSON to this file, after each benchmark "
                    "(kept when a run is cut short)")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # one block of timings (in_fresh_process)
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    if only is not None:
        unknown = only - {f.__name__.removeprefix("bench_") for f in BENCHMARKS}
        if unknown:
            ap.error(f"unknown benchmarks: {', '.join(sorted(unknown))}")
    if args.build_for:
        build_for(args.build_for, sizes(args.quick), args.cpu, args.features)
        return
    if args.child:
        child(json.loads(args.child))
        return
    sz = sizes(args.quick)
    work = ROOT / "target" / "bench"
    work.mkdir(parents=True, exist_ok=True)
    if args.prebuilt:
        # The C kernels too, where DIR has them; else built here.
        libs = c_libs = args.prebuilt
        if not ((libs / "libcbench.so").exists() and (libs / "libcbench_omp.so").exists()):
            build_c(work)
            c_libs = work
    else:
        commands, compile_times = build(work, sz, ablations=only is None)
        libs = c_libs = work
    chosen = [f.__name__.removeprefix("bench_") for f in BENCHMARKS]
    chosen = [k for k in chosen if only is None or k in only]
    job = dict(libs=str(libs), c_libs=str(c_libs), quick=args.quick, reps=args.reps, peers=not args.no_peers)
    # The compile service, for the full table: each kernel's process compiles
    # its kernel there and with JAX in turns (`compile_rounds`).
    service = CompileService.start(hint_list(sz)) if only is None and not args.prebuilt else None
    if service is not None:
        job["service"] = dict(address=service.address, shapes=service.shapes)
        compile_times["service"] = {}
        compile_times["service_hinted"] = {}
    rows, peer_versions = [], {}
    facts = machine_facts()
    try:
        for name in chosen:
            result = in_fresh_process(dict(job, kind="kernel", name=name))
            rows.append(result["row"])
            if result["jax_compile"] is not None:
                JAX_COMPILE[name] = result["jax_compile"]
            if result["service_compile"] is not None:
                compile_times["service"][name] = result["service_compile"]
            if result["service_hinted"] is not None:
                compile_times["service_hinted"][name] = result["service_hinted"]
            peer_versions = result["peer_versions"] or peer_versions
            if args.rows:
                args.rows.write_text(json.dumps(dict(machine=facts, peers=peer_versions, rows=rows,
                                                     jax_compile=JAX_COMPILE), indent=1) + "\n")
    finally:
        if service is not None:
            service.stop()
    c = CLib(ctypes.CDLL(str(c_libs / "libcbench.so")), ctypes.CDLL(str(c_libs / "libcbench_omp.so")))
    # (They compile with withloop: not from prebuilt libraries.)
    run_strategies = (only is None or "det" in only) and not args.prebuilt
    strategies = det_strategies(work, c, sz, args.reps) if run_strategies else {}
    if only is not None or args.prebuilt:
        # No results file: the tables go to standard output (and the figures
        # to `--rows`, for a run on a machine lent for a measurement).
        by_name = {row["benchmark"]: row["figures"] for row in rows}
        impls = table_impls(peer_versions)
        lines = ratio_table(rows, impls) + ["", generic_line(by_name), ""]
        if peer_versions:
            lines += peer_summary(by_name)
        if JAX_COMPILE:
            lines += [f"JAX jit compile (median of {COMPILE_ROUNDS}): "
                      + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in JAX_COMPILE.items()) + ".", ""]
        print("\n".join(lines + [threads_summary(rows)]))
        return
    # Each optimisation switched off in turn: every benchmark's outputs are
    # checked again against that library, then its SaC AKS version timed.
    ablation = {}
    for pass_name in ABLATIONS:
        ablation[pass_name] = {}
        for name in chosen:
            figure = in_fresh_process(dict(job, kind="ablation", name=name, disabled=pass_name, peers=False))["figure"]
            ablation[pass_name][name] = figure
            print(f"{name:8} no {pass_name:7} {figure['median'] * 1e3:9.2f} ms", file=sys.stderr)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d")
    machine = dict(facts)
    cpu = machine["cpu"]
    machine.update(peer_versions)
    result = dict(date=stamp, machine=machine, quick=args.quick, reps=args.reps,
                  command=" ".join(["python3", "bench/run.py"] + sys.argv[1:]), build=commands, rows=rows,
                  ablation=ablation, det_strategies=strategies, compile_seconds=dict(withloop=compile_times, jax=JAX_COMPILE))
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"{stamp}{'-quick' if args.quick else ''}"
    base = args.out / name
    # A second run on the same day gets a file of its own (earlier results are records).
    k = 2
    while base.with_suffix(".md").exists() or base.with_suffix(".json").exists():
        base = args.out / f"{name}-{k}"
        k += 1
    base.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    impls = table_impls(peer_versions)
    lines = [f"# withloop benchmarks, {stamp}", "",
             f"Machine: {cpu}, {os.cpu_count()} cores; gcc {machine['gcc']}; NumPy {np.__version__}"
             + (f"; JAX {machine['jax']}; Numba {machine['numba']}." if peer_versions else "."),
             f"Command: `{result['command']}` (median of >= {args.reps} runs, each at least {RUN_MIN * 1e3:.0f} ms: a "
             "shorter call is repeated within a run and the figure is per call; each kernel in a process of its "
             "own, its implementations timed in rounds of one run each; ratio = time / C -O3 time, lower "
             "is better).", ""]
    lines += ratio_table(rows, impls)
    lines += ["", "Min/median/max of every figure: the JSON file beside this one. L0: bench/kernels.l0 "
              "(seed 004's programs in L0, generic shapes). det: every column runs Kreye's Laplace expansion "
              "(NumPy and JAX over the whole batch of minors, one level at a time); their LU is timed beside "
              "it (below). Threads: C and the SaC "
              "and L0 columns run on one thread (the last two columns: SaC on two, and the C with its OpenMP pragmas on "
              "two, `gcc -fopenmp`, a measure of what the machine gives a second thread: memory-bound kernels gain "
              "little from either; each speed-up is of the medians, and in parentheses of the minima, the runs a "
              "virtual machine's second CPU was not slowed by another guest); the peers run as installed: NumPy's "
              "matmul and dot call OpenBLAS on every core, JAX's XLA may split work over cores.", ""]
    by_name = {row["benchmark"]: row["figures"] for row in rows}
    aks = {k: v["SaC AKS"]["median"] for k, v in by_name.items()}
    lines += [generic_line(by_name), ""]
    if peer_versions:
        lines += peer_summary(by_name)
    lines += ["## Optimisations switched off", "",
              "SaC AKS, one thread, built with `--disable PASS`; each figure is time with the pass off / time "
              "with every pass on (higher: the pass matters more). Outputs are checked with each pass off.", "",
              "| benchmark | all on (ms) | " + " | ".join(f"no {x}" for x in ABLATIONS) + " |",
              "|---|---|" + "---|" * len(ABLATIONS)]
    for name in by_name:
        cells = [f"{ablation[x][name]['median'] / aks[name]:.2f}" for x in ABLATIONS]
        lines.append(f"| {name} | {aks[name] * 1e3:.1f} | " + " | ".join(cells) + " |")
    lines += [""]
    if "relax_apl" in by_name:
        apl = by_name["relax_apl"]
        composed = apl["SaC AKS"]["median"] / apl["SaC AKS, hand-fused"]["median"]
        lines += [f"Composed (rotate/take/drop/cat) / hand-fused relaxation, SaC AKS (both timed in the same "
                  f"rounds, relax_apl's row): {composed:.2f} (target ≤ 1.05).", ""]
    if strategies:
        spec = strategies["specific"]["median"]
        cdet = strategies["C -O3"]["median"]
        lines += ["## Seed 003 §5.3: determinant by specialisation strategy", "",
                  f"det of a {sz['det']}×{sz['det']} array through det's generic entry (the dispatch wrapper), one "
                  "library per strategy: \"generic\" has only the two user-defined Det instances, \"generic k\" "
                  "adds Det specialised for [3,3] … [k,k] (`--shape Det.a=double[k,k]`), \"specific\" a hint "
                  "for the argument's shape. The thesis (Figs. 5.13/5.14): generic 5.0–8.0×, generic 3 "
                  "2.3–3.0×, generic 4 1.4–1.8× the specific time.", "",
                  "| strategy | ms | × specific | × C -O3 |", "|---|---|---|---|"]
        for label, _ in DET_STRATEGIES:
            t = strategies[label]["median"]
            lines.append(f"| {label} | {t * 1e3:.2f} | {t / spec:.1f} | {t / cdet:.2f} |")
        lines += ["", "Our \"specific\" is far below C because the unrolled small instances ([7,7] down) are "
                  "common-subexpression eliminated: their minors are computed once, not once per path, an "
                  "algorithmic gain generic code cannot have; each specialisation dispatched at run time "
                  "removes one level of it. The SaC AUD det column above is the generic instance in the "
                  "benchmark library, which holds the [n,n] specialisations: its dispatch reaches them.", ""]
    ours = compile_times
    lines += ["## Compile times", "",
              f"- withloop, all of bench/kernels.sac (13 kernels, their AKS variants and generic instances, "
              f"-O3): {ours['obj'] * 1e3:.0f} ms to an object file, {ours['so'] * 1e3:.0f} ms to a linked shared "
              f"library (the `withloop` process included); gcc -O3 of the C kernels: {ours['gcc'] * 1e3:.0f} ms."]
    if JAX_COMPILE:
        total = sum(JAX_COMPILE.values())
        each = ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in JAX_COMPILE.items())
        lines += [f"- JAX jit (trace + lower + compile of a fresh function, in a process that has compiled once before, "
                  f"one shape each, median of {COMPILE_ROUNDS}): {each}; total {total * 1e3:.0f} ms. "
                  f"withloop object / JAX total: {ours['obj'] / total:.2f}× (target ≤ 0.5×)."]
    if "kernels" in ours:
        vs = f"; / JAX total: **{ours['kernels'] / sum(JAX_COMPILE.values()):.2f}×** (target ≤ 0.5×)" if JAX_COMPILE else ""
        lines += [f"- withloop, the 13 kernels JAX compiles (`--entry` for each, one process: each kernel with what it "
                  f"calls, its AKS variants and its generic instance; not the file's other exports), object file: "
                  f"{ours['kernels'] * 1e3:.0f} ms{vs}. Wall times of withloop are medians of 3 runs."]
    lines += against_jax(ours.get("per_kernel", {}), "withloop",
                         "Each kernel compiled alone (`--entry NAME`, object file, the `withloop` process included; "
                         "median of 5) against JAX's jit of the same function (in-process):",
                         " det: ours compiles Kreye's Laplace expansion specialised for every size from 10×10 down "
                         "(ten instances, unrolled), JAX the same expansion batched level by level.")
    if ours.get("startup"):
        lines += ["Of each such process, starting it (medians of 9, the Python that times them included): "
                  + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in ours["startup"].items())
                  + ". JAX's figure is a compile in a process already running.", ""]
    lines += against_jax(ours.get("service", {}), "service",
                         "Each kernel compiled alone by the compile service (`withloop-server`, a warm process as "
                         "JAX's is; `POST /v1/compile` with `entry`, one shape hint per parameter, `bypass_cache`; the "
                         f"`compile_ms` it reports, median of {COMPILE_ROUNDS}, taken in turns with JAX's compiles of the "
                         "kernel). Ours also compiles the generic instance that accepts "
                         "every other shape; JAX compiles the one shape:", "")
    lines += against_jax(ours.get("service_hinted", {}), "hinted only",
                         "The same, compiling the hinted instance only (`options: {generic: false}`, in the same "
                         "rounds): no generic instance, as JAX compiles the one shape; a call with another shape "
                         "fails (R0004) instead of running generic code:", "")
    for label, key in [("bench/kernels.sac", "phases"), ("the 13 kernels", "kernels_phases"),
                       ("bench/kernels.l0", "l0_phases")]:
        ph = ours.get(key, {})
        if ph:
            lines += [f"- Phases of the object-file compile of {label} (`--time-phases`): "
                      + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in ph.items()) + "."]
    lines += [""]
    base.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
