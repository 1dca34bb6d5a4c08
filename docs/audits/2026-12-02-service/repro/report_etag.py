"""One key, two different `report` artifacts: the report holds pass timings,
so every compile of a key yields other bytes. Two servers sharing a database
that both miss on a request (or a bypass_cache recompile) serve different
bytes and ETags for the same "immutable" URL, and a response's
`artifacts.report.content_hash` need not match what the URL later serves.
Usage: python3 report_etag.py URL_A URL_B URL_C (all on one DATABASE_URL)"""
import sys, random, requests, threading
A, B, C = sys.argv[1:4]
src = f"double[.,.] scale(double[.,.] a, double s) {{ return {{ iv -> a[iv] * s + {random.randrange(10**9)}.0 }}; }}\n"
body = {"source": src, "emit": ["report", "object"]}
out = {}
def go(name, url): out[name] = requests.post(url + "/v1/compile", json=body).json()
ts = [threading.Thread(target=go, args=(n, u)) for n, u in (("A", A), ("B", B))]
[t.start() for t in ts]; [t.join() for t in ts]
key = out["A"]["key"]; assert key == out["B"]["key"]
print("same key from A and B:", key[:16], "cache:", out["A"]["cache"], out["B"]["cache"])
for n in "AB":
    print(f"compile response from {n}: report hash {out[n]['artifacts']['report']['content_hash'][:16]}  object hash {out[n]['artifacts']['object']['content_hash'][:16]}")
for n, u in (("A", A), ("B", B), ("C", C)):
    r = requests.get(f"{u}/v1/artifacts/{key}/report")
    print(f"GET report from {n}: ETag {r.headers['etag'][1:17]}  Cache-Control: {r.headers['cache-control']}")
r = requests.get(f"{B}/v1/artifacts/{key}/report", headers={"If-None-Match": '"' + out['A']['artifacts']['report']['content_hash'] + '"'})
print("B revalidating A's ETag ->", r.status_code)
