#!/usr/bin/env python3
"""Differential fuzzer: native code against the reference interpreter.

`cargo test` runs a fuzz smoke test (tests/fuzz.rs) of the front end, the
interpreter and the optimiser in-process. This tool goes further, through the
release `withloop` binary, and is run by hand (it takes minutes, finds bugs
in code generation, and belongs in no timed suite):

    cargo build --release -p withloop-cli -p withloop-rt
    python3 tests/fuzz_native.py --seconds 600            # findings in target/fuzz/

It mutates the language tests (tests/lang/**/*.sac, *.l0) — gently (numbers,
operators, identifiers swapped for others of the same file, so that many
mutants still type-check), deeply (an operator and its operand repeated into
a chain hundreds or thousands long, a token in as many parentheses) or
roughly (tokens deleted, duplicated, swapped) —
and for each mutant:

1. `withloop check` must not crash (no panic, no signal, no compiler-bug `B`
   diagnostic);
2. where the mutant has an entry to run (the test's `entry:`/`args:`, `main`
   otherwise), `withloop run --interp` (the oracle) and `withloop run` (native,
   with a random set of passes switched off and, for SaC, random shape hints
   compatible with the entry's declaration) must agree: the same exit status
   and the same output, numbers within 1e-6 relative. Where the oracle stops
   with a run-time error, native code may finish instead (a with-loop element
   or a value nobody reads need not be computed: SaC leaves that open), but
   must not crash.

A finding is written to target/fuzz/NNNN.{sac,l0} with the commands and both
outputs in NNNN.txt. A compiler limitation (an `L` diagnostic) is not a
finding. Seeded (`--seed`): the same seed mutates the same way.
"""

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LANG = ROOT / "tests" / "lang"
TOKEN = re.compile(r"\s+|//[^\n]*|/\*.*?\*/|\d+\.\d*(?:[eE][-+]?\d+)?|\d+|[A-Za-z_]\w*|<=|>=|==|!=|&&|\|\||\+\+|--|"
                   r"\+=|-=|\*=|/=|->|\.\.\.|.", re.S)
NUMBER = re.compile(r"\d+\.\d*(?:[eE][-+]?\d+)?|\d+")
OPERATORS = ["+", "-", "*", "/", "%", "<", "<=", ">", ">=", "==", "!=", "&&", "||"]
KEYWORDS = {"int", "double", "float", "bool", "char", "void", "return", "if", "else", "for", "while", "do", "with",
            "genarray", "modarray", "fold", "true", "false", "let", "in", "fun", "map", "reduce", "filter",
            "scan", "loop", "iota", "replicate", "inline", "include", "define", "step", "width", "use", "import",
            "all", "module", "export", "provide", "external", "typedef", "struct", "then"}
PASSES = []  # from `withloop passes`
ELEM = re.compile(r"\b(int|double|float|bool|char)\s*\[([^\]]*)\]\s*(\w+)")


def header(text):
    """The expectation block's directives: flags, entry, args."""
    out = {"flags": [], "entry": None, "args": []}
    for line in text.splitlines():
        if not line.startswith("//"):
            break
        body = line[2:].strip()
        if body.startswith("flags:"):
            out["flags"] = body[6:].split()
        elif body.startswith("entry:"):
            out["entry"] = body[6:].strip()
        elif body.startswith("args:"):
            out["args"] = [a.strip() for a in body[5:].split(";") if a.strip()]
    return out


def cli_flags(flags, directory):
    """The test's flags the CLI takes (`--register-tile` is the harness's own)."""
    out, it = [], iter(flags)
    for f in it:
        if f == "--register-tile":
            continue
        if f == "--disable":
            out += [f, next(it, "")]
        elif f.startswith("-I"):
            out.append("-I" + str(directory / f[2:]))
        else:
            out.append(f)
    return out


def mutate(text, rng):
    """A mutant of `text` (the expectation block kept, so entry and args stay)."""
    lines = text.splitlines(keepends=True)
    keep = 0
    while keep < len(lines) and lines[keep].startswith("//"):
        keep += 1
    head, body = "".join(lines[:keep]), "".join(lines[keep:])
    tokens = TOKEN.findall(body)
    solid = [i for i, t in enumerate(tokens) if not t.isspace() and not t.startswith("/")]
    if not solid:
        return None
    idents = sorted({t for t in tokens if re.fullmatch(r"[A-Za-z_]\w*", t) and t not in KEYWORDS})
    numbers = [i for i in solid if NUMBER.fullmatch(tokens[i])]
    operators = [i for i in solid if tokens[i] in OPERATORS]
    names = [i for i in solid if tokens[i] in idents]
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        kind = rng.random()
        if kind < 0.35 and numbers:
            i = rng.choice(numbers)
            if not NUMBER.fullmatch(tokens[i]):
                continue  # already mutated
            if "." in tokens[i]:
                tokens[i] = rng.choice(["0.0", "1.0", "-1.5", "1e300", str(float(tokens[i]) * 2), "0.5"])
            else:
                t = int(tokens[i])
                tokens[i] = str(rng.choice([0, 1, 2, 3, t + 1, max(t - 1, 0), 7, 100]))
        elif kind < 0.55 and operators:
            tokens[rng.choice(operators)] = rng.choice(OPERATORS)
        elif kind < 0.75 and names:
            tokens[rng.choice(names)] = rng.choice(idents)
        elif kind < 0.85:
            hide(tokens, solid, rng)
        elif kind < 0.88:
            deepen(tokens, solid, rng)
        else:
            i, j = rng.choice(solid), rng.choice(solid)
            roughly = rng.random()
            if roughly < 0.4:
                tokens[i] = ""
            elif roughly < 0.7:
                tokens[i] = tokens[i] + " " + tokens[i]
            else:
                tokens[i], tokens[j] = tokens[j], tokens[i]
    return head + "".join(tokens)


