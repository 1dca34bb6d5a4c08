//! Jobs as clients see them, whichever queue holds them: the in-process one of
//! the embedded server or Postgres ([`crate::queue`]).
//!
//! A job's life: `queued` → `running` (one event per compile phase) → `done`,
//! `failed` (the program's fault; not retried), `dead` (out of attempts after
//! infrastructure failures: the dead letter, with the last error) or
//! `cancelled`. A `queued` event after `running` means the job went back to the
//! queue (a lost worker, a retry).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::failure::ErrorBody;
use crate::request::CompileRequest;
use crate::run::RunRequest;

/// Where a job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Queued,
    Running,
    Done,
    Failed,
    Dead,
    Cancelled,
}

impl JobStatus {
    pub fn name(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Done => "done",
            JobStatus::Failed => "failed",
            JobStatus::Dead => "dead",
            JobStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(name: &str) -> Option<JobStatus> {
        [
            JobStatus::Queued,
            JobStatus::Running,
            JobStatus::Done,
            JobStatus::Failed,
            JobStatus::Dead,
            JobStatus::Cancelled,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }

    pub fn finished(self) -> bool {
        matches!(self, JobStatus::Done | JobStatus::Failed | JobStatus::Dead | JobStatus::Cancelled)
    }
}

/// One step of a job's progress.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobEvent {
    /// 0, 1, 2, … in order.
    pub seq: u64,
    pub status: JobStatus,
    /// What the step is: the compile phase starting for `running` events
    /// (`frontend`, `optimise`, `codegen:object`, `link`, …); why for others:
    /// the error's code for `failed` (`compile_error`, `runtime_error`, …) and
    /// `cancelled` events (the job's `error` has the message), what failed
    /// for a job back in the queue or dead (`after: …`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Milliseconds since the job was created.
    pub at_ms: f64,
}

/// A job as `GET /v1/jobs/{id}` shows it.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct JobView {
    pub id: String,
    /// `compile` or `run`.
    pub kind: String,
    pub status: JobStatus,
    /// The cache key a compile job produces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Times a worker took the job.
    pub attempts: u32,
    /// The worker holding (or last holding) the job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    pub events: Vec<JobEvent>,
    /// The result once done (the compile response, or the run response).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub result: Option<serde_json::Value>,
    /// Why it failed (the last error, for dead jobs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// What a job does.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobSpec {
    /// Compile through the cache (a re-run of a finished compile is a cache hit).
    Compile { request: CompileRequest, bypass_cache: bool },
    /// Run an entry of a compiled program in a sandboxed child process
    /// (`request.compile` is filled in; `key` is its compilation).
    Run { request: RunRequest, key: String },
}

impl JobSpec {
    pub fn kind(&self) -> &'static str {
        match self {
            JobSpec::Compile { .. } => "compile",
            JobSpec::Run { .. } => "run",
        }
    }

    /// The capability a worker needs to take the job.
    pub fn capability(&self) -> &str {
        match self {
            JobSpec::Compile { .. } => "cpu",
            JobSpec::Run { request, .. } => &request.target,
        }
    }
}

/// A worker serving the queue, as `GET /v1/workers` shows it.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct WorkerView {
    pub id: String,
    pub host: String,
    pub pid: u32,
    /// What it can run: `cpu`, …
    pub capabilities: Vec<String>,
    /// Jobs it runs at once.
    pub concurrency: u32,
    /// Milliseconds since its last heartbeat.
    pub last_heartbeat_ms: f64,
    pub jobs_done: u64,
    /// Jobs it holds now.
    pub running: Vec<String>,
}
