//! API tokens and per-team rate limits for `/v1`.
//!
//! Without configured tokens every request is anonymous (the embedded
//! default). With `WITHLOOP_TOKENS=team-a:secret,…`, `/v1` requires
//! `Authorization: Bearer <token>`; the admin token counts as team `admin`.
//! Each team (anonymous requests together) gets `WITHLOOP_RATE_LIMIT`
//! requests per minute from a token bucket refilled continuously.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

/// The team a request is made for (a request extension).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Team(pub String);

/// Whether the request carries the admin token (a request extension).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admin(pub bool);

/// Token buckets per team.
#[derive(Debug)]
pub struct RateLimiter {
    per_minute: u32,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    pub fn new(per_minute: u32) -> RateLimiter {
        RateLimiter { per_minute, buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes one request from `team`'s budget, or says how many seconds until
    /// one is available.
    pub fn take(&self, team: &str) -> Result<(), u64> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let capacity = self.per_minute as f64;
        let per_second = capacity / 60.0;
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, last) = buckets.entry(team.to_string()).or_insert((capacity, now));
        *tokens = (*tokens + (now - *last).as_secs_f64() * per_second).min(capacity);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - *tokens) / per_second).ceil().max(1.0) as u64)
        }
    }
}

/// The middleware: who is asking, and may they.
pub async fn authorise(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .map(str::to_string);
    let admin = match (&state.config.admin_token, &bearer) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    };
    let team = if admin {
        "admin".to_string()
    } else if state.tokens.is_empty() {
        "anonymous".to_string()
    } else {
        match bearer.as_deref().and_then(|b| state.tokens.get(b)) {
            Some(team) => team.clone(),
            None => {
                let message = if bearer.is_some() {
                    "this API token is not known to the server"
                } else {
                    "this server requires an API token: send `Authorization: Bearer <token>`"
                };
                return ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response();
            }
        }
    };
    if let Err(wait) = state.limiter.take(&team) {
        let mut e = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!("team `{team}` has used its {} requests per minute", state.config.rate_limit_per_minute),
        );
        e.retry_after = Some(wait);
        return e.into_response();
    }
    req.extensions_mut().insert(Team(team));
    req.extensions_mut().insert(Admin(admin));
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_per_team_and_say_when_to_retry() {
        let limiter = RateLimiter::new(2);
        assert!(limiter.take("a").is_ok());
        assert!(limiter.take("a").is_ok());
        let wait = limiter.take("a").unwrap_err();
        assert!((1..=30).contains(&wait), "{wait}");
        assert!(limiter.take("b").is_ok());
        assert!(RateLimiter::new(0).take("a").is_ok());
    }
}
