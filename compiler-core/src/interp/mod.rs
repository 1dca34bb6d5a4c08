//! The reference interpreter: the semantic oracle for every later pass and backend.
//!
//! Runs a resolved program with SaC semantics: strict, purely functional arrays,
//! row-major, empty arrays legal, fold order unspecified (we fold in index order).
//! Every failure — a bad index, a shape mismatch, running out of stack — is a
//! [`RuntimeError`] with a source location, never a panic. Errors raised inside the
//! library are reported at the user's call that led there.

pub mod dispatch;
mod eval;
pub mod format;
pub mod ops;
pub mod prims;
pub mod value;

use crate::diagnostics::{Code, Diagnostic};
use crate::sema::hir::Program;
use crate::sema::typed::Typed;
use crate::span::{SourceMap, Span};
pub use value::Value;

pub use eval::{describe_value, shape_text};

#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Deepest call nesting before a recursion error (the caller must run the
    /// interpreter on a thread with enough stack, see [`STACK_BYTES`]).
    pub max_call_depth: usize,
    /// Statements and with-loop iterations before the run is stopped (`None`: no limit).
    pub max_steps: Option<u64>,
    /// Elements one array may have.
    pub max_elements: usize,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { max_call_depth: 10_000, max_steps: None, max_elements: value::MAX_ELEMENTS }
    }
}

/// Stack size a thread running the interpreter with the default call depth needs.
pub const STACK_BYTES: usize = 1 << 30;

/// The run-time error (`R0006`) of a genarray with-loop whose generator's
/// indices are not as long as its shape (the shape's length known only at
/// run time; the type checker reports the rest). Compiled code fails with
/// the same message (`ir::lower`).
pub const GENERATOR_LENGTH_MISMATCH: &str = "the generator's indices are not as long as the genarray's shape";

/// A run-time error: code, message, the user's source location, and the calls
/// that led there.
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeError {
    pub code: Code,
    pub message: String,
    pub span: Span,
    pub notes: Vec<String>,
    pub trace: Vec<(Span, String)>,
}

impl RuntimeError {
    pub fn to_diagnostic(&self) -> Diagnostic {
        let mut d = Diagnostic::error(self.code, self.message.clone()).at(self.span, "");
        for (span, label) in &self.trace {
            d = d.with_label(*span, label.clone());
        }
        for n in &self.notes {
            d = d.with_note(n.clone());
        }
        d
    }
}

/// Why an entry point could not be run.
#[derive(Clone, Debug)]
pub enum EntryError {
    /// No user function of that name.
    Unknown(String),
    Runtime(RuntimeError),
}

/// What a run produced.
#[derive(Debug)]
pub struct Run {
    pub result: Result<Vec<Value>, EntryError>,
    /// Calls the typed program had no static target for (dispatched on the fly).
    /// Always 0 when inference is right; tests check it.
    pub untyped_fallbacks: usize,
}

/// Calls user function `entry` with `args`; program output goes to `out`.
/// With a typed program, calls follow its instances and wrappers; without one,
/// every call dispatches on its arguments' types at run time.
pub fn run(
    program: &Program,
    typed: Option<&Typed>,
    sources: &SourceMap,
    entry: &str,
    args: Vec<Value>,
    options: RunOptions,
    out: &mut dyn FnMut(&[u8]),
) -> Run {
    let candidates = program.user_functions(entry);
    let Some(first) = candidates.first() else {
        return Run { result: Err(EntryError::Unknown(entry.to_string())), untyped_fallbacks: 0 };
    };
    let span = program.function(*first).name_span;
    let callee = crate::sema::hir::Callee {
        name: entry.into(),
        candidates: candidates.clone().into(),
        site: crate::sema::hir::SiteId(u32::MAX),
    };
    let limit = options.max_elements;
    let mut interp = eval::Interp::new(program, typed, sources, options, out);
    let args: Vec<Option<Value>> = args.into_iter().map(Some).collect();
    let entry_wrapper = typed.and_then(|t| t.entries.get(entry).copied());
    let result = value::with_element_limit(limit, || match entry_wrapper {
        Some(w) => interp.call_entry(w, args, span),
        None => interp.call(&callee, args, span),
    })
    .map_err(EntryError::Runtime);
    Run { result, untyped_fallbacks: interp.untyped_fallbacks }
}

