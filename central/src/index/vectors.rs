//! Chunk vectors for semantic search, persisted as f32 in an append-only file
//! per model (`vectors-<model>.bin`) and held in memory as int8 codes with
//! one scale per vector: a quarter of the memory of f32 (384 MB for a
//! million 384-d vectors), and integer dot products the compiler vectorises.
//!
//! Search is exact while the store is small. From `ANN_MIN` vectors on, an
//! inverted-file index (IVF) is trained beside it: k-means centroids, each
//! vector listed under its nearest centroid, and a query scores only the
//! vectors of its `NPROBE` nearest lists. Training runs off the lock queries
//! take (`ann_sample` -> `train` -> `assign` -> `install_ann`), so the store
//! keeps answering, exactly, until the index is ready.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"KITHVEC1";

/// Below this many vectors, search is exact.
pub const ANN_MIN: usize = 50_000;
/// Lists a query probes: with `sqrt(n)` lists, about `NPROBE / sqrt(n)` of
/// the store (3% at 1M vectors).
const NPROBE: usize = 32;
/// k-means rounds when training.
const KMEANS_ROUNDS: usize = 8;
/// Training vectors per centroid.
const SAMPLE_PER_LIST: usize = 32;
/// Slots assigned per step while training, each step taking the read lock
/// only to copy their codes.
pub const ASSIGN_STEP: usize = 4096;

/// A chunk's key: the first 8 bytes of sha256(chunk_id), little-endian.
pub fn chunk_key(chunk_id: &str) -> u64 {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(chunk_id.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_le_bytes(b)
}

/// Chunk keys are sha256 prefixes, uniform already: hashing them again for a
/// map is wasted work.
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A map keyed by chunk key.
pub type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;

/// Symmetric int8 quantisation: `v[i] ≈ out[i] * scale`.
fn quantize(v: &[f32], out: &mut [i8]) -> f32 {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        out.fill(0);
        return 0.0;
    }
    let scale = max / 127.0;
    for (o, x) in out.iter_mut().zip(v) {
        *o = (x / scale).round().clamp(-127.0, 127.0) as i8;
    }
    scale
}

fn dot(a: &[i8], b: &[i8]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| i32::from(x) * i32::from(y))
        .sum()
}

/// The best `k` of what is offered, best first.
struct Best<T> {
    k: usize,
    items: Vec<(T, f32)>,
}

impl<T> Best<T> {
    fn new(k: usize) -> Self {
        Self {
            k,
            items: Vec::with_capacity(k + 1),
        }
    }

    fn offer(&mut self, item: T, score: f32) {
        if self.k == 0 || (self.items.len() == self.k && score <= self.items[self.k - 1].1) {
            return;
        }
        let at = self.items.partition_point(|(_, s)| *s >= score);
        self.items.insert(at, (item, score));
        self.items.truncate(self.k);
    }
}

/// A query, quantised like the vectors it is compared with.
struct Probe {
    codes: Vec<i8>,
    scale: f32,
}

impl Probe {
    fn new(query: &[f32]) -> Self {
        let mut codes = vec![0; query.len()];
        let scale = quantize(query, &mut codes);
        Self { codes, scale }
    }
}

/// Unit-length centroids of the IVF lists, int8 like the vectors.
pub struct Centroids {
    dim: usize,
    codes: Vec<i8>,
    scales: Vec<f32>,
}

impl Centroids {
    fn len(&self) -> usize {
        self.scales.len()
    }

    fn code(&self, i: usize) -> &[i8] {
        &self.codes[i * self.dim..(i + 1) * self.dim]
    }

    /// The list of the vector with these codes: its nearest centroid.
    fn nearest(&self, codes: &[i8]) -> u32 {
        let mut best = (0, f32::MIN);
        for i in 0..self.len() {
            let s = dot(codes, self.code(i)) as f32 * self.scales[i];
            if s > best.1 {
                best = (i, s);
            }
        }
        best.0 as u32
    }

    fn nearest_lists(&self, probe: &Probe, n: usize) -> Vec<usize> {
        let mut best = Best::new(n);
        for i in 0..self.len() {
            best.offer(i, dot(&probe.codes, self.code(i)) as f32 * self.scales[i]);
        }
        best.items.into_iter().map(|(i, _)| i).collect()
    }
}

struct Ann {
    centroids: Centroids,
    /// Slots of each list.
    lists: Vec<Vec<u32>>,
    /// List of each slot.
    list_of: Vec<u32>,
    /// Store size when trained; the index is retrained at 4x.
    trained_at: usize,
}

/// What training needs, copied out of the store under its read lock.
pub struct AnnSample {
    generation: u64,
    dim: usize,
    n_lists: usize,
    /// Dequantised vectors, `dim` floats each.
    vectors: Vec<f32>,
}

