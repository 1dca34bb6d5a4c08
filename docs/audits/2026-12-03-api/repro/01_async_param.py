"""01: `async` is documented as a required *path* parameter; it is an optional query parameter.
Usage: python3 01_async_param.py BASE_URL"""
import json, oas, requests
for path in ("/v1/compile", "/v1/run"):
    print(path, "spec parameters:", json.dumps(oas.SPEC["paths"][path]["post"]["parameters"]))
src = {"source": "int main() { return 1; }"}
r = requests.post(oas.BASE + "/v1/compile", json=src)
print("no async at all (spec: required) ->", r.status_code)
r = requests.post(oas.BASE + "/v1/compile?async=true", json=src)
print("?async=true (query, which the spec does not list) ->", r.status_code, list(r.json()))
