//! The job queue in Postgres (tables `jobs` and `workers`, see `migrations/`).
//!
//! * **Enqueue** inserts the job and `NOTIFY withloop_jobs` in one transaction:
//!   workers hear of it at commit, never before.
//! * **Dequeue** takes the oldest queued job a worker can run with
//!   `FOR UPDATE SKIP LOCKED`, so concurrent workers never take the same row,
//!   and leases it (`leased_by`, `lease_expires_at`); the holder extends the
//!   lease by heartbeats.
//! * **Completion** only counts while the lease is the worker's own
//!   (`WHERE leased_by = me AND status = 'running'`): a worker that lost its lease
//!   (it stalled, another took over) cannot overwrite the other's result, so
//!   nothing is done twice visibly.
//! * **Failures**: the program's fault (compile errors) fails the job at once;
//!   infrastructure failures retry with exponential backoff (1 s, 2 s, 4 s, … ≤
//!   60 s) up to `max_attempts`, then the job is `dead` with the last error.
//! * **Lost workers**: [`PgQueue::reap`] (run by every worker while it polls) puts
//!   jobs whose lease expired back in the queue, or in the dead letter when
//!   out of attempts.
//! * **Cancellation** marks the job and `NOTIFY withloop_cancel, '<id>'`.

use std::time::Duration;

use serde_json::Value;
use sqlx::postgres::PgPool;
use sqlx::types::Json;
use sqlx::{Postgres, Row, Transaction};

use crate::failure::ErrorBody;
use crate::jobs::{JobEvent, JobSpec, JobStatus, JobView, WorkerView};

/// Channel workers listen on for new jobs (payload: the capability).
pub const JOBS_CHANNEL: &str = "withloop_jobs";
/// Channel announcing cancelled jobs (payload: the job id).
pub const CANCEL_CHANNEL: &str = "withloop_cancel";
/// How long a finished job stays readable (`GET /v1/jobs/{id}`); [`PgQueue::reap`]
/// deletes older ones.
pub const FINISHED_JOB_RETENTION: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// A job a worker holds.
#[derive(Clone, Debug)]
pub struct Leased {
    pub id: String,
    pub spec: JobSpec,
    pub attempts: u32,
}

/// The queue.
#[derive(Clone, Debug)]
pub struct PgQueue {
    pool: PgPool,
    /// How long a lease lasts without a heartbeat.
    pub lease: Duration,
    /// Attempts before a job is dead.
    pub max_attempts: u32,
}

impl PgQueue {
    pub fn new(pool: PgPool, lease: Duration) -> PgQueue {
        PgQueue { pool, lease, max_attempts: 3 }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    fn lease_ms(&self) -> i64 {
        self.lease.as_millis().min(i64::MAX as u128) as i64
    }

    /// Adds a job; returns its id.
    pub async fn enqueue(&self, spec: &JobSpec, key: Option<&str>) -> Result<String, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let id = self.enqueue_in(&mut tx, spec, key).await?;
        tx.commit().await?;
        Ok(id)
    }

    /// Adds a job within the caller's transaction (it becomes visible, and
    /// workers hear of it, when that commits).
    pub async fn enqueue_in(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        spec: &JobSpec,
        key: Option<&str>,
    ) -> Result<String, sqlx::Error> {
        let id = uuid::Uuid::new_v4().to_string();
        sqlx::query(
            "INSERT INTO jobs (id, kind, capability, payload, key, max_attempts, events)
             VALUES ($1, $2, $3, $4, $5, $6, jsonb_build_array(jsonb_build_object('seq', 0, 'status', 'queued', 'at_ms', 0)))",
        )
        .bind(&id)
        .bind(spec.kind())
        .bind(spec.capability())
        .bind(Json(spec))
        .bind(key)
        .bind(self.max_attempts as i32)
        .execute(&mut **tx)
        .await?;
        sqlx::query("SELECT pg_notify($1, $2)").bind(JOBS_CHANNEL).bind(spec.capability()).execute(&mut **tx).await?;
        Ok(id)
    }

