//! The compile API against the router in-process, with real Postgres where the
//! database tier is involved (each test gets a database of its own).

mod common;

use std::time::Duration;

use axum::http::{Method, StatusCode};
use common::*;
use serde_json::{Value, json};
use withloop_server::{AppState, Config, app};

fn request(emit: &[&str]) -> Value {
    json!({ "source": NEG, "file_name": "neg.sac", "emit": emit })
}

fn compiles(state: &AppState) -> u64 {
    state.metrics.compiles()
}

#[tokio::test]
async fn miss_then_memory_then_database_after_a_restart_with_identical_bytes() {
    let db = TestDb::new().await;
    let first = with_database(&db).await;
    let router = app(first.clone());
    let body = request(&["shared", "header", "report"]);

    let miss = post(&router, "/v1/compile", body.clone()).await;
    assert_eq!(miss.status, StatusCode::OK, "{}", miss.text());
    let miss = miss.json();
    assert_eq!(miss["cache"], "miss");
    let key = miss["key"].as_str().unwrap().to_string();
    assert_eq!(key.len(), 64);
    let shared_url = miss["artifacts"]["shared"]["url"].as_str().unwrap().to_string();
    let shared = get(&router, &shared_url).await;
    assert_eq!(shared.status, StatusCode::OK);
    assert_eq!(&shared.body[..4], b"\x7fELF", "a shared library");

    let hit = post(&router, "/v1/compile", body.clone()).await.json();
    assert_eq!(hit["cache"], "memory");
    assert_eq!(hit["key"], key.as_str());
    assert_eq!(compiles(&first), 1);

    // A new server over the same database: nothing in memory.
    let restarted = with_database(&db).await;
    let router2 = app(restarted.clone());
    let from_db = post(&router2, "/v1/compile", body.clone()).await.json();
    assert_eq!(from_db["cache"], "database", "{from_db}");
    assert_eq!(from_db["variants"], miss["variants"]);
    assert_eq!(compiles(&restarted), 0);
    let again = get(&router2, &shared_url).await;
    assert_eq!(again.body, shared.body, "identical bytes from the database tier");
    // Backfilled into memory.
    assert_eq!(post(&router2, "/v1/compile", body).await.json()["cache"], "memory");
}

#[tokio::test]
async fn a_bypassing_compile_recompiles_even_beside_a_plain_lookup_and_yields_the_same_report() {
    let db = TestDb::new().await;
    let body = request(&["object", "report"]);
    let first = post(&app(with_database(&db).await), "/v1/compile", body.clone()).await.json();
    assert_eq!(first["cache"], "miss", "{first}");
    // A second server: the plain request's flight looks the key up in the
    // database while the bypassing one arrives; that one must compile.
    let state = with_database(&db).await;
    let router = app(state.clone());
    let mut bypass = body.clone();
    bypass["bypass_cache"] = json!(true);
    let (plain, bypassed) = tokio::join!(post(&router, "/v1/compile", body), post(&router, "/v1/compile", bypass));
    let (plain, bypassed) = (plain.json(), bypassed.json());
    assert_eq!((plain["cache"].as_str(), bypassed["cache"].as_str()), (Some("database"), Some("miss")));
    assert_eq!(compiles(&state), 1);
    // The report is an artifact served by its content hash: every compile of a
    // key makes the same bytes (pass times are in `phases`, not in it).
    for kind in ["report", "object"] {
        assert_eq!(bypassed["artifacts"][kind]["content_hash"], first["artifacts"][kind]["content_hash"], "{kind}");
    }
    assert!(bypassed["report"]["passes"].as_array().unwrap().iter().all(|p| p.get("time_us").is_none()));
    let phases: Vec<&str> = bypassed["phases"].as_array().unwrap().iter().filter_map(|p| p["phase"].as_str()).collect();
    assert!(phases.contains(&"optimise") && phases.contains(&"pass:wlf"), "{phases:?}");
}

#[tokio::test]
async fn a_memory_hit_answers_what_the_miss_did_but_for_where_it_came_from() {
    let router = app(embedded());
    let body = request(&["object", "header", "report"]);
    let miss = post(&router, "/v1/compile", body.clone()).await;
    assert_eq!(miss.status, StatusCode::OK, "{}", miss.text());
    // The first hit serialises the response and keeps it; the second answers those bytes.
    let hits = [post(&router, "/v1/compile", body.clone()).await, post(&router, "/v1/compile", body).await];
    for hit in &hits {
        assert_eq!(hit.status, StatusCode::OK);
        assert_eq!(hit.header("content-type").as_deref(), Some("application/json"));
    }
    assert_eq!(hits[0].body, hits[1].body);
    let (mut miss, mut hit) = (miss.json(), hits[0].json());
    assert_eq!((miss["cache"].take(), hit["cache"].take()), ("miss".into(), "memory".into()));
    assert_eq!(hit, miss);
    assert!(hit["report"]["passes"].as_array().is_some_and(|p| !p.is_empty()), "{hit}");
}

#[tokio::test]
async fn fifty_concurrent_identical_requests_compile_once() {
    let state = embedded();
    let router = app(state.clone());
    let body = request(&["object", "report"]);
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let (router, body) = (router.clone(), body.clone());
        tasks.push(tokio::spawn(async move { post(&router, "/v1/compile", body).await }));
    }
    let mut keys = std::collections::BTreeSet::new();
    let mut hashes = std::collections::BTreeSet::new();
    for t in tasks {
        let reply = t.await.unwrap();
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        let v = reply.json();
        keys.insert(v["key"].as_str().unwrap().to_string());
        hashes.insert(v["artifacts"]["object"]["content_hash"].as_str().unwrap().to_string());
    }
    assert_eq!(keys.len(), 1);
    assert_eq!(hashes.len(), 1);
    assert_eq!(compiles(&state), 1, "one compile for fifty identical requests");
}

