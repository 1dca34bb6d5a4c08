//! `GET /v1/jobs/{id}` and its event stream.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use tokio::sync::broadcast;

use crate::error::{ApiError, ErrorEnvelope};
use crate::jobs::{Job, JobEvent, JobView};
use crate::state::AppState;

fn job(state: &AppState, id: &str) -> Result<Arc<Job>, ApiError> {
    state
        .jobs
        .get(id)
        .ok_or_else(|| ApiError::not_found(format!("there is no job `{id}` (finished jobs are kept for an hour)")))
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
    Ok(Json(job(&state, &id)?.view()))
}

/// A job's progress as server-sent events: every event so far, then each new
/// one, ending after `done` or `failed`. Each event's name is its status and
/// its data a `JobEvent`.
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
    let job = job(&state, &id)?;
    let (history, receiver) = job.subscribe();
    let follow = Follow { job, backlog: history.into(), receiver, next_seq: 0, finished: false };
    let stream = futures_util::stream::unfold(follow, |mut f| async move {
        let event = f.next().await?;
        let sse = Event::default().event(event.status.name()).id(event.seq.to_string()).json_data(&event).ok()?;
        Some((Ok(sse), f))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// Following one job's events in order, each once.
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