/// Evaluates a primitive without effects on known arguments (constant folding at
/// compile time uses exactly the run-time semantics). `None` for primitives with
/// effects; `Some(Err)` when the operation would fail at run time.
pub fn fold_prim(prim: &crate::sema::hir::Prim, args: Vec<Value>) -> Option<Result<Value, ops::OpError>> {
    use crate::sema::hir::Prim;
    Some(match prim {
        Prim::Bin(op) => ops::elementwise_binop(*op, &args[0], &args[1]),
        Prim::Un(op) => ops::elementwise_unop(*op, &args[0]),
        Prim::Conv(to) => ops::elementwise_convert(&args[0], *to),
        Prim::Math(f) => ops::elementwise_math(*f, &args),
        p if p.has_effect() || matches!(p, Prim::Error) => return None,
        p => prims::structural(p, args),
    })
}

/// Applies a primitive at run time; what printing primitives print goes to `out`.
/// Shared by the HIR evaluator and the IR interpreter, so both have one semantics.
pub fn apply_prim(
    prim: &crate::sema::hir::Prim,
    args: Vec<Value>,
    out: &mut dyn FnMut(&[u8]),
) -> Result<Value, ops::OpError> {
    use crate::diagnostics as codes;
    use crate::sema::hir::Prim;
    use value::Scalar;
    let printed = Ok(Value::Scalar(Scalar::int(0)));
    match prim {
        Prim::Bin(op) => ops::elementwise_binop(*op, &args[0], &args[1]),
        Prim::Un(op) => ops::elementwise_unop(*op, &args[0]),
        Prim::Conv(to) => ops::elementwise_convert(&args[0], *to),
        Prim::Math(f) => ops::elementwise_math(*f, &args),
        Prim::PrintScalar | Prim::PrintArray => {
            let bytes = match &args[0] {
                Value::Scalar(s) if *prim == Prim::PrintScalar => format::print_scalar(*s),
                Value::Str(s) => {
                    let mut b = s.to_vec();
                    b.push(b'\n');
                    b
                }
                v => format::print_array(v),
            };
            out(&bytes);
            printed
        }
        Prim::Show => {
            let text = match &args[0] {
                Value::Scalar(Scalar::Double(d)) => format::format_g(*d, 6, false, false),
                Value::Scalar(Scalar::Float(f)) => format::format_g(*f as f64, 6, false, false),
                Value::Scalar(Scalar::Bool(b)) => (*b as i32).to_string(),
                Value::Scalar(Scalar::Char(c)) => (*c as char).to_string(),
                other => format::value_literal(other),
            };
            out(format!("{text}\n").as_bytes());
            printed
        }
        Prim::Puts => {
            let mut bytes = match &args[0] {
                Value::Str(s) => s.to_vec(),
                other => format::value_literal(other).into_bytes(),
            };
            bytes.push(b'\n');
            out(&bytes);
            printed
        }
        Prim::Printf => {
            let Some(Value::Str(fmt)) = args.first() else {
                return Err(ops::OpError::new(codes::RUNTIME_TYPE_MISMATCH, "`printf` needs a format string first"));
            };
            let bytes = format::printf(fmt, &args[1..]).map_err(|m| ops::OpError::new(codes::INVALID_ARGUMENT, m))?;
            out(&bytes);
            printed
        }
        Prim::Error => {
            let msg = match &args[0] {
                Value::Str(s) => String::from_utf8_lossy(s).to_string(),
                other => format::value_literal(other),
            };
            Err(ops::OpError::new(codes::INVALID_ARGUMENT, msg))
        }
        other => prims::structural(other, args),
    }
}

/// `[a, b, …]` of constants (for command-line arguments).
pub fn stack_values(vals: Vec<Value>) -> Result<Value, String> {
    prims::stack(vals).map_err(|e| e.message)
}

/// `reshape(a, b)` or `genarray(a, b)` of constants (for command-line arguments).
pub fn build_constant(name: &str, a: &Value, b: &Value) -> Result<Value, String> {
    let prim = if name == "reshape" { crate::sema::hir::Prim::Reshape } else { crate::sema::hir::Prim::Genarray };
    prims::structural(&prim, vec![a.clone(), b.clone()]).map_err(|e| e.message)
}

/// Runs `f` on a thread with a stack large enough for the interpreter.
pub fn with_large_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match std::thread::Builder::new().stack_size(STACK_BYTES).name("withloop-interp".into()).spawn(f) {
        Ok(handle) => match handle.join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        },
        Err(_) => panic!("cannot start the interpreter thread"),
    }
}