#[tokio::test]
async fn a_corrupt_stored_artifact_is_detected_and_recompiled() {
    let db = TestDb::new().await;
    let state = with_database(&db).await;
    let router = app(state.clone());
    let body = request(&["header", "report"]);
    let first = post(&router, "/v1/compile", body.clone()).await.json();
    let header_url = first["artifacts"]["header"]["url"].as_str().unwrap().to_string();
    let original = get(&router, &header_url).await.body;

    let store = state.cache.store().unwrap();
    sqlx::query("UPDATE artifacts SET bytes = 'garbage'::bytea WHERE kind = 'header'")
        .execute(store.pool())
        .await
        .unwrap();

    // A fresh memory tier must go to the database and find the damage.
    let restarted = with_database(&db).await;
    let router2 = app(restarted.clone());
    let not_served = get(&router2, &header_url).await;
    assert_eq!(not_served.status, StatusCode::NOT_FOUND, "{}", not_served.text());
    assert!(not_served.text().contains("failed verification"), "{}", not_served.text());
    let again = post(&router2, "/v1/compile", body).await.json();
    assert_eq!(again["cache"], "miss", "a corrupt entry is a miss");
    assert_eq!(compiles(&restarted), 1);
    assert_eq!(get(&router2, &header_url).await.body, original);
    let metrics = get(&router2, "/metrics").await.text();
    assert!(metrics.contains("withloop_cache_corrupt_total 2"), "{metrics}");
    // The row was rewritten: a third server reads it from the database.
    let third = app(with_database(&db).await);
    assert_eq!(get(&third, &header_url).await.body, original);
}

#[tokio::test]
async fn compile_errors_are_422_with_structured_and_rendered_diagnostics() {
    let router = app(embedded());
    let source = "int main()\n{\n    x = [1, 2, 3] + [1, 2];\n    return y;\n}\n";
    let reply = post(&router, "/v1/compile", json!({ "source": source, "file_name": "bad.sac" })).await;
    assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY);
    let v = reply.json();
    assert_eq!(v["error"]["code"], "compile_error");
    let diagnostics = v["error"]["diagnostics"].as_array().unwrap();
    let unknown = diagnostics.iter().find(|d| d["code"] == "E0200").expect("the unknown variable is reported");
    assert_eq!(unknown["at"]["file"], "bad.sac");
    assert_eq!(unknown["at"]["line"], 4);
    assert_eq!(unknown["at"]["column"], 12);
    assert_eq!(unknown["class"], "user");
    let rendered = v["error"]["rendered"].as_str().unwrap();
    assert!(rendered.contains("bad.sac:4:12"), "{rendered}");
}

#[tokio::test]
async fn oversized_bodies_are_413() {
    let config = Config { max_body_kb: 1, ..Config::embedded() };
    let router = app(AppState::new(config, None).unwrap());
    let source = format!("int main() {{ return 0; }}\n// {}\n", "x".repeat(4096));
    let reply = post(&router, "/v1/compile", json!({ "source": source })).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(reply.json()["error"]["code"], "payload_too_large");
}

#[tokio::test]
async fn unknown_routes_methods_fields_and_passes_are_clear_4xx() {
    let router = app(embedded());
    let r = get(&router, "/v1/nothing").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json()["error"]["code"], "not_found");
    let r = send(&router, Method::PUT, "/v1/compile", None, &[]).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.json()["error"]["code"], "method_not_allowed");
    let r = post(&router, "/v1/compile", json!({ "source": NEG, "colour": "blue" })).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("unknown field `colour`"), "{}", r.text());
    let r = post(&router, "/v1/compile", json!({ "source": NEG, "options": { "disable": ["wlf", "warp"] } })).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text().contains("no pass `warp`"), "{}", r.text());
    let r = post(&router, "/v1/compile", json!({ "source": NEG, "emit": ["pdf"] })).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = post(&router, "/v1/compile", json!({ "source": NEG, "options": { "opt_level": 7 } })).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = post(&router, "/v1/compile", json!({ "source": NEG, "options": { "target": "no-such-triple" } })).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    // LLVM aborts on our code for a GPU target.
    let body = json!({ "source": NEG, "options": { "target": "amdgcn-amd-amdhsa" }, "emit": ["object"] });
    let r = post(&router, "/v1/compile", body).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    assert!(r.text().contains("special-purpose targets such as `amdgcn`"), "{}", r.text());
    // Names LLVM would take and then end the process on (abort, segfault): refused first.
    // (x86-64 names: the host's target.)
    if cfg!(target_arch = "x86_64") {
        let r = post(&router, "/v1/compile", json!({ "source": NEG, "options": { "cpu": "znver33" } })).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
        assert!(r.text().contains("did you mean `znver3`?"), "{}", r.text());
        let body =
            json!({ "source": NEG, "options": { "cpu": "x86-64", "features": "+avx2,-sse2" }, "emit": ["object"] });
        let r = post(&router, "/v1/compile", body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
        assert!(r.text().contains("without `sse2`"), "{}", r.text());
        let r =
            post(&router, "/v1/compile", json!({ "source": NEG, "options": { "cpu": "x86-64" }, "emit": ["object"] }))
                .await;
        assert_eq!(r.status, StatusCode::OK, "the service still compiles: {}", r.text());
    }
    let r = send(&router, Method::POST, "/v1/compile", None, &[("content-type", "application/json")]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = get(&router, "/v1/compilations/abc").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = get(&router, &format!("/v1/artifacts/{}/object", "0".repeat(64))).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.text().contains("no compilation"), "{}", r.text());
}

#[tokio::test]
async fn shape_hints_specialise_and_bad_hints_are_located() {
    let router = app(embedded());
    let body = json!({ "source": NEG, "shapes": { "neg": { "a": "int[ 1000 ]" } }, "emit": ["header"] });
    let v = post(&router, "/v1/compile", body).await.json();
    assert_eq!(v["components"]["shapes"], json!(["neg.a=int[1000]"]));
    let hinted = v["variants"].as_array().unwrap().iter().find(|x| x["reason"] == "hint").expect("a hinted variant");
    assert_eq!(hinted["signature"], "(int[1000]) -> int[1000]");
    assert_eq!(hinted["specialised"], true);
    let header = get(&router, v["artifacts"]["header"]["url"].as_str().unwrap()).await.text();
    assert!(header.contains(hinted["c_symbol"].as_str().unwrap()), "{header}");

    let r = post(&router, "/v1/compile", json!({ "source": NEG, "shapes": { "neg": { "a": "int[3" } } })).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text());
    let d = &r.json()["error"]["diagnostics"][0];
    assert!(d["at"]["file"].as_str().unwrap().contains("neg.a=int[3"), "{d}");

    let r = post(&router, "/v1/compile", json!({ "source": NEG, "shapes": { "neg": { "b": "int[3]" } } })).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text());
    assert_eq!(r.json()["error"]["diagnostics"][0]["code"], "E0304");
}

