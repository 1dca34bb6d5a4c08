//! Shared by the server's tests: a private Postgres database per test, and
//! requests against the router.

#![allow(dead_code)]

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;
use withloop_server::{AppState, Config};
pub use withloop_worker::testing::TestDb;

/// An embedded server's state (no database).
pub fn embedded() -> AppState {
    AppState::new(Config::embedded(), None).expect("embedded state")
}

/// A server's state over `db` (a fresh memory tier each call: a "restart").
pub async fn with_database(db: &TestDb) -> AppState {
    with_database_config(db, Config::embedded()).await
}

pub async fn with_database_config(db: &TestDb, mut config: Config) -> AppState {
    config.database_url = Some(db.url.clone());
    AppState::connect(config).await.expect("connect to the test database")
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
    }
}

/// Sends one request to the router.
pub async fn send(app: &Router, method: Method, uri: &str, body: Option<Value>, headers: &[(&str, &str)]) -> Reply {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = match body {
        Some(b) => req.header("content-type", "application/json").body(Body::from(b.to_string())),
        None => req.body(Body::empty()),
    }
    .expect("request");
    reply(app, req).await
}

/// Sends raw bytes with a content type.
pub async fn send_raw(app: &Router, uri: &str, content_type: &str, body: Vec<u8>) -> Reply {
    let req = Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header("content-type", content_type)
        .body(Body::from(body))
        .expect("request");
    reply(app, req).await
}

async fn reply(app: &Router, req: Request<Body>) -> Reply {
    let response = app.clone().oneshot(req).await.expect("the router answers");
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.expect("body").to_bytes().to_vec();
    Reply { status, headers, body }
}

/// Polls a job (`/v1/jobs/{id}`) until it has finished; its last view.
pub async fn finished_job(app: &Router, job_url: &str) -> Value {
    for _ in 0..1200 {
        let view = get(app, job_url).await.json();
        if matches!(view["status"].as_str(), Some("done" | "failed" | "dead" | "cancelled")) {
            return view;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("the job at {job_url} did not finish within 30 s");
}

pub async fn post(app: &Router, uri: &str, body: Value) -> Reply {
    send(app, Method::POST, uri, Some(body), &[]).await
}

pub async fn get(app: &Router, uri: &str) -> Reply {
    send(app, Method::GET, uri, None, &[]).await
}

/// A small program with a generic function, for most tests.
pub const NEG: &str = "\
use Array: all;

int[.] neg(int[.] a)
{
    return with { (. <= iv <= .): -a[iv]; } : modarray(a);
}

int main()
{
    return sum(neg([1, 2, 3]));
}
";
