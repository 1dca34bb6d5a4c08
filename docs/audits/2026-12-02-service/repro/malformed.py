"""Bad input never gets a 5xx or a non-envelope answer. Usage: python3 malformed.py BASE_URL"""
import sys, json, requests
base = sys.argv[1]
ok_src = "int f(int x) { return x + 1; }\n"
def post(path, data=None, js=None, headers=None):
    try:
        r = requests.post(base + path, data=data, json=js, headers=headers, timeout=150)
    except Exception as e:
        return ("EXC", str(e)[:80])
    try:
        j = r.json(); env = "error" in j and "code" in j["error"]
        return (r.status_code, j["error"]["code"] if env else ("(no envelope)" if r.status_code >= 400 else "ok"))
    except Exception:
        return (r.status_code, "(not JSON) " + r.text[:60])
H = {"content-type": "application/json"}
cases = {
 "empty body": dict(data=b"", headers=H),
 "not json": dict(data=b"{", headers=H),
 "array": dict(data=b"[]", headers=H),
 "no content-type": dict(data=json.dumps({"source": ok_src}).encode()),
 "deep nesting": dict(data=b'{"source":' + b"[" * 100000 + b"]" * 100000 + b"}", headers=H),
 "unknown field": dict(js={"source": ok_src, "bogus": 1}),
 "opt_level 300": dict(js={"source": ok_src, "options": {"opt_level": 300}}),
 "opt_level 9": dict(js={"source": ok_src, "options": {"opt_level": 9}}),
 "bad emit": dict(js={"source": ok_src, "emit": ["exe"]}),
 "threads 0": dict(js={"source": ok_src, "options": {"threads": 0}}),
 "bad pass": dict(js={"source": ok_src, "options": {"disable": ["nope"]}}),
 "bad target": dict(js={"source": ok_src, "options": {"target": "nonsense-triple"}}),
 "bad cpu": dict(js={"source": ok_src, "options": {"cpu": "pentium99"}}),
 "bad features": dict(js={"source": ok_src, "options": {"features": "+sse9"}}),
 "feature -sse2": dict(js={"source": ok_src, "options": {"features": "-sse2"}}),
 "gpu target": dict(js={"source": ok_src, "options": {"target": "nvptx64-nvidia-cuda"}}),
 "file_name ..": dict(js={"source": ok_src, "file_name": ".."}),
 "file_name /": dict(js={"source": ok_src, "file_name": "a/b"}),
 "bad hint": dict(js={"source": ok_src, "shapes": {"f": {"x": "blah[3"}}}),
 "hint huge extent": dict(js={"source": "int[.] f(int[.] x) { return x; }", "shapes": {"f": {"x": "int[99999999999999999999]"}}}),
 "hint unknown fn": dict(js={"source": ok_src, "shapes": {"g": {"x": "int"}}}),
 "hint bad names": dict(js={"source": ok_src, "shapes": {"f.y": {"x=": "int"}}}),
 "entry unknown": dict(js={"source": ok_src, "entry": ["nope"]}),
 "defines weird": dict(js={"source": ok_src, "options": {"defines": ["", "=", "A(", "1X", "A B=2"]}}),
 "max_spec 0": dict(js={"source": ok_src, "options": {"max_specialisations": 0}}),
 "max_spec huge": dict(js={"source": ok_src, "options": {"max_specialisations": 18446744073709551615}}),
 "include loop": dict(js={"source": '#include "a.h"\n' + ok_src, "includes": {"a.h": '#include "a.h"\n'}}),
 "l0 garbage": dict(js={"source": "fun fun fun", "language": "l0"}),
 "language bad": dict(js={"source": ok_src, "language": "c"}),
 "source binary junk": dict(js={"source": "".join(chr(i) for i in range(1, 2000) if not 0xd800 <= i < 0xe000)}),
 "big body 3MB": dict(js={"source": "//" + "x" * (3 << 20)}),
 "async bad": dict(js={"source": "int f( {"}),
}
for name, kw in cases.items():
    path = "/v1/compile?async=true" if name == "async bad" else "/v1/compile"
    print(f"{name:22}", post(path, **kw))
print("--- query & run ---")
print(f"{'bad query':22}", post("/v1/compile?async=maybe", js={"source": ok_src}))
print(f"{'run no program':22}", post("/v1/run", js={}))
print(f"{'run bad key':22}", post("/v1/run", js={"key": "zz"}))
print(f"{'run bad args':22}", post("/v1/run", js={"compile": {"source": "int main(int x) { return x; }"}, "args": [{"shape": [2], "data": [1]}]}))
print(f"{'run huge shape':22}", post("/v1/run", js={"compile": {"source": "int main(int[.] x) { return 1; }"}, "args": [{"shape": [2**62, 2**62], "data": []}]}))
print(f"{'run bad npy':22}", post("/v1/run", js={"compile": {"source": "int main(int[.] x) { return 1; }"}, "args": [{"npy": "AAAA"}]}))
print(f"{'run mem 0':22}", post("/v1/run", js={"compile": {"source": "int main() { return 1; }"}, "limits": {"memory_mb": 0}}))
print(f"{'run wall 0':22}", post("/v1/run", js={"compile": {"source": "int main() { return 1; }"}, "limits": {"wall_ms": 0}}))
mp = requests.post(base + "/v1/run", files={"request": (None, json.dumps({"compile": {"source": "int main(int[.] x) { return 1; }"}, "args": [{"npy_part": "x"}]})), "x": ("x.npy", b"\0" * (3 << 20))})
print(f"{'multipart 3MB':22}", mp.status_code, mp.json().get("error", {}).get("code"), mp.json().get("error", {}).get("message", "")[:80])
mp = requests.post(base + "/v1/run", data=b"--x\r\nbroken", headers={"content-type": "multipart/form-data; boundary=x"})
print(f"{'multipart broken':22}", mp.status_code, mp.text[:100])
for path in ["/v1/compilations/" + "0" * 64, "/v1/artifacts/" + "0" * 64 + "/report", "/v1/jobs/nope", "/v1/jobs/nope/events"]:
    r = requests.get(base + path); print(f"GET {path[:30]:26}", r.status_code, r.json()["error"]["code"])
