#!/usr/bin/env python3
"""Cache-hit latency of the compile service under load (issue 6's benchmark).

Starts the release `withloop-server` twice -- embedded (memory tier) and over
Postgres with the memory tier switched off (`--memory-cache-mb 0`, so every
request is answered from the database tier) -- primes one compilation, then
drives `POST /v1/compile` for that compilation with wrk at several connection
counts. Server and load generator share the machine's cores, as they would on
one 2-core box. Writes bench/results/service-<date>.md and .json.

    python3 bench/service.py [--seconds 10] [--connections 1,4,16,64]

Needs wrk (installed with apt-get when missing) and, for the database tier,
Postgres at $WITHLOOP_BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres);
a scratch database `withloop_bench` is created and dropped there.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = os.path.join(ROOT, "target", "release", "withloop-server")

PROGRAM = """use Array: all;

double[.,.] relax(double[.,.] a)
{
    return with {
        ([1,1] <= iv < shape(a) - 1):
            0.25 * (a[iv + [1,0]] + a[iv - [1,0]] + a[iv + [0,1]] + a[iv - [0,1]]);
    } : modarray(a);
}

int main()
{
    return toi(sum(relax(genarray([100, 100], 1.0))));
}
"""

BODY = {
    "source": PROGRAM,
    "file_name": "relax.sac",
    "shapes": {"relax": {"a": "double[1000,1000]"}},
    "emit": ["object", "header", "report"],
}

LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open(os.getenv("WITHLOOP_BENCH_BODY"), "r")
wrk.body = f:read("*a")
f:close()
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT {\\"requests\\":%d,\\"duration_us\\":%d,\\"p50_us\\":%d,\\"p90_us\\":%d,\\"p99_us\\":%d,\\"max_us\\":%d,\\"errors\\":%d}\\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, e.connect + e.read + e.write + e.status + e.timeout))
end
"""


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def ensure_wrk():
    if shutil.which("wrk"):
        return
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    sh(sudo + ["apt-get", "install", "-y", "-qq", "wrk"])


