//! The Postgres job queue with real `withloop-worker` processes: every job
//! exactly once across workers, a killed worker's job finished by another,
//! retries into the dead letter, cancellation, compile errors not retried.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use withloop_worker::jobs::{JobSpec, JobStatus};
use withloop_worker::queue::PgQueue;
use withloop_worker::request::CompileRequest;
use withloop_worker::store::Store;
use withloop_worker::testing::TestDb;

/// A `withloop-worker` process, killed when dropped.
struct Worker {
    child: Child,
    id: String,
}

impl Worker {
    fn start(db: &TestDb, args: &[&str]) -> Worker {
        let mut child = Command::new(env!("CARGO_BIN_EXE_withloop-worker"))
            .args(args)
            .env("DATABASE_URL", &db.url)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start withloop-worker");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        let id = first
            .strip_prefix("withloop-worker ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("the worker did not introduce itself: {first:?}"))
            .to_string();
        std::thread::spawn(move || for _ in lines {});
        Worker { child, id }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn compile_job(source: &str) -> JobSpec {
    let request: CompileRequest =
        serde_json::from_value(json!({ "source": source, "emit": ["report"] })).expect("a compile request");
    JobSpec::Compile { request, bypass_cache: false }
}

async fn queue(db: &TestDb, lease: Duration) -> PgQueue {
    let store = Store::connect(&db.url, 1 << 30).await.expect("connect and migrate");
    PgQueue::new(store.pool().clone(), lease)
}

/// Waits until `done` says so, or panics after `limit`.
async fn wait_for<F, Fut>(limit: Duration, what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !done().await {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn count(queue: &PgQueue, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(queue.pool()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_run_two_hundred_jobs_each_exactly_once() {
    let db = TestDb::new().await;
    let queue = queue(&db, Duration::from_secs(15)).await;
    let mut ids = Vec::new();
    for n in 0..200 {
        ids.push(queue.enqueue(&compile_job(&format!("int main() {{ return {n}; }}")), None).await.unwrap());
    }
    let a = Worker::start(&db, &["--concurrency", "2"]);
    let b = Worker::start(&db, &["--concurrency", "2"]);
    wait_for(Duration::from_secs(240), "200 jobs", || async {
        count(&queue, "SELECT count(*) FROM jobs WHERE status IN ('done', 'failed', 'dead')").await == 200
    })
    .await;
    assert_eq!(count(&queue, "SELECT count(*) FROM jobs WHERE status = 'done'").await, 200);
    assert_eq!(count(&queue, "SELECT count(*) FROM jobs WHERE attempts <> 1").await, 0, "no job ran twice");
    // Every job's result is its own program's compilation.
    for (n, id) in ids.iter().enumerate().step_by(37) {
        let view = queue.view(id).await.unwrap().unwrap();
        assert_eq!(view.status, JobStatus::Done);
        let result = view.result.unwrap();
        assert_eq!(result["components"]["language"], "sac");
        assert!(result["report"]["variants"].as_array().is_some(), "job {n}");
    }
    let distinct: i64 = count(&queue, "SELECT count(DISTINCT result->>'key') FROM jobs").await;
    assert_eq!(distinct, 200, "200 different programs, 200 different compilations");
    let per_worker: Vec<(String, i64)> = sqlx::query_as("SELECT leased_by, count(*) FROM jobs GROUP BY leased_by")
        .fetch_all(queue.pool())
        .await
        .unwrap();
    let total: i64 = per_worker.iter().map(|(_, n)| n).sum();
    assert_eq!(total, 200);
    assert!(per_worker.iter().any(|(w, _)| *w == a.id) && per_worker.iter().any(|(w, _)| *w == b.id), "{per_worker:?}");
    let done: i64 = count(&queue, "SELECT sum(jobs_done)::bigint FROM workers").await;
    assert_eq!(done, 200);
    let workers = queue.workers().await.unwrap();
    assert_eq!(workers.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_job_goes_back_to_the_queue_and_another_finishes_it() {
    let db = TestDb::new().await;
    let queue = queue(&db, Duration::from_secs(1)).await;
    // This worker holds every job it takes for a minute before running it.
    let mut stalled = Worker::start(&db, &["--lease-secs", "1", "--hold-ms", "60000", "--poll-ms", "50"]);
    let id = queue.enqueue(&compile_job("int main() { return 7; }"), None).await.unwrap();
    wait_for(Duration::from_secs(30), "the first worker to take the job", || async {
        queue.view(&id).await.unwrap().unwrap().worker.as_deref() == Some(stalled.id.as_str())
    })
    .await;
    stalled.kill(); // SIGKILL while it holds the job
    let rescuer = Worker::start(&db, &["--lease-secs", "1", "--poll-ms", "50"]);
    wait_for(Duration::from_secs(60), "the second worker to finish the job", || async {
        queue.view(&id).await.unwrap().unwrap().status.finished()
    })
    .await;
    let view = queue.view(&id).await.unwrap().unwrap();
    assert_eq!(view.status, JobStatus::Done);
    assert_eq!(view.attempts, 2);
    assert_eq!(view.worker.as_deref(), Some(rescuer.id.as_str()));
    let expired = format!("lease of {} expired", stalled.id);
    assert!(
        view.events.iter().any(|e| e.status == JobStatus::Queued && e.phase.as_deref() == Some(expired.as_str())),
        "{:?}",
        view.events
    );
    assert_eq!(view.events.iter().filter(|e| e.status == JobStatus::Done).count(), 1, "done once");
}

#[tokio::test]
async fn jobs_whose_workers_keep_dying_end_in_the_dead_letter() {
    let db = TestDb::new().await;
    let queue = queue(&db, Duration::from_millis(200)).await;
    let id = queue.enqueue(&compile_job("int main() { return 1; }"), None).await.unwrap();
    let cpu = vec!["cpu".to_string()];
    for attempt in 1..=3 {
        let leased = queue.dequeue("ghost", &cpu).await.unwrap().expect("the job is available again");
        assert_eq!(leased.attempts, attempt);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(queue.reap().await.unwrap(), 1);
    }
    let view = queue.view(&id).await.unwrap().unwrap();
    assert_eq!(view.status, JobStatus::Dead);
    assert!(view.error.unwrap().message.contains("ghost stopped renewing its lease"));
    assert!(queue.dequeue("ghost", &cpu).await.unwrap().is_none(), "dead jobs are not taken");
    // A worker that lost its lease cannot record an outcome.
    assert!(!queue.finish(&id, "ghost", JobStatus::Done, Some(&json!({})), None).await.unwrap());
}

#[tokio::test]
async fn infrastructure_failures_retry_with_backoff_and_capabilities_route_jobs() {
    let db = TestDb::new().await;
    let queue = queue(&db, Duration::from_secs(10)).await;
    let id = queue.enqueue(&compile_job("int main() { return 1; }"), None).await.unwrap();
    assert!(queue.dequeue("gpu-only", &["gpu".to_string()]).await.unwrap().is_none(), "a cpu job needs a cpu worker");
    let cpu = vec!["cpu".to_string()];
    queue.dequeue("w", &cpu).await.unwrap().unwrap();
    let error = withloop_worker::failure::Failure::transient("the disk is full").body;
    assert_eq!(queue.retry(&id, "w", &error).await.unwrap(), Some(JobStatus::Queued));
    assert!(queue.dequeue("w", &cpu).await.unwrap().is_none(), "not before its backoff");
    sqlx::query("UPDATE jobs SET run_after = now()").execute(queue.pool()).await.unwrap();
    assert_eq!(queue.dequeue("w", &cpu).await.unwrap().unwrap().attempts, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compile_errors_fail_at_once_and_cancelled_jobs_are_not_run() {
    let db = TestDb::new().await;
    let queue = queue(&db, Duration::from_secs(10)).await;
    let cancelled = queue.enqueue(&compile_job("int main() { return 2; }"), None).await.unwrap();
    assert_eq!(queue.cancel(&cancelled).await.unwrap(), Some(JobStatus::Cancelled));
    let bad = queue.enqueue(&compile_job("int main() { return x; }"), None).await.unwrap();
    let _worker = Worker::start(&db, &["--poll-ms", "50"]);
    wait_for(Duration::from_secs(60), "the bad job to fail", || async {
        queue.view(&bad).await.unwrap().unwrap().status.finished()
    })
    .await;
    let view = queue.view(&bad).await.unwrap().unwrap();
    assert_eq!(view.status, JobStatus::Failed);
    assert_eq!(view.attempts, 1, "the program's errors are not retried");
    let error = view.error.unwrap();
    assert_eq!(error.code, "compile_error");
    assert_eq!(error.diagnostics.unwrap()[0].code, "E0200");
    let view = queue.view(&cancelled).await.unwrap().unwrap();
    assert_eq!(view.status, JobStatus::Cancelled);
    assert_eq!(view.attempts, 0);

    // Compile jobs are idempotent: running one again is a cache hit.
    let mut results = Vec::new();
    for round in 0..2 {
        if round == 1 {
            // The database tier lost the key (evicted, or purged by another
            // server): the worker's memory hit must put it back, for the API
            // servers that serve the job's artifact URLs read only the database.
            sqlx::query("DELETE FROM compilations").execute(queue.pool()).await.unwrap();
        }
        let id = queue.enqueue(&compile_job("int main() { return 3; }"), None).await.unwrap();
        wait_for(Duration::from_secs(60), "the compile job", || async {
            queue.view(&id).await.unwrap().unwrap().status.finished()
        })
        .await;
        results.push(queue.view(&id).await.unwrap().unwrap().result.expect("a result"));
    }
    assert_eq!(results[0]["cache"], "miss");
    assert_eq!(results[1]["cache"], "memory", "the same worker still holds it in memory");
    assert_eq!(results[0]["key"], results[1]["key"]);
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM compilations WHERE key = $1")
        .bind(results[1]["key"].as_str().unwrap())
        .fetch_one(queue.pool())
        .await
        .unwrap();
    assert_eq!(stored, 1, "a memory hit of a job is in the database tier again");
}

/// Sandboxed runs the process `parent` has going now.
fn sandboxed_children(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // The command name is in parentheses and may contain spaces.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else { continue };
        let ppid: Option<u32> = after.split_whitespace().nth(1).and_then(|p| p.parse().ok());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let zombie = after.starts_with('Z');
        if ppid == Some(parent) && !zombie && String::from_utf8_lossy(&cmdline).contains("--exec-run") {
            out.push(pid);
        }
    }
    out
}

#[tokio::test]
async fn finished_jobs_are_deleted_after_the_retention_period() {
    let db = TestDb::new().await;
    let queue = queue(&db, Duration::from_secs(10)).await;
    let old = queue.enqueue(&compile_job("int main() { return 1; }"), None).await.unwrap();
    let recent = queue.enqueue(&compile_job("int main() { return 2; }"), None).await.unwrap();
    let waiting = queue.enqueue(&compile_job("int main() { return 3; }"), None).await.unwrap();
    queue.cancel(&old).await.unwrap();
    queue.cancel(&recent).await.unwrap();
    let age = withloop_worker::queue::FINISHED_JOB_RETENTION + Duration::from_secs(60);
    sqlx::query("UPDATE jobs SET finished_at = now() - $2 * interval '1 second' WHERE id = $1")
        .bind(&old)
        .bind(age.as_secs() as i64)
        .execute(queue.pool())
        .await
        .unwrap();
    queue.reap().await.unwrap();
    assert!(queue.view(&old).await.unwrap().is_none(), "past the retention period");
    assert_eq!(queue.view(&recent).await.unwrap().unwrap().status, JobStatus::Cancelled);
    assert_eq!(queue.view(&waiting).await.unwrap().unwrap().status, JobStatus::Queued);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_told_to_stop_finishes_its_job_and_takes_no_other() {
    let db = TestDb::new().await;
    let queue = queue(&db, Duration::from_secs(10)).await;
    let mut worker = Worker::start(&db, &["--poll-ms", "50", "--concurrency", "1"]);
    let pid = worker.child.id();
    let spin = "int main() { i = 0; while (true) { i = i + 1; } return i; }";
    let running = queue.enqueue(&run_job(spin, json!({ "wall_ms": 3000 })), None).await.unwrap();
    wait_for(Duration::from_secs(60), "the program to start", || async { !sandboxed_children(pid).is_empty() }).await;
    let waiting = queue.enqueue(&compile_job("int main() { return 4; }"), None).await.unwrap();
    let stopped = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
    assert!(stopped.success());
    let exit = tokio::task::spawn_blocking(move || worker.child.wait()).await.unwrap().unwrap();
    assert!(exit.success(), "{exit:?}");
    // The running job ended (at its limit), the queued one was left for others.
    assert!(queue.view(&running).await.unwrap().unwrap().status.finished());
    assert_eq!(queue.view(&waiting).await.unwrap().unwrap().status, JobStatus::Queued);
}

/// Whether process `pid` is still running (not gone, not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rfind(')').is_some_and(|i| !stat[i + 2..].starts_with('Z')))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_does_not_outlive_its_killed_worker() {
    let db = TestDb::new().await;
    let queue = queue(&db, Duration::from_secs(10)).await;
    let mut worker = Worker::start(&db, &["--poll-ms", "50"]);
    let pid = worker.child.id();
    let spin = "int main() { i = 0; while (true) { i = i + 1; } return i; }";
    queue.enqueue(&run_job(spin, json!({ "wall_ms": 120000, "cpu_ms": 120000 })), None).await.unwrap();
    wait_for(Duration::from_secs(60), "the program to start", || async { !sandboxed_children(pid).is_empty() }).await;
    let children = sandboxed_children(pid);
    // `kill -9`: the worker cannot kill its child; the child notices.
    worker.kill();
    wait_for(Duration::from_secs(2), "the orphaned program to exit", || async { !children.iter().any(|&c| alive(c)) })
        .await;
}

fn run_job(source: &str, limits: serde_json::Value) -> JobSpec {
    let request = serde_json::from_value(json!({ "compile": { "source": source }, "limits": limits })).unwrap();
    JobSpec::Run { request, key: "test".into() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_jobs_are_sandboxed_time_limited_and_cancelled_by_killing_the_program() {
    let db = TestDb::new().await;
    let queue = queue(&db, Duration::from_secs(10)).await;
    // A 3 s lease: the worker heartbeats every second.
    let worker = Worker::start(&db, &["--poll-ms", "50", "--concurrency", "2", "--lease-secs", "3"]);
    let pid = worker.child.id();
    let spin = "int main() { i = 0; while (true) { i = i + 1; } return i; }";

    // An infinite loop under a 1.5 s limit fails the job; the worker lives on.
    let limited = queue.enqueue(&run_job(spin, json!({ "wall_ms": 1500 })), None).await.unwrap();
    wait_for(Duration::from_secs(60), "the limited run to fail", || async {
        queue.view(&limited).await.unwrap().unwrap().status.finished()
    })
    .await;
    let view = queue.view(&limited).await.unwrap().unwrap();
    assert_eq!(view.status, JobStatus::Failed);
    assert_eq!(view.error.unwrap().code, "time_limit");

    // A running program is killed within a second of its job's cancellation.
    let endless = queue.enqueue(&run_job(spin, json!({ "wall_ms": 120000, "cpu_ms": 120000 })), None).await.unwrap();
    wait_for(Duration::from_secs(60), "the program to start", || async { !sandboxed_children(pid).is_empty() }).await;
    assert_eq!(queue.cancel(&endless).await.unwrap(), Some(JobStatus::Cancelled));
    let cancelled_at = Instant::now();
    wait_for(Duration::from_secs(1), "the program to be killed", || async { sandboxed_children(pid).is_empty() }).await;
    assert!(cancelled_at.elapsed() <= Duration::from_secs(1));
    assert_eq!(queue.view(&endless).await.unwrap().unwrap().status, JobStatus::Cancelled);

    // A cancellation whose notification is lost (the listener was
    // reconnecting after a database outage): the heartbeat finds it, within
    // a third of a lease (1 s here).
    let unheard = queue.enqueue(&run_job(spin, json!({ "wall_ms": 120000, "cpu_ms": 120000 })), None).await.unwrap();
    wait_for(Duration::from_secs(60), "the program to start", || async { !sandboxed_children(pid).is_empty() }).await;
    sqlx::query("UPDATE jobs SET status = 'cancelled', lease_expires_at = NULL WHERE id = $1")
        .bind(&unheard)
        .execute(queue.pool())
        .await
        .unwrap();
    wait_for(Duration::from_secs(3), "the unheard cancellation's program to be killed", || async {
        sandboxed_children(pid).is_empty()
    })
    .await;

    // A program printing a NUL, which Postgres' `jsonb` cannot store: the job
    // fails with the reason (it once stayed `running`, its lease renewed
    // for ever by the worker's heartbeat).
    let nul = "use StdIO: all; int main() { printf(\"a%cb\\n\", (char)0); return 1; }";
    let stored = queue.enqueue(&run_job(nul, json!({})), None).await.unwrap();
    wait_for(Duration::from_secs(60), "the NUL run to end", || async {
        queue.view(&stored).await.unwrap().unwrap().status.finished()
    })
    .await;
    let view = queue.view(&stored).await.unwrap().unwrap();
    assert_eq!(view.status, JobStatus::Failed);
    let error = view.error.unwrap();
    assert_eq!(error.code, "internal");
    assert!(error.message.contains("could not be stored"), "{}", error.message);

    // And it still serves: a run with a result.
    let answer = queue.enqueue(&run_job("int main() { return 6 * 7; }", json!({})), None).await.unwrap();
    wait_for(Duration::from_secs(60), "the answer", || async {
        queue.view(&answer).await.unwrap().unwrap().status.finished()
    })
    .await;
    let view = queue.view(&answer).await.unwrap().unwrap();
    assert_eq!(view.status, JobStatus::Done, "{:?}", view.error);
    assert_eq!(view.result.unwrap()["results"], json!([42]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_heartbeat_renews_only_the_jobs_it_holds() {
    let db = TestDb::new().await;
    let queue = queue(&db, Duration::from_millis(600)).await;
    let kept = queue.enqueue(&compile_job("int main() { return 1; }"), None).await.unwrap();
    let dropped = queue.enqueue(&compile_job("int main() { return 2; }"), None).await.unwrap();
    let cpu = vec!["cpu".to_string()];
    let mut leased = Vec::new();
    while let Some(job) = queue.dequeue("w", &cpu).await.unwrap() {
        leased.push(job.id);
    }
    assert_eq!(leased.len(), 2);
    // `w` still runs `kept`; its task for `dropped` ended without a word.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(queue.worker_heartbeat("w", std::slice::from_ref(&kept)).await.unwrap(), Vec::<String>::new());
    }
    assert_eq!(queue.reap().await.unwrap(), 1, "only the job nobody holds has an expired lease");
    assert_eq!(queue.view(&kept).await.unwrap().unwrap().status, JobStatus::Running);
    assert_eq!(queue.view(&dropped).await.unwrap().unwrap().status, JobStatus::Queued);
    // A cancelled job, or one another worker took after its lease ran out,
    // is named back so that the worker stops it (its notification may be lost).
    queue.cancel(&kept).await.unwrap();
    assert_eq!(queue.worker_heartbeat("w", &[kept.clone(), dropped.clone()]).await.unwrap(), vec![kept, dropped]);
}