pub struct VectorStore {
    path: PathBuf,
    model_id: String,
    dim: usize,
    /// `dim` int8 codes per slot.
    codes: Vec<i8>,
    /// Scale of each slot's codes.
    scales: Vec<f32>,
    /// Chunk key of each slot.
    keys: Vec<u64>,
    slot_of: KeyMap<u32>,
    ann: Option<Ann>,
    /// Bumped by `clear`: an index trained before it is stale.
    generation: u64,
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
            codes: Vec::new(),
            scales: Vec::new(),
            keys: Vec::new(),
            slot_of: KeyMap::default(),
            ann: None,
            generation: 0,
            out: None,
        };
        match File::open(&path) {
            Ok(f) => store.load(f).map_err(|e| match e {
                LoadError::Io(e) => io_err(e),
                LoadError::Foreign => VectorError::Foreign {
                    path: path.clone(),
                    model_id: model_id.to_owned(),
                    dim,
                },
            })?,
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

    /// Reads the file record by record (a million vectors are 1.5 GB of f32:
    /// never all in memory at once).
    fn load(&mut self, f: File) -> Result<(), LoadError> {
        let len = f.metadata()?.len();
        let mut r = BufReader::with_capacity(1 << 20, f);
        let header = self.header();
        let mut got = vec![0; header.len()];
        if (len as usize) < header.len() {
            return Err(LoadError::Foreign);
        }
        r.read_exact(&mut got)?;
        if got != header {
            return Err(LoadError::Foreign);
        }
        let record = 8 + 4 * self.dim;
        let body = len as usize - header.len();
        let mut rec = vec![0u8; record];
        let mut v = vec![0f32; self.dim];
        for _ in 0..body / record {
            r.read_exact(&mut rec)?;
            let mut k = [0u8; 8];
            k.copy_from_slice(&rec[..8]);
            for (x, b) in v.iter_mut().zip(rec[8..].chunks_exact(4)) {
                *x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            self.insert(u64::from_le_bytes(k), &v);
        }
        if !body.is_multiple_of(record) {
            // Drop the torn tail so later appends line up.
            OpenOptions::new()
                .write(true)
                .open(&self.path)?
                .set_len((header.len() + body / record * record) as u64)?;
        }
        Ok(())
    }

    fn code(&self, slot: usize) -> &[i8] {
        &self.codes[slot * self.dim..(slot + 1) * self.dim]
    }

    fn insert(&mut self, key: u64, v: &[f32]) {
        let slot = match self.slot_of.get(&key) {
            Some(&slot) => slot as usize,
            None => {
                let slot = self.keys.len();
                self.slot_of.insert(key, slot as u32);
                self.keys.push(key);
                self.scales.push(0.0);
                self.codes.resize(self.codes.len() + self.dim, 0);
                slot
            }
        };
        let dim = self.dim;
        self.scales[slot] = quantize(v, &mut self.codes[slot * dim..(slot + 1) * dim]);
        if let Some(ann) = self.ann.as_mut() {
            let list = ann
                .centroids
                .nearest(&self.codes[slot * dim..(slot + 1) * dim]);
            if let Some(&old) = ann.list_of.get(slot) {
                ann.lists[old as usize].retain(|&s| s as usize != slot);
                ann.list_of[slot] = list;
            } else {
                ann.list_of.push(list);
            }
            ann.lists[list as usize].push(slot as u32);
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
        self.codes.clear();
        self.scales.clear();
        self.keys.clear();
        self.slot_of.clear();
        self.ann = None;
        self.generation += 1;
        self.write_header().map_err(|source| VectorError::Io {
            path: self.path.clone(),
            source,
        })
    }

    /// The `k` vectors among `keys` most similar to `query`, best first, as
    /// (key, cosine); keys without a vector are skipped. Exact.
    pub fn top_k(
        &self,
        query: &[f32],
        k: usize,
        keys: impl IntoIterator<Item = u64>,
    ) -> Vec<(u64, f32)> {
        if query.len() != self.dim {
            return Vec::new();
        }
        let probe = Probe::new(query);
        let mut best = Best::new(k);
        for key in keys {
            if let Some(&slot) = self.slot_of.get(&key) {
                best.offer(key, self.score(&probe, slot as usize));
            }
        }
        best.items
    }

    fn score(&self, probe: &Probe, slot: usize) -> f32 {
        dot(&probe.codes, self.code(slot)) as f32 * probe.scale * self.scales[slot]
    }

    /// The `n` vectors most similar to `query` by the IVF index, best first,
    /// unfiltered: the caller keeps those its viewer may read. `None` until
    /// an index is trained.
    pub fn ann_candidates(&self, query: &[f32], n: usize) -> Option<Vec<(u64, f32)>> {
        let ann = self.ann.as_ref()?;
        if query.len() != self.dim {
            return Some(Vec::new());
        }
        let probe = Probe::new(query);
        let mut best = Best::new(n);
        for list in ann.centroids.nearest_lists(&probe, NPROBE) {
            for &slot in &ann.lists[list] {
                best.offer(slot as usize, self.score(&probe, slot as usize));
            }
        }
        Some(
            best.items
                .into_iter()
                .map(|(slot, s)| (self.keys[slot], s))
                .collect(),
        )
    }

    /// Whether an ANN index is due: none yet and `ANN_MIN` vectors, or the
    /// store has grown 4x since the last one.
    pub fn ann_sample_due(&self) -> bool {
        match &self.ann {
            None => self.len() >= ANN_MIN,
            Some(ann) => self.len() >= 4 * ann.trained_at,
        }
    }

    /// A training sample, when an index is due.
    pub fn ann_sample(&self) -> Option<AnnSample> {
        self.ann_sample_due().then(|| {
            let n_lists = ((self.len() as f64).sqrt() as usize).clamp(16, 4096);
            let n = (n_lists * SAMPLE_PER_LIST).min(self.len());
            let mut vectors = Vec::with_capacity(n * self.dim);
            for i in 0..n {
                let slot = i * self.len() / n;
                let scale = self.scales[slot];
                vectors.extend(self.code(slot).iter().map(|&c| f32::from(c) * scale));
            }
            AnnSample {
                generation: self.generation,
                dim: self.dim,
                n_lists,
                vectors,
            }
        })
    }

    /// The codes of slots `from..from + ASSIGN_STEP` (fewer at the end), for
    /// `Centroids::assign` off the lock.
    pub fn codes_from(&self, generation: u64, from: usize) -> Option<Vec<i8>> {
        (generation == self.generation && from <= self.len()).then(|| {
            let to = (from + ASSIGN_STEP).min(self.len());
            self.codes[from * self.dim..to * self.dim].to_vec()
        })
    }

    /// Installs an index whose lists were assigned for the first
    /// `assigned.len()` slots; later slots are assigned now. Ignored when
    /// the store was cleared since the sample was taken.
    pub fn install_ann(&mut self, generation: u64, centroids: Centroids, mut assigned: Vec<u32>) {
        if generation != self.generation || assigned.len() > self.len() {
            return;
        }
        for slot in assigned.len()..self.len() {
            assigned.push(centroids.nearest(self.code(slot)));
        }
        let mut lists = vec![Vec::new(); centroids.len()];
        for (slot, &list) in assigned.iter().enumerate() {
            lists[list as usize].push(slot as u32);
        }
        self.ann = Some(Ann {
            centroids,
            lists,
            list_of: assigned,
            trained_at: self.len(),
        });
    }
}

impl AnnSample {
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Spherical k-means over the sample: centroids are unit-length means of
    /// their members, seeded from evenly spread sample vectors.
    pub fn train(&self) -> Centroids {
        let dim = self.dim;
        let n = self.vectors.len() / dim;
        let k = self.n_lists.min(n).max(1);
        let sample: Vec<&[f32]> = self.vectors.chunks_exact(dim).collect();
        let mut codes = vec![0i8; n * dim];
        for (c, v) in codes.chunks_exact_mut(dim).zip(&sample) {
            quantize(v, c);
        }
        let mut centroids = Centroids {
            dim,
            codes: vec![0; k * dim],
            scales: vec![0.0; k],
        };
        let set = |centroids: &mut Centroids, i: usize, v: &[f32]| {
            let norm = v
                .iter()
                .map(|x| x * x)
                .sum::<f32>()
                .sqrt()
                .max(f32::MIN_POSITIVE);
            let unit: Vec<f32> = v.iter().map(|x| x / norm).collect();
            centroids.scales[i] = quantize(&unit, &mut centroids.codes[i * dim..(i + 1) * dim]);
        };
        for i in 0..k {
            set(&mut centroids, i, sample[i * n / k]);
        }
        for round in 0..KMEANS_ROUNDS {
            let mut sums = vec![0f32; k * dim];
            let mut counts = vec![0usize; k];
            for (j, c) in codes.chunks_exact(dim).enumerate() {
                let list = centroids.nearest(c) as usize;
                counts[list] += 1;
                for (s, x) in sums[list * dim..(list + 1) * dim].iter_mut().zip(sample[j]) {
                    *s += x;
                }
            }
            for i in 0..k {
                if counts[i] > 0 {
                    set(&mut centroids, i, &sums[i * dim..(i + 1) * dim]);
                } else {
                    // An empty list takes over some sample vector instead.
                    set(&mut centroids, i, sample[(i * 7919 + round * 104_729) % n]);
                }
            }
        }
        centroids
    }
}

impl Centroids {
    /// The list of each vector in `codes` (`dim` codes each).
    pub fn assign(&self, codes: &[i8]) -> Vec<u32> {
        codes
            .chunks_exact(self.dim)
            .map(|c| self.nearest(c))
            .collect()
    }
}

enum LoadError {
    Io(io::Error),
    Foreign,
}

impl From<io::Error> for LoadError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    fn keys(hits: Vec<(u64, f32)>) -> Vec<u64> {
        hits.into_iter().map(|(k, _)| k).collect()
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
        assert_eq!(keys(s.top_k(&q, 2, [1, 2, 3])), vec![1, 2]);
        assert_eq!(
            keys(s.top_k(&q, 2, [2, 3, 99])),
            vec![2, 3],
            "a key the viewer may not read never ranks; an unknown key is skipped"
        );
        let cos = s.top_k(&q, 1, [1])[0].1;
        assert!(
            (cos - 0.9988).abs() < 0.01,
            "int8 codes keep the cosine: {cos}"
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
        assert_eq!(
            keys(s.top_k(&unit(&[0.0, 0.0, 1.0]), 1, [1, 2, 3, 5])),
            vec![5]
        );
        assert!(
            VectorStore::open(dir.path(), "m/1", 4).is_err(),
            "another dimension is another store"
        );
    }

    /// Deterministic pseudo-random unit vectors around `n_topics` topics,
    /// like chunk embeddings of a corpus about a few things.
    fn corpus(n: usize, dim: usize, n_topics: usize, seed: u64) -> Vec<Vec<f32>> {
        let mut state = seed;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 2000) as f32 / 1000.0 - 1.0
        };
        let topics: Vec<Vec<f32>> = (0..n_topics)
            .map(|_| (0..dim).map(|_| next()).collect())
            .collect();
        (0..n)
            .map(|i| {
                let t = &topics[i % n_topics];
                unit(&t.iter().map(|x| x + 0.6 * next()).collect::<Vec<_>>())
            })
            .collect()
    }

    #[test]
    fn ann_finds_what_exact_search_finds_and_follows_changes() {
        let dim = 32;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut s = VectorStore::open(dir.path(), "m", dim).unwrap_or_else(|e| panic!("{e}"));
        let n = ANN_MIN;
        let items: Vec<(u64, Vec<f32>)> = corpus(n, dim, 40, 7)
            .into_iter()
            .enumerate()
            .map(|(i, v)| (i as u64, v))
            .collect();
        s.put(&items).unwrap_or_else(|e| panic!("{e}"));
        let queries = corpus(50, dim, 40, 99);
        assert!(s.ann_candidates(&queries[0], 10).is_none(), "no index yet");

        // Train the way the index does: sample, train and assign off the
        // lock, install under it.
        let sample = s.ann_sample().unwrap_or_else(|| panic!("due at ANN_MIN"));
        let centroids = sample.train();
        let mut assigned = Vec::new();
        while let Some(codes) = s
            .codes_from(sample.generation(), assigned.len())
            .filter(|c| !c.is_empty())
        {
            assigned.extend(centroids.assign(&codes));
        }
        // A vector that arrives while training is listed at install.
        let late = n as u64 + 1;
        s.put(&[(late, queries[0].clone())])
            .unwrap_or_else(|e| panic!("{e}"));
        s.install_ann(sample.generation(), centroids, assigned);
        assert!(s.ann_sample().is_none(), "not due again until 4x");

        let mut found = 0;
        for q in &queries {
            let exact = keys(s.top_k(q, 10, 0..=late));
            let ann = keys(s.ann_candidates(q, 10).unwrap_or_default());
            found += exact.iter().filter(|k| ann.contains(k)).count();
        }
        let recall = found as f64 / (10 * queries.len()) as f64;
        assert!(recall >= 0.9, "ANN recall@10 against exact: {recall}");
        assert_eq!(
            keys(s.ann_candidates(&queries[0], 1).unwrap_or_default()),
            vec![late]
        );

        // A replaced vector moves to its new list: found by its new value,
        // not its old one.
        s.put(&[(late, queries[1].clone())])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            keys(s.ann_candidates(&queries[1], 1).unwrap_or_default()),
            vec![late]
        );
        assert_ne!(
            keys(s.ann_candidates(&queries[0], 1).unwrap_or_default()),
            vec![late]
        );

        // Cleared: the index goes, and a sample from before is ignored.
        s.clear().unwrap_or_else(|e| panic!("{e}"));
        assert!(s.ann_candidates(&queries[0], 1).is_none());
        assert!(s.codes_from(sample.generation(), 0).is_none());
    }
}
