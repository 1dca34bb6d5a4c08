"""03: non-finite `float` results come back as JSON null (NaN, +inf and -inf indistinguishable),
non-finite `double` results as strings ("NaN", "inf", "-inf"). Usage: python3 03_float_nonfinite.py BASE_URL"""
import oas, requests
for src in ["float[.] main() { return [0.0f/0.0f, 1.0f/0.0f, -1.0f/0.0f, 1.5f]; }",
            "double[.] main() { return [0.0/0.0, 1.0/0.0, -1.0/0.0, 1.5]; }",
            "float main() { return 1.0f/0.0f; }"]:
    r = requests.post(oas.BASE + "/v1/run", json={"compile": {"source": src}})
    print(r.status_code, src.split()[0], "->", r.json()["results"])
