//! Prometheus metrics, kept by hand: a handful of counters, gauges and one
//! histogram, rendered in the text exposition format at `GET /metrics`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Upper bounds (seconds) of the compile latency histogram's buckets.
const COMPILE_BUCKETS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
/// Upper bounds (seconds) of the request latency histogram's buckets.
const REQUEST_BUCKETS: [f64; 10] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0, 10.0];

#[derive(Debug, Default)]
struct Histogram {
    /// Count per bucket (not cumulative), plus one for +Inf.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], value: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; bounds.len() + 1];
        }
        let i = bounds.iter().position(|b| value <= *b).unwrap_or(bounds.len());
        self.counts[i] += 1;
        self.sum += value;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str, bounds: &[f64]) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, b) in bounds.iter().enumerate() {
            cumulative += self.counts.get(i).copied().unwrap_or(0);
            out.push_str(&format!("{name}_bucket{{{labels}{sep}le=\"{b}\"}} {cumulative}\n"));
        }
        out.push_str(&format!("{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}\n", self.count));
        let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        out.push_str(&format!("{name}_sum{braces} {}\n", self.sum));
        out.push_str(&format!("{name}_count{braces} {}\n", self.count));
    }
}

/// Where a cache lookup was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    Memory,
    Database,
    Miss,
}

/// The service's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    /// (method, route, status) → count.
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    request_seconds: Mutex<Histogram>,
    compile_seconds: Mutex<Histogram>,
    pub compiles_ok: AtomicU64,
    pub compiles_failed: AtomicU64,
    memory_hits: AtomicU64,
    database_hits: AtomicU64,
    misses: AtomicU64,
    /// Stored artifacts whose bytes did not match their hash.
    pub corrupt_artifacts: AtomicU64,
    /// Compiles waiting for a compile slot plus jobs not yet started.
    pub queue_depth: AtomicI64,
    pub compiles_running: AtomicI64,
    pub coalesced_requests: AtomicU64,
}

