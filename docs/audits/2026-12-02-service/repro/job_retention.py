"""Embedded jobs keep their full result (the whole compile response, report
included) for an hour, however many there are: N async requests for ONE cached
compilation grow the server by ~N x response size, outside
WITHLOOP_MEMORY_CACHE_MB; and every create scans all kept jobs, as does
GET /v1/workers (cloning each job's result). Usage: python3 job_retention.py BASE_URL PIDFILE N"""
import sys, time, requests
from concurrent.futures import ThreadPoolExecutor
base, pidfile, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
pid = open(pidfile).read().strip()
def rss(): return int([l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")][0].split()[1]) // 1024
src = open("/tmp/audit_queue/bomb16.sac").read()
body = {"source": src, "emit": ["report", "ir"]}
size = len(requests.post(base + "/v1/compile", json=body).content)
print(f"one compile response: {size/1024:.0f} KiB; RSS {rss()} MiB")
s = [requests.Session() for _ in range(8)]
def sub(i): return s[i % 8].post(base + "/v1/compile?async=true", json=body).status_code
t = time.time()
for batch in range(4):
    t0 = time.time()
    with ThreadPoolExecutor(8) as ex: list(ex.map(sub, range(n // 4)))
    dt = time.time() - t0
    t1 = time.time(); requests.get(base + "/v1/workers"); w = time.time() - t1
    print(f"after {(batch+1)*n//4} async requests (all one cached key): RSS {rss()} MiB; {n//4/dt:.0f} req/s; GET /v1/workers {w*1000:.0f} ms")
