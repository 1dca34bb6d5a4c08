//! Profiles the compile service's warm path without HTTP: the request a
//! `POST /v1/compile` would carry, prepared and built `--repeat` times in one
//! process (the first build warms the library and LLVM, as the service's
//! first request does). Under callgrind, `--toggle-collect='*warm_build*'`
//! counts only the builds after the first.
//!
//! `cargo run --release -p withloop-worker --example warm_compile -- FILE ENTRY [FN.PARAM=TYPE ...] [--repeat N] [--disable PASS ...]`
use std::time::Instant;

use withloop_worker::build::{ArtifactKind, build};
use withloop_worker::request::{CompileRequest, prepare};

#[inline(never)]
fn warm_build(request: &withloop_worker::build::BuildRequest) -> withloop_worker::build::BuildOutput {
    build(request, &mut |_| {}).map_err(|_| "the request compiles").unwrap()
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut repeat = 2;
    if let Some(i) = args.iter().position(|a| a == "--repeat") {
        repeat = args[i + 1].parse().expect("--repeat N");
        args.drain(i..i + 2);
    }
    let mut disable = Vec::new();
    while let Some(i) = args.iter().position(|a| a == "--disable") {
        disable.push(args[i + 1].clone());
        args.drain(i..i + 2);
    }
    let file = &args[0];
    let entry = &args[1];
    let mut shapes = std::collections::BTreeMap::<String, std::collections::BTreeMap<String, String>>::new();
    for hint in &args[2..] {
        let (target, ty) = hint.split_once('=').expect("FN.PARAM=TYPE");
        let (f, p) = target.split_once('.').expect("FN.PARAM=TYPE");
        shapes.entry(f.to_string()).or_default().entry(p.to_string()).or_insert_with(|| ty.to_string());
    }
    let source = std::fs::read_to_string(file).expect("the source file");
    let warmup = serde_json::json!({"source": "int main() { return 0; }", "emit": ["object"]});
    let warmup: CompileRequest = serde_json::from_value(warmup).unwrap();
    let prepared = prepare(&warmup).map_err(|_| "prepare").unwrap();
    build(&prepared.build, &mut |_| {}).map_err(|_| "warm-up").unwrap();
    let request = serde_json::json!({
        "source": source, "file_name": "kernels.sac", "entry": [entry], "shapes": shapes, "emit": ["object"],
        "options": { "disable": disable },
    });
    let request: CompileRequest = serde_json::from_value(request).unwrap();
    let prepared = prepare(&request).map_err(|_| "prepare").unwrap();
    assert!(prepared.build.emit.contains(&ArtifactKind::Object));
    for _ in 0..repeat {
        let t = Instant::now();
        let out = warm_build(&prepared.build);
        let bytes: usize = out.artifacts.iter().map(|(_, b)| b.len()).sum();
        eprintln!("{} ms ({bytes} bytes) {:?}", t.elapsed().as_millis(), out.phases);
    }
}
