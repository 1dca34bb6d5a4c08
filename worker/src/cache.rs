//! The two-tier compile cache: moka in memory (bounded in bytes, with a time to
//! live), Postgres behind it ([`crate::store`]) when the server has a
//! database. A database hit is copied into memory (backfill).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::ArtifactKind;
use crate::build::{DiagnosticData, PhaseTime, VariantData};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::key::KeyComponents;
use crate::metrics::{Lookup, Metrics};
use crate::store::{Invalid, Store};

/// One artifact of a compilation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ArtifactInfo {
    pub kind: ArtifactKind,
    /// BLAKE3 of the bytes, in hex (also the HTTP ETag).
    pub content_hash: String,
    pub size: u64,
    pub content_type: String,
}

/// What is known about a compilation besides its artifacts' bytes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CompilationMeta {
    pub key: String,
    pub components: KeyComponents,
    /// When it was compiled (milliseconds since the Unix epoch).
    pub created_unix_ms: u64,
    pub compile_ms: f64,
    pub phases: Vec<PhaseTime>,
    /// Warnings and notes.
    pub diagnostics: Vec<DiagnosticData>,
    pub variants: Vec<VariantData>,
    pub report: serde_json::Value,
    pub artifacts: Vec<ArtifactInfo>,
    /// The request that made it (normalised), so it can be run by key.
    #[serde(default)]
    pub request: Option<crate::request::CompileRequest>,
}

/// A cached compilation.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub meta: CompilationMeta,
    pub bytes: BTreeMap<ArtifactKind, Bytes>,
    /// The JSON body of a memory-tier hit on it, serialised at the first such
    /// hit ([`crate::request::CompileResponse::memory_hit_body`]).
    pub memory_hit_body: std::sync::OnceLock<Bytes>,
}

impl Compiled {
    /// A compilation of `meta` with its artifacts' `bytes` (no hit body yet).
    pub fn new(meta: CompilationMeta, bytes: BTreeMap<ArtifactKind, Bytes>) -> Compiled {
        Compiled { meta, bytes, memory_hit_body: Default::default() }
    }

    /// Bytes it takes (artifacts plus a rough size of the metadata), for the
    /// caches' size bounds.
    pub fn size_bytes(&self) -> u64 {
        let (artifacts, report) = self.sizes();
        artifacts + report + 1024
    }

    /// Bytes it takes in the memory tier: [`Self::size_bytes`], and the
    /// response body a memory-tier hit keeps ([`Compiled::memory_hit_body`]),
    /// whose size is mostly the report's (counted before the body exists:
    /// moka weighs an entry when it is inserted).
    fn memory_bytes(&self) -> u64 {
        let (artifacts, report) = self.sizes();
        artifacts + 2 * report + 1024
    }

    /// The artifacts' bytes and the report's, serialised.
    fn sizes(&self) -> (u64, u64) {
        let artifacts: u64 = self.bytes.values().map(|b| b.len() as u64).sum();
        (artifacts, self.meta.report.to_string().len() as u64)
    }
}

/// Where a compilation came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CacheOutcome {
    /// Compiled for this request (or for an identical one running at the same time).
    Miss,
    /// Found in the memory tier.
    Memory,
    /// Found in the database tier (and copied into memory).
    Database,
}

/// The memory tier's bounds.
#[derive(Clone, Copy, Debug)]
pub struct MemoryLimits {
    pub max_bytes: u64,
    pub time_to_live: Duration,
}

/// Both tiers.
#[derive(Clone, Debug)]
pub struct Cache {
    memory: moka::future::Cache<String, Arc<Compiled>>,
    store: Option<Store>,
}

impl Cache {
    pub fn new(limits: MemoryLimits, store: Option<Store>) -> Cache {
        let memory = moka::future::Cache::builder()
            .max_capacity(limits.max_bytes)
            .weigher(|_key: &String, c: &Arc<Compiled>| c.memory_bytes().min(u32::MAX as u64) as u32)
            .time_to_live(limits.time_to_live)
            .build();
        Cache { memory, store }
    }

    pub fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    /// Looks `key` up in memory, then in the database; counts the outcome.
    pub async fn lookup(
        &self,
        key: &str,
        metrics: &Metrics,
    ) -> Result<Option<(Arc<Compiled>, CacheOutcome)>, sqlx::Error> {
        if let Some(c) = self.memory.get(key).await {
            metrics.lookup(Lookup::Memory);
            return Ok(Some((c, CacheOutcome::Memory)));
        }
        if let Some(store) = &self.store {
            match store.load(key).await? {
                Some(Ok(c)) => {
                    let c = Arc::new(c);
                    self.memory.insert(key.to_string(), c.clone()).await;
                    metrics.lookup(Lookup::Database);
                    return Ok(Some((c, CacheOutcome::Database)));
                }
                Some(Err(Invalid::Corrupt(why))) => {
                    metrics.corrupt_artifacts.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%key, %why, "stored compilation failed verification; treating it as a miss");
                }
                None => {}
            }
        }
        metrics.lookup(Lookup::Miss);
        Ok(None)
    }

    /// Only the memory tier (no counting).
    pub async fn in_memory(&self, key: &str) -> Option<Arc<Compiled>> {
        self.memory.get(key).await
    }

    /// Stores a fresh compilation in both tiers.
    pub async fn insert(&self, compiled: Arc<Compiled>) -> Result<(), sqlx::Error> {
        self.memory.insert(compiled.meta.key.clone(), compiled.clone()).await;
        if let Some(store) = &self.store {
            store.save(&compiled).await?;
        }
        Ok(())
    }

    /// Makes sure a compilation answered from this process's memory is in the
    /// database too, and marks it used there. A queue job's result is served
    /// by other processes (API servers), which look only in their own memory
    /// and the database; the database may have evicted the key meanwhile.
    pub async fn ensure_stored(&self, compiled: &Compiled) -> Result<(), sqlx::Error> {
        match &self.store {
            Some(store) if !store.mark_used(&compiled.meta.key).await? => store.save(compiled).await,
            _ => Ok(()),
        }
    }

    /// Removes `key` from both tiers; whether either held it.
    pub async fn purge(&self, key: &str) -> Result<bool, sqlx::Error> {
        let in_memory = self.memory.remove(key).await.is_some();
        let in_store = match &self.store {
            Some(s) => s.purge(key).await?,
            None => false,
        };
        Ok(in_memory || in_store)
    }

    /// The memory tier's weighted size in bytes and entry count.
    pub async fn memory_usage(&self) -> (u64, u64) {
        self.memory.run_pending_tasks().await;
        (self.memory.weighted_size(), self.memory.entry_count())
    }
}
