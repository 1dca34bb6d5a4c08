//! Running programs: `POST /v1/run` and run jobs.
//!
//! Every run happens in a child process of its own (the `withloop-server` or
//! `withloop-worker` binary started with `--exec-run`), so nothing a program
//! does can take its worker down:
//!
//! ```text
//! parent ──RunRequest (JSON, stdin)──▶ child: setrlimit(AS, CPU) → compile (JIT) → run entry
//!        ◀──ChildOutcome (JSON, stdout)──┘
//! parent: wall-clock limit and cancellation kill the child; a signal becomes
//!         time_limit (SIGXCPU/SIGKILL after the CPU limit), memory_limit, or crashed
//! ```
//!
//! Limits: wall time (the parent kills the child), CPU time (`RLIMIT_CPU`),
//! address space (`RLIMIT_AS`; an allocation past it is the run-time error
//! R0010, reported as `memory_limit`), and program output (capped in the
//! child; past the cap the run fails with `output_limit`). Network: SaC
//! programs cannot open sockets (the runtime offers only output to the job's
//! buffer); besides, the child moves into a network namespace of its own (no
//! interfaces) where the kernel allows it (as root, or with unprivileged user
//! namespaces), and the response says whether it did (`network_isolated`).
//!
//! Arguments and results are JSON — a number or boolean for a scalar, or
//! `{"shape": [2, 3], "data": [...], "type": "double"}` (`type` optional: the
//! entry's parameter type decides) — or NumPy `.npy`, base64 in
//! `{"npy": "..."}`. The child compiles the program again with the JIT (the
//! compile through the cache before it checks the program and records the
//! variants, but a run does not load the cached object code).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine as _;
use compiler_core::diagnostics::{self as codes};
use compiler_core::interp::value::{Elems, Scalar, Value};
use compiler_core::sema::hir::Elem;
use compiler_core::sema::ty::{Shape, Ty};
use compiler_core::syntax::ast::BaseType;
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use utoipa::ToSchema;

use crate::build::{DiagnosticData, optimise};
use crate::failure::{ErrorBody, Failure, FailureKind};
use crate::npy;
use crate::request::{CompileRequest, prepare};

/// Resource limits of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RunLimits {
    /// Wall-clock time, compiling included (ms).
    pub wall_ms: u64,
    /// CPU time of the child, all threads (ms; rounded up to whole seconds).
    pub cpu_ms: u64,
    /// Address space of the child (MiB), the compiler's own included.
    pub memory_mb: u64,
    /// What the program may print (KiB).
    pub output_kb: u64,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits { wall_ms: 30_000, cpu_ms: 30_000, memory_mb: 4096, output_kb: 1024 }
    }
}

impl RunLimits {
    /// Rejects a limit above the server's `max` (each field's maximum).
    pub fn within(&self, max: &RunLimits) -> Result<(), Failure> {
        let asked = [
            ("wall_ms", self.wall_ms, max.wall_ms),
            ("cpu_ms", self.cpu_ms, max.cpu_ms),
            ("memory_mb", self.memory_mb, max.memory_mb),
            ("output_kb", self.output_kb, max.output_kb),
        ];
        match asked.iter().find(|(_, given, most)| given > most) {
            Some((name, given, most)) => {
                Err(Failure::invalid(format!("`limits.{name}` is {given}; this server allows at most {most}")))
            }
            None => Ok(()),
        }
    }
}

/// How results come back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResultFormat {
    /// `{"shape", "data", "type"}` (scalars as plain numbers).
    #[default]
    Json,
    /// `{"npy": "<base64 .npy>"}` for arrays.
    Npy,
}

/// What to run.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// A compilation's key (from `POST /v1/compile`) …
    #[serde(default)]
    pub key: Option<String>,
    /// … or the compile request itself (compiled through the cache first).
    #[serde(default)]
    pub compile: Option<CompileRequest>,
    /// The entry function (default `main`).
    #[serde(default = "default_entry")]
    pub entry: String,
    /// Arguments: numbers (`"NaN"`, `"inf"`, `"-inf"` for those), booleans,
    /// `{"shape", "data", "type"?}`, `{"npy": base64}` or (multipart) `{"npy_part": name}`.
    #[serde(default)]
    #[schema(value_type = Vec<RunValue>)]
    pub args: Vec<Json>,
    #[serde(default)]
    pub limits: RunLimits,
    #[serde(default)]
    pub results: ResultFormat,
    /// Where to run: `cpu` (the only target yet).
    #[serde(default = "default_target")]
    pub target: String,
}