    /// Leases the oldest queued job `worker` can run, if any.
    pub async fn dequeue(&self, worker: &str, capabilities: &[String]) -> Result<Option<Leased>, sqlx::Error> {
        let row = sqlx::query(&format!(
            "UPDATE jobs SET status = 'running', attempts = attempts + 1, leased_by = $1,
                 lease_expires_at = clock_timestamp() + $2 * interval '1 millisecond',
                 events = events || {event}
             WHERE id = (
                 SELECT id FROM jobs
                 WHERE status = 'queued' AND run_after <= now() AND capability = ANY($3)
                 ORDER BY created_at
                 FOR UPDATE SKIP LOCKED
                 LIMIT 1)
             RETURNING id, payload, attempts",
            event = event_sql("'running'", "'leased by ' || $1::text")
        ))
        .bind(worker)
        .bind(self.lease_ms())
        .bind(capabilities)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let id: String = row.try_get("id")?;
        let attempts: i32 = row.try_get("attempts")?;
        match row.try_get::<Json<JobSpec>, _>("payload") {
            Ok(Json(spec)) => Ok(Some(Leased { id, spec, attempts: attempts.max(0) as u32 })),
            Err(e) => {
                // A payload this worker cannot read (written by another
                // version): fail the job rather than take it again and again.
                let error = ErrorBody {
                    code: "internal".into(),
                    message: format!("the job's payload cannot be read by this worker: {e}"),
                    diagnostics: None,
                    rendered: None,
                };
                self.finish(&id, worker, JobStatus::Dead, None, Some(&error)).await?;
                Ok(None)
            }
        }
    }

    /// Extends `worker`'s lease on job `id`; false when the lease is no longer
    /// its own (expired and taken over, or the job was cancelled).
    pub async fn heartbeat(&self, id: &str, worker: &str) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(
            "UPDATE jobs SET lease_expires_at = clock_timestamp() + $3 * interval '1 millisecond'
             WHERE id = $1 AND leased_by = $2 AND status = 'running'",
        )
        .bind(id)
        .bind(worker)
        .bind(self.lease_ms())
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Records a progress event of a running job.
    pub async fn progress(&self, id: &str, worker: &str, phase: &str) -> Result<(), sqlx::Error> {
        sqlx::query(&format!(
            "UPDATE jobs SET events = events || {} WHERE id = $1 AND leased_by = $2 AND status = 'running'",
            event_sql("'running'", "$3::text")
        ))
        .bind(id)
        .bind(worker)
        .bind(phase)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Finishes a job `worker` holds: `done` with `result`, or `failed`/`dead`
    /// with `error`. False when the lease was no longer the worker's (the
    /// outcome is dropped).
    pub async fn finish(
        &self,
        id: &str,
        worker: &str,
        status: JobStatus,
        result: Option<&Value>,
        error: Option<&ErrorBody>,
    ) -> Result<bool, sqlx::Error> {
        // One statement: the job, and the worker's count when the job was its own.
        let finished: i64 = sqlx::query_scalar(&format!(
            "WITH finished AS (
                 UPDATE jobs SET status = $3, result = $4, error = $5, finished_at = now(), lease_expires_at = NULL,
                     events = events || {}
                 WHERE id = $1 AND leased_by = $2 AND status = 'running'
                 RETURNING id),
             counted AS (
                 UPDATE workers SET jobs_done = jobs_done + 1 WHERE id = $2 AND EXISTS (SELECT 1 FROM finished))
             SELECT count(*) FROM finished",
            // A failure's event says why: the error's code.
            event_sql("$3::text", "$5::jsonb->>'code'")
        ))
        .bind(id)
        .bind(worker)
        .bind(status.name())
        .bind(result.map(Json))
        .bind(error.map(Json))
        .fetch_one(&self.pool)
        .await?;
        Ok(finished == 1)
    }

