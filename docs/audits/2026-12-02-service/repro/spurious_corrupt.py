"""GET /v1/artifacts/{key}/report from a server without the compilation in
memory, while other servers recompile the key (bypass_cache): metadata and
bytes are read in two queries, the report's bytes differ per compile, so a
re-save between them is reported as corruption (404 + corrupt_artifacts++).
Usage: python3 spurious_corrupt.py URL_A URL_B URL_C SECONDS"""
import sys, random, time, threading, requests, collections
A, B, C = sys.argv[1:4]; secs = float(sys.argv[4])
src = f"double[.,.] scale(double[.,.] a, double s) {{ return {{ iv -> a[iv] * s + {random.randrange(10**9)}.0 }}; }}\n"
body = {"source": src, "emit": ["report"]}
key = requests.post(A + "/v1/compile", json=body).json()["key"]
stop = time.time() + secs
def recompile(u):
    s = requests.Session()
    while time.time() < stop: s.post(u + "/v1/compile", json=dict(body, bypass_cache=True))
ts = [threading.Thread(target=recompile, args=(u,)) for u in (A, B, A, B)]
[t.start() for t in ts]
s = requests.Session(); c = collections.Counter()
def metric():
    for line in requests.get(C + "/metrics").text.splitlines():
        if line.startswith("withloop_corrupt") or "corrupt" in line and not line.startswith("#"): return line
before = metric()
while time.time() < stop:
    r = s.get(f"{C}/v1/artifacts/{key}/report")
    c[(r.status_code, r.json()["error"]["message"][:60] if r.status_code != 200 else "ok")] += 1
[t.join() for t in ts]
print(dict(c)); print("metric before:", before, "after:", metric())
