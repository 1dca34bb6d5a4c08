"""Run limits are not capped by the server: an async run with huge limits is
accepted and occupies a worker slot for as long as the program runs
(forever for a non-terminating program); the wall limit is enforced only by the
parent, so a child orphaned by a worker crash runs until its CPU limit.
Usage: python3 limits.py BASE_URL"""
import sys, time, requests
base = sys.argv[1]
src = open("/tmp/audit_queue/long.sac").read()
huge = {"wall_ms": 10**15, "cpu_ms": 10**15, "memory_mb": 10**9, "output_kb": 10**12}
r = requests.post(base + "/v1/run?async=true", json={"compile": {"source": src}, "limits": huge})
print("async run with limits", huge, "->", r.status_code)
job = r.json()["job"]
time.sleep(8)
v = requests.get(base + "/v1/jobs/" + job).json()
print("after 8 s:", v["status"], "(program would run ~hours; nothing bounds it)")
print("cancel ->", requests.delete(base + "/v1/jobs/" + job).json()["status"])
