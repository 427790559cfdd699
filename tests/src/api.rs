//! Central's HTTP API as a machine calls it: a caller with one machine's
//! token, what central answered, and the reads and waits the tests share
//! (a run indexed, embedded; indexing settled; every source chain).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};

/// A caller of central's HTTP API with one machine's token.
pub struct Api {
    pub base: String,
    pub token: String,
    pub http: reqwest::blocking::Client,
}

/// Status and parsed JSON body of a response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: serde_json::Value,
}

impl Reply {
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or_default()
    }
}

impl Api {
    pub fn post(&self, path: &str, body: &serde_json::Value) -> Result<Reply> {
        self.send(self.http.post(self.url(path)).json(body))
    }

    pub fn post_with(&self, path: &str, body: &serde_json::Value, key: &str) -> Result<Reply> {
        self.send(
            self.http
                .post(self.url(path))
                .header("Idempotency-Key", key)
                .json(body),
        )
    }

    pub fn get(&self, path: &str) -> Result<Reply> {
        self.send(self.http.get(self.url(path)))
    }

    pub fn get_bytes(&self, path: &str) -> Result<(u16, Vec<u8>)> {
        let res = self
            .http
            .get(self.url(path))
            .bearer_auth(&self.token)
            .send()?;
        Ok((res.status().as_u16(), res.bytes()?.to_vec()))
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends with this caller's bearer token.
    pub fn send(&self, req: reqwest::blocking::RequestBuilder) -> Result<Reply> {
        Self::send_raw(req.bearer_auth(&self.token))
    }

    /// Sends exactly the request given (no token added).
    pub fn send_raw(req: reqwest::blocking::RequestBuilder) -> Result<Reply> {
        let res = req.send()?;
        let status = res.status().as_u16();
        let text = res.text()?;
        let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
        Ok(Reply { status, body })
    }

    /// Polls `GET /api/runs/{id}` until the run is indexed.
    pub fn wait_indexed(&self, run_id: &str, within: Duration) -> Result<serde_json::Value> {
        let deadline = Instant::now() + within;
        loop {
            let r = self.get(&format!("/api/runs/{run_id}"))?;
            if r.status == 200 && r.body["indexed_at"].is_string() {
                return Ok(r.body);
            }
            if Instant::now() > deadline {
                bail!("run {run_id} not indexed within {within:?}: {r:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Api {
    /// Polls until the run has vectors.
    pub fn wait_embedded(&self, run_id: &str, within: Duration) -> Result<serde_json::Value> {
        let deadline = Instant::now() + within;
        loop {
            let r = self.get(&format!("/api/runs/{run_id}"))?;
            if r.status == 200 && r.body["embedded_at"].is_string() {
                return Ok(r.body);
            }
            if Instant::now() > deadline {
                bail!("run {run_id} not embedded within {within:?}: {r:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Polls `GET /api/status` until central has no indexing left to do.
    pub fn wait_settled(&self, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        loop {
            let s = self.get("/api/status")?;
            if s.body["counts"]["pending_index_jobs"] == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("indexing did not settle within {within:?}: {s:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `POST /api/runs` of `body`, which central must take (202): the id
    /// of the run it made.
    pub fn ingest(&self, body: &serde_json::Value) -> Result<String> {
        let r = self.post("/api/runs", body)?;
        ensure!(
            r.status == 202,
            "ingest of {} answered {r:?}",
            body["source_identity"]
        );
        Ok(str_of(&r.body, "run_id"))
    }

    /// The runs a keyword search for `query` finds, in rank order (the
    /// search must answer 200).
    pub fn keyword(&self, query: &str) -> Result<Vec<String>> {
        let r = self.post(
            "/api/search",
            &serde_json::json!({"query": query, "mode": "keyword"}),
        )?;
        ensure!(r.status == 200, "search for {query:?} answered {r:?}");
        Ok(hit_run_ids(&r.body))
    }
}

impl Api {
    /// Central's copy of every source chain this caller may read: source
    /// identity -> its runs' bytes in offset order, checked to chain
    /// without a gap or an overlap.
    pub fn chains(&self) -> Result<BTreeMap<String, Vec<u8>>> {
        let forest = self.get("/api/runs/forest?limit=500")?;
        let mut runs: Vec<(String, u64, u64, String)> = Vec::new();
        for tree in forest.body["trees"].as_array().into_iter().flatten() {
            for r in tree["runs"].as_array().into_iter().flatten() {
                let run = &r["run"];
                runs.push((
                    str_of(run, "source_identity"),
                    run["from_offset"].as_u64().unwrap_or(0),
                    run["to_offset"].as_u64().unwrap_or(0),
                    str_of(run, "id"),
                ));
            }
        }
        runs.sort();
        let mut out: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for (source, from, to, id) in runs {
            let (status, bytes) = self.get_bytes(&format!("/api/runs/{id}/jsonl"))?;
            ensure!(status == 200, "run {id}: {status}");
            let chain = out.entry(source).or_default();
            ensure!(
                chain.len() as u64 == from,
                "a gap or an overlap in the chain: {} bytes, then a run from {from}",
                chain.len()
            );
            ensure!(
                bytes.len() as u64 == to - from,
                "run {id} holds {} bytes",
                bytes.len()
            );
            chain.extend(bytes);
        }
        Ok(out)
    }
}

/// The chains (of `Api::chains`) whose source identity names `path`.
pub fn chain_of<'a>(chains: &'a BTreeMap<String, Vec<u8>>, path: &Path) -> Vec<&'a Vec<u8>> {
    let prefix = format!("{}#", path.display());
    chains
        .iter()
        .filter(|(k, _)| k.starts_with(&prefix))
        .map(|(_, v)| v)
        .collect()
}

/// The run of each hit of a search answer, in rank order.
pub fn hit_run_ids(body: &serde_json::Value) -> Vec<String> {
    body["hits"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h["run_id"].as_str().map(str::to_owned))
        .collect()
}

/// The string at `key` of a JSON object, or "" (a test compares it).
pub fn str_of(v: &serde_json::Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_owned()
}