/// The schema of one argument or result of a run (the items of
/// `RunRequest.args` and `RunResponse.results`): the forms [`arg_value`]
/// reads and [`result_json`] writes.
#[derive(Debug)]
pub struct RunValue;

impl utoipa::PartialSchema for RunValue {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{AnyOfBuilder, ArrayBuilder, ObjectBuilder, Type};
        let string = || ObjectBuilder::new().schema_type(Type::String);
        let non_finite = || {
            string()
                .enum_values(Some(["NaN", "inf", "-inf"]))
                .description(Some("a `float` or `double` that is not finite"))
        };
        let closed = || utoipa::openapi::schema::AdditionalProperties::FreeForm(false);
        // What an array element or a scalar is: a number, a boolean, or a
        // non-finite number's name.
        let scalars = |any: AnyOfBuilder| {
            any.item(ObjectBuilder::new().schema_type(Type::Number))
                .item(ObjectBuilder::new().schema_type(Type::Boolean))
                .item(non_finite())
        };
        let extents = ArrayBuilder::new().items(ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(0)));
        let array = ObjectBuilder::new()
            .description(Some(
                "an array: its extents, its elements flat in row-major order and their type \
                 (`int`, `double`, `bool`, …; optional in arguments: the entry's, else guessed)",
            ))
            .property("shape", extents)
            .property("data", ArrayBuilder::new().items(scalars(AnyOfBuilder::new())))
            .property("type", string())
            .required("shape")
            .required("data")
            .additional_properties(Some(closed()));
        let npy = ObjectBuilder::new()
            .description(Some("an array as a base64 `.npy` file (results with `\"results\": \"npy\"`)"))
            .property("npy", string().format(Some(utoipa::openapi::SchemaFormat::Custom("base64".into()))))
            .required("npy")
            .additional_properties(Some(closed()));
        let npy_part = ObjectBuilder::new()
            .description(Some("an argument that is the `.npy` file of a multipart request's part of this name"))
            .property("npy_part", string())
            .required("npy_part")
            .additional_properties(Some(closed()));
        let text = ObjectBuilder::new()
            .description(Some("a string result"))
            .property("type", string().enum_values(Some(["string"])))
            .property("data", string())
            .required("type")
            .required("data")
            .additional_properties(Some(closed()));
        scalars(
            AnyOfBuilder::new()
                .description(Some("a scalar (a number, a boolean, or a non-finite number's name) or an array")),
        )
        .item(array)
        .item(npy)
        .item(npy_part)
        .item(text)
        .into()
    }
}

impl ToSchema for RunValue {}

fn default_entry() -> String {
    "main".into()
}

fn default_target() -> String {
    "cpu".into()
}

/// The instance a run called.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RanVariant {
    pub function: String,
    /// `(double[1000,1000]) -> double[1000,1000]`.
    pub signature: String,
    /// Every parameter's shape is static (a specialised variant), not generic.
    pub specialised: bool,
}

/// A finished run.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct RunResponse {
    /// The compilation that ran.
    pub key: String,
    /// The entry's results (see `RunRequest.results`); a non-finite `float` or
    /// `double` is `"NaN"`, `"inf"` or `"-inf"`.
    #[schema(value_type = Vec<RunValue>)]
    pub results: Vec<Json>,
    /// What the program printed.
    pub stdout: String,
    /// Time of the entry call alone (ms).
    pub run_ms: f64,
    /// Compiling in the sandbox before the call (ms).
    pub compile_ms: f64,
    pub variant: RanVariant,
    pub limits: RunLimits,
    /// The program ran in a network namespace without interfaces.
    pub network_isolated: bool,
}

/// What the child reports.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ChildOutcome {
    Ok(RunResponse),
    Err { kind: FailureKind, body: ErrorBody },
}

