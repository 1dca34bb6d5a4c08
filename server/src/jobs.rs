//! The embedded server's job queue: asynchronous compiles
//! (`POST /v1/compile?async=true`) run as tasks of this process, each with a
//! progress history that `GET /v1/jobs/{id}` reports and `GET
//! /v1/jobs/{id}/events` streams. (With a database, jobs go through the
//! Postgres queue instead: `withloop_worker::queue`.) Events: `queued`, then
//! `running` once per compile phase (`frontend`, `optimise`, `codegen:object`,
//! `link`, …), then `done`, `failed` or `cancelled`.
//!
//! Finished jobs are kept for [`Jobs::RETENTION`]; their results live on in the
//! cache under the job's key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, watch};
use withloop_worker::failure::ErrorBody;
use withloop_worker::jobs::{JobEvent, JobStatus, JobView};

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
    /// `compile` or `run`.
    pub kind: &'static str,
    /// Turns true when the job is cancelled (a run's child is then killed).
    cancel_signal: watch::Sender<bool>,
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
            if state.events.last().is_some_and(|e| e.status.finished()) {
                return;
            }
            state.result = Some(result);
        }
        self.push(JobStatus::Done, None);
    }

    pub fn fail(&self, error: ErrorBody) {
        if let Ok(mut state) = self.state.lock() {
            if state.events.last().is_some_and(|e| e.status.finished()) {
                return;
            }
            state.error = Some(error);
        }
        self.push(JobStatus::Failed, None);
    }

    /// Cancels the job unless it finished; its status afterwards. (A compile
    /// already running still finishes and is cached.)
    pub fn cancel(&self) -> JobStatus {
        let finished = self.view().status.finished();
        if !finished {
            if let Ok(mut state) = self.state.lock() {
                state.error = Some(ErrorBody {
                    code: "cancelled".into(),
                    message: "the job was cancelled".into(),
                    diagnostics: None,
                    rendered: None,
                });
            }
            self.push(JobStatus::Cancelled, None);
            let _ = self.cancel_signal.send(true);
        }
        self.view().status
    }

    /// Hears the job's cancellation.
    pub fn cancellation(&self) -> watch::Receiver<bool> {
        self.cancel_signal.subscribe()
    }

    pub fn view(&self) -> JobView {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        JobView {
            id: self.id.clone(),
            kind: self.kind.into(),
            status: state.events.last().map_or(JobStatus::Queued, |e| e.status),
            key: Some(self.key.clone()),
            attempts: u32::from(state.events.iter().any(|e| e.status == JobStatus::Running)),
            worker: None,
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

    /// A new queued job of `kind` (`compile`, `run`) on compilation `key`.
    pub fn create(&self, key: &str, kind: &'static str) -> Arc<Job> {
        let (sender, _) = broadcast::channel(64);
        let (cancel_signal, _) = watch::channel(false);
        let job = Arc::new(Job {
            id: uuid::Uuid::new_v4().to_string(),
            key: key.to_string(),
            kind,
            cancel_signal,
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

    /// Jobs finished (of those kept).
    pub fn finished(&self) -> usize {
        let Ok(map) = self.map.lock() else { return 0 };
        map.values().filter(|j| j.view().status.finished()).count()
    }

    /// Ids of the jobs running now.
    pub fn running(&self) -> Vec<String> {
        let Ok(map) = self.map.lock() else { return Vec::new() };
        map.values().filter(|j| j.view().status == JobStatus::Running).map(|j| j.id.clone()).collect()
    }
}