def start(args, env_extra):
    env = dict(os.environ, WITHLOOP_LISTEN="127.0.0.1:0", RUST_LOG="warn", **env_extra)
    env.pop("DATABASE_URL", None)
    env.update(env_extra)
    proc = subprocess.Popen([SERVER] + args, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    line = proc.stderr.readline()
    m = re.search(r"http://(\S+)", line)
    if not m:
        proc.kill()
        sys.exit(f"the server did not start: {line}")
    return proc, m.group(1)


def post(address, body):
    req = urllib.request.Request(f"http://{address}/v1/compile", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)


def drive(address, connections, seconds, body_file):
    threads = min(2, connections)
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "-s", LUA_FILE, f"http://{address}/v1/compile"],
        env=dict(os.environ, WITHLOOP_BENCH_BODY=body_file), capture_output=True, text=True, check=True).stdout
    line = next(l for l in out.splitlines() if l.startswith("RESULT "))
    r = json.loads(line[len("RESULT "):])
    r["connections"] = connections
    r["throughput_rps"] = r["requests"] / (r["duration_us"] / 1e6)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", default="1,4,16,64")
    args = ap.parse_args()
    ensure_wrk()
    sh(["cargo", "build", "--release", "-q", "-p", "withloop-server", "-p", "withloop-rt"], cwd=ROOT)
    conns = [int(c) for c in args.connections.split(",")]
    tmp = tempfile.mkdtemp()
    global LUA_FILE
    LUA_FILE = os.path.join(tmp, "post.lua")
    with open(LUA_FILE, "w") as f:
        f.write(LUA)
    body_file = os.path.join(tmp, "body.json")
    with open(body_file, "w") as f:
        json.dump(BODY, f)

    tiers = []
    # Memory tier: the embedded default.
    proc, address = start([], {})
    try:
        first = post(address, BODY)
        assert first["cache"] == "miss", first["cache"]
        assert post(address, BODY)["cache"] == "memory"
        tiers.append(("memory", first["compile_ms"], [drive(address, c, args.seconds, body_file) for c in conns]))
    finally:
        proc.terminate()
        proc.wait()

    # Database tier: memory tier off, so every hit is a Postgres read (and verify).
    admin = os.environ.get("WITHLOOP_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    base = admin.rsplit("/", 1)[0]
    sh(["psql", admin, "-qc", "DROP DATABASE IF EXISTS withloop_bench WITH (FORCE)"])
    sh(["psql", admin, "-qc", "CREATE DATABASE withloop_bench"])
    proc, address = start(["--memory-cache-mb", "0"], {"DATABASE_URL": f"{base}/withloop_bench"})
    try:
        first = post(address, BODY)
        assert first["cache"] == "miss", first["cache"]
        assert post(address, BODY)["cache"] == "database"
        tiers.append(("database", first["compile_ms"], [drive(address, c, args.seconds, body_file) for c in conns]))
    finally:
        proc.terminate()
        proc.wait()
        sh(["psql", admin, "-qc", "DROP DATABASE IF EXISTS withloop_bench WITH (FORCE)"])

    date = datetime.date.today().isoformat()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}"
    cmd = "python3 bench/service.py " + " ".join(sys.argv[1:])
    targets = {"memory": (1.0, 2.0), "database": (5.0, 10.0)}
    lines = [
        f"# Compile service: cache-hit latency under load ({date})",
        "",
        f"Command: `{cmd.strip()}` (release build; wrk {args.seconds} s per row, server and wrk on the same machine).",
        f"Machine: {machine}.",
        "",
        "Request: `POST /v1/compile` of a 2-D relaxation with a shape hint, emitting object, header and report",
        "(the response carries the full optimisation report). `database` runs with `--memory-cache-mb 0`, so every",
        "request reads and verifies the compilation from Postgres.",
        "",
        "| tier | connections | req/s | p50 ms | p90 ms | p99 ms | max ms | errors | target p50 / p99 ms | met |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for tier, compile_ms, rows in tiers:
        for r in rows:
            p50, p99 = r["p50_us"] / 1e3, r["p99_us"] / 1e3
            t50, t99 = targets[tier]
            met = "yes" if p50 <= t50 and p99 <= t99 and r["errors"] == 0 else "no"
            lines.append(
                f"| {tier} | {r['connections']} | {r['throughput_rps']:.0f} | {p50:.2f} | {r['p90_us']/1e3:.2f} | "
                f"{p99:.2f} | {r['max_us']/1e3:.2f} | {r['errors']} | {t50:g} / {t99:g} | {met} |")
    lines.append("")
    for tier, _, rows in tiers:
        t50, t99 = targets[tier]
        best = max(r["throughput_rps"] for r in rows)
        ok = [r for r in rows if r["p50_us"] / 1e3 <= t50 and r["p99_us"] / 1e3 <= t99 and r["errors"] == 0]
        if ok:
            top = max(ok, key=lambda r: r["throughput_rps"])
            lines.append(f"- {tier}: within target up to {top['throughput_rps']:.0f} req/s "
                         f"({top['connections']} connections), {100 * top['throughput_rps'] / best:.0f}% of the "
                         f"highest throughput measured ({best:.0f} req/s); beyond that requests queue and latency grows.")
        else:
            lines.append(f"- {tier}: the target is not met at any load measured.")
    lines += ["- Identical concurrent requests share one lookup (single flight), so the database rows at high",
              "  connection counts include coalesced lookups; with one connection every request is its own read."]
    lines += ["", "Cold compile of the request (the priming miss): " +
              ", ".join(f"{t}: {c:.0f} ms" for t, c, _ in tiers) + "."]
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    md = os.path.join(ROOT, "bench", "results", f"service-{date}.md")
    with open(md, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(md[:-3] + ".json", "w") as f:
        json.dump({"date": date, "machine": machine, "command": cmd.strip(),
                   "tiers": [{"tier": t, "cold_compile_ms": c, "rows": rows} for t, c, rows in tiers]}, f, indent=2)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
