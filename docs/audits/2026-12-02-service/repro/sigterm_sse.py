"""SIGTERM while a client follows a job's events: graceful shutdown waits for
every open connection, and an SSE stream of a job that does not finish keeps
one open, so the server does not stop. Usage: python3 sigterm_sse.py BASE_URL PIDFILE JOB_ID"""
import sys, os, time, signal, threading, requests
base, pidfile, job = sys.argv[1:4]
pid = int(open(pidfile).read())
def follow():
    try:
        with requests.get(f"{base}/v1/jobs/{job}/events", stream=True, timeout=60) as r:
            for _ in r.iter_lines(): pass
    except Exception as e: pass
threading.Thread(target=follow, daemon=True).start()
time.sleep(1)
os.kill(pid, signal.SIGTERM); t = time.time()
while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z" and time.time() - t < 20:
    time.sleep(0.5)
alive = os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z"
print(f"server {'STILL RUNNING' if alive else 'exited'} {time.time()-t:.1f}s after SIGTERM (an SSE stream open)")
try:
    r = requests.get(base + "/healthz", timeout=2); print("healthz during shutdown:", r.status_code)
except Exception as e: print("healthz during shutdown: connection refused/failed")
