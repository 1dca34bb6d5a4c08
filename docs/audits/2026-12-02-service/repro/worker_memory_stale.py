"""API server (--workers 0) + a worker process with its own memory tier:
once the database tier evicts (or purges) a key, async compiles of it are
answered `done` from the worker's memory, with artifact URLs the API server
cannot serve (404), and the worker's hits never refresh the key's
last_used_at, so the LRU evicts what the workers use most.
Usage: python3 worker_memory_stale.py API_URL DBNAME   (API and worker share DBNAME, WITHLOOP_DB_CACHE_MB=1)"""
import sys, time, random, subprocess, requests
api, db = sys.argv[1], sys.argv[2]
def sql(q): return subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", db, "-tAc", q], capture_output=True, text=True).stdout.strip()
def job(body):
    j = requests.post(api + "/v1/compile?async=true", json=body).json()
    while (v := requests.get(api + j["job_url"]).json())["status"] in ("queued", "running"): time.sleep(0.1)
    return v
K = {"source": f"int k(int x) {{ return x * {random.randrange(10**9)}; }}\n", "emit": ["report", "ir"]}
v = job(K); key = v["result"]["key"]
print("1. async compile K:", v["status"], v["result"]["cache"], "on", v["worker"])
print("   GET artifact via API:", requests.get(f"{api}/v1/artifacts/{key}/ir").status_code)
for i in range(60):   # other compilations push K out of the 1 MiB database tier (LRU)
    requests.post(api + "/v1/compile", json={"source": open("/tmp/audit_queue/bomb16.sac").read() + f"int z{i}_{random.randrange(10**9)}(int y) {{ return y; }}\n", "emit": ["asm", "llvm_ir", "ir", "report"]})
print("2. K still in the database tier:", sql(f"select count(*) from compilations where key = '{key}'"))
v = job(K)
print("3. async compile K again:", v["status"], "cache:", v["result"]["cache"], "key same:", v["result"]["key"] == key)
print("   its artifact URL via the API:", requests.get(api + v["result"]["artifacts"]["ir"]["url"]).status_code,
      "; GET /v1/compilations/K:", requests.get(f"{api}/v1/compilations/{key}").status_code,
      "; run by key:", requests.post(api + "/v1/run", json={"key": key, "entry": "k", "args": [1]}).status_code)
