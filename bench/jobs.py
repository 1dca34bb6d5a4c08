#!/usr/bin/env python3
"""Job queue figures (issue 7's benchmark): job overhead and worker scaling.

* Overhead: `POST /v1/compile?async=true` of an already cached program, then
  `GET /v1/jobs/{id}` every millisecond until it is done -- enqueue → result
  through Postgres and a `withloop-worker`, the job itself a cache hit.
* Scaling: 16 CPU-bound run jobs (a loop of ~0.4 s each) with one worker process
  (concurrency 1), then with two (concurrency 1 each); throughput ratio.

Starts a release `withloop-server --workers 0` (API only) over a scratch database
`withloop_bench_jobs` and the worker processes itself. Writes
bench/results/jobs-<date>.md and .json.

    python3 bench/jobs.py [--overhead-jobs 200] [--scaling-jobs 16]
"""

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASE = os.path.join(ROOT, "target", "release")
ADMIN = os.environ.get("WITHLOOP_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
DB = ADMIN.rsplit("/", 1)[0] + "/withloop_bench_jobs"

SPIN = """int main()
{
    s = 0;
    for (i = 0; i < N; i++) { s = (s * 31 + i) % 1000003; }
    return s;
}
"""


def http(method, address, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://{address}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def start(cmd, env_extra):
    env = dict(os.environ, RUST_LOG="warn", DATABASE_URL=DB, **env_extra)
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    return proc, proc.stderr.readline()


def wait_job(address, job, poll=0.001):
    while True:
        v = http("GET", address, f"/v1/jobs/{job}")
        if v["status"] in ("done", "failed", "dead", "cancelled"):
            return v
        time.sleep(poll)


def workers(n):
    procs = [start([os.path.join(RELEASE, "withloop-worker"), "--concurrency", "1", "--poll-ms", "200"], {})[0]
             for _ in range(n)]
    time.sleep(0.5)
    return procs


def stop(procs):
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--overhead-jobs", type=int, default=200)
    ap.add_argument("--scaling-jobs", type=int, default=16)
    ap.add_argument("--spin", type=int, default=60_000_000, help="loop iterations of each CPU-bound job")
    args = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "withloop-server", "-p", "withloop-worker",
                    "-p", "withloop-rt"], cwd=ROOT, check=True)
    subprocess.run(["psql", ADMIN, "-qc", "DROP DATABASE IF EXISTS withloop_bench_jobs WITH (FORCE)"], check=True)
    subprocess.run(["psql", ADMIN, "-qc", "CREATE DATABASE withloop_bench_jobs"], check=True)
    server, line = start([os.path.join(RELEASE, "withloop-server"), "--workers", "0"],
                         {"WITHLOOP_LISTEN": "127.0.0.1:0"})
    address = re.search(r"http://(\S+)", line).group(1)
    rows = {}
    try:
        # Overhead: a cached compile as a job.
        body = {"source": "int main() { return 1; }", "emit": ["report"]}
        http("POST", address, "/v1/compile", body)
        procs = workers(1)
        times = []
        for _ in range(args.overhead_jobs):
            t0 = time.perf_counter()
            job = http("POST", address, "/v1/compile?async=true", body)["job"]
            v = wait_job(address, job)
            times.append((time.perf_counter() - t0) * 1e3)
            assert v["status"] == "done" and v["result"]["cache"] in ("memory", "database"), v
        stop(procs)
        times.sort()
        rows["overhead_ms"] = {"p50": statistics.median(times), "p90": times[int(0.9 * len(times))],
                               "p99": times[int(0.99 * len(times)) - 1], "min": times[0], "max": times[-1],
                               "jobs": len(times)}

        # Scaling: CPU-bound runs on one worker, then two.
        source = SPIN.replace("N", str(args.spin))
        run = {"compile": {"source": source}, "limits": {"wall_ms": 600000, "cpu_ms": 600000}}
        http("POST", address, "/v1/run", run)  # compiles it into the cache and checks it runs
        scaling = {}
        for n in (1, 2):
            procs = workers(n)
            t0 = time.perf_counter()
            jobs = [http("POST", address, "/v1/run?async=true", run)["job"] for _ in range(args.scaling_jobs)]
            for j in jobs:
                v = wait_job(address, j, poll=0.01)
                assert v["status"] == "done", v
            elapsed = time.perf_counter() - t0
            stop(procs)
            scaling[n] = {"seconds": elapsed, "jobs_per_s": args.scaling_jobs / elapsed}
        rows["scaling"] = scaling
    finally:
        server.terminate()
        server.wait()
        subprocess.run(["psql", ADMIN, "-qc", "DROP DATABASE IF EXISTS withloop_bench_jobs WITH (FORCE)"])

    date = datetime.date.today().isoformat()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}"
    cmd = ("python3 bench/jobs.py " + " ".join(sys.argv[1:])).strip()
    o = rows["overhead_ms"]
    s = rows["scaling"]
    ratio = s[2]["jobs_per_s"] / s[1]["jobs_per_s"]
    lines = [
        f"# Job queue: overhead and worker scaling ({date})",
        "",
        f"Command: `{cmd}` (release build). Machine: {machine}.",
        "Server (`--workers 0`), Postgres, workers and this script share the machine.",
        "",
        "## Job overhead (enqueue → result, a cached compile as a job, one worker)",
        "",
        "| jobs | p50 ms | p90 ms | p99 ms | min ms | max ms | target p50 | met |",
        "|---|---|---|---|---|---|---|---|",
        f"| {o['jobs']} | {o['p50']:.2f} | {o['p90']:.2f} | {o['p99']:.2f} | {o['min']:.2f} | {o['max']:.2f} | 5 ms | "
        f"{'yes' if o['p50'] <= 5 else 'no'} |",
        "",
        "Includes the HTTP round trips of the script's 1 ms status polling.",
        "",
        f"## Scaling ({args.scaling_jobs} CPU-bound run jobs, {args.spin} loop iterations each)",
        "",
        "| workers | seconds | jobs/s |",
        "|---|---|---|",
        f"| 1 | {s[1]['seconds']:.2f} | {s[1]['jobs_per_s']:.2f} |",
        f"| 2 | {s[2]['seconds']:.2f} | {s[2]['jobs_per_s']:.2f} |",
        "",
        f"Speed-up 1 → 2 workers: {ratio:.2f}× (target ≥ 1.7×: {'met' if ratio >= 1.7 else 'not met'}).",
        "Each run compiles its program again in the sandbox (JIT) before running it.",
    ]
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    md = os.path.join(ROOT, "bench", "results", f"jobs-{date}.md")
    with open(md, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(md[:-3] + ".json", "w") as f:
        json.dump({"date": date, "machine": machine, "command": cmd, **rows}, f, indent=2, default=str)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
