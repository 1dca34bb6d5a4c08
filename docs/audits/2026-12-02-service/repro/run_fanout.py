"""How many sandboxed children run at once for N async (or sync) runs.
Embedded: one child per request, unbounded; Postgres: bounded by workers.
Usage: python3 run_fanout.py BASE_URL N [sync]"""
import sys, time, subprocess, requests, threading
base = sys.argv[1]; n = int(sys.argv[2]); sync = "sync" in sys.argv
src = open("/tmp/audit_queue/long.sac").read()
body = {"compile": {"source": src}, "limits": {"wall_ms": 6000, "cpu_ms": 6000}}
jobs = []
def fire():
    try: requests.post(base + "/v1/run", json=body, timeout=15)
    except Exception: pass
for _ in range(n):
    if sync: threading.Thread(target=fire, daemon=True).start()
    else: jobs.append(requests.post(base + "/v1/run?async=true", json=body).json()["job"])
peak = 0; t = time.time()
while time.time() - t < 5:
    k = len(subprocess.run(["pgrep", "-f", "--", "--exec-run"], capture_output=True, text=True).stdout.split())
    peak = max(peak, k); time.sleep(0.2)
print(f"{n} {'sync' if sync else 'async'} runs -> peak {peak} sandboxed children at once")
for j in jobs: requests.delete(base + "/v1/jobs/" + j)
