"""kill -9 of the server whose worker holds a run job: does another server
take the job over, and what happens to the sandboxed child?
Usage: python3 kill9.py SURVIVOR_URL  (both servers share DB audit_q)"""
import sys, time, subprocess, requests, os
base = sys.argv[1]
src = open("/tmp/audit_queue/long.sac").read()
r = requests.post(base + "/v1/run?async=true", json={"compile": {"source": src}, "limits": {"wall_ms": 15000, "cpu_ms": 15000}})
job = r.json()["job"]
while (v := requests.get(base + "/v1/jobs/" + job).json())["status"] != "running":
    time.sleep(0.2)
time.sleep(1)
worker = v["worker"]; pid = int(worker.split("-")[1])
kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
print("job held by", worker, "server pid", pid, "sandbox children", kids)
os.kill(pid, 9); t0 = time.time()
print("killed server", pid)
seen = None
while time.time() - t0 < 40:
    v = requests.get(base + "/v1/jobs/" + job).json()
    alive = [k for k in kids if os.path.exists(f"/proc/{k}") and open(f"/proc/{k}/stat").read().split()[2] != "Z"]
    st = (v["status"], v["worker"], v["attempts"], bool(alive))
    if st != seen:
        print(f"t={time.time()-t0:5.1f}s status={v['status']} worker={v['worker']} attempts={v['attempts']} orphan child alive={bool(alive)}")
        seen = st
    if v["status"] not in ("queued", "running") and not alive: break
    time.sleep(0.5)
print("final:", v["status"], v.get("error"))
