"""10: request bodies the schema admits that the server refuses with 400 (bounds the spec does not state).
Usage: python3 10_schema_bounds.py BASE_URL"""
import oas, requests
src = "int main() { return 1; }"
for opts in ({"opt_level": 9}, {"threads": 0}):
    body = {"source": src, "options": opts}
    r = requests.post(oas.BASE + "/v1/compile", json=body)
    print(opts, "schema errors:", oas.validate_schema(oas.component("CompileRequest"), body), "-> server", r.status_code, r.json()["error"]["message"])
