"""02: RunRequest.args and RunResponse.results items are typed `object` in the spec, but scalar
arguments are plain JSON numbers/booleans and scalar results come back as plain numbers
(or strings/null for non-finite values). Usage: python3 02_scalar_args_results.py BASE_URL"""
import oas, requests
body = {"compile": {"source": "int g(int x) { return x + 1; }"}, "entry": "g", "args": [41]}
print("request body against RunRequest:", oas.validate_schema(oas.component("RunRequest"), body))
r = requests.post(oas.BASE + "/v1/run", json=body)
print(r.status_code, r.json()["results"], "response against spec:", oas.check(r))
l0 = {"compile": {"source": "fun {int, bool} main(int n) = {n * 2, n > 0}\n", "language": "l0"}, "args": [21]}
r = requests.post(oas.BASE + "/v1/run", json=l0)
print(r.status_code, r.json()["results"], "response against spec:", oas.check(r))