def deepen(tokens, solid, rng):
    """Makes an expression long or deep, some hundreds to thousands of levels:
    an operator and the operand after it repeated (`a - b` becomes a chain
    `a - b - b - … - b`), or a token in that many parentheses. Around and
    beyond the parsers' depth limits, with the deep stacks behind them (a
    chain of 3000 once overflowed the stack)."""
    times = rng.choice([100, 300, 1000, 1100, 3000])
    chains = [k for k in range(len(solid) - 1) if tokens[solid[k]] in OPERATORS]
    if chains and rng.random() < 0.7:
        k = rng.choice(chains)
        op, operand = tokens[solid[k]], tokens[solid[k + 1]]
        tokens[solid[k]] = f"{op} {operand} " * times + op
    else:
        i = rng.choice(solid)
        tokens[i] = "(" * times + tokens[i] + ")" * times


HIDERS = ["_hideShape_SxA_", "_hideDim_SxA_", "_hideValue_SxA_"]


def hide(tokens, solid, rng):
    """Wraps an array literal (a `[` after `=`, `(` or `,`, to its matching
    `]`) in `_hideShape_SxA_(0, …)` or a sibling: the compiler loses what it
    knew of the value, so the generic (AKD, AUD) paths run."""
    opens = [k for n, k in enumerate(solid) if tokens[k] == "[" and n > 0 and tokens[solid[n - 1]] in ("=", "(", ",")]
    if not opens:
        return
    start = rng.choice(opens)
    depth = 0
    for k in range(start, len(tokens)):
        depth += {"[": 1, "]": -1}.get(tokens[k], 0)
        if depth == 0:
            tokens[start] = f"{rng.choice(HIDERS)}(0, ["
            tokens[k] = "])"
            return


def hints(text, entry, rng):
    """Random `--shape` hints for `entry`'s array parameters that its
    declaration admits (a known extent stays, `.` may become a number, `*` and
    `+` a rank of dots)."""
    m = re.search(r"\b" + re.escape(entry) + r"\s*\(([^)]*)\)\s*\{", text)
    if not m or rng.random() < 0.4:
        return []
    out = []
    for elem, dims, name in ELEM.findall(m.group(1)):
        if rng.random() < 0.5:
            continue
        dims = [d.strip() for d in dims.split(",")]
        if dims in (["*"], ["+"]):
            rank = rng.choice([1, 2, 3]) if dims == ["+"] else rng.choice([0, 1, 2])
            dims = ["."] * rank
            if rng.random() < 0.3:
                out.append(f"{entry}.{name}={elem}[{','.join(dims)}]" if dims else f"{entry}.{name}={elem}")
                continue
        new = [d if d != "." or rng.random() < 0.5 else str(rng.choice([0, 1, 2, 3, 4, 5])) for d in dims]
        out.append(f"{entry}.{name}={elem}[{','.join(new)}]" if new else f"{entry}.{name}={elem}")
    return out


def execute(cmd, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, errors="replace")
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return "timeout", "", ""


def crashed(rc, err):
    """A panic, a signal, or a diagnostic of the compiler-bug class."""
    if rc == "timeout":
        return False
    return ((rc not in (0, 1, 2, 64)) or "panicked" in err or "a compiler bug" in err
            or re.search(r"error\[B\d+\]", err) is not None)


def same_output(a, b):
    """Equal, numbers within 1e-6 relative (native folds may reassociate)."""
    ta, tb = re.split(r"([-+]?\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)", a), re.split(
        r"([-+]?\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)", b)
    if len(ta) != len(tb):
        return False
    for x, y in zip(ta, tb):
        if x == y:
            continue
        try:
            fx, fy = float(x), float(y)
        except ValueError:
            return False
        if not (abs(fx - fy) <= 1e-6 * max(1.0, abs(fx), abs(fy)) or (fx != fx and fy != fy)):
            return False
    return True


def limitation(err):
    """A compiler limitation: an `L` diagnostic, or the back end's "does not
    support … yet"."""
    return re.search(r"error\[L\d+\]", err) is not None or "does not support" in err


STATS = {"mutants": 0, "accepted": 0, "compared": 0}


