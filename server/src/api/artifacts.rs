//! `GET /v1/artifacts/{key}/{kind}`: an artifact's bytes.

use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use withloop_worker::ArtifactKind;

use crate::error::{ApiError, ErrorEnvelope};
use crate::state::AppState;
use withloop_worker::key::is_key;
use withloop_worker::store::Invalid;

/// Fetch one artifact of a compilation. Artifacts never change (the key says
/// what they are), so they are served with an ETag (the BLAKE3 of the bytes)
/// and `Cache-Control: immutable`.
#[utoipa::path(
    get,
    path = "/v1/artifacts/{key}/{kind}",
    tag = "artifacts",
    params(
        ("key" = String, Path, description = "The compilation's key"),
        ("kind" = String, Path, description = "`object`, `shared`, `header`, `llvm_ir`, `asm`, `report` or `ir`"),
    ),
    responses(
        // Its content types, one per kind, are added by `SharedResponses`.
        (status = 200, description = "The bytes, served with the kind's content type (`ArtifactLink.content_type`)"),
        (status = 304, description = "Not modified (If-None-Match matched the ETag)"),
        (status = 404, description = "No such compilation or artifact", body = ErrorEnvelope),
    )
)]
pub async fn artifact(
    State(state): State<AppState>,
    Path((key, kind_name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let kind = ArtifactKind::parse(&kind_name).ok_or_else(|| {
        let kinds: Vec<&str> = ArtifactKind::ALL.iter().map(|k| k.name()).collect();
        ApiError::not_found(format!("there is no artifact kind `{kind_name}`; the kinds are: {}", kinds.join(", ")))
    })?;
    if !is_key(&key) {
        return Err(ApiError::not_found(format!("`{key}` is not a compilation key (64 hex digits)")));
    }
    let (hash, file_stem, bytes) = find(&state, &key, kind).await?;
    let etag = format!("\"{hash}\"");
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        // The weak comparison (RFC 9110 §13.1.2): a gzipped response's ETag
        // is the weak form of the same tag.
        .is_some_and(|v| v.split(',').map(str::trim).any(|t| t.strip_prefix("W/").unwrap_or(t) == etag || t == "*"));
    let mut response = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut r = Response::new(Body::from(bytes));
        if let Ok(v) = HeaderValue::from_str(kind.content_type()) {
            r.headers_mut().insert(header::CONTENT_TYPE, v);
        }
        let disposition = format!("attachment; filename=\"{}\"", kind.file_name(&file_stem));
        if let Ok(v) = HeaderValue::from_str(&disposition) {
            r.headers_mut().insert(header::CONTENT_DISPOSITION, v);
        }
        r
    };
    if let Ok(v) = HeaderValue::from_str(&etag) {
        response.headers_mut().insert(header::ETAG, v);
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=31536000, immutable"));
    Ok(response)
}

/// The artifact's hash, the source's file stem and the bytes: from memory,
/// else from the database (verified).
async fn find(state: &AppState, key: &str, kind: ArtifactKind) -> Result<(String, String, Bytes), ApiError> {
    let missing_kind = |emitted: Vec<&str>| {
        ApiError::not_found(format!(
            "compilation {key} has no `{}` artifact; it emitted: {} (compile again with `\"emit\": [\"{}\"]`)",
            kind.name(),
            emitted.join(", "),
            kind.name()
        ))
    };
    let stem = |file: &str| file.rsplit_once('.').map_or(file, |(s, _)| s).to_string();
    if let Some(c) = state.cache.in_memory(key).await {
        let info = c.meta.artifacts.iter().find(|a| a.kind == kind);
        return match (info, c.bytes.get(&kind)) {
            (Some(info), Some(bytes)) => {
                Ok((info.content_hash.clone(), stem(&c.meta.components.file_name), bytes.clone()))
            }
            _ => Err(missing_kind(c.meta.artifacts.iter().map(|a| a.kind.name()).collect())),
        };
    }
    let unknown = || ApiError::not_found(format!("no compilation has the key {key} (it may have been evicted)"));
    let Some(store) = state.cache.store() else { return Err(unknown()) };
    let (meta, found) = store.artifact(key, kind).await.map_err(ApiError::cache_database)?.ok_or_else(unknown)?;
    match found {
        None => Err(missing_kind(meta.artifacts.iter().map(|a| a.kind.name()).collect())),
        Some(Ok(bytes)) => {
            let hash = meta.artifacts.iter().find(|a| a.kind == kind).map(|a| a.content_hash.clone());
            Ok((hash.unwrap_or_default(), stem(&meta.components.file_name), bytes))
        }
        Some(Err(Invalid::Corrupt(why))) => {
            state.metrics.corrupt_artifacts.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%key, %why, "stored artifact failed verification; not serving it");
            Err(ApiError::not_found(format!(
                "the stored `{}` artifact of {key} failed verification and is not served; compile again to rebuild it",
                kind.name()
            )))
        }
    }
}
