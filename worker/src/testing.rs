//! Test support shared by the workspace's tests: a private Postgres database
//! per test (created on the server tests use, dropped with its connections
//! when the value goes).

use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::Connection;

/// The server used to create test databases: `WITHLOOP_TEST_DATABASE_URL`, else
/// the local Postgres with trust authentication.
pub fn admin_url() -> String {
    std::env::var("WITHLOOP_TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A database of its own for one test, dropped (with its connections) when
/// the value goes.
#[derive(Debug)]
pub struct TestDb {
    pub name: String,
    pub url: String,
}

impl TestDb {
    pub async fn new() -> TestDb {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let name = format!("withloop_test_{}_{}_{nanos}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let admin = admin_url();
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("the tests need Postgres at {admin} (WITHLOOP_TEST_DATABASE_URL): {e}"));
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut conn).await.expect("create the test database");
        let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b).to_string();
        TestDb { url: format!("{base}/{name}"), name }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            rt.block_on(async {
                if let Ok(mut conn) = sqlx::PgConnection::connect(&admin_url()).await {
                    let _ =
                        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut conn).await;
                }
            });
        })
        .join();
    }
}