/// Which binary runs sandboxed children: `configured`, else this executable
/// when it is `withloop-server` or `withloop-worker`, else `withloop-worker` beside
/// it or one directory up (cargo's `deps/`).
pub fn runner(configured: Option<&Path>) -> Result<PathBuf, Failure> {
    if let Some(p) = configured {
        return Ok(p.to_path_buf());
    }
    let exe = std::env::current_exe().map_err(|e| Failure::transient(format!("locating the runner: {e}")))?;
    let name = exe.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if name.starts_with("withloop-server") || name.starts_with("withloop-worker") {
        return Ok(exe);
    }
    let find = |d: &Path| Some(d.join("withloop-worker")).filter(|c| c.is_file());
    if let Some(found) = withloop_codegen::link::near_executable(&exe, find) {
        return Ok(found);
    }
    Err(Failure::transient(format!("no `withloop-worker` binary beside `{}` to run programs with", exe.display())))
}

/// Runs `request` (its `compile` filled in, `key` the compilation's key) in a
/// sandboxed child; `cancel` turning true kills it.
pub async fn run_sandboxed(
    runner: &Path,
    key: &str,
    request: &RunRequest,
    mut cancel: tokio::sync::watch::Receiver<bool>,
) -> Result<RunResponse, Failure> {
    let limits = request.limits;
    let mut spec = request.clone();
    spec.key = Some(key.to_string());
    let payload = serde_json::to_vec(&spec).map_err(|e| Failure::transient(format!("encoding the run: {e}")))?;
    let mut child = tokio::process::Command::new(runner)
        .arg("--exec-run")
        // The runner allocates through mimalloc (see cli/src/main.rs), which
        // reserves address space a gigabyte at a time: under the child's
        // `RLIMIT_AS` that reservation left no room for the JIT's code. With
        // none, it maps what it uses, as malloc does.
        .env("MIMALLOC_ARENA_RESERVE", "0")
        .env(RUN_PARENT_ENV, std::process::id().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Failure::transient(format!("starting the sandbox `{}`: {e}", runner.display())))?;
    let mut stdin = child.stdin.take().ok_or_else(|| Failure::transient("the sandbox has no stdin"))?;
    let mut stdout = child.stdout.take().ok_or_else(|| Failure::transient("the sandbox has no stdout"))?;
    let mut stderr = child.stderr.take().ok_or_else(|| Failure::transient("the sandbox has no stderr"))?;
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(&payload).await;
    });
    let out_reader = tokio::spawn(async move {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf).await;
        buf
    });
    let err_reader = tokio::spawn(async move {
        let mut buf = Vec::new();
        let _ = (&mut stderr).take(64 * 1024).read_to_end(&mut buf).await;
        buf
    });
    let wall = Duration::from_millis(limits.wall_ms.max(1));
    let status = tokio::select! {
        status = child.wait() => status.map_err(|e| Failure::transient(format!("waiting for the sandbox: {e}")))?,
        () = tokio::time::sleep(wall) => {
            let _ = child.kill().await;
            return Err(Failure::new(FailureKind::User, "time_limit",
                format!("the run took longer than its wall-clock limit of {} ms and was stopped", limits.wall_ms)));
        }
        () = cancelled(&mut cancel) => {
            let _ = child.kill().await;
            return Err(Failure::new(FailureKind::User, "cancelled", "the run was cancelled"));
        }
    };
    let _ = writer.await;
    let out = out_reader.await.unwrap_or_default();
    let err = err_reader.await.unwrap_or_default();
    if let Ok(outcome) = serde_json::from_slice::<ChildOutcome>(&out) {
        return match outcome {
            ChildOutcome::Ok(response) => Ok(response),
            ChildOutcome::Err { kind, body } => Err(Failure { kind, body }),
        };
    }
    Err(abnormal_end(status, &err, limits))
}

