"""SIGTERM a server whose only worker slot is busy while another job waits:
does it take the waiting job after the signal (and delay its exit by it)?
Usage: python3 shutdown_extra_job.py BASE_URL PIDFILE"""
import sys, os, time, signal, requests
base, pidfile = sys.argv[1:3]
pid = int(open(pidfile).read())
src = open("/tmp/audit_queue/long.sac").read()
body = {"compile": {"source": src}, "limits": {"wall_ms": 5000, "cpu_ms": 5000}}
j1 = requests.post(base + "/v1/run?async=true", json=body).json()["job"]
time.sleep(1.5)
j2 = requests.post(base + "/v1/run?async=true", json=body).json()["job"]
time.sleep(0.5)
os.kill(pid, signal.SIGTERM); t = time.time()
print("SIGTERM sent; job 2 was queued")
while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z": time.sleep(0.2)
print(f"server exited {time.time()-t:.1f} s after SIGTERM")
import subprocess
print(subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", sys.argv[3], "-tAc",
      f"select id = '{j1}' as first, status, attempts, events->-1->>'status' from jobs where id in ('{j1}', '{j2}') order by created_at"], capture_output=True, text=True).stdout)
