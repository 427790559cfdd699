//! Prometheus counters kept in atomics, rendered as text for `GET /metrics`.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use kith_proto::LaneDepths;

use crate::registry::RegistryCounts;

#[derive(Default)]
pub struct Metrics {
    runs_ingested: AtomicU64,
    bytes_ingested: AtomicU64,
    searches: AtomicU64,
}

impl Metrics {
    pub fn ingested(&self, bytes: u64) {
        self.runs_ingested.fetch_add(1, Ordering::Relaxed);
        self.bytes_ingested.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn searched(&self) {
        self.searches.fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition of every counter and gauge.
    /// `embedded` is texts embedded per lane (query, realtime, bulk).
    pub fn render(
        &self,
        counts: &RegistryCounts,
        lanes: &LaneDepths,
        embedded: [u64; 3],
        n_chunks: u64,
    ) -> String {
        let mut out = String::new();
        let mut put = |name: &str, kind: &str, help: &str, samples: &[(&str, u64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, v) in samples {
                let _ = writeln!(out, "{name}{labels} {v}");
            }
        };
        put(
            "kith_runs_ingested_total",
            "counter",
            "Runs accepted since start.",
            &[("", self.runs_ingested.load(Ordering::Relaxed))],
        );
        put(
            "kith_ingested_bytes_total",
            "counter",
            "Transcript bytes accepted since start.",
            &[("", self.bytes_ingested.load(Ordering::Relaxed))],
        );
        put(
            "kith_searches_total",
            "counter",
            "Search requests since start.",
            &[("", self.searches.load(Ordering::Relaxed))],
        );
        put("kith_runs", "gauge", "Runs stored.", &[("", counts.runs)]);
        put(
            "kith_chunks",
            "gauge",
            "Chunks in the search index.",
            &[("", n_chunks)],
        );
        put(
            "kith_queue_depth",
            "gauge",
            "Pending work per lane.",
            &[
                ("{lane=\"query\"}", lanes.query),
                ("{lane=\"ingest-realtime\"}", lanes.ingest_realtime),
                ("{lane=\"ingest-bulk\"}", lanes.ingest_bulk),
            ],
        );
        put(
            "kith_embedded_texts_total",
            "counter",
            "Texts embedded per lane since start.",
            &[
                ("{lane=\"query\"}", embedded[0]),
                ("{lane=\"ingest-realtime\"}", embedded[1]),
                ("{lane=\"ingest-bulk\"}", embedded[2]),
            ],
        );
        put(
            "kith_users",
            "gauge",
            "Registered users.",
            &[("", counts.users)],
        );
        put(
            "kith_machines",
            "gauge",
            "Machines with a live token.",
            &[("", counts.machines)],
        );
        out
    }
}