    /// An infrastructure failure of a held job: back to the queue after a
    /// backoff, or dead when out of attempts. Returns the new status.
    pub async fn retry(&self, id: &str, worker: &str, error: &ErrorBody) -> Result<Option<JobStatus>, sqlx::Error> {
        let row = sqlx::query(&format!(
            "UPDATE jobs SET
                 status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'queued' END,
                 run_after = now() + least(60, power(2, greatest(attempts - 1, 0))) * interval '1 second',
                 error = $3, leased_by = CASE WHEN attempts >= max_attempts THEN leased_by ELSE NULL END,
                 lease_expires_at = NULL,
                 finished_at = CASE WHEN attempts >= max_attempts THEN now() ELSE NULL END,
                 events = events || {}
             WHERE id = $1 AND leased_by = $2 AND status = 'running'
             RETURNING status",
            event_sql("CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'queued' END", "$4::text")
        ))
        .bind(id)
        .bind(worker)
        .bind(Json(error))
        .bind(format!("after: {}", error.message))
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.and_then(|r| r.try_get::<String, _>("status").ok()).and_then(|s| JobStatus::parse(&s)))
    }

    /// Puts jobs whose lease expired back in the queue (or in the dead letter
    /// when out of attempts); returns how many. Also deletes the jobs that
    /// finished more than [`FINISHED_JOB_RETENTION`] ago.
    pub async fn reap(&self) -> Result<u64, sqlx::Error> {
        let done = sqlx::query(&format!(
            "UPDATE jobs SET
                 status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'queued' END,
                 error = jsonb_build_object('code', 'unavailable', 'message',
                     'worker ' || coalesce(leased_by, '?') || ' stopped renewing its lease'),
                 finished_at = CASE WHEN attempts >= max_attempts THEN now() ELSE NULL END,
                 lease_expires_at = NULL,
                 events = events || {}
             WHERE status = 'running' AND lease_expires_at < clock_timestamp()",
            event_sql(
                "CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'queued' END",
                "'lease of ' || coalesce(leased_by, '?') || ' expired'"
            )
        ))
        .execute(&self.pool)
        .await?;
        // Finished jobs are kept for a while (clients read their outcome), not
        // for ever: their results and events would grow the table without end.
        sqlx::query("DELETE FROM jobs WHERE finished_at < now() - $1 * interval '1 second'")
            .bind(FINISHED_JOB_RETENTION.as_secs() as i64)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    /// Cancels a queued or running job; its status afterwards (None: no such job).
    pub async fn cancel(&self, id: &str) -> Result<Option<JobStatus>, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query(&format!(
            "UPDATE jobs SET status = 'cancelled', finished_at = now(), lease_expires_at = NULL,
                 error = jsonb_build_object('code', 'cancelled', 'message', 'the job was cancelled'),
                 events = events || {}
             WHERE id = $1 AND status IN ('queued', 'running')",
            event_sql("'cancelled'", "'cancelled'")
        ))
        .bind(id)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 1 {
            sqlx::query("SELECT pg_notify($1, $2)").bind(CANCEL_CHANNEL).bind(id).execute(&mut *tx).await?;
        }
        let status: Option<String> =
            sqlx::query_scalar("SELECT status FROM jobs WHERE id = $1").bind(id).fetch_optional(&mut *tx).await?;
        tx.commit().await?;
        Ok(status.and_then(|s| JobStatus::parse(&s)))
    }

    /// A job as clients see it.
    pub async fn view(&self, id: &str) -> Result<Option<JobView>, sqlx::Error> {
        let row = sqlx::query(
            "SELECT id, kind, status, key, attempts, leased_by, events, result, error FROM jobs WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let status: String = row.try_get("status")?;
        let Json(events): Json<Vec<JobEvent>> = row.try_get("events")?;
        let result: Option<Json<Value>> = row.try_get("result")?;
        let error: Option<Json<ErrorBody>> = row.try_get("error").ok().flatten();
        let attempts: i32 = row.try_get("attempts")?;
        Ok(Some(JobView {
            id: row.try_get("id")?,
            kind: row.try_get("kind")?,
            status: JobStatus::parse(&status).unwrap_or(JobStatus::Queued),
            key: row.try_get("key")?,
            attempts: attempts.max(0) as u32,
            worker: row.try_get("leased_by")?,
            events,
            result: result.map(|j| j.0),
            error: error.map(|j| j.0),
        }))
    }

    /// Jobs waiting to run.
    pub async fn depth(&self) -> Result<i64, sqlx::Error> {
        sqlx::query_scalar("SELECT count(*) FROM jobs WHERE status = 'queued'").fetch_one(&self.pool).await
    }

    /// Registers (or re-registers) a worker.
    pub async fn register(&self, w: &WorkerView) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO workers (id, host, pid, capabilities, concurrency) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()",
        )
        .bind(&w.id)
        .bind(&w.host)
        .bind(w.pid as i32)
        .bind(&w.capabilities)
        .bind(w.concurrency as i32)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The worker is alive: renews its row and the leases of `held`, the jobs
    /// it is running now. Only those: a job whose task ended without
    /// recording its outcome (or that a restarted worker of the same id took
    /// before) must see its lease run out, to be retried or given up. Returns
    /// the held jobs that are no longer this worker's to run (cancelled, or
    /// taken over after a lost lease): the worker stops them. A cancellation's
    /// notification can be lost (the listener was reconnecting); this is not.
    pub async fn worker_heartbeat(&self, worker: &str, held: &[String]) -> Result<Vec<String>, sqlx::Error> {
        sqlx::query("UPDATE workers SET heartbeat_at = now() WHERE id = $1").bind(worker).execute(&self.pool).await?;
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let renewed: Vec<String> = sqlx::query_scalar(
            "UPDATE jobs SET lease_expires_at = clock_timestamp() + $2 * interval '1 millisecond'
             WHERE leased_by = $1 AND status = 'running' AND id = ANY($3) RETURNING id",
        )
        .bind(worker)
        .bind(self.lease_ms())
        .bind(held)
        .fetch_all(&self.pool)
        .await?;
        Ok(held.iter().filter(|id| !renewed.contains(id)).cloned().collect())
    }

    pub async fn deregister(&self, worker: &str) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM workers WHERE id = $1").bind(worker).execute(&self.pool).await?;
        Ok(())
    }

    /// Workers that heartbeated within three leases (older rows are removed).
    pub async fn workers(&self) -> Result<Vec<WorkerView>, sqlx::Error> {
        let stale = self.lease_ms() * 3;
        sqlx::query("DELETE FROM workers WHERE heartbeat_at < now() - $1 * interval '1 millisecond'")
            .bind(stale.max(60_000))
            .execute(&self.pool)
            .await?;
        let rows = sqlx::query(
            "SELECT w.id, w.host, w.pid, w.capabilities, w.concurrency, w.jobs_done,
                    (extract(epoch from (now() - w.heartbeat_at)) * 1000)::float8 AS since_ms,
                    coalesce(array_agg(j.id) FILTER (WHERE j.id IS NOT NULL), '{}') AS running
             FROM workers w LEFT JOIN jobs j ON j.leased_by = w.id AND j.status = 'running'
             WHERE w.heartbeat_at >= now() - $1 * interval '1 millisecond'
             GROUP BY w.id ORDER BY w.started_at",
        )
        .bind(stale)
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::new();
        for r in rows {
            let pid: i32 = r.try_get("pid")?;
            let concurrency: i32 = r.try_get("concurrency")?;
            let done: i64 = r.try_get("jobs_done")?;
            let since: f64 = r.try_get("since_ms")?;
            out.push(WorkerView {
                id: r.try_get("id")?,
                host: r.try_get("host")?,
                pid: pid.max(0) as u32,
                capabilities: r.try_get("capabilities")?,
                concurrency: concurrency.max(0) as u32,
                last_heartbeat_ms: since,
                jobs_done: done.max(0) as u64,
                running: r.try_get("running")?,
            });
        }
        Ok(out)
    }
}

/// SQL for one event appended to `events` (a JSON array with one object):
/// `status` and `phase` are SQL expressions.
fn event_sql(status: &str, phase: &str) -> String {
    format!(
        "jsonb_build_array(jsonb_strip_nulls(jsonb_build_object('seq', jsonb_array_length(events), 'status', {status},
             'phase', {phase}, 'at_ms', round((extract(epoch from (clock_timestamp() - created_at)) * 1000)::numeric, 3))))"
    )
}
