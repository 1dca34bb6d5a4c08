"""Compile cost per bench kernel in instructions (callgrind): deterministic where times are not.

Wall-clock compile times on the shared 2-core hosts drift by tens of percent
within minutes, so a compile-time change of a few percent shows only in counted
instructions. For each kernel this compiles it as the compile service does
(`withloop compile bench/kernels.sac --entry K`, the bench's first shape hint
per parameter, an object file) under `valgrind --tool=callgrind` and prints:

- `llvm`: instructions in LLVM's work — building the LLVM module
  (`withloop_codegen::emit_module`), its optimisation pipeline
  (`LLVMRunPasses`) and code generation (`LLVMTargetMachineEmitToMemoryBuffer`),
  summed over every part's thread (parts compile on threads of their own, whose
  stacks do not pass through `compile_timed`);
- `optimiser`: our optimisation pipeline (`withloop_cli::optimised_timed`
  less `withloop_cli::lowered_timed`).

The figures count instructions on all threads together, not wall time: a part
compiled in parallel counts in full.

    python3 bench/ab/compile_cost.py                 # every kernel (about 7 minutes)
    python3 bench/ab/compile_cost.py neg,det --binary /tmp/withloop-a   # an A/B: run it again with the other binary
"""
import argparse
import math
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import run  # noqa: E402  (bench/run.py: hints, sizes, kernel names)


def inclusive(annotated, symbol):
    """The inclusive instruction count `callgrind_annotate` gives `symbol` (0 if absent)."""
    for line in annotated.splitlines():
        if symbol in line:
            return int(line.split()[0].replace(",", ""))
    return 0


def first_hints(kernel):
    """`--shape` arguments for `kernel` as the service gets its hints (`run.service_shapes`)."""
    params = run.service_shapes(run.hint_list(run.sizes(False))).get(kernel, {})
    return [a for param, ty in params.items() for a in ("--shape", f"{kernel}.{param}={ty}")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernels", nargs="?", default="all", help="comma-separated, or `all` (the bench's thirteen)")
    ap.add_argument("--binary", type=Path, default=run.ROOT / "target" / "release" / "withloop")
    args = ap.parse_args()
    kernels = run.KERNEL_ENTRIES if args.kernels == "all" else args.kernels.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in kernels:
            out = Path(tmp) / f"{k}.callgrind"
            cmd = [
                "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(args.binary), "compile",
                str(run.BENCH / "kernels.sac"), "--entry", k, *first_hints(k), "--emit", "obj",
                "-o", str(Path(tmp) / f"{k}.o"),
            ]
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(out)], capture_output=True,
                                       text=True, check=True).stdout
            llvm = sum(inclusive(annotated, s) for s in ("LLVMRunPasses", "LLVMTargetMachineEmitToMemoryBuffer",
                                                          "withloop_codegen::emit_module"))
            optimiser = inclusive(annotated, "withloop_cli::optimised_timed") - inclusive(annotated,
                                                                                        "withloop_cli::lowered_timed")
            rows.append((k, llvm, optimiser))
            print(f"{k:13} llvm {llvm / 1e6:9.1f}M   optimiser {optimiser / 1e6:8.1f}M", flush=True)
    if len(rows) > 1:
        geo = math.exp(sum(math.log(max(r[1], 1)) for r in rows) / len(rows))
        print(f"{'sum':13} llvm {sum(r[1] for r in rows) / 1e6:9.1f}M   optimiser "
              f"{sum(r[2] for r in rows) / 1e6:8.1f}M   (llvm geometric mean {geo / 1e6:.1f}M)")


if __name__ == "__main__":
    main()