def one(wl, src, text, rng, work, timeout):
    """Mutates and checks one file; a finding's description, or None."""
    mutant = mutate(text, rng)
    if mutant is None:
        return None
    path = work / src.relative_to(LANG)
    path.write_text(mutant)
    info = header(text)
    flags = cli_flags(info["flags"], src.parent)
    rc, out, err = execute([wl, "check", path, *flags], timeout)
    if crashed(rc, err):
        return path, mutant, f"check crashed (exit {rc})\n{err}"
    if rc != 0:
        return None
    STATS["accepted"] += 1
    entry = info["entry"] or "main"
    run = [wl, "run", path, *flags, "--entry", entry, *[a for x in info["args"] for a in ("--arg", x)]]
    irc, iout, ierr = execute([*run, "--interp"], timeout)
    if crashed(irc, ierr):
        return path, mutant, f"the interpreter crashed (exit {irc})\n{ierr}"
    if irc not in (0, 2):
        return None  # no such entry, wrong arguments, a timeout: nothing to compare
    STATS["compared"] += 1
    extra = []
    if PASSES and rng.random() < 0.5:
        for p in rng.sample(PASSES, rng.choice([1, 1, 2, 3])):
            extra += ["--disable", p]
    elif rng.random() < 0.2:
        # The code generator alone, on the unoptimised IR.
        extra += ["--passes", "none"]
    if src.suffix == ".sac":
        # Hints for the entry or for any function the file defines, and now
        # and then a specialisation cap of 1 (more generic instances).
        names = re.findall(r"^\s*[\w\[\]\.,\s*+]+?\b(\w+)\s*\([^)]*\)\s*\{", mutant, re.M)
        for h in hints(mutant, rng.choice([entry, entry, *names]) if names else entry, rng):
            extra += ["--shape", h]
        if rng.random() < 0.15:
            extra += ["--maxspec", "1"]
    nrc, nout, nerr = execute([*run, *extra], timeout * 3)
    command = " ".join(map(str, [*run, *extra]))
    report = f"{command}\n--- interpreter (exit {irc})\n{iout}{ierr}\n--- native (exit {nrc})\n{nout}{nerr}"
    if crashed(nrc, nerr):
        return path, mutant, "native crashed\n" + report
    if nrc == 1 and limitation(nerr):
        return None
    if irc == 0 and nrc == "timeout":
        return path, mutant, "native timed out where the interpreter finished (compile time?)\n" + report
    if irc == 0 and (nrc != 0 or not same_output(iout, nout)):
        if nrc == 1 and "error[E" in nerr and extra:
            return None  # a hint the mutant's body contradicts: a user error
        if nrc == 0:
            # Folds reassociated (and vector math) round differently; with
            # huge or cancelling values beyond any tolerance. Exact folds
            # must agree.
            erc, eout, _ = execute([*run, *extra, "--exact-folds", "--no-vector-math"], timeout * 3)
            if erc == 0 and same_output(iout, eout):
                return None
        return path, mutant, "native differs from the interpreter\n" + report
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=5, help="per interpreter run (native gets 3×)")
    ap.add_argument("--only", help="test files whose path contains this")
    ap.add_argument("--out", type=Path, default=ROOT / "target" / "fuzz")
    args = ap.parse_args()
    wl = ROOT / "target" / "release" / "withloop"
    if not wl.exists():
        sys.exit("build first: cargo build --release -p withloop-cli -p withloop-rt")
    listing = subprocess.run([wl, "passes"], capture_output=True, text=True).stdout
    PASSES.extend(sorted({ln.split()[0] for ln in listing.splitlines() if ln.startswith("  ")}))
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    files = sorted(p for p in LANG.rglob("*") if p.suffix in (".sac", ".l0") and "// ==" in p.read_text())
    if args.only:
        files = [f for f in files if args.only in str(f)]
    texts = {f: f.read_text() for f in files}
    args.out.mkdir(parents=True, exist_ok=True)
    found = len(list(args.out.glob("*.txt")))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # Support files (includes) beside the mutants, as in the tree.
        shutil.copytree(LANG, work, dirs_exist_ok=True)
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            src = rng.choice(files)
            finding = one(wl, src, texts[src], rng, work, args.timeout)
            STATS["mutants"] += 1
            if finding:
                path, mutant, what = finding
                name = args.out / f"{found:04}"
                name.with_suffix(path.suffix).write_text(mutant)
                name.with_suffix(".txt").write_text(f"from {src.relative_to(ROOT)} (seed {seed})\n{what}\n")
                print(f"finding {name.with_suffix('.txt')}: {what.splitlines()[0]}", file=sys.stderr)
                found += 1
    print(f"{STATS['mutants']} mutants ({STATS['accepted']} accepted by `check`, {STATS['compared']} run and "
          f"compared), seed {seed}; findings so far in {args.out}: {found}")


if __name__ == "__main__":
    os.environ.setdefault("WITHLOOP_THREADS", "2")
    main()
