//! `GET /v1/jobs/{id}`, its event stream, `DELETE /v1/jobs/{id}` and
//! `GET /v1/workers`, over whichever queue the server has: Postgres (with a
//! database) or the embedded in-process one.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use tokio::sync::broadcast;
use withloop_worker::jobs::{JobEvent, JobView, WorkerView};
use withloop_worker::queue::PgQueue;

use crate::error::{ApiError, ErrorEnvelope};
use crate::jobs::Job;
use crate::state::AppState;

fn unknown(id: &str) -> ApiError {
    ApiError::not_found(format!("there is no job `{id}` (finished jobs of an embedded server are kept for an hour)"))
}

fn memory_job(state: &AppState, id: &str) -> Result<Arc<Job>, ApiError> {
    state.jobs.get(id).ok_or_else(|| unknown(id))
}

async fn view(state: &AppState, id: &str) -> Result<JobView, ApiError> {
    match &state.queue {
        Some(queue) => queue.view(id).await.map_err(ApiError::job_queue)?.ok_or_else(|| unknown(id)),
        None => Ok(memory_job(state, id)?.view()),
    }
}

/// A job: its status, progress events, and the result once done.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(("id" = String, Path, description = "The job id")),
    responses(
        (status = 200, description = "The job", body = JobView),
        (status = 404, description = "No such job", body = ErrorEnvelope),
    )
)]
pub async fn get(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<JobView>, ApiError> {
    Ok(Json(view(&state, &id).await?))
}

/// Cancel a queued or running job. A running compile still finishes and is
/// cached (compiles are idempotent); the job itself ends `cancelled`.
#[utoipa::path(
    delete,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(("id" = String, Path, description = "The job id")),
    responses(
        (status = 200, description = "The job after cancelling (a finished job is unchanged)", body = JobView),
        (status = 404, description = "No such job", body = ErrorEnvelope),
    )
)]
pub async fn cancel(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<JobView>, ApiError> {
    match &state.queue {
        Some(queue) => {
            queue.cancel(&id).await.map_err(ApiError::job_queue)?.ok_or_else(|| unknown(&id))?;
        }
        None => {
            memory_job(&state, &id)?.cancel();
        }
    }
    Ok(Json(view(&state, &id).await?))
}

/// A job's progress as server-sent events: every event so far, then each new
/// one, ending after the job finishes. Each event's name is its status and its
/// data a `JobEvent`.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/events",
    tag = "jobs",
    params(("id" = String, Path, description = "The job id")),
    responses(
        (status = 200, description = "Server-sent events, data: JobEvent", content_type = "text/event-stream"),
        (status = 404, description = "No such job", body = ErrorEnvelope),
    )
)]
pub async fn events(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let events: BoxStream<'static, JobEvent> = match &state.queue {
        Some(queue) => {
            queue.view(&id).await.map_err(ApiError::job_queue)?.ok_or_else(|| unknown(&id))?;
            polled(queue.clone(), id).boxed()
        }
        None => {
            let job = memory_job(&state, &id)?;
            let (history, receiver) = job.subscribe();
            let follow = Follow { job, backlog: history.into(), receiver, next_seq: 0, finished: false };
            futures_util::stream::unfold(follow, |mut f| async move { f.next().await.map(|e| (e, f)) }).boxed()
        }
    };
    // A shutting-down server ends the stream (the client resumes elsewhere
    // with `Last-Event-ID`): an open stream would hold the drain until the
    // job ends.
    let stream = events.take_until(state.shutting_down()).filter_map(|event| async move {
        let sse = Event::default().event(event.status.name()).id(event.seq.to_string()).json_data(&event).ok()?;
        Some(Ok(sse))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// Events of a job in the Postgres queue, read every 100 ms until it finishes.
fn polled(queue: PgQueue, id: String) -> impl Stream<Item = JobEvent> {
    let start = (queue, id, VecDeque::<JobEvent>::new(), 0u64, false);
    futures_util::stream::unfold(start, |(queue, id, mut backlog, mut next_seq, mut finished)| async move {
        loop {
            if let Some(event) = backlog.pop_front() {
                next_seq = event.seq + 1;
                finished = event.status.finished();
                return Some((event, (queue, id, backlog, next_seq, finished)));
            }
            if finished {
                return None;
            }
            let view = queue.view(&id).await.ok().flatten()?;
            backlog.extend(view.events.into_iter().filter(|e| e.seq >= next_seq));
            if backlog.is_empty() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    })
}

/// Following one in-process job's events in order, each once.
struct Follow {
    job: Arc<Job>,
    backlog: VecDeque<JobEvent>,
    receiver: broadcast::Receiver<JobEvent>,
    next_seq: u64,
    finished: bool,
}

impl Follow {
    async fn next(&mut self) -> Option<JobEvent> {
        if self.finished {
            return None;
        }
        loop {
            let event = match self.backlog.pop_front() {
                Some(e) => e,
                None => match self.receiver.recv().await {
                    Ok(e) => e,
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        self.backlog = self.job.view().events.into_iter().filter(|e| e.seq >= self.next_seq).collect();
                        continue;
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
            };
            if event.seq < self.next_seq {
                continue;
            }
            self.next_seq = event.seq + 1;
            self.finished = event.status.finished();
            return Some(event);
        }
    }
}

/// The workers serving this server's jobs: every live worker of the Postgres
/// queue, or the embedded server's own in-process pool.
#[utoipa::path(
    get,
    path = "/v1/workers",
    tag = "jobs",
    responses((status = 200, description = "Live workers", body = [WorkerView]))
)]
pub async fn workers(State(state): State<AppState>) -> Result<Json<Vec<WorkerView>>, ApiError> {
    match &state.queue {
        Some(queue) => Ok(Json(queue.workers().await.map_err(ApiError::job_queue)?)),
        None => Ok(Json(vec![WorkerView {
            id: "embedded".into(),
            host: "this server".into(),
            pid: std::process::id(),
            capabilities: vec!["cpu".into()],
            concurrency: state.config.max_compiles() as u32,
            last_heartbeat_ms: 0.0,
            jobs_done: state.jobs.finished() as u64,
            running: state.jobs.running(),
        }])),
    }
}
