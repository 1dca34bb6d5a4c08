"""04: for L0 programs, /v1/run's `variant` is always "(dispatched at run time)", specialised
false, although L0 types fix every rank and the compile response names the one instance.
Usage: python3 04_l0_run_variant.py BASE_URL"""
import oas, requests
prog = {"source": "fun [int] twice([int] a) = map(fn int (int x) => 2 * x, a)\nfun int main(int n) = n + 1\n", "language": "l0", "entry": ["twice"]}
c = requests.post(oas.BASE + "/v1/compile", json=prog).json()
print("compile variants:", [(v["function"], v["signature"], v["specialised"]) for v in c["variants"]])
r = requests.post(oas.BASE + "/v1/run", json={"key": c["key"], "entry": "twice", "args": [{"shape": [3], "data": [1, 2, 3]}]}).json()
print("run results:", r["results"], "variant:", r["variant"])
s = requests.post(oas.BASE + "/v1/run", json={"compile": {"source": "int[.] twice(int[.] a) { return { iv -> 2 * a[iv] }; }"}, "entry": "twice", "args": [{"shape": [3], "data": [1, 2, 3]}]}).json()
print("the same in SaC, variant:", s["variant"])
