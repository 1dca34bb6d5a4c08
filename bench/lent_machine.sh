#!/usr/bin/env bash
# The benchmark on a machine lent for a measurement (no Rust, no LLVM there),
# pinned to two cores like the 2-core hosts the other tables come from.
#
#   bench/lent_machine.sh build              # here: libraries for likely CPUs into .devbench/
#   bench/lent_machine.sh run [run.py args]  # there (`.devbench` carried): the table to stdout,
#                                            # figures to $OUT/rows.json (or ./rows.json)
#
# `build` compiles bench/kernels.sac and bench/kernels.l0 once per CPU name
# below (`bench/run.py --build-for`) and strips them (about 10 MB each; what
# travels is limited). `run` picks the directory from the CPU gcc detects
# there (`-march=native`), falling back to x86-64-v3, pins the run to two CPUs
# of different cores of the first socket, limits the peers (OpenBLAS, OpenMP,
# Numba) to two threads, keeps JAX on the CPU, and runs
# `bench/run.py --prebuilt DIR --rows FILE` with the arguments given.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=.devbench
# LLVM CPU name -> directory.
TARGETS="sapphirerapids:spr znver4:zn4 icelake-server:icx x86-64-v3:v3"

case "${1:-}" in
build)
    grep -qx '/.devbench/' .git/info/exclude 2>/dev/null || echo '/.devbench/' >>.git/info/exclude
    for t in $TARGETS; do
        cpu=${t%%:*} sub=${t##*:}
        python3 bench/run.py --build-for "$DIR/$sub" --cpu "$cpu"
        strip --strip-unneeded "$DIR/$sub"/*.so
    done
    du -sh "$DIR"
    ;;
run)
    shift
    # (awk reads to the end: an early exit would fail the pipeline under pipefail.)
    march=$(gcc -march=native -Q --help=target 2>/dev/null | awk '$1 == "-march=" && !found++ { print $2 }')
    case "$march" in
    sapphirerapids | emeraldrapids | graniterapids*) sub=spr ;;
    znver4 | znver5) sub=zn4 ;;
    icelake-server | icelake-client | tigerlake | rocketlake | cascadelake | cooperlake | skylake-avx512) sub=icx ;;
    *) sub=v3 ;;
    esac
    # Two CPUs of different cores of the first socket, CPU 0 (the interrupts' usual home) only
    # when there is no other.
    cpus=$(lscpu -p=CPU,CORE,SOCKET | awk -F, '!/^#/ && $3 == 0 && !seen[$2]++ { print ($1 == 0 ? 1 : 0), $1 }' |
        sort -n -k1,1 -k2,2 | awk 'n++ < 2 { print $2 }' | paste -sd,)
    echo "gcc -march=native: $march; libraries: $DIR/$sub; CPUs: $cpus"
    export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 NUMBA_NUM_THREADS=2
    export JAX_PLATFORMS=cpu
    exec taskset -c "$cpus" python3 bench/run.py --prebuilt "$DIR/$sub" --rows "${OUT:-.}/rows.json" "$@"
    ;;
*)
    sed -n '2,8p' "$0"
    exit 2
    ;;
esac