impl Metrics {
    pub fn request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        if let Ok(mut m) = self.requests.lock() {
            *m.entry((method.to_string(), route.to_string(), status)).or_default() += 1;
        }
        if let Ok(mut h) = self.request_seconds.lock() {
            h.observe(&REQUEST_BUCKETS, seconds);
        }
    }

    pub fn compiled(&self, seconds: f64, ok: bool) {
        if let Ok(mut h) = self.compile_seconds.lock() {
            h.observe(&COMPILE_BUCKETS, seconds);
        }
        let counter = if ok { &self.compiles_ok } else { &self.compiles_failed };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn lookup(&self, result: Lookup) {
        let counter = match result {
            Lookup::Memory => &self.memory_hits,
            Lookup::Database => &self.database_hits,
            Lookup::Miss => &self.misses,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Compilations run to completion or failure (not cache hits).
    pub fn compiles(&self) -> u64 {
        self.compiles_ok.load(Ordering::Relaxed) + self.compiles_failed.load(Ordering::Relaxed)
    }

    /// The text exposition format. `memory_bytes`: the memory tier's size.
    pub fn render(&self, memory_bytes: u64, memory_entries: u64) -> String {
        let mut out = String::new();
        out.push_str("# HELP withloop_http_requests_total HTTP requests by method, route and status.\n");
        out.push_str("# TYPE withloop_http_requests_total counter\n");
        if let Ok(m) = self.requests.lock() {
            for ((method, route, status), n) in m.iter() {
                out.push_str(&format!(
                    "withloop_http_requests_total{{method=\"{method}\",route=\"{}\",status=\"{status}\"}} {n}\n",
                    route.replace('\\', "\\\\").replace('"', "\\\"")
                ));
            }
        }
        out.push_str("# HELP withloop_http_request_duration_seconds Time to the response head.\n");
        out.push_str("# TYPE withloop_http_request_duration_seconds histogram\n");
        if let Ok(h) = self.request_seconds.lock() {
            h.render(&mut out, "withloop_http_request_duration_seconds", "", &REQUEST_BUCKETS);
        }
        out.push_str("# HELP withloop_compile_duration_seconds Compile latency (front end to artifacts).\n");
        out.push_str("# TYPE withloop_compile_duration_seconds histogram\n");
        if let Ok(h) = self.compile_seconds.lock() {
            h.render(&mut out, "withloop_compile_duration_seconds", "", &COMPILE_BUCKETS);
        }
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        out.push_str("# HELP withloop_compiles_total Compilations run, by outcome.\n");
        out.push_str("# TYPE withloop_compiles_total counter\n");
        out.push_str(&format!("withloop_compiles_total{{outcome=\"ok\"}} {}\n", load(&self.compiles_ok)));
        out.push_str(&format!("withloop_compiles_total{{outcome=\"error\"}} {}\n", load(&self.compiles_failed)));
        out.push_str("# HELP withloop_cache_lookups_total Cache lookups by the tier that answered.\n");
        out.push_str("# TYPE withloop_cache_lookups_total counter\n");
        out.push_str(&format!("withloop_cache_lookups_total{{result=\"memory\"}} {}\n", load(&self.memory_hits)));
        out.push_str(&format!("withloop_cache_lookups_total{{result=\"database\"}} {}\n", load(&self.database_hits)));
        out.push_str(&format!("withloop_cache_lookups_total{{result=\"miss\"}} {}\n", load(&self.misses)));
        out.push_str("# HELP withloop_cache_corrupt_total Stored artifacts whose bytes did not match their hash.\n");
        out.push_str("# TYPE withloop_cache_corrupt_total counter\n");
        out.push_str(&format!("withloop_cache_corrupt_total {}\n", load(&self.corrupt_artifacts)));
        out.push_str("# HELP withloop_coalesced_requests_total Requests that waited for an identical compile.\n");
        out.push_str("# TYPE withloop_coalesced_requests_total counter\n");
        out.push_str(&format!("withloop_coalesced_requests_total {}\n", load(&self.coalesced_requests)));
        out.push_str("# HELP withloop_memory_cache_bytes Bytes held by the memory tier.\n");
        out.push_str("# TYPE withloop_memory_cache_bytes gauge\n");
        out.push_str(&format!("withloop_memory_cache_bytes {memory_bytes}\n"));
        out.push_str("# HELP withloop_memory_cache_entries Compilations held by the memory tier.\n");
        out.push_str("# TYPE withloop_memory_cache_entries gauge\n");
        out.push_str(&format!("withloop_memory_cache_entries {memory_entries}\n"));
        out.push_str("# HELP withloop_queue_depth Compiles waiting for a compile slot and jobs not yet started.\n");
        out.push_str("# TYPE withloop_queue_depth gauge\n");
        out.push_str(&format!("withloop_queue_depth {}\n", self.queue_depth.load(Ordering::Relaxed)));
        out.push_str("# HELP withloop_compiles_running Compiles running now.\n");
        out.push_str("# TYPE withloop_compiles_running gauge\n");
        out.push_str(&format!("withloop_compiles_running {}\n", self.compiles_running.load(Ordering::Relaxed)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::default();
        m.compiled(0.003, true);
        m.compiled(0.2, true);
        m.compiled(100.0, false);
        let text = m.render(0, 0);
        assert!(text.contains("withloop_compile_duration_seconds_bucket{le=\"0.005\"} 1\n"), "{text}");
        assert!(text.contains("withloop_compile_duration_seconds_bucket{le=\"0.25\"} 2\n"), "{text}");
        assert!(text.contains("withloop_compile_duration_seconds_bucket{le=\"+Inf\"} 3\n"), "{text}");
        assert!(text.contains("withloop_compiles_total{outcome=\"error\"} 1\n"), "{text}");
    }
}