async fn cancelled(cancel: &mut tokio::sync::watch::Receiver<bool>) {
    loop {
        if *cancel.borrow() {
            return;
        }
        if cancel.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Why a child ended without reporting.
fn abnormal_end(status: std::process::ExitStatus, stderr: &[u8], limits: RunLimits) -> Failure {
    use std::os::unix::process::ExitStatusExt;
    let text = String::from_utf8_lossy(stderr);
    let signal = status.signal();
    // SIGXCPU (24) at the soft CPU limit, SIGKILL (9) at the hard one.
    if matches!(signal, Some(24) | Some(9)) {
        return Failure::new(
            FailureKind::User,
            "time_limit",
            format!("the run used its CPU time limit of {} ms and was stopped", limits.cpu_ms),
        );
    }
    if text.contains("memory allocation") || text.contains("out of memory") {
        return Failure::new(
            FailureKind::User,
            "memory_limit",
            format!("the run needed more than its memory limit of {} MiB", limits.memory_mb),
        );
    }
    let how = match signal {
        Some(s) => format!("was killed by signal {s}"),
        None => format!("exited with {status}"),
    };
    Failure::new(
        FailureKind::Bug,
        "crashed",
        format!("the sandboxed run {how} without a result (a withloop bug): {}", text.trim()),
    )
}

/// The child: `--exec-run`. Reads a [`RunRequest`] on stdin, limits itself,
/// compiles, runs and writes a `ChildOutcome` on stdout.
pub fn child_main() -> std::process::ExitCode {
    let mut input = Vec::new();
    let outcome = match std::io::stdin().read_to_end(&mut input) {
        Err(e) => ChildOutcome::Err {
            kind: FailureKind::Transient,
            body: Failure::transient(format!("reading the run: {e}")).body,
        },
        Ok(_) => match serde_json::from_slice::<RunRequest>(&input) {
            Err(e) => {
                ChildOutcome::Err { kind: FailureKind::Bug, body: Failure::invalid(format!("the run: {e}")).body }
            }
            Ok(request) => match supervise(request.limits).and_then(|()| child_run_on_deep_stack(request)) {
                Ok(r) => ChildOutcome::Ok(r),
                Err(f) => ChildOutcome::Err { kind: f.kind, body: f.body },
            },
        },
    };
    let text = serde_json::to_vec(&outcome).unwrap_or_default();
    let mut stdout = std::io::stdout();
    if stdout.write_all(&text).and_then(|()| stdout.flush()).is_err() {
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}

/// The environment variable that tells a run's child its parent's pid.
const RUN_PARENT_ENV: &str = "WITHLOOP_RUN_PARENT";

/// The child watches over itself: the parent kills it at its wall-clock
/// limit or on cancellation, but a parent that dies (`kill -9`, the OOM
/// killer) does neither, and the job is run again elsewhere meanwhile. So the
/// child exits when its parent is gone (it is re-parented) and, a second
/// after the parent would have, at its own wall-clock limit.
fn supervise(limits: RunLimits) -> Result<(), Failure> {
    let parent: Option<u32> = std::env::var(RUN_PARENT_ENV).ok().and_then(|p| p.parse().ok());
    let deadline = Instant::now() + Duration::from_millis(limits.wall_ms.max(1)) + Duration::from_secs(1);
    std::thread::Builder::new()
        .name("withloop-run-watch".into())
        .spawn(move || {
            loop {
                let orphaned = parent.is_some_and(|p| p != std::os::unix::process::parent_id());
                if orphaned || Instant::now() >= deadline {
                    std::process::exit(if orphaned { 137 } else { 124 });
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
        .map(drop)
        .map_err(|e| Failure::transient(format!("starting the run's watchdog: {e}")))
}

/// The stack of the thread a run's child compiles and runs on: the front end
/// recurses over expression trees as deep as the parsers allow (1024 levels,
/// a few MiB; a chain of 3000 subtractions overflowed 8 MiB before the
/// parsers bounded chains). Reserved before the run's memory limit is set,
/// and counted in it.
const CHILD_STACK: usize = 64 << 20;

/// [`child_run`] on a thread with [`CHILD_STACK`].
fn child_run_on_deep_stack(request: RunRequest) -> Result<RunResponse, Failure> {
    let spawned = std::thread::Builder::new()
        .name("withloop-run".into())
        .stack_size(CHILD_STACK)
        .spawn(move || child_run(&request));
    match spawned {
        Ok(handle) => handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        Err(e) => Err(Failure::transient(format!("starting the run's thread: {e}"))),
    }
}

fn child_run(request: &RunRequest) -> Result<RunResponse, Failure> {
    let limits = request.limits;
    let mib = limits.memory_mb.saturating_mul(1 << 20);
    rlimit::setrlimit(rlimit::Resource::AS, mib, mib)
        .map_err(|e| Failure::transient(format!("setting the memory limit: {e}")))?;
    let cpu_s = limits.cpu_ms.div_ceil(1000).max(1);
    rlimit::setrlimit(rlimit::Resource::CPU, cpu_s, cpu_s + 1)
        .map_err(|e| Failure::transient(format!("setting the CPU limit: {e}")))?;

    let network_isolated = isolate_network();
    let compile = request.compile.as_ref().ok_or_else(|| Failure::invalid("the run has no program"))?;
    let prepared = prepare(compile)?;
    let started = Instant::now();
    let opt = optimise(&prepared.build, &mut |_| {})
        .map_err(|e| Failure::new(FailureKind::User, "compile_error", e.to_string()).with_diagnostics(e.diagnostics))?;
    let module = &opt.module;
    let candidates: Vec<&compiler_core::ir::Function> =
        module.entries.iter().filter(|(n, _)| n == request.entry.as_str()).map(|(_, f)| module.function(*f)).collect();
    if candidates.is_empty() {
        let mut names: Vec<String> = module.entries.iter().map(|(n, _)| n.to_string()).collect();
        names.sort();
        let l0_note = if opt.frontend.l0.is_some() {
            " (an L0 program with `main` exports `main` alone unless its compile request's `entry` names others)"
        } else {
            ""
        };
        return Err(Failure::invalid(format!(
            "the program has no entry function `{}`; its functions are: {}{l0_note}",
            request.entry,
            names.join(", ")
        )));
    }
    let arity_match: Vec<&&compiler_core::ir::Function> =
        candidates.iter().filter(|f| f.params.len() == request.args.len()).collect();
    let Some(first) = arity_match.first() else {
        let arities: Vec<String> = candidates.iter().map(|f| f.params.len().to_string()).collect();
        return Err(Failure::invalid(format!(
            "`{}` takes {} argument(s), not {}",
            request.entry,
            arities.join(" or "),
            request.args.len()
        )));
    };
    let mut args = Vec::new();
    for (i, (arg, p)) in request.args.iter().zip(&first.params).enumerate() {
        let declared = match first.ty(*p).elem {
            Elem::Base(b) => Some(b),
            _ => None,
        };
        args.push(arg_value(arg, declared).map_err(|m| Failure::invalid(format!("args[{i}]: {m}")))?);
    }
    let variant = if opt.frontend.l0.is_some() {
        // L0 has no overloading: its one instance of the entry is what runs.
        let params: Vec<Ty> = first.params.iter().map(|p| first.ty(*p).clone()).collect();
        RanVariant {
            function: request.entry.clone(),
            signature: crate::build::signature(
                &params.iter().map(Ty::to_string).collect::<Vec<_>>(),
                &first.results.iter().map(Ty::to_string).collect::<Vec<_>>(),
            ),
            specialised: params.iter().all(|t| t.shape.extents().is_some()),
        }
    } else {
        ran_variant(&opt.frontend, &request.entry, &args)
    };
    let codegen = prepared.build.codegen.clone();
    let cap = limits.output_kb.saturating_mul(1024) as usize;
    let mut printed = Vec::new();
    let mut overflow = false;
    let compile_ms = started.elapsed().as_secs_f64() * 1e3;
    let call = Instant::now();
    let result = withloop_codegen::jit::run(
        module,
        &opt.frontend.sources,
        &request.entry,
        args,
        &codegen,
        Some(i64::MAX),
        &mut |b: &[u8]| {
            if printed.len() + b.len() > cap {
                overflow = true;
                printed.extend_from_slice(&b[..cap.saturating_sub(printed.len()).min(b.len())]);
            } else {
                printed.extend_from_slice(b);
            }
        },
    );
    let run_ms = call.elapsed().as_secs_f64() * 1e3;
    if overflow {
        return Err(Failure::new(
            FailureKind::User,
            "output_limit",
            format!("the program printed more than its output limit of {} KiB", limits.output_kb),
        ));
    }
    let values = match result {
        Ok(v) => v,
        Err(withloop_codegen::jit::RunError::Runtime(e)) => {
            let d = DiagnosticData::of(&opt.frontend.sources, &e.to_diagnostic());
            let code = if e.code.id == codes::ALLOCATION_TOO_LARGE.id { "memory_limit" } else { "runtime_error" };
            return Err(Failure::new(FailureKind::User, code, format!("error[{}]: {}", d.code, d.message))
                .with_diagnostics(vec![d]));
        }
        Err(withloop_codegen::jit::RunError::UnknownEntry(name)) => {
            return Err(Failure::invalid(format!("the program has no entry function `{name}`")));
        }
        Err(withloop_codegen::jit::RunError::Codegen(e)) => {
            let (kind, code) = match e {
                withloop_codegen::CodegenError::Unsupported(_) => (FailureKind::Limitation, "compiler_limitation"),
                withloop_codegen::CodegenError::Target(_) => (FailureKind::User, "invalid_request"),
                _ => (FailureKind::Bug, "compiler_bug"),
            };
            return Err(Failure::new(kind, code, e.to_string()));
        }
    };
    let results = values.iter().map(|v| result_json(v, request.results)).collect();
    Ok(RunResponse {
        key: request.key.clone().unwrap_or_default(),
        results,
        stdout: String::from_utf8_lossy(&printed).into_owned(),
        run_ms,
        compile_ms,
        variant,
        limits,
        network_isolated,
    })
}

/// Moves this (still single-threaded) process into a network namespace of its
/// own; whether that worked.
fn isolate_network() -> bool {
    use nix::sched::{CloneFlags, unshare};
    unshare(CloneFlags::CLONE_NEWNET).is_ok() || unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET).is_ok()
}

/// The most specific instance of `entry` whose parameter types admit `args`
/// (what the dispatch wrapper picks).
fn ran_variant(fe: &compiler_core::driver::Frontend, entry: &str, args: &[Value]) -> RanVariant {
    let score = |t: &Ty| match &t.shape {
        Shape::Fixed(extents) if extents.iter().all(Option::is_some) => 2,
        Shape::Fixed(_) => 1,
        Shape::AtLeast(_) => 0,
    };
    let mut best: Option<(usize, &compiler_core::sema::typed::Instance)> = None;
    for id in &fe.typed.reachable {
        let inst = fe.typed.instance(*id);
        if fe.program.function(inst.fun).name.as_str() != entry || inst.params.len() != args.len() {
            continue;
        }
        if !inst.params.iter().zip(args).all(|(t, a)| t.admits(a)) {
            continue;
        }
        let s: usize = inst.params.iter().map(score).sum();
        if best.is_none_or(|(b, _)| s > b) {
            best = Some((s, inst));
        }
    }
    match best {
        Some((_, inst)) => {
            let params: Vec<String> = inst.params.iter().map(|t| t.to_string()).collect();
            let results: Vec<String> = inst.results.iter().map(|t| t.to_string()).collect();
            RanVariant {
                function: entry.to_string(),
                signature: crate::build::signature(&params, &results),
                specialised: inst.params.iter().all(|t| score(t) == 2),
            }
        }
        None => {
            RanVariant { function: entry.to_string(), signature: "(dispatched at run time)".into(), specialised: false }
        }
    }
}

fn scalar_of(v: &Json, base: BaseType) -> Result<Scalar, String> {
    let bad = || format!("`{v}` is not a {}", base.name());
    Ok(match base {
        BaseType::Bool => Scalar::Bool(v.as_bool().ok_or_else(bad)?),
        BaseType::Char => Scalar::Char(v.as_u64().filter(|c| *c < 256).ok_or_else(bad)? as u8),
        BaseType::Float => Scalar::Float(real_of(v).ok_or_else(bad)? as f32),
        BaseType::Double => Scalar::Double(real_of(v).ok_or_else(bad)?),
        t => Scalar::Int(t, v.as_i64().ok_or_else(bad)?),
    })
}

/// A JSON number, or the name of a non-finite one as results spell it
/// (`"NaN"`, `"inf"`, `"-inf"`), so that a result can be passed back.
fn real_of(v: &Json) -> Option<f64> {
    match v {
        Json::String(s) => s.parse::<f64>().ok().filter(|x| !x.is_finite()),
        v => v.as_f64(),
    }
}

/// A JSON argument as a value; `declared`: the entry's element type.
fn arg_value(arg: &Json, declared: Option<BaseType>) -> Result<Value, String> {
    let guess = |v: &Json| {
        if v.is_boolean() {
            BaseType::Bool
        } else if v.is_i64() {
            BaseType::Int
        } else {
            BaseType::Double
        }
    };
    match arg {
        Json::Object(o) if o.contains_key("npy") => {
            let text = o["npy"].as_str().ok_or("`npy` must be a base64 string")?;
            let bytes =
                base64::engine::general_purpose::STANDARD.decode(text).map_err(|e| format!("bad base64: {e}"))?;
            npy::decode(&bytes)
        }
        Json::Object(o) => {
            let shape: Vec<usize> = o
                .get("shape")
                .and_then(Json::as_array)
                .ok_or("an array argument needs `shape` (a list of extents) and `data`")?
                .iter()
                .map(|d| d.as_u64().map(|d| d as usize).ok_or("extents must be non-negative integers"))
                .collect::<Result<_, _>>()?;
            let data = o.get("data").and_then(Json::as_array).ok_or("an array argument needs `data` (a flat list)")?;
            let size = compiler_core::interp::value::shape_size(&shape).ok_or("the shape overflows")?;
            if data.len() != size {
                return Err(format!("the shape {shape:?} has {size} elements but `data` has {}", data.len()));
            }
            let base = match o.get("type").and_then(Json::as_str) {
                Some(t) => BaseType::from_name(t).ok_or_else(|| format!("unknown element type `{t}`"))?,
                None => declared.or_else(|| data.first().map(guess)).unwrap_or(BaseType::Double),
            };
            let scalars: Vec<Scalar> = data.iter().map(|d| scalar_of(d, base)).collect::<Result<_, _>>()?;
            let out = elems_of(base, &scalars);
            Ok(Value::from_parts(shape, out))
        }
        v => Ok(Value::Scalar(scalar_of(v, declared.unwrap_or_else(|| guess(v)))?)),
    }
}

/// Elements of type `base` from scalars already of that type.
fn elems_of(base: BaseType, scalars: &[Scalar]) -> Elems {
    match base {
        BaseType::Bool => Elems::Bool(scalars.iter().map(|s| matches!(s, Scalar::Bool(true))).collect()),
        BaseType::Char => Elems::Char(scalars.iter().map(|s| if let Scalar::Char(c) = s { *c } else { 0 }).collect()),
        BaseType::Float => {
            Elems::Float(scalars.iter().map(|s| if let Scalar::Float(x) = s { *x } else { 0.0 }).collect())
        }
        BaseType::Double => {
            Elems::Double(scalars.iter().map(|s| if let Scalar::Double(x) = s { *x } else { 0.0 }).collect())
        }
        t => Elems::Int(t, scalars.iter().map(|s| if let Scalar::Int(_, x) = s { *x } else { 0 }).collect()),
    }
}

/// A result value as JSON (or `.npy`).
fn result_json(v: &Value, format: ResultFormat) -> Json {
    match v {
        Value::Str(s) => json!({ "type": "string", "data": String::from_utf8_lossy(s) }),
        Value::Scalar(s) => scalar_json(*s),
        Value::Array(a) => {
            if format == ResultFormat::Npy
                && let Some(bytes) = npy::encode(v)
            {
                return json!({ "npy": base64::engine::general_purpose::STANDARD.encode(bytes) });
            }
            let data: Vec<Json> = (0..a.elems.len()).filter_map(|i| a.elems.get(i)).map(scalar_json).collect();
            json!({ "type": a.elems.base().name(), "shape": a.shape, "data": data })
        }
    }
}

fn scalar_json(s: Scalar) -> Json {
    match s {
        Scalar::Bool(b) => json!(b),
        Scalar::Char(c) => json!(c),
        Scalar::Int(_, x) => json!(x),
        // NaN and infinities are not JSON numbers; they come back as strings.
        Scalar::Float(x) if !x.is_finite() => json!(x.to_string()),
        Scalar::Float(x) => json!(x),
        Scalar::Double(x) if !x.is_finite() => json!(x.to_string()),
        Scalar::Double(x) => json!(x),
    }
}
