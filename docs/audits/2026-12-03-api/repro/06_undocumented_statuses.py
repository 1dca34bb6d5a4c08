"""06: statuses the server answers that the spec does not list, no security scheme for the bearer
tokens, and artifacts served with per-kind content types where the spec says only
application/octet-stream.
Usage: python3 06_undocumented_statuses.py BASE_URL [TOKEN_SERVER_URL] [TIMEOUT_SERVER_URL]
  TOKEN_SERVER_URL: withloop-server --tokens team:sekrit --rate-limit-per-minute 2
  TIMEOUT_SERVER_URL: withloop-server --request-timeout-secs 1"""
import json, sys, oas, requests
B = oas.BASE
src = {"source": "int main() { return 1; }"}
def show(label, r):
    print(f"{label:42} {r.status_code} {r.headers.get('content-type')}  {oas.check(r)}")
show("compile without content-type", requests.post(B + "/v1/compile", data=json.dumps(src)))
show("run without content-type", requests.post(B + "/v1/run", data=json.dumps({"compile": src})))
c = requests.post(B + "/v1/compile", json={**src, "emit": ["header", "object", "report"]}).json()
for kind in ("header", "object", "report"):
    show(f"artifact {kind}", requests.get(B + c["artifacts"][kind]["url"]))
print("spec security / securitySchemes:", oas.SPEC.get("security"), oas.SPEC.get("components", {}).get("securitySchemes"))
if len(sys.argv) > 2:
    T = sys.argv[2].rstrip("/")
    show("no token (tokens configured)", requests.post(T + "/v1/compile", json=src))
    h = {"Authorization": "Bearer sekrit"}
    for i in range(3):
        r = requests.post(T + "/v1/compile", json=src, headers=h)
    show(f"rate limited (Retry-After {r.headers.get('retry-after')})", r)
if len(sys.argv) > 3:
    spin = "int main(int n) {\n  s = 0;\n  i = 0;\n  while (i < n) {\n    s = (s * 31 + i) % 1000003;\n    i = i + 1;\n  }\n  return s;\n}\n"
    show("request past the timeout", requests.post(sys.argv[3].rstrip("/") + "/v1/run", json={"compile": {"source": spin}, "args": [10**13], "limits": {"wall_ms": 4000}}))
