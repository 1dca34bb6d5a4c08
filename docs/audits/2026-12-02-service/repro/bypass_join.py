"""bypass_cache:true arriving while an identical non-bypass request's flight
is looking the key up joins that flight, and so is answered from the cache
(`cache: database`) instead of recompiling. Usage: python3 bypass_join.py URL_A URL_B TRIES"""
import sys, random, threading, time, requests, collections
A, B, tries = sys.argv[1], sys.argv[2], int(sys.argv[3])
big = open("/tmp/audit_queue/bomb16.sac").read()
c = collections.Counter()
for i in range(tries):
    body = {"source": big + f"int h{random.randrange(10**9)}(int y) {{ return y; }}\n", "emit": ["object", "asm", "llvm_ir", "ir", "report"]}
    requests.post(A + "/v1/compile", json=body)           # now in the database tier, not in B's memory
    out = {}
    t1 = threading.Thread(target=lambda: out.__setitem__("plain", requests.post(B + "/v1/compile", json=body).json()["cache"]))
    t1.start(); time.sleep(0.004)
    out["bypass"] = requests.post(B + "/v1/compile", json=dict(body, bypass_cache=True)).json()["cache"]
    t1.join()
    c[(out["plain"], out["bypass"])] += 1
print("(plain, bypass_cache=true) outcomes:", dict(c))
