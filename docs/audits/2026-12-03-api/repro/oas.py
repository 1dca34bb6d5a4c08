"""Validates real responses against openapi/openapi.json (OpenAPI 3.1 = JSON Schema 2020-12).
Used by the repro scripts: `pip install jsonschema requests`; BASE_URL as first argument or $BASE."""
import json, os, re, sys, requests
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
SPEC_PATH = os.environ.get("SPEC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../../openapi/openapi.json"))
SPEC = json.load(open(SPEC_PATH))
BASE = (sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].startswith("http") else os.environ.get("BASE", "http://127.0.0.1:8080")).rstrip("/")
REG = Registry().with_resource("spec", Resource.from_contents(SPEC, default_specification=__import__("referencing.jsonschema").jsonschema.DRAFT202012))

def schema_ref(ref):
    return {"$ref": "spec" + ref} if ref.startswith("#") else ref

def fix(s):
    if isinstance(s, dict):
        return {k: (("spec" + v) if k == "$ref" and v.startswith("#") else fix(v)) for k, v in s.items()}
    if isinstance(s, list):
        return [fix(x) for x in s]
    return s

def validate_schema(schema, value):
    v = Draft202012Validator(fix(schema), registry=REG)
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:200]}" for e in v.iter_errors(value)]

def component(name):
    return {"$ref": f"#/components/schemas/{name}"}

def op_for(method, url_path):
    for p, ops in SPEC["paths"].items():
        rx = "^" + re.sub(r"\{[^}]+\}", "[^/]+", p) + "$"
        if re.match(rx, url_path) and method.lower() in ops:
            return p, ops[method.lower()]
    return None, None

def check(r):
    """Problems of a requests.Response against the spec (status documented, content type, body schema)."""
    from urllib.parse import urlparse
    path = urlparse(r.request.url).path
    p, op = op_for(r.request.method, path)
    if op is None:
        return [f"{r.request.method} {path}: not in the spec"]
    resp = op["responses"].get(str(r.status_code))
    if resp is None:
        return [f"{r.request.method} {p}: status {r.status_code} not documented (documented: {list(op['responses'])})"]
    probs = []
    content = resp.get("content")
    ct = r.headers.get("content-type", "").split(";")[0].strip()
    if not content:
        if r.content:
            probs.append(f"{p} {r.status_code}: spec has no body but got {len(r.content)} bytes ({ct})")
        return probs
    if ct not in content:
        probs.append(f"{p} {r.status_code}: content-type {ct!r} not in spec {list(content)}")
        return probs
    sch = content[ct].get("schema")
    if sch and ct == "application/json":
        try:
            body = r.json()
        except Exception as e:
            return probs + [f"{p} {r.status_code}: body not JSON: {e}"]
        probs += [f"{p} {r.status_code}: {m}" for m in validate_schema(sch, body)]
    return probs

def report(label, r, extra=""):
    probs = check(r)
    short = r.text[:300].replace("\n", " ")
    print(f"[{label}] {r.request.method} {r.status_code} {'OK' if not probs else 'SPEC-MISMATCH'} {extra}")
    for pr in probs:
        print("    !", pr)
    return probs
