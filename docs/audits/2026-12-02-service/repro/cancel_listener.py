"""Finding: after one database outage in which the worker's LISTEN
withloop_cancel connection cannot reconnect at once, the canceller task
(`while let Ok(n) = cancel_listener.recv().await`, worker/src/pool.rs) ends
for good: DELETE /v1/jobs/{id} then marks a run job cancelled but its
program keeps running until its wall-clock limit.
Usage: python3 cancel_listener.py BASE_URL DBNAME [--outage]
(--outage: refuse connections to DBNAME for 3 s first; use a scratch DB
served by this one server only)"""
import sys, time, subprocess, requests
base, db = sys.argv[1], sys.argv[2]
def sql(q, d="postgres"):
    return subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", d, "-tAc", q], capture_output=True, text=True).stdout.strip()
def listeners():
    return sql("select string_agg(query, ' | ') from pg_stat_activity where datname = '%s' and query like 'LISTEN%%'" % db)
print("LISTEN connections:", listeners())
if "--outage" in sys.argv:
    sql(f"ALTER DATABASE {db} ALLOW_CONNECTIONS false")
    sql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}'")
    time.sleep(3)
    sql(f"ALTER DATABASE {db} ALLOW_CONNECTIONS true")
    time.sleep(3)
    print("after a 3 s outage, LISTEN connections:", listeners())
src = open("/tmp/audit_queue/long.sac").read()
r = requests.post(base + "/v1/run?async=true", json={"compile": {"source": src}, "limits": {"wall_ms": 25000, "cpu_ms": 25000}})
job = r.json()["job"]
while requests.get(base + "/v1/jobs/" + job).json()["status"] != "running":
    time.sleep(0.2)
time.sleep(2)
def children():
    return subprocess.run(["pgrep", "-f", "--", "--exec-run"], capture_output=True, text=True).stdout.split()
print("sandboxed children before cancel:", children())
t0 = time.time()
print("cancel ->", requests.delete(base + "/v1/jobs/" + job).json()["status"])
while children() and time.time() - t0 < 30:
    time.sleep(0.25)
print(f"children gone after {time.time() - t0:.1f} s (cancellation should kill within ~1 s)")
