//! Fuzz smoke test: the front end (preprocessor, parser, resolver) and the
//! interpreter must never panic, whatever the input. Sources are the language test
//! files, mutated at random (deterministically seeded), plus random token soup.
//! A failure prints the input that broke it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use compiler_core::driver::{FrontendOptions, frontend};
use compiler_core::interp::{self, RunOptions};
use compiler_core::syntax::cpp::MemoryLoader;

/// xorshift64*: small, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next() % n as u64) as usize }
    }
}

const FRAGMENTS: &[&str] = &[
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ";",
    ",",
    ".",
    "...",
    "<=",
    "<",
    "with",
    "genarray(",
    "modarray(",
    "fold(+, 0)",
    ":",
    "#if 1\n",
    "#endif\n",
    "#define X(a) a a\n",
    "\"",
    "'",
    "/*",
    "*/",
    "99999999999999999999",
    "-",
    "++",
    "--",
    "+=",
    "return",
    "int[*]",
    "double[.,.]",
    "int[n:shp]",
    "{ iv -> iv }",
    "[[.,1]]",
    "?",
    "&&",
    "step [0]",
    "width [2]",
    "\\\n",
    "typedef int[3] t;",
    "use Array: all;",
    "x",
    "iv",
    "=",
    "0",
    "1.5e308",
    "'\\x",
    "_sel_VxA_(",
    "foldfix(",
];

fn corpus() -> Vec<String> {
    let mut files = Vec::new();
    collect(Path::new(env!("CARGO_MANIFEST_DIR")), &mut files);
    files.sort();
    files.iter().filter_map(|p| std::fs::read_to_string(p).ok()).collect()
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "sac") {
            out.push(p);
        }
    }
}

fn mutate(rng: &mut Rng, text: &str) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = bytes.len();
        let at = rng.below(len + 1);
        match rng.below(6) {
            0 if len > 0 => {
                let end = (at + 1 + rng.below(20)).min(len);
                bytes.drain(at.min(end)..end);
            }
            1 => {
                let f = FRAGMENTS[rng.below(FRAGMENTS.len())];
                bytes.splice(at..at, f.bytes());
            }
            2 if len > 0 => {
                let start = rng.below(len);
                let end = (start + 1 + rng.below(40)).min(len);
                let piece: Vec<u8> = bytes[start..end].to_vec();
                bytes.splice(at..at, piece);
            }
            3 if at < len => bytes[at] = (rng.next() & 0x7f) as u8,
            4 => {
                // A digit change keeps the program valid more often (shapes, bounds).
                if let Some(pos) = bytes.iter().enumerate().skip(at).find(|(_, b)| b.is_ascii_digit()).map(|(i, _)| i) {
                    bytes[pos] = b'0' + rng.below(10) as u8;
                }
            }
            _ => {
                let f = FRAGMENTS[rng.below(FRAGMENTS.len())];
                bytes.extend_from_slice(f.as_bytes());
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn soup(rng: &mut Rng) -> String {
    (0..rng.below(60)).map(|_| FRAGMENTS[rng.below(FRAGMENTS.len())]).collect::<Vec<_>>().join(" ")
}

/// Compiles and (if it compiles) runs `text` under tight limits; a program
/// the front end accepts must also lower to well-formed IR and get through
/// the optimiser with the IR still well-formed (anything else is a compiler
/// bug: a mutated fold function, a variable retyped in a loop and a loop that
/// never runs each once passed the front end and broke lowering).
fn exercise(text: &str) {
    let fe = frontend("fuzz.sac", text, &MemoryLoader::default(), &FrontendOptions::default());
    if fe.has_errors() {
        return;
    }
    let options = RunOptions { max_call_depth: 200, max_steps: Some(200_000), max_elements: 1 << 20 };
    let _ = interp::run(&fe.program, Some(&fe.typed), &fe.sources, "main", Vec::new(), options, &mut |_| {});
    let mut module = compiler_core::ir::lower::lower(&fe.program, &fe.typed, &fe.sources);
    if let Err(problems) = compiler_core::ir::verify::verify(&module) {
        panic!("the lowered IR is malformed: {}", problems.join("; "));
    }
    if let Err(broken) = compiler_core::opt::optimise(&mut module, &fe.sources, &Default::default()) {
        panic!("the optimiser left the IR malformed: {broken:?}");
    }
}

#[test]
fn front_end_and_interpreter_never_panic() {
    let corpus = corpus();
    assert!(!corpus.is_empty(), "no test files found");
    let iterations: usize = std::env::var("WITHLOOP_FUZZ_ITERATIONS").ok().and_then(|s| s.parse().ok()).unwrap_or(600);
    let failure = interp::with_large_stack(move || {
        let mut rng = Rng(20_261_121);
        for i in 0..iterations {
            let text = if i % 5 == 4 {
                soup(&mut rng)
            } else {
                let pick = rng.below(corpus.len());
                mutate(&mut rng, &corpus[pick])
            };
            let outcome = catch_unwind(AssertUnwindSafe(|| exercise(&text)));
            if outcome.is_err() {
                return Some((i, text));
            }
        }
        None
    });
    if let Some((i, text)) = failure {
        panic!("iteration {i} panicked on this input:\n-----\n{text}\n-----");
    }
}
