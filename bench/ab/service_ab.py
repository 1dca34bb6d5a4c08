"""A/B of the compile service's compile times: two `withloop-server` binaries.

The host's speed drifts by tens of percent within minutes (this session's Zen 4
host: det's service compile 235 ms at one hour, 330-420 ms at the next), so two
servers timed in separate runs of bench/run.py cannot show a 10% difference.
This starts both (embedded defaults: in-memory cache, in-process workers),
compiles each kernel on each in turn (the order alternating per round), and
prints per kernel the median and minimum `compile_ms` of each, then the
geometric mean of the medians. Each compile is the bench's service compile:
`POST /v1/compile` with the kernel as `entry`, the bench's first shape hint per
parameter, `emit: [object]`, `bypass_cache`; `trivial` is `int main()` alone.

    cp target/release/withloop-server /tmp/server-a      # build, copy; change, build:
    python3 bench/ab/service_ab.py neg,matmul,det 7 /tmp/server-a target/release/withloop-server

Arguments: KERNELS (comma-separated; `all`: the bench's thirteen and `trivial`),
ROUNDS, then two or more server binaries. `--sleep S` pauses before each compile.
"""
import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import run  # noqa: E402  (bench/run.py: hints, sizes, the service client)

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernels")
    ap.add_argument("rounds", type=int)
    ap.add_argument("servers", nargs="+")
    ap.add_argument("--sleep", type=float, default=0.02)
    args = ap.parse_args()
    if len(args.servers) < 2:
        ap.error("two or more server binaries")
    kernels = ["trivial"] + run.KERNEL_ENTRIES if args.kernels == "all" else args.kernels.split(",")
    services = []
    try:
        for b in args.servers:
            services.append(run.CompileService.start(run.hint_list(run.sizes(False)), server=b))
        logs = [0.0] * len(services)
        for k in kernels:
            times = [[] for _ in services]
            for r in range(args.rounds):
                order = range(len(services)) if r % 2 == 0 else reversed(range(len(services)))
                for j in order:
                    s = services[j]
                    time.sleep(args.sleep)
                    if k == "trivial":
                        body = dict(source=run.TRIVIAL_PROGRAM, emit=["object"], bypass_cache=True)
                    else:
                        body = dict(source=s.source, file_name="kernels.sac", entry=[k], shapes=s.shapes,
                                    emit=["object"], bypass_cache=True)
                    times[j].append(s.post(body)["compile_ms"])
            for j, t in enumerate(times):
                logs[j] += math.log(statistics.median(t))
            cells = " | ".join(f"{args.servers[j]}: median {statistics.median(t):6.1f} min {min(t):6.1f}"
                               for j, t in enumerate(times))
            print(f"{k:13} {cells}", flush=True)
        print("geometric mean of the medians (ms):",
              " | ".join(f"{b} {math.exp(g / len(kernels)):.1f}" for b, g in zip(args.servers, logs)))
    finally:
        for s in services:
            s.stop()


if __name__ == "__main__":
    main()
