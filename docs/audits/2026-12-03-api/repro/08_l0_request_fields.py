"""08: request fields that do not fit L0: the default file name is `program.sac` for L0 sources,
a `.l0` file name without `language` is compiled as SaC, and `options.defines` is accepted and
ignored for L0 (no preprocessor) although it changes the key. Usage: python3 08_l0_request_fields.py BASE_URL"""
import oas, requests
B = oas.BASE
r = requests.post(B + "/v1/compile", json={"source": "fun int main() = x\n", "language": "l0"})
print("L0 default file name in diagnostics:", r.json()["error"]["diagnostics"][0]["at"]["file"])
r = requests.post(B + "/v1/compile", json={"source": "fun int main() = 1\n", "file_name": "prog.l0"})
print("file_name prog.l0 without language:", r.status_code, r.json()["error"]["message"])
a = requests.post(B + "/v1/compile", json={"source": "fun int main() = 1\n", "language": "l0"}).json()
b = requests.post(B + "/v1/compile", json={"source": "fun int main() = 1\n", "language": "l0", "options": {"defines": ["N=3"]}}).json()
print("defines: keys differ:", a["key"] != b["key"], "; reports equal:", a["report"] == b["report"])
r = requests.post(B + "/v1/compile", json={"source": "fun int main() = N\n", "language": "l0", "options": {"defines": ["N=3"]}})
print("defines N=3, source uses N:", r.status_code, r.json()["error"]["message"])
