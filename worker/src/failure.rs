//! Why a compile request or job failed, in the one form the API and the job
//! queue both use: a kind (which the server maps to an HTTP status) and the
//! error body `{code, message, diagnostics?, rendered?}`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::build::DiagnosticData;

/// What went wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// Stable machine-readable code: `compile_error`, `compiler_limitation`,
    /// `compiler_bug`, `invalid_request`, `payload_too_large`, `not_found`,
    /// `method_not_allowed`, `unauthorized`, `forbidden`, `rate_limited`,
    /// `timeout`, `cancelled`, `unavailable`, `internal`, or for runs
    /// `runtime_error`, `time_limit`, `memory_limit`, `output_limit`, `crashed`.
    pub code: String,
    pub message: String,
    /// Structured diagnostics (compile failures, run-time errors).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<Vec<DiagnosticData>>,
    /// The diagnostics rendered as the command line prints them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rendered: Option<String>,
}

/// Whose fault, and so which status and whether a retry can help.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The request is malformed (400).
    Invalid,
    /// The program is wrong: compile errors, run-time errors, limits (422).
    User,
    /// withloop does not support what the program uses (422).
    Limitation,
    /// withloop is wrong (500).
    Bug,
    /// The infrastructure failed (a database, a lost process): retrying may help (503).
    Transient,
}

/// A failure with its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    pub body: ErrorBody,
}

impl Failure {
    pub fn new(kind: FailureKind, code: &str, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            body: ErrorBody { code: code.to_string(), message: message.into(), diagnostics: None, rendered: None },
        }
    }

    pub fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(FailureKind::Invalid, "invalid_request", message)
    }

    pub fn transient(message: impl Into<String>) -> Failure {
        Failure::new(FailureKind::Transient, "unavailable", message)
    }

    pub fn with_diagnostics(mut self, diagnostics: Vec<DiagnosticData>) -> Failure {
        self.body.rendered = Some(diagnostics.iter().map(|d| d.rendered.as_str()).collect());
        self.body.diagnostics = Some(diagnostics);
        self
    }
}
