//! Asynchronous compile jobs (`POST /v1/compile?async=true`): an in-process
//! registry with a progress history per job that `GET /v1/jobs/{id}` reports and
//! `GET /v1/jobs/{id}/events` streams (server-sent events). Events: `queued`,
//! then `running` once per compile phase (`frontend`, `optimise`,
//! `codegen:object`, `link`, …), then `done` or `failed`.
//!
//! Finished jobs are kept for [`Jobs::RETENTION`]; their results live on in the
//! cache under the job's key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use utoipa::ToSchema;

use crate::error::ErrorBody;

/// Where a job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Queued,
    Running,
    Done,
    Failed,
}

impl JobStatus {
    pub fn name(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Done => "done",
            JobStatus::Failed => "failed",
        }
    }

    pub fn finished(self) -> bool {
        matches!(self, JobStatus::Done | JobStatus::Failed)
    }
}

/// One step of a job's progress.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct JobEvent {
    /// 0, 1, 2, … in order.
    pub seq: u64,
    pub status: JobStatus,
    /// The compile phase starting (`frontend`, `optimise`, `codegen:object`,
    /// `link`, …) for `running` events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Milliseconds since the job was created.
    pub at_ms: f64,
}

/// A job as `GET /v1/jobs/{id}` shows it.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct JobView {
    pub id: String,
    pub status: JobStatus,
    /// The cache key the job compiles.
    pub key: String,
    pub events: Vec<JobEvent>,
    /// The compile response, once done.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub result: Option<serde_json::Value>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

#[derive(Debug)]
struct JobState {
    events: Vec<JobEvent>,
    result: Option<serde_json::Value>,
    error: Option<ErrorBody>,
    finished_at: Option<Instant>,
}

/// One job.
#[derive(Debug)]
pub struct Job {
    pub id: String,
    pub key: String,
    created: Instant,
    state: Mutex<JobState>,
    sender: broadcast::Sender<JobEvent>,
}

impl Job {
    fn push(&self, status: JobStatus, phase: Option<String>) {
        let Ok(mut state) = self.state.lock() else { return };
        if state.events.last().is_some_and(|e| e.status.finished()) {
            return;
        }
        let event = JobEvent {
            seq: state.events.len() as u64,
            status,
            phase,
            at_ms: self.created.elapsed().as_secs_f64() * 1e3,
        };
        state.events.push(event.clone());
        if status.finished() {
            state.finished_at = Some(Instant::now());
        }
        // Sent under the lock, so a subscriber that copied the history under
        // the lock sees every later event exactly once.
        let _ = self.sender.send(event);
    }

    /// A compile phase started.
    pub fn phase(&self, phase: String) {
        self.push(JobStatus::Running, Some(phase));
    }

    pub fn succeed(&self, result: serde_json::Value) {
        if let Ok(mut state) = self.state.lock() {
            state.result = Some(result);
        }
        self.push(JobStatus::Done, None);
    }

    pub fn fail(&self, error: ErrorBody) {
        if let Ok(mut state) = self.state.lock() {
            state.error = Some(error);
        }
        self.push(JobStatus::Failed, None);
    }

    pub fn view(&self) -> JobView {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        JobView {
            id: self.id.clone(),
            status: state.events.last().map_or(JobStatus::Queued, |e| e.status),
            key: self.key.clone(),
            events: state.events.clone(),
            result: state.result.clone(),
            error: state.error.clone(),
        }
    }

    /// The events so far and a receiver for every later one.
    pub fn subscribe(&self) -> (Vec<JobEvent>, broadcast::Receiver<JobEvent>) {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (state.events.clone(), self.sender.subscribe())
    }
}

/// Every job of this process.
#[derive(Debug, Default)]
pub struct Jobs {
    map: Mutex<HashMap<String, Arc<Job>>>,
}

impl Jobs {
    /// How long finished jobs stay visible.
    pub const RETENTION: Duration = Duration::from_secs(3600);

    /// A new queued job compiling `key`.
    pub fn create(&self, key: &str) -> Arc<Job> {
        let (sender, _) = broadcast::channel(64);
        let job = Arc::new(Job {
            id: uuid::Uuid::new_v4().to_string(),
            key: key.to_string(),
            created: Instant::now(),
            state: Mutex::new(JobState { events: Vec::new(), result: None, error: None, finished_at: None }),
            sender,
        });
        job.push(JobStatus::Queued, None);
        if let Ok(mut map) = self.map.lock() {
            map.retain(|_, j| {
                j.state.lock().ok().and_then(|s| s.finished_at).is_none_or(|t| t.elapsed() < Self::RETENTION)
            });
            map.insert(job.id.clone(), job.clone());
        }
        job
    }

    pub fn get(&self, id: &str) -> Option<Arc<Job>> {
        self.map.lock().ok()?.get(id).cloned()
    }

    /// Jobs not yet running.
    pub fn queued(&self) -> usize {
        let Ok(map) = self.map.lock() else { return 0 };
        map.values().filter(|j| j.view().status == JobStatus::Queued).count()
    }
}
