//! The database tier of the cache: compilations and their artifacts in
//! Postgres (schema in `migrations/`, applied at start-up).
//!
//! Reads verify every artifact's bytes against its BLAKE3 hash; a mismatch (a
//! corrupted row, a partial write, a hand edit) is logged, counted and treated
//! as a miss, so the compilation is rebuilt and the row overwritten, never
//! served.
//!
//! Eviction: after every write, compilations beyond the size cap are deleted,
//! least recently used first (`last_used_at`, written back in the background
//! at most every five seconds per key and process, so a hit costs one round
//! trip): what stays
//! is the most recently used compilations whose sizes add up to at most the
//! cap. A compilation larger than the cap on its own is not kept (and does not
//! push everything else out).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::ArtifactKind;
use bytes::Bytes;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::types::Json;
use sqlx::{Executor, Row};

use crate::cache::{CompilationMeta, Compiled};
use crate::key::content_hash;

/// Why a stored compilation was not served.
#[derive(Debug)]
pub enum Invalid {
    /// An artifact's bytes do not hash to the recorded hash (or it is missing).
    Corrupt(String),
}

/// The Postgres tier.
#[derive(Clone, Debug)]
pub struct Store {
    pool: PgPool,
    /// Size cap of all stored compilations, in bytes.
    max_bytes: u64,
    /// Hits not yet written to `last_used_at`/`hits`, by key, with when the key
    /// was last written: a hit costs no extra round trip, and each key is
    /// written at most every [`TOUCH_EVERY`].
    touches: Arc<Mutex<HashMap<String, (u64, Instant)>>>,
}

/// How often a key's use is written back (the eviction order is exact to this).
const TOUCH_EVERY: Duration = Duration::from_secs(5);

impl Store {
    /// Connects and applies the migrations.
    pub async fn connect(url: &str, max_bytes: u64) -> Result<Store, sqlx::Error> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(std::time::Duration::from_secs(5))
            .connect(url)
            .await?;
        sqlx::migrate!("../migrations").run(&pool).await?;
        Ok(Store { pool, max_bytes, touches: Arc::default() })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Whether the database answers.
    pub async fn ping(&self) -> Result<(), sqlx::Error> {
        self.pool.execute("SELECT 1").await.map(|_| ())
    }

    /// The stored compilation `key`, verified; `Ok(Err(_))` when it is stored
    /// but fails verification.
    pub async fn load(&self, key: &str) -> Result<Option<Result<Compiled, Invalid>>, sqlx::Error> {
        // One round trip: the metadata with every artifact (one row each).
        let rows = sqlx::query(
            "SELECT c.metadata, a.kind, a.content_hash, a.bytes
             FROM compilations c LEFT JOIN artifacts a ON a.key = c.key WHERE c.key = $1",
        )
        .bind(key)
        .fetch_all(&self.pool)
        .await?;
        let Some(first) = rows.first() else { return Ok(None) };
        let Json(meta): Json<CompilationMeta> = match first.try_get("metadata") {
            Ok(m) => m,
            Err(e) => return Ok(Some(Err(Invalid::Corrupt(format!("unreadable metadata: {e}"))))),
        };
        let mut stored: BTreeMap<String, (String, Vec<u8>)> = BTreeMap::new();
        for r in &rows {
            if let Some(kind) = r.try_get::<Option<String>, _>("kind")? {
                stored.insert(kind, (r.try_get("content_hash")?, r.try_get("bytes")?));
            }
        }
        let mut bytes = BTreeMap::new();
        for info in &meta.artifacts {
            let Some((hash, data)) = stored.remove(info.kind.name()) else {
                return Ok(Some(Err(Invalid::Corrupt(format!("artifact `{}` is missing", info.kind.name())))));
            };
            let actual = content_hash(&data);
            if actual != info.content_hash || hash != info.content_hash {
                return Ok(Some(Err(Invalid::Corrupt(format!(
                    "artifact `{}` hashes to {actual}, expected {}",
                    info.kind.name(),
                    info.content_hash
                )))));
            }
            bytes.insert(info.kind, Bytes::from(data));
        }
        self.touch(key);
        Ok(Some(Ok(Compiled::new(meta, bytes))))
    }

