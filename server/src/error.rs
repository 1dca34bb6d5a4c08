//! The one error envelope every failing request gets:
//! `{"error": {"code": "…", "message": "…", "diagnostics": [...], "rendered": "…"}}`.
//!
//! Codes are stable snake_case words (`compile_error`, `invalid_request`,
//! `not_found`, …); `diagnostics` and `rendered` appear for compile failures.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use withloop_worker::build::DiagnosticData;
pub use withloop_worker::failure::ErrorBody;
use withloop_worker::failure::{Failure, FailureKind};

/// The error envelope.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorEnvelope {
    pub error: ErrorBody,
}

/// An error response.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
    /// Seconds before retrying (429, 503).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: ErrorBody { code: code.to_string(), message: message.into(), diagnostics: None, rendered: None },
            retry_after: None,
        }
    }

    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// The cache database failed (503).
    pub fn cache_database(e: sqlx::Error) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", format!("the cache database failed: {e}"))
    }

    /// The job queue failed (503).
    pub fn job_queue(e: sqlx::Error) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", format!("the job queue failed: {e}"))
    }

    /// The body is past the server's limit (413), whatever its content type.
    pub fn payload_too_large() -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "the request body is larger than this server accepts",
        )
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    pub fn with_diagnostics(mut self, diagnostics: Vec<DiagnosticData>) -> ApiError {
        self.body.rendered = Some(diagnostics.iter().map(|d| d.rendered.as_str()).collect());
        self.body.diagnostics = Some(diagnostics);
        self
    }
}

impl From<Failure> for ApiError {
    fn from(f: Failure) -> ApiError {
        let status = match f.kind {
            FailureKind::Invalid => StatusCode::BAD_REQUEST,
            FailureKind::User | FailureKind::Limitation => StatusCode::UNPROCESSABLE_ENTITY,
            FailureKind::Bug => StatusCode::INTERNAL_SERVER_ERROR,
            FailureKind::Transient => StatusCode::SERVICE_UNAVAILABLE,
        };
        ApiError { status, body: f.body, retry_after: None }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(ErrorEnvelope { error: self.body })).into_response();
        if let Some(secs) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        response
    }
}

/// `Json<T>` whose rejections use the envelope: malformed JSON, unknown or
/// missing fields → 400 `invalid_request`; too large → 413
/// `payload_too_large`; wrong content type → 415.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    let status = rejection.status();
    let text = rejection.body_text();
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::payload_too_large(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
            status,
            "unsupported_media_type",
            "send the request body as JSON with `Content-Type: application/json`",
        ),
        _ => ApiError::invalid(format!("the request body is not valid: {text}")),
    }
}