#[tokio::test]
async fn keys_follow_the_inputs_and_ignore_invisible_differences() {
    let router = app(embedded());
    let key = |v: Value| v["key"].as_str().unwrap().to_string();
    let base = key(post(&router, "/v1/compile", request(&["report"])).await.json());
    let crlf = NEG.replace('\n', "  \r\n");
    let same =
        post(&router, "/v1/compile", json!({ "source": crlf, "file_name": "neg.sac", "emit": ["report"] })).await;
    assert_eq!(same.json()["cache"], "memory");
    assert_eq!(key(same.json()), base);
    let other = post(
        &router,
        "/v1/compile",
        json!({ "source": NEG, "file_name": "neg.sac", "emit": ["report"], "options": { "opt_level": 1 } }),
    )
    .await
    .json();
    assert_ne!(key(other.clone()), base);
    let mine = get(&router, &format!("/v1/compilations/{base}")).await.json();
    let differs: Vec<&str> = ["opt_level"]
        .into_iter()
        .filter(|o| mine["components"]["options"][o] != other["components"]["options"][o])
        .collect();
    assert_eq!(differs, vec!["opt_level"], "the components say why the second request missed");
}

#[tokio::test]
async fn artifacts_have_content_types_etags_and_revalidate() {
    let router = app(embedded());
    let v = post(&router, "/v1/compile", request(&["object", "asm", "llvm_ir", "ir", "report"])).await.json();
    for (kind, ty, starts) in
        [("object", "application/x-object", &b"\x7fELF"[..]), ("report", "application/json", &b"{"[..])]
    {
        let r = get(&router, v["artifacts"][kind]["url"].as_str().unwrap()).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.header("content-type").as_deref(), Some(ty));
        assert!(r.body.starts_with(starts), "{kind}");
        let etag = r.header("etag").unwrap();
        assert_eq!(etag, format!("\"{}\"", v["artifacts"][kind]["content_hash"].as_str().unwrap()));
        assert!(r.header("cache-control").unwrap().contains("immutable"));
        let url = v["artifacts"][kind]["url"].as_str().unwrap();
        let again = send(&router, Method::GET, url, None, &[("if-none-match", &etag)]).await;
        assert_eq!(again.status, StatusCode::NOT_MODIFIED);
    }
    // Gzipped, the bytes differ: the same tag, weak (a strong one names
    // one representation), and it revalidates as well.
    let url = v["artifacts"]["llvm_ir"]["url"].as_str().unwrap();
    let plain = get(&router, url).await.header("etag").unwrap();
    let gzipped = send(&router, Method::GET, url, None, &[("accept-encoding", "gzip")]).await;
    assert_eq!(gzipped.header("content-encoding").as_deref(), Some("gzip"));
    let weak = gzipped.header("etag").unwrap();
    assert_eq!(weak, format!("W/{plain}"));
    let again = send(&router, Method::GET, url, None, &[("if-none-match", &weak)]).await;
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);
    let asm = get(&router, v["artifacts"]["asm"]["url"].as_str().unwrap()).await.text();
    assert!(asm.contains("wl_neg"), "assembly names the exported symbol");
    let ll = get(&router, v["artifacts"]["llvm_ir"]["url"].as_str().unwrap()).await.text();
    assert!(ll.contains("define"), "LLVM IR");
    let key = v["key"].as_str().unwrap();
    let r = get(&router, &format!("/v1/artifacts/{key}/shared")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.text().contains("it emitted"), "{}", r.text());
}