    /// Records a use of `key` now; whether the database holds it.
    pub async fn mark_used(&self, key: &str) -> Result<bool, sqlx::Error> {
        let done = sqlx::query("UPDATE compilations SET last_used_at = now(), hits = hits + 1 WHERE key = $1")
            .bind(key)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Records a hit of `key`; writes it back (in the background) when the
    /// key's last write is older than [`TOUCH_EVERY`].
    fn touch(&self, key: &str) {
        let due = {
            let mut touches = self.touches.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let entry = touches.entry(key.to_string()).or_insert((0, now - TOUCH_EVERY));
            entry.0 += 1;
            if now.duration_since(entry.1) >= TOUCH_EVERY {
                let hits = entry.0;
                *entry = (0, now);
                Some(hits)
            } else {
                None
            }
        };
        if let Some(hits) = due {
            let (pool, key) = (self.pool.clone(), key.to_string());
            tokio::spawn(async move {
                let done = sqlx::query("UPDATE compilations SET last_used_at = now(), hits = hits + $2 WHERE key = $1")
                    .bind(&key)
                    .bind(hits as i64)
                    .execute(&pool)
                    .await;
                if let Err(e) = done {
                    tracing::warn!(%key, error = %e, "recording a cache hit failed");
                }
            });
        }
    }

    /// Stores `compiled` (replacing any row with its key), then evicts.
    pub async fn save(&self, compiled: &Compiled) -> Result<(), sqlx::Error> {
        let meta = &compiled.meta;
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO compilations (key, components, metadata, size_bytes) VALUES ($1, $2, $3, $4)
             ON CONFLICT (key) DO UPDATE SET components = EXCLUDED.components, metadata = EXCLUDED.metadata,
                 size_bytes = EXCLUDED.size_bytes, last_used_at = now()",
        )
        .bind(&meta.key)
        .bind(Json(&meta.components))
        .bind(Json(meta))
        .bind(compiled.size_bytes() as i64)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM artifacts WHERE key = $1").bind(&meta.key).execute(&mut *tx).await?;
        for info in &meta.artifacts {
            let data = compiled.bytes.get(&info.kind).map(|b| b.to_vec()).unwrap_or_default();
            sqlx::query("INSERT INTO artifacts (key, kind, content_hash, bytes) VALUES ($1, $2, $3, $4)")
                .bind(&meta.key)
                .bind(info.kind.name())
                .bind(&info.content_hash)
                .bind(data)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        self.evict().await?;
        Ok(())
    }

    /// Deletes compilations beyond the size cap, least recently used first;
    /// returns how many went.
    pub async fn evict(&self) -> Result<u64, sqlx::Error> {
        let done = sqlx::query(
            "WITH ranked AS (
                 SELECT key, sum(size_bytes) OVER (ORDER BY last_used_at DESC, key) AS running
                 FROM compilations WHERE size_bytes <= $1)
             DELETE FROM compilations
             WHERE size_bytes > $1 OR key IN (SELECT key FROM ranked WHERE running > $1)",
        )
        .bind(self.max_bytes.min(i64::MAX as u64) as i64)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Deletes one compilation; whether it was stored.
    pub async fn purge(&self, key: &str) -> Result<bool, sqlx::Error> {
        let done = sqlx::query("DELETE FROM compilations WHERE key = $1").bind(key).execute(&self.pool).await?;
        Ok(done.rows_affected() > 0)
    }

    /// Only the metadata of `key` (no artifact bytes, no verification).
    pub async fn metadata(&self, key: &str) -> Result<Option<CompilationMeta>, sqlx::Error> {
        let row = sqlx::query("SELECT metadata FROM compilations WHERE key = $1")
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        match row {
            Some(r) => {
                let Json(meta): Json<CompilationMeta> = r.try_get("metadata")?;
                Ok(Some(meta))
            }
            None => Ok(None),
        }
    }

    /// The compilation's metadata with one artifact's bytes, verified against
    /// the hash that metadata records: `None` when the key is unknown; the
    /// inner `None` when the compilation has no such artifact, `Err` when it is
    /// stored but corrupt. One statement, so one snapshot: a concurrent
    /// [`Store::save`] of the key is seen whole or not at all.
    pub async fn artifact(
        &self,
        key: &str,
        kind: ArtifactKind,
    ) -> Result<Option<(CompilationMeta, Option<Result<Bytes, Invalid>>)>, sqlx::Error> {
        let row = sqlx::query(
            "SELECT c.metadata, a.content_hash, a.bytes
             FROM compilations c LEFT JOIN artifacts a ON a.key = c.key AND a.kind = $2 WHERE c.key = $1",
        )
        .bind(key)
        .bind(kind.name())
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let Json(meta): Json<CompilationMeta> = row.try_get("metadata")?;
        let Some(expected) = meta.artifacts.iter().find(|a| a.kind == kind).map(|a| a.content_hash.clone()) else {
            return Ok(Some((meta, None)));
        };
        let hash: Option<String> = row.try_get("content_hash")?;
        let data: Option<Vec<u8>> = row.try_get("bytes")?;
        let checked = match (hash, data) {
            (Some(hash), Some(data)) => {
                let actual = content_hash(&data);
                if actual == expected && hash == expected {
                    Ok(Bytes::from(data))
                } else {
                    Err(Invalid::Corrupt(format!(
                        "artifact `{}` of {key} hashes to {actual}, expected {expected}",
                        kind.name()
                    )))
                }
            }
            _ => Err(Invalid::Corrupt(format!("artifact `{}` of {key} is missing", kind.name()))),
        };
        Ok(Some((meta, Some(checked))))
    }
}
