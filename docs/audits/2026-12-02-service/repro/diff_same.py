"""Two compiles of one request (bypass_cache, or two servers) differ: which
key components and which artifact hashes differ. Usage: python3 diff_same.py URL1 URL2"""
import sys, json, requests, random
tag = random.randrange(10**9)
b = {"source": f"double[.,.] scale(double[.,.] a, double s) {{ return {{ iv -> a[iv] * s + {tag}.0 }}; }}\n", "emit": ["report", "header", "ir", "llvm_ir", "object", "shared", "asm"]}
r1 = requests.post(sys.argv[1] + "/v1/compile", json=b).json()
r2 = requests.post(sys.argv[2] + "/v1/compile", json=dict(b, bypass_cache=True)).json()
print("keys equal:", r1["key"] == r2["key"])
for k in r1["artifacts"]:
    print(k, "same hash" if r1["artifacts"][k]["content_hash"] == r2["artifacts"][k]["content_hash"] else "DIFFERENT hash")
def walk(a, b, path=""):
    if type(a) != type(b): print("diff", path); return
    if isinstance(a, dict):
        for k in set(a) | set(b): walk(a.get(k), b.get(k), path + "." + k)
    elif isinstance(a, list):
        if len(a) != len(b): print("diff len", path); return
        for i, (x, y) in enumerate(zip(a, b)): walk(x, y, f"{path}[{i}]")
    elif a != b: print("diff", path, str(a)[:60], str(b)[:60])
walk(r1["report"], r2["report"], "report")
