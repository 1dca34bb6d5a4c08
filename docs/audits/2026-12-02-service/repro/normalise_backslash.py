"""Source normalisation strips trailing blanks, which turns a backslash
followed by a space (not a line continuation for withloop's preprocessor: the
CLI rejects the file) into a line continuation: the service compiles and runs a
different program than the one sent. Usage: python3 normalise_backslash.py BASE_URL"""
import sys, subprocess, requests
base = sys.argv[1]
src = 'use StdIO: all;\n#define N 1 \\ \n+ 2\nint main() { return N; }\n'
open("/tmp/audit_queue/bs.sac", "w").write(src)
cli = subprocess.run(["/tmp/audit_queue/bin/withloop", "run", "/tmp/audit_queue/bs.sac"], capture_output=True, text=True)
print("CLI  `withloop run`: exit", cli.returncode, (cli.stdout + cli.stderr).splitlines()[0])
r = requests.post(base + "/v1/run", json={"compile": {"source": src}}).json()
print("service /v1/run:", r.get("results"), r.get("error"))
k1 = requests.post(base + "/v1/compile", json={"source": src}).json()["key"]
k2 = requests.post(base + "/v1/compile", json={"source": src.replace("\\ \n", "\\\n")}).json()["key"]
print("same key with and without the space:", k1 == k2)
