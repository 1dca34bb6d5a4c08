"""09: JobEvent.phase is documented as "why" for events other than `running`; failed and
cancelled events carry no phase. Usage: python3 09_job_event_why.py BASE_URL"""
import time, oas, requests
B = oas.BASE
print("spec:", oas.SPEC["components"]["schemas"]["JobEvent"]["properties"]["phase"]["description"].replace("\n", " "))
j = requests.post(B + "/v1/compile?async=true", json={"source": "int f( {"}).json()
time.sleep(2)
print("failed job events:", requests.get(B + j["job_url"]).json()["events"])
spin = "int main(int n) {\n  s = 0;\n  i = 0;\n  while (i < n) {\n    s = (s * 31 + i) % 1000003;\n    i = i + 1;\n  }\n  return s;\n}\n"
j = requests.post(B + "/v1/run?async=true", json={"compile": {"source": spin}, "args": [10**13]}).json()
time.sleep(1.5)
print("cancelled job events:", requests.delete(B + j["job_url"]).json()["events"])