#[tokio::test]
async fn compilations_show_metadata_and_purge_from_both_tiers() {
    let db = TestDb::new().await;
    let router = app(with_database(&db).await);
    let v = post(&router, "/v1/compile", request(&["report"])).await.json();
    let key = v["key"].as_str().unwrap();
    let meta = get(&router, &format!("/v1/compilations/{key}")).await.json();
    assert_eq!(meta["components"]["file_name"], "neg.sac");
    assert_eq!(meta["components"]["format"], 1);
    assert!(meta["components"]["compiler"].as_str().unwrap().starts_with("withloop "));
    assert_eq!(meta["report"]["schema"], "withloop.optimisation-report/1");
    let purge = send(&router, Method::DELETE, &format!("/v1/compilations/{key}"), None, &[]).await;
    assert_eq!(purge.status, StatusCode::NO_CONTENT);
    assert_eq!(get(&router, &format!("/v1/compilations/{key}")).await.status, StatusCode::NOT_FOUND);
    let fresh = app(with_database(&db).await);
    assert_eq!(get(&fresh, &format!("/v1/compilations/{key}")).await.status, StatusCode::NOT_FOUND);
    let again = send(&router, Method::DELETE, &format!("/v1/compilations/{key}"), None, &[]).await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn async_compiles_are_jobs_with_progress_events() {
    let router = app(embedded());
    let accepted = post(&router, "/v1/compile?async=true", request(&["object", "report"])).await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED, "{}", accepted.text());
    let accepted = accepted.json();
    let job_url = accepted["job_url"].as_str().unwrap().to_string();
    let view = finished_job(&router, &job_url).await;
    assert_eq!(view["status"], "done", "{view}");
    assert_eq!(view["result"]["key"], accepted["key"]);
    let phases: Vec<&str> = view["events"].as_array().unwrap().iter().filter_map(|e| e["phase"].as_str()).collect();
    let (passes, others): (Vec<&str>, Vec<&str>) = phases.iter().partition(|p| p.starts_with("pass:"));
    assert_eq!(others, vec!["frontend", "optimise", "codegen:object"]);
    assert!(passes.contains(&"pass:wlf") && passes.contains(&"pass:ive"), "{passes:?}");
    // The event stream replays the history and ends after `done`.
    let events = get(&router, accepted["events_url"].as_str().unwrap()).await;
    assert_eq!(events.header("content-type").as_deref(), Some("text/event-stream"));
    let text = events.text();
    let names: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
    assert_eq!(names.len(), 2 + phases.len(), "{text}");
    assert_eq!((names[0], names[names.len() - 1]), ("queued", "done"), "{text}");
    assert!(text.contains("\"phase\":\"pass:wlf\""), "{text}");
    assert_eq!(get(&router, "/v1/jobs/nope").await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_failing_async_compile_fails_its_job() {
    let router = app(embedded());
    let accepted =
        post(&router, "/v1/compile?async=true", json!({ "source": "int main() { return x; }" })).await.json();
    let job_url = accepted["job_url"].as_str().unwrap().to_string();
    let view = finished_job(&router, &job_url).await;
    assert_eq!(view["status"], "failed");
    assert_eq!(view["error"]["code"], "compile_error");
    assert_eq!(view["error"]["diagnostics"][0]["code"], "E0200");
    // The last event says why, as the events stream shows it.
    let last = view["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["status"], "failed", "{view}");
    assert_eq!(last["phase"], "compile_error", "{view}");
}

#[tokio::test]
async fn progressive_lookup_serves_the_generic_build_while_the_specialised_one_compiles() {
    let state = embedded();
    let router = app(state.clone());
    let generic = post(&router, "/v1/compile", request(&["report"])).await.json();
    let mut hinted = request(&["report"]);
    hinted["shapes"] = json!({ "neg": { "a": "int[1000]" } });
    hinted["progressive"] = json!(true);
    let fallback = post(&router, "/v1/compile", hinted.clone()).await.json();
    assert_eq!(fallback["key"], generic["key"], "the generic build, at once");
    let pending = &fallback["generic_fallback"];
    let requested = pending["requested_key"].as_str().unwrap().to_string();
    assert_ne!(requested, generic["key"].as_str().unwrap());
    let job_url = pending["job_url"].as_str().unwrap();
    assert_eq!(finished_job(&router, job_url).await["status"], "done");
    let exact = post(&router, "/v1/compile", hinted).await.json();
    assert_eq!(exact["key"], requested.as_str());
    assert_eq!(exact["cache"], "memory");
    assert!(exact.get("generic_fallback").is_none());
    assert!(exact["variants"].as_array().unwrap().iter().any(|v| v["signature"] == "(int[1000]) -> int[1000]"));
}

#[tokio::test]
async fn entries_select_exports_and_unknown_entries_are_reported() {
    let router = app(embedded());
    let v = post(&router, "/v1/compile", json!({ "source": NEG, "entry": ["neg"], "emit": ["header"] })).await.json();
    let header = get(&router, v["artifacts"]["header"]["url"].as_str().unwrap()).await.text();
    assert!(header.contains("wl_neg"), "{header}");
    assert!(!header.contains("wl_main"), "{header}");
    let r = post(&router, "/v1/compile", json!({ "source": NEG, "entry": ["negate"] })).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    let d = &r.json()["error"]["diagnostics"][0];
    assert_eq!(d["code"], "E0201");
    assert!(d["notes"][0].as_str().unwrap().contains("main, neg"), "{d}");
}

#[tokio::test]
async fn includes_come_from_the_request() {
    let router = app(embedded());
    let source = "#include \"lib.h\"\nint main() { return TWICE(21); }\n";
    let r = post(
        &router,
        "/v1/compile",
        json!({ "source": source, "includes": { "lib.h": "#define TWICE(x) ((x) * 2)\n" } }),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = post(&router, "/v1/compile", json!({ "source": source })).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(r.json()["error"]["diagnostics"][0]["code"], "E0012");
}

/// L0 sources go through the same pipeline, cache and back end (seed 004's P1).
#[tokio::test]
async fn l0_compiles_and_runs() {
    let router = app(embedded());
    let source = "fun int dot([int] a, [int] b) = reduce(op +, 0, map(op *, zip(a, b)))\n\
                  fun int main([int] a, [int] b) = dot(a, b)\n";
    let r = post(
        &router,
        "/v1/compile",
        json!({ "source": source, "language": "l0", "file_name": "dot.l0", "emit": ["object", "header", "report"] }),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let j = r.json();
    assert_eq!(j["variants"][0]["function"], "main", "{j}");
    assert_eq!(j["variants"][0]["signature"], "(int[.], int[.]) -> int", "{j}");
    assert_eq!(j["variants"][0]["c_symbol"], "wl_main", "{j}");
    // Run it in the sandbox: the dot product of two vectors.
    let runner = app(runner_state(2048));
    let vector = |d: [i32; 3]| json!({ "shape": [3], "data": d, "type": "int" });
    let body = json!({
        "compile": { "source": source, "language": "l0", "file_name": "dot.l0" },
        "entry": "main",
        "args": [vector([1, 2, 3]), vector([4, 5, 6])],
    });
    let r = post(&runner, "/v1/run", body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["results"][0], json!(32), "{}", r.text());
    // The uniqueness checker's errors come back located.
    let bad = "fun [int] f(int i, int x) = let a = [1, 2, 3] in let a[i] = x in a\n";
    let r = post(&router, "/v1/compile", json!({ "source": bad, "language": "l0", "file_name": "bad.l0" })).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text());
    let d = &r.json()["error"]["diagnostics"][0];
    assert_eq!(d["code"], "E0401", "{d}");
    assert_eq!(d["at"]["line"], 1, "{d}");
}

/// L0 requests: the language follows a `.l0` file name, the default file
/// name is `program.l0`, SaC's preprocessor options are refused, a run of a
/// function other than `main` exports it, the variant that ran is L0's one
/// instance, and an unknown entry lists the functions there are.
#[tokio::test]
async fn l0_requests_take_their_language_name_entries_and_variants_from_l0() {
    let router = app(embedded());
    let source = "fun [int] inc([int] a) = map(op +(1), a)\nfun int main(int n) = n\n";
    // Language from the file name.
    let r = post(&router, "/v1/compile", json!({ "source": source, "file_name": "inc.l0" })).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    // The default file name is an L0 one.
    let r = post(&router, "/v1/compile", json!({ "source": "fun int main() = x\n", "language": "l0" })).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.json()["error"]["rendered"].as_str().unwrap().contains("program.l0"), "{}", r.text());
    let r =
        post(&router, "/v1/compile", json!({ "source": source, "language": "l0", "options": { "defines": ["N=3"] } }))
            .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    assert!(r.text().contains("L0 has none"), "{}", r.text());
    let r = post(&router, "/v1/compile", json!({ "source": source, "language": "l0", "entry": ["dec"] })).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    let d = &r.json()["error"]["diagnostics"][0];
    assert_eq!(d["notes"][0], "its functions are: inc, main", "{d}");
    // A run of `inc`, which `main` would have kept from being exported.
    let runner = app(runner_state(2048));
    let body = json!({
        "compile": { "source": source, "language": "l0" },
        "entry": "inc",
        "args": [{ "shape": [2], "data": [1, 2] }],
    });
    let r = post(&runner, "/v1/run", body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let j = r.json();
    assert_eq!(j["results"][0]["data"], json!([2, 3]), "{j}");
    assert_eq!(j["variant"]["signature"], "(int[.]) -> int[.]", "{j}");
    assert_eq!(j["variant"]["specialised"], false, "{j}");
    let r = post(&runner, "/v1/run", json!({ "compile": { "source": source, "language": "l0" }, "args": [4] })).await;
    assert_eq!(r.json()["variant"]["signature"], "(int) -> int", "{}", r.text());
    assert_eq!(r.json()["variant"]["specialised"], true, "{}", r.text());
}

/// Non-finite numbers are strings both ways, for `float` as for `double`.
#[tokio::test]
async fn non_finite_results_are_named_and_can_be_passed_back() {
    let runner = app(runner_state(2048));
    let source = "use Array: all;\nfloat[.] f(float[.] a) { return a / 0.0f; }\n";
    let r = post(
        &runner,
        "/v1/run",
        run_body(source, "f", json!([{ "shape": [3], "data": [1.0, -1.0, 0.0], "type": "float" }])),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let data = r.json()["results"][0]["data"].clone();
    assert_eq!(data[0], "inf", "{data}");
    assert_eq!(data[1], "-inf", "{data}");
    assert!(data[2].as_str().is_some_and(|s| s.eq_ignore_ascii_case("nan")), "{data}");
    let source = "use Array: all;\ndouble g(double x) { return x + 1.0; }\n";
    let r = post(&runner, "/v1/run", run_body(source, "g", json!(["-inf"]))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["results"][0], "-inf", "{}", r.text());
}

#[tokio::test]
async fn health_readiness_and_metrics() {
    let router = app(embedded());
    let h = get(&router, "/healthz").await.json();
    assert_eq!(h["status"], "ok");
    assert_eq!(h["mode"], "embedded");
    assert_eq!(get(&router, "/readyz").await.status, StatusCode::OK);
    post(&router, "/v1/compile", request(&["report"])).await;
    post(&router, "/v1/compile", request(&["report"])).await;
    let m = get(&router, "/metrics").await;
    assert!(m.header("content-type").unwrap().starts_with("text/plain"));
    let text = m.text();
    for line in [
        "withloop_cache_lookups_total{result=\"memory\"} 1",
        "withloop_cache_lookups_total{result=\"miss\"} 1",
        "withloop_compiles_total{outcome=\"ok\"} 1",
        "withloop_http_requests_total{method=\"POST\",route=\"/v1/compile\",status=\"200\"} 2",
        "withloop_compile_duration_seconds_count 1",
        "withloop_queue_depth 0",
    ] {
        assert!(text.contains(line), "missing `{line}` in\n{text}");
    }
    let docs = get(&router, "/docs").await;
    assert!(docs.text().contains("/openapi.json"));
    assert!(get(&router, "/openapi.json").await.json()["paths"]["/v1/compile"].is_object());

    let db = TestDb::new().await;
    let with_db = app(with_database(&db).await);
    let ready = get(&with_db, "/readyz").await.json();
    assert_eq!(ready["mode"], "database");
    assert_eq!(ready["status"], "ready");
}

#[tokio::test]
async fn tokens_are_required_when_configured_and_rate_limited_per_team() {
    let config = Config {
        tokens: "alpha:secret-a,beta:secret-b".into(),
        admin_token: Some("root".into()),
        rate_limit_per_minute: 3,
        ..Config::embedded()
    };
    let router = app(AppState::new(config, None).unwrap());
    let body = request(&["report"]);
    let r = send(&router, Method::POST, "/v1/compile", Some(body.clone()), &[]).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.json()["error"]["code"], "unauthorized");
    let r = send(&router, Method::POST, "/v1/compile", Some(body.clone()), &[("authorization", "Bearer nope")]).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let alpha = [("authorization", "Bearer secret-a")];
    for _ in 0..3 {
        let r = send(&router, Method::POST, "/v1/compile", Some(body.clone()), &alpha).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    }
    let limited = send(&router, Method::POST, "/v1/compile", Some(body.clone()), &alpha).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(limited.header("retry-after").is_some());
    let beta = [("authorization", "Bearer secret-b")];
    let r = send(&router, Method::POST, "/v1/compile", Some(body), &beta).await;
    assert_eq!(r.status, StatusCode::OK, "teams have budgets of their own");
    let key = r.json()["key"].as_str().unwrap().to_string();
    let r = send(&router, Method::DELETE, &format!("/v1/compilations/{key}"), None, &beta).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r =
        send(&router, Method::DELETE, &format!("/v1/compilations/{key}"), None, &[("authorization", "Bearer root")])
            .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(get(&router, "/healthz").await.status, StatusCode::OK, "operations need no token");
}

#[tokio::test]
async fn the_database_tier_evicts_least_recently_used_compilations_beyond_its_cap() {
    let db = TestDb::new().await;
    // 1 MiB: a few report-only compilations fit, a shared library (megabytes) does not.
    let config = Config { db_cache_mb: 1, ..Config::embedded() };
    let state = with_database_config(&db, config).await;
    let router = app(state.clone());
    let small = post(&router, "/v1/compile", request(&["report"])).await.json();
    let big = post(&router, "/v1/compile", request(&["shared"])).await.json();
    let store = state.cache.store().unwrap();
    let rows: Vec<(String,)> = sqlx::query_as("SELECT key FROM compilations").fetch_all(store.pool()).await.unwrap();
    let keys: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert!(keys.contains(&small["key"].as_str().unwrap()), "{keys:?}");
    assert!(!keys.contains(&big["key"].as_str().unwrap()), "the oversized entry went: {keys:?}");
}

#[test]
fn the_committed_openapi_document_matches_the_code() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../openapi/openapi.json");
    let current = withloop_server::api::openapi_json();
    if std::env::var_os("WITHLOOP_BLESS").is_some() {
        std::fs::write(&path, &current).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == current,
        "openapi/openapi.json differs from the API in the code; regenerate it with \
         `cargo run -p withloop-server -- --print-openapi > openapi/openapi.json` (or WITHLOOP_BLESS=1 cargo test)"
    );
}

/// What a client generated from the document needs to be true: path
/// parameters are in their paths, every `/v1` operation says what the layers
/// answer (401, 429, 503, 504) and that a bearer token may be needed, the
/// POSTs their 415, and run values' schema admits scalars.
#[test]
fn the_openapi_document_describes_parameters_layers_and_run_values() {
    let doc: Value = serde_json::from_str(&withloop_server::api::openapi_json()).unwrap();
    assert!(doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer", "{}", doc["components"]);
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for p in op["parameters"].as_array().into_iter().flatten() {
                if p["in"] == "path" {
                    let name = p["name"].as_str().unwrap();
                    assert!(path.contains(&format!("{{{name}}}")), "{method} {path}: path parameter `{name}`");
                }
            }
            let statuses = op["responses"].as_object().unwrap();
            assert!(statuses.contains_key("504"), "{method} {path}");
            if path.starts_with("/v1/") {
                for s in ["401", "429", "503"] {
                    assert!(statuses.contains_key(s), "{method} {path}: {s}");
                }
                assert!(op["security"].is_array(), "{method} {path}");
            }
            if method == "post" {
                assert!(statuses.contains_key("415"), "{method} {path}");
            }
        }
    }
    let value = &doc["components"]["schemas"]["RunValue"]["anyOf"];
    assert!(value.as_array().unwrap().iter().any(|s| s["type"] == "number"), "{value}");
    let results = &doc["components"]["schemas"]["RunResponse"]["properties"]["results"]["items"];
    assert_eq!(results["$ref"], "#/components/schemas/RunValue");
    let artifact = &doc["paths"]["/v1/artifacts/{key}/{kind}"]["get"]["responses"]["200"]["content"];
    assert!(artifact["text/x-c"].is_object() && artifact["application/x-object"].is_object(), "{artifact}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_database_async_compiles_go_through_the_postgres_queue() {
    let db = TestDb::new().await;
    let state = with_database(&db).await;
    let router = app(state.clone());
    // No worker yet: the job waits in the queue.
    let accepted = post(&router, "/v1/compile?async=true", request(&["object", "report"])).await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED, "{}", accepted.text());
    let accepted = accepted.json();
    let job_url = accepted["job_url"].as_str().unwrap().to_string();
    let queued = get(&router, &job_url).await.json();
    assert_eq!(queued["status"], "queued");
    assert_eq!(queued["kind"], "compile");
    let workers = state.spawn_workers().expect("a server with a database runs workers");
    let view = finished_job(&router, &job_url).await;
    assert_eq!(view["status"], "done", "{view}");
    assert_eq!(view["result"]["key"], accepted["key"]);
    assert_eq!(view["attempts"], 1);
    let live = get(&router, "/v1/workers").await.json();
    assert_eq!(live.as_array().unwrap().len(), 1, "{live}");
    assert_eq!(live[0]["capabilities"], json!(["cpu"]));
    let events = get(&router, accepted["events_url"].as_str().unwrap()).await.text();
    let names: Vec<&str> = events.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
    assert_eq!(names.first(), Some(&"queued"));
    assert_eq!(names.last(), Some(&"done"));
    assert!(events.contains("\"phase\":\"codegen:object\""), "{events}");
    // The compilation is in the cache the synchronous API reads.
    let again = post(&router, "/v1/compile", request(&["object", "report"])).await.json();
    assert_eq!(again["key"], accepted["key"]);
    assert_eq!(again["cache"], "memory");
    // Cancelling a finished job changes nothing; an unknown one is 404.
    let r = send(&router, Method::DELETE, &job_url, None, &[]).await;
    assert_eq!(r.json()["status"], "done");
    assert_eq!(send(&router, Method::DELETE, "/v1/jobs/nope", None, &[]).await.status, StatusCode::NOT_FOUND);
    workers.stop().await;
    assert!(get(&router, "/v1/workers").await.json().as_array().unwrap().is_empty(), "deregistered on stop");
}

#[tokio::test]
async fn embedded_jobs_can_be_cancelled_and_the_embedded_pool_is_listed() {
    let router = app(embedded());
    let workers = get(&router, "/v1/workers").await.json();
    assert_eq!(workers[0]["id"], "embedded");
    let accepted = post(&router, "/v1/compile?async=true", request(&["shared"])).await.json();
    let job_url = accepted["job_url"].as_str().unwrap();
    let r = send(&router, Method::DELETE, job_url, None, &[]).await.json();
    // Either it was still running (cancelled) or it had finished (done).
    assert!(r["status"] == "cancelled" || r["status"] == "done", "{r}");
    if r["status"] == "cancelled" {
        assert_eq!(r["error"]["code"], "cancelled");
    }
}

/// An embedded server whose sandboxed runs use the real server binary.
fn runner_state(max_body_kb: usize) -> AppState {
    let config =
        Config { runner: Some(env!("CARGO_BIN_EXE_withloop-server").into()), max_body_kb, ..Config::embedded() };
    AppState::new(config, None).unwrap()
}

/// The status of the job at `url` once it is `status` (within 30 s).
async fn job_reaches(router: &axum::Router, url: &str, status: &str) {
    for _ in 0..1200 {
        if get(router, url).await.json()["status"] == status {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the job at {url} did not become {status} within 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_bounded_in_number_and_limits_and_a_shutdown_ends_event_streams() {
    let config = Config {
        runner: Some(env!("CARGO_BIN_EXE_withloop-server").into()),
        max_runs: Some(1),
        max_run_wall_ms: 60_000,
        ..Config::embedded()
    };
    let state = AppState::new(config, None).unwrap();
    let router = app(state.clone());
    let spin = "int main() { i = 0; while (true) { i = i + 1; } return i; }";
    let mut body = run_body(spin, "main", json!([]));
    body["limits"] = json!({ "wall_ms": 1_000_000_000_000_000u64 });
    let r = post(&router, "/v1/run", body.clone()).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    assert!(
        r.text().contains("`limits.wall_ms` is 1000000000000000; this server allows at most 60000"),
        "{}",
        r.text()
    );
    // One run slot: the second run waits queued until the first ends.
    body["limits"] = json!({ "wall_ms": 30_000 });
    let first = post(&router, "/v1/run?async=true", body.clone()).await.json();
    let second = post(&router, "/v1/run?async=true", body).await.json();
    let (first, second) = (first["job_url"].as_str().unwrap(), second["job_url"].as_str().unwrap());
    job_reaches(&router, first, "running").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(get(&router, second).await.json()["status"], "queued");
    send(&router, Method::DELETE, first, None, &[]).await;
    job_reaches(&router, second, "running").await;
    // A follower of a job that will not end soon: the shutdown ends its stream.
    let events = format!("{second}/events");
    let follower = tokio::spawn({
        let router = router.clone();
        async move { get(&router, &events).await.text() }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    state.begin_shutdown();
    let text = tokio::time::timeout(Duration::from_secs(10), follower).await.expect("the stream ended").unwrap();
    assert!(text.contains("event: queued") && text.contains("event: running"), "{text}");
    send(&router, Method::DELETE, second, None, &[]).await;
}

fn run_body(source: &str, entry: &str, args: Value) -> Value {
    json!({ "compile": { "source": source }, "entry": entry, "args": args })
}

const SCALE: &str = "use Array: all;\nuse StdIO: all;\n\
double[.] scale(double[.] a, double s)\n{\n    printf(\"scaling %d\\n\", shape(a)[0]);\n    return { iv -> a[iv] * s };\n}\n";

#[tokio::test]
async fn runs_return_results_output_and_the_variant_that_ran() {
    let router = app(runner_state(2048));
    let body = run_body(SCALE, "scale", json!([{ "shape": [3], "data": [1, 2, 3] }, 2.5]));
    let r = post(&router, "/v1/run", body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let v = r.json();
    assert_eq!(v["results"][0], json!({ "type": "double", "shape": [3], "data": [2.5, 5.0, 7.5] }));
    assert_eq!(v["stdout"], "scaling 3\n");
    assert_eq!(v["variant"]["signature"], "(double[.], double) -> double[.]");
    assert_eq!(v["variant"]["specialised"], false);
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    if root {
        assert_eq!(v["network_isolated"], true, "as root the run gets a network namespace of its own");
    }
    // With a shape hint the specialised variant runs; by key, the same program.
    let mut hinted = run_body(SCALE, "scale", json!([{ "shape": [3], "data": [1, 2, 3] }, 2.0]));
    hinted["compile"]["shapes"] = json!({ "scale": { "a": "double[3]" } });
    let v = post(&router, "/v1/run", hinted).await.json();
    assert_eq!(v["variant"]["signature"], "(double[3], double) -> double[3]", "{v}");
    assert_eq!(v["variant"]["specialised"], true);
    let by_key = json!({ "key": v["key"], "entry": "scale", "args": [{ "shape": [2], "data": [1, 1] }, 3.0] });
    let r = post(&router, "/v1/run", by_key).await.json();
    assert_eq!(r["results"][0]["data"], json!([3.0, 3.0]), "{r}");
    assert_eq!(r["variant"]["specialised"], false, "double[2] runs the generic instance");
    // Bad arguments are the caller's error, located by index.
    let r = post(&router, "/v1/run", run_body(SCALE, "scale", json!([{ "shape": [2], "data": [1] }, 1.0]))).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text().contains("args[0]"), "{}", r.text());
    let r = post(&router, "/v1/run", run_body(SCALE, "nope", json!([]))).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = post(&router, "/v1/run", json!({ "key": "0".repeat(64) })).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn without_generic_code_only_the_hinted_shapes_are_compiled_and_run() {
    let router = app(runner_state(2048));
    let hints = json!({ "scale": { "a": "double[3]" } });
    let mut body = run_body(SCALE, "scale", json!([{ "shape": [3], "data": [1, 2, 3] }, 2.0]));
    body["compile"]["shapes"] = hints.clone();
    body["compile"]["options"] = json!({ "generic": false });
    let v = post(&router, "/v1/run", body).await.json();
    assert_eq!(v["results"][0]["data"], json!([2.0, 4.0, 6.0]), "{v}");
    assert_eq!(v["variant"]["signature"], "(double[3], double) -> double[3]", "{v}");
    // The generic instance is neither exported nor compiled; the key says why it differs.
    let compiled = post(
        &router,
        "/v1/compile",
        json!({ "source": SCALE, "shapes": hints, "options": { "generic": false }, "emit": ["header"] }),
    )
    .await
    .json();
    assert_eq!(compiled["components"]["options"]["generic"], "false");
    let symbols: Vec<&str> =
        compiled["variants"].as_array().unwrap().iter().filter_map(|x| x["c_symbol"].as_str()).collect();
    assert_eq!(symbols, ["wl_scale__d_3__d"], "{compiled}");
    let header = get(&router, compiled["artifacts"]["header"]["url"].as_str().unwrap()).await.text();
    assert!(!header.contains("wl_scale__d_X__d"), "{header}");
    let with_generic =
        post(&router, "/v1/compile", json!({ "source": SCALE, "shapes": { "scale": { "a": "double[3]" } } }))
            .await
            .json();
    assert_ne!(with_generic["key"], compiled["key"]);
    assert!(with_generic["components"]["options"].get("generic").is_none(), "default keys are as before");
    // Another shape has no instance to run: a run-time error at the entry.
    let by_key = json!({ "key": v["key"], "entry": "scale", "args": [{ "shape": [2], "data": [1, 1] }, 3.0] });
    let r = post(&router, "/v1/run", by_key).await.json();
    assert_eq!(r["error"]["code"], "runtime_error", "{r}");
    assert_eq!(r["error"]["diagnostics"][0]["code"], "R0004", "{r}");
    let message = r["error"]["diagnostics"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("compiled for its shape hints only"), "{r}");
}

#[tokio::test]
async fn runaway_programs_hit_their_limits_and_the_server_keeps_serving() {
    let router = app(runner_state(2048));
    let spin = "int main() { i = 0; while (true) { i = i + 1; } return i; }";
    let mut body = run_body(spin, "main", json!([]));
    body["limits"] = json!({ "wall_ms": 1500 });
    let started = std::time::Instant::now();
    let r = post(&router, "/v1/run", body).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(r.json()["error"]["code"], "time_limit");
    assert!(started.elapsed() < Duration::from_secs(10));
    let mut body = run_body(spin, "main", json!([]));
    body["limits"] = json!({ "cpu_ms": 1000, "wall_ms": 20000 });
    let r = post(&router, "/v1/run", body).await;
    assert_eq!(r.json()["error"]["code"], "time_limit", "the CPU limit");

    // The loop-carried update keeps the array alive: `sum(genarray(shp, 1.0))` alone folds to
    // a loop over the constant and allocates nothing.
    let hog = "use Array: all;\nint main() { a = genarray([125000, 100000], 1.0);\n\
               for (i = 1; i < 125000; i++) { a[[i, 0]] = a[[i - 1, 0]] + a[[i, 1]]; }\n\
               return toi(sum(a)); }";
    let r = post(&router, "/v1/run", run_body(hog, "main", json!([]))).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(r.json()["error"]["code"], "memory_limit", "{}", r.text());

    // Under the address-space limit itself (800 MB in 512 MiB), not the element cap.
    let big = "use Array: all;\nint fill(int n) { a = genarray([n], 1.0);\n\
               for (i = 1; i < n; i++) { a[[i]] = a[[i - 1]] + a[[i]]; }\n\
               return toi(a[[n - 1]]); }";
    let mut body = run_body(big, "fill", json!([100_000_000]));
    body["limits"] = json!({ "memory_mb": 512 });
    let r = post(&router, "/v1/run", body).await;
    assert_eq!(r.json()["error"]["code"], "memory_limit", "{}", r.text());

    let chatty =
        "use StdIO: all;\nint main() { for (i = 0; i < 100000; i++) { printf(\"line %d\\n\", i); } return 0; }";
    let mut body = run_body(chatty, "main", json!([]));
    body["limits"] = json!({ "output_kb": 1 });
    let r = post(&router, "/v1/run", body).await;
    assert_eq!(r.json()["error"]["code"], "output_limit", "{}", r.text());

    let oob = "int main() { a = [1, 2, 3]; return a[[5]]; }";
    let r = post(&router, "/v1/run", run_body(oob, "main", json!([]))).await.json();
    assert_eq!(r["error"]["code"], "runtime_error");
    assert_eq!(r["error"]["diagnostics"][0]["code"], "R0001");
    assert_eq!(r["error"]["diagnostics"][0]["at"]["column"], 36);

    let ok = post(&router, "/v1/run", run_body("int main() { return 42; }", "main", json!([]))).await.json();
    assert_eq!(ok["results"], json!([42]));
}

#[tokio::test]
async fn expressions_too_deep_are_422_and_long_chains_run() {
    let router = app(runner_state(2048));
    // 100000 subtractions: one located error, not a stack overflow (which
    // aborts the whole process).
    let deep = format!("int main() {{ return 1{}; }}", " - 1".repeat(100_000));
    let r = post(&router, "/v1/compile", json!({ "source": deep, "file_name": "deep.sac" })).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text());
    let diagnostics = r.json()["error"]["diagnostics"].as_array().unwrap().clone();
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    assert_eq!(diagnostics[0]["code"], "E0107");
    assert_eq!(diagnostics[0]["at"]["line"], 1);
    // 1000 compile and run in the run's child process, under a memory limit
    // that its deep stack counts towards.
    let long = format!("int main() {{ x = 5; return x{}; }}", " - 1".repeat(1000));
    let mut body = run_body(&long, "main", json!([]));
    body["limits"] = json!({ "memory_mb": 512 });
    let r = post(&router, "/v1/run", body).await;
    assert_eq!(r.json()["results"], json!([-995]), "{}", r.text());
}

#[tokio::test]
async fn a_million_doubles_round_trip_through_npy_bit_exactly() {
    use base64::Engine as _;
    let router = app(runner_state(64 * 1024));
    let n = 1_000_000;
    let data: Vec<f64> = (0..n).map(|i| ((i as f64) * 0.618).sin() * 1e-300 + (i as f64)).collect();
    let value = compiler_core::interp::value::Value::from_parts(
        vec![n],
        compiler_core::interp::value::Elems::Double(data.clone()),
    );
    let npy = withloop_worker::npy::encode(&value).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&npy);
    let source = "double[.] same(double[.] a) { return a; }";
    let mut body = run_body(source, "same", json!([{ "npy": b64 }]));
    body["results"] = json!("npy");
    let r = post(&router, "/v1/run", body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", &r.text()[..r.text().len().min(500)]);
    let back = r.json()["results"][0]["npy"].as_str().unwrap().to_string();
    let bytes = base64::engine::general_purpose::STANDARD.decode(back).unwrap();
    let value = withloop_worker::npy::decode(&bytes).unwrap();
    let compiler_core::interp::value::Value::Array(a) = value else { panic!("an array") };
    let compiler_core::interp::value::Elems::Double(out) = &a.elems else { panic!("doubles") };
    assert_eq!(out.len(), n);
    assert!(out.iter().zip(&data).all(|(x, y)| x.to_bits() == y.to_bits()), "bit-exact");
}

#[tokio::test]
async fn multipart_runs_take_npy_files_as_arguments() {
    let router = app(runner_state(2048));
    let a = compiler_core::interp::value::Value::from_parts(
        vec![3],
        compiler_core::interp::value::Elems::Double(vec![1.0, 2.0, 3.0]),
    );
    let npy = withloop_worker::npy::encode(&a).unwrap();
    let request = json!({ "compile": { "source": SCALE }, "entry": "scale", "args": [{ "npy_part": "a" }, 2.0] });
    let form = |parts: &[(&str, &str, &[u8])]| {
        let mut body = Vec::new();
        for (name, ty, data) in parts {
            body.extend_from_slice(
                format!("--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{name}\"\r\nContent-Type: {ty}\r\n\r\n")
                    .as_bytes(),
            );
            body.extend_from_slice(data);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"--XyZ--\r\n");
        body
    };
    let json_bytes = request.to_string().into_bytes();
    let body = form(&[("request", "application/json", &json_bytes), ("a", "application/octet-stream", &npy)]);
    let r = send_raw(&router, "/v1/run", "multipart/form-data; boundary=XyZ", body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["results"][0]["data"], json!([2.0, 4.0, 6.0]));
    let body = form(&[("request", "application/json", &json_bytes)]);
    let r = send_raw(&router, "/v1/run", "multipart/form-data; boundary=XyZ", body).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text().contains("part `a`"), "{}", r.text());
    // Past the body limit: 413, as a JSON body (it was 400 `invalid_request`).
    let big = vec![0u8; 3 << 20];
    let body = form(&[("request", "application/json", &json_bytes), ("a", "application/octet-stream", &big)]);
    let r = send_raw(&router, "/v1/run", "multipart/form-data; boundary=XyZ", body).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "payload_too_large");
}

#[tokio::test]
async fn a_nul_in_a_program_is_a_located_400() {
    // Text only; the database's `jsonb` could not hold the request either
    // (a queued job once answered 503 in Postgres mode).
    let router = app(runner_state(2048));
    let source = "int main()\n{ /* \u{0} */ return 0; }";
    let r = post(&router, "/v1/compile?async=true", json!({ "source": source })).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "invalid_request");
    let message = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(message.contains("`source` holds a NUL character (line 2, column 6)"), "{message}");
    let r = post(
        &router,
        "/v1/compile",
        json!({ "source": "#include \"a.h\"\nint main() { return A; }", "includes": { "a.h": "#define A 1\u{0}" } }),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    assert!(r.text().contains("includes[\\\"a.h\\\"]"), "{}", r.text());
}
