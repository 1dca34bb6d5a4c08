"""05: `entry` defaults to "every function of the program" per the spec; for L0 it is `main` only
(when there is one), so /v1/run of another function fails; an unknown L0 entry lists no functions.
Usage: python3 05_l0_entries.py BASE_URL"""
import oas, requests
src = "fun int inc(int x) = x + 1\nfun int main(int n) = inc(n)\n"
print("spec says:", oas.SPEC["components"]["schemas"]["CompileRequest"]["properties"]["entry"]["description"].replace("\n", " "))
c = requests.post(oas.BASE + "/v1/compile", json={"source": src, "language": "l0"}).json()
print("L0 exported:", [v["function"] for v in c["variants"]])
s = requests.post(oas.BASE + "/v1/compile", json={"source": "int inc(int x) { return x + 1; }\nint main(int n) { return inc(n); }\n"}).json()
print("SaC exported:", [v["function"] for v in s["variants"]])
r = requests.post(oas.BASE + "/v1/run", json={"compile": {"source": src, "language": "l0"}, "entry": "inc", "args": [1]})
print("L0 run entry inc:", r.status_code, r.json()["error"]["message"])
r = requests.post(oas.BASE + "/v1/compile", json={"source": src, "language": "l0", "entry": ["nope"]})
print("L0 unknown entry:", r.status_code, r.json()["error"]["diagnostics"][0]["notes"])
r = requests.post(oas.BASE + "/v1/compile", json={"source": "int main() { return 1; }", "entry": ["nope"]})
print("SaC unknown entry:", r.status_code, r.json()["error"]["diagnostics"][0]["notes"])
