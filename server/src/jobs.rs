//! The embedded server's job queue: asynchronous compiles
//! (`POST /v1/compile?async=true`) run as tasks of this process, each with a
//! progress history that `GET /v1/jobs/{id}` reports and `GET
//! /v1/jobs/{id}/events` streams. (With a database, jobs go through the
//! Postgres queue instead: `withloop_worker::queue`.) Events: `queued`, then
//! `running` once per compile phase (`frontend`, `optimise`, `codegen:object`,
//! `link`, …), then `done`, `failed` or `cancelled`.
//!
//! Finished jobs are kept for [`Jobs::RETENTION`], and at most
//! [`Jobs::MAX_FINISHED`] of them (the oldest go first); their results live on
//! in the cache under the job's key.

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
        let code = error.code.clone();
        if let Ok(mut state) = self.state.lock() {
            if state.events.last().is_some_and(|e| e.status.finished()) {
                return;
            }
            state.error = Some(error);
        }
        self.push(JobStatus::Failed, Some(code));
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
            self.push(JobStatus::Cancelled, Some("cancelled".into()));
            let _ = self.cancel_signal.send(true);
        }
        self.view().status
    }

    /// Hears the job's cancellation.
    pub fn cancellation(&self) -> watch::Receiver<bool> {
        self.cancel_signal.subscribe()
    }

    fn status(&self) -> JobStatus {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.events.last().map_or(JobStatus::Queued, |e| e.status)
    }

    fn finished_at(&self) -> Option<Instant> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).finished_at
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
    kept: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    map: HashMap<String, Arc<Job>>,
    /// When the next prune is due: past this many jobs, or this instant.
    prune_at_len: usize,
    prune_at: Option<Instant>,
}

impl Jobs {
    /// How long finished jobs stay visible.
    pub const RETENTION: Duration = Duration::from_secs(3600);
    /// How many finished jobs stay visible at most (each holds its result).
    pub const MAX_FINISHED: usize = 1000;

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
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.map.insert(job.id.clone(), job.clone());
        // Pruning looks at every job: it runs once a minute or when the jobs
        // grew by a tenth of the bound since the last, not on every create.
        if kept.map.len() > kept.prune_at_len || kept.prune_at.is_none_or(|t| t <= Instant::now()) {
            kept.prune();
        }
        job
    }

    pub fn get(&self, id: &str) -> Option<Arc<Job>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner()).map.get(id).cloned()
    }

    /// Jobs finished (of those kept).
    pub fn finished(&self) -> usize {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.map.values().filter(|j| j.status().finished()).count()
    }

    /// Ids of the jobs running now.
    pub fn running(&self) -> Vec<String> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.map.values().filter(|j| j.status() == JobStatus::Running).map(|j| j.id.clone()).collect()
    }
}

impl Kept {
    /// Drops finished jobs past [`Jobs::RETENTION`], then the oldest finished
    /// beyond [`Jobs::MAX_FINISHED`].
    fn prune(&mut self) {
        let mut finished: Vec<(Instant, String)> =
            self.map.values().filter_map(|j| Some((j.finished_at()?, j.id.clone()))).collect();
        finished.sort();
        let expired = finished.iter().take_while(|(t, _)| t.elapsed() >= Jobs::RETENTION).count();
        let excess = finished.len().saturating_sub(Jobs::MAX_FINISHED);
        for (_, id) in finished.iter().take(expired.max(excess)) {
            self.map.remove(id);
        }
        self.prune_at_len = self.map.len() + Jobs::MAX_FINISHED / 10;
        self.prune_at = Some(Instant::now() + Duration::from_secs(60));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_the_bound_of_finished_jobs_is_kept_and_running_ones_always() {
        let jobs = Jobs::default();
        let running = jobs.create("k", "compile");
        running.phase("frontend".into());
        let first = jobs.create("k", "compile");
        first.succeed(serde_json::json!({}));
        for _ in 0..3 * Jobs::MAX_FINISHED {
            jobs.create("k", "compile").succeed(serde_json::json!({}));
        }
        let kept = jobs.kept.lock().unwrap().map.len();
        assert!(kept <= Jobs::MAX_FINISHED + Jobs::MAX_FINISHED / 10 + 1, "{kept} jobs kept");
        assert!(jobs.get(&running.id).is_some(), "a running job is never dropped");
        assert!(jobs.get(&first.id).is_none(), "the oldest finished job went first");
        assert_eq!(jobs.running(), vec![running.id.clone()]);
    }
}
