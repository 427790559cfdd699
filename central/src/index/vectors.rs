//! Chunk vectors for semantic search: a flat, in-memory f32 matrix searched
//! exactly (brute-force dot products over L2-normalised vectors), persisted
//! as an append-only file per model (`vectors-<model>.bin`).
//!
//! Exact search is fast enough for a family (measured ~30 ms at 100k chunks
//! on this machine, see BENCHMARKS.md); callers pass the set of chunk keys
//! the viewer may read, so filtering happens before ranking, never after.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"KITHVEC1";

/// A chunk's key: the first 8 bytes of sha256(chunk_id), little-endian.
pub fn chunk_key(chunk_id: &str) -> u64 {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(chunk_id.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_le_bytes(b)
}

pub struct VectorStore {
    path: PathBuf,
    model_id: String,
    dim: usize,
    /// `dim` floats per slot.
    data: Vec<f32>,
    /// Chunk key of each slot.
    keys: Vec<u64>,
    slot_of: HashMap<u64, usize>,
    /// Records appended but not yet flushed to disk.
    out: Option<BufWriter<File>>,
}

#[derive(Debug, thiserror::Error)]
pub enum VectorError {
    #[error("vector file {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("vector file {path} is not a kith vector file for {model_id} ({dim} dimensions); run `kith-central reindex`")]
    Foreign {
        path: PathBuf,
        model_id: String,
        dim: usize,
    },
    #[error("vector has {got} dimensions, the model has {want}")]
    Dim { got: usize, want: usize },
}

impl VectorStore {
    /// Opens (or creates) the vector file of `model_id` in `dir`. A torn
    /// last record (crash mid-append) is dropped.
    pub fn open(dir: &Path, model_id: &str, dim: usize) -> Result<Self, VectorError> {
        let safe: String = model_id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = dir.join(format!("vectors-{safe}.bin"));
        let io_err = |source| VectorError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io_err)?;
        let mut store = Self {
            path: path.clone(),
            model_id: model_id.to_owned(),
            dim,
            data: Vec::new(),
            keys: Vec::new(),
            slot_of: HashMap::new(),
            out: None,
        };
        match File::open(&path) {
            Ok(f) => store.load(f)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                store.write_header().map_err(io_err)?
            }
            Err(e) => return Err(io_err(e)),
        }
        Ok(store)
    }

    fn header(&self) -> Vec<u8> {
        let mut h = MAGIC.to_vec();
        h.extend_from_slice(&(self.dim as u32).to_le_bytes());
        h.extend_from_slice(&(self.model_id.len() as u32).to_le_bytes());
        h.extend_from_slice(self.model_id.as_bytes());
        h
    }

    fn write_header(&mut self) -> io::Result<()> {
        let mut f = File::create(&self.path)?;
        f.write_all(&self.header())?;
        f.sync_all()
    }

    fn load(&mut self, f: File) -> Result<(), VectorError> {
        let mut bytes = Vec::new();
        BufReader::new(f)
            .read_to_end(&mut bytes)
            .map_err(|source| VectorError::Io {
                path: self.path.clone(),
                source,
            })?;
        let header = self.header();
        if !bytes.starts_with(&header) {
            return Err(VectorError::Foreign {
                path: self.path.clone(),
                model_id: self.model_id.clone(),
                dim: self.dim,
            });
        }
        let record = 8 + 4 * self.dim;
        let body = &bytes[header.len()..];
        let whole = body.len() / record * record;
        for rec in body[..whole].chunks_exact(record) {
            let mut k = [0u8; 8];
            k.copy_from_slice(&rec[..8]);
            let v: Vec<f32> = rec[8..]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            self.insert(u64::from_le_bytes(k), &v);
        }
        if whole != body.len() {
            // Drop the torn tail so later appends line up.
            let f = OpenOptions::new()
                .write(true)
                .open(&self.path)
                .map_err(|source| VectorError::Io {
                    path: self.path.clone(),
                    source,
                })?;
            f.set_len((header.len() + whole) as u64)
                .map_err(|source| VectorError::Io {
                    path: self.path.clone(),
                    source,
                })?;
        }
        Ok(())
    }

    fn insert(&mut self, key: u64, v: &[f32]) {
        match self.slot_of.get(&key) {
            Some(&slot) => self.data[slot * self.dim..(slot + 1) * self.dim].copy_from_slice(v),
            None => {
                self.slot_of.insert(key, self.keys.len());
                self.keys.push(key);
                self.data.extend_from_slice(v);
            }
        }
    }

    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn contains(&self, key: u64) -> bool {
        self.slot_of.contains_key(&key)
    }

    /// Adds (or replaces) vectors; durable after `flush`.
    pub fn put(&mut self, items: &[(u64, Vec<f32>)]) -> Result<(), VectorError> {
        for (_, v) in items {
            if v.len() != self.dim {
                return Err(VectorError::Dim {
                    got: v.len(),
                    want: self.dim,
                });
            }
        }
        let io_err = |path: &Path, source| VectorError::Io {
            path: path.to_owned(),
            source,
        };
        if self.out.is_none() {
            let f = OpenOptions::new()
                .append(true)
                .open(&self.path)
                .map_err(|e| io_err(&self.path, e))?;
            self.out = Some(BufWriter::new(f));
        }
        for (key, v) in items {
            if let Some(out) = self.out.as_mut() {
                out.write_all(&key.to_le_bytes())
                    .map_err(|e| io_err(&self.path, e))?;
                for x in v {
                    out.write_all(&x.to_le_bytes())
                        .map_err(|e| io_err(&self.path, e))?;
                }
            }
            self.insert(*key, v);
        }
        Ok(())
    }

    pub fn flush(&mut self) -> Result<(), VectorError> {
        if let Some(out) = self.out.as_mut() {
            out.flush().map_err(|source| VectorError::Io {
                path: self.path.clone(),
                source,
            })?;
            out.get_ref()
                .sync_data()
                .map_err(|source| VectorError::Io {
                    path: self.path.clone(),
                    source,
                })?;
        }
        Ok(())
    }

    /// Removes every vector.
    pub fn clear(&mut self) -> Result<(), VectorError> {
        self.out = None;
        self.data.clear();
        self.keys.clear();
        self.slot_of.clear();
        self.write_header().map_err(|source| VectorError::Io {
            path: self.path.clone(),
            source,
        })
    }

    /// The `k` most similar vectors among those whose key `allowed` accepts,
    /// best first, as (key, cosine).
    pub fn top_k(&self, query: &[f32], k: usize, allowed: impl Fn(u64) -> bool) -> Vec<(u64, f32)> {
        if query.len() != self.dim || k == 0 {
            return Vec::new();
        }
        let mut best: Vec<(u64, f32)> = Vec::with_capacity(k + 1);
        for (slot, &key) in self.keys.iter().enumerate() {
            if !allowed(key) {
                continue;
            }
            let v = &self.data[slot * self.dim..(slot + 1) * self.dim];
            let score: f32 = v.iter().zip(query).map(|(a, b)| a * b).sum();
            if best.len() < k || score > best[best.len() - 1].1 {
                let at = best.partition_point(|(_, s)| *s >= score);
                best.insert(at, (key, score));
                best.truncate(k);
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn nearest_first_only_allowed_and_survives_reopen_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut s = VectorStore::open(dir.path(), "m/1", 3).unwrap_or_else(|e| panic!("{e}"));
        s.put(&[
            (1, unit(&[1.0, 0.0, 0.0])),
            (2, unit(&[0.9, 0.1, 0.0])),
            (3, unit(&[0.0, 1.0, 0.0])),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        s.flush().unwrap_or_else(|e| panic!("{e}"));
        let q = unit(&[1.0, 0.05, 0.0]);
        let keys = |hits: Vec<(u64, f32)>| hits.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(keys(s.top_k(&q, 2, |_| true)), vec![1, 2]);
        assert_eq!(
            keys(s.top_k(&q, 2, |k| k != 1)),
            vec![2, 3],
            "a key the viewer may not read never ranks"
        );
        assert!(s.put(&[(4, vec![1.0])]).is_err(), "wrong dimension refused");
        drop(s);
        // A crash mid-append leaves a partial record: it is dropped on open.
        let path = dir.path().join("vectors-m_1.bin");
        let mut f = OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{e}"));
        f.write_all(&[7, 7, 7]).unwrap_or_else(|e| panic!("{e}"));
        drop(f);
        let mut s = VectorStore::open(dir.path(), "m/1", 3).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.len(), 3);
        s.put(&[(5, unit(&[0.0, 0.0, 1.0]))])
            .unwrap_or_else(|e| panic!("{e}"));
        s.flush().unwrap_or_else(|e| panic!("{e}"));
        let s = VectorStore::open(dir.path(), "m/1", 3).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(keys(s.top_k(&unit(&[0.0, 0.0, 1.0]), 1, |_| true)), vec![5]);
        assert!(
            VectorStore::open(dir.path(), "m/1", 4).is_err(),
            "another dimension is another store"
        );
    }
}
