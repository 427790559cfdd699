//! Chunk vectors for semantic search, persisted as f32 in an append-only file
//! per model (`vectors-<model>.bin`) and held in memory as int8 codes with
//! one scale per vector: a quarter of the memory of f32 (384 MB for a
//! million 384-d vectors), and integer dot products the compiler vectorises.
//!
//! In memory the vectors sit in lists, each list's codes contiguous. A small
//! store is one list, searched exactly. From `ANN_MIN` vectors on, an
//! inverted-file index (IVF) is trained: k-means centroids, one list per
//! centroid holding the vectors nearest to it, and a query scores only the
//! vectors of its `NPROBE` nearest lists, reading each list front to back.
//! Training runs off the lock queries take (`ann_sample` -> `train` ->
//! `assign_step`s -> `install_ann`), so the store keeps answering, exactly,
//! until the index is ready; only the final regrouping holds the lock.
//!
//! A trained index is saved beside the vector file (`vectors-<model>.ivf`:
//! the centroids and each vector's list, with a checksum), again each time
//! the store grows 4% past it, and read back on open, so a restart does
//! not train again (20 s of both cores at a
//! million vectors, with every semantic search exact until then). The file
//! is derived: missing, torn or foreign, it is ignored and the index is
//! trained again.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use sha2::{Digest, Sha256};

const MAGIC: &[u8; 8] = b"KITHVEC1";
const IVF_MAGIC: &[u8; 8] = b"KITHIVF1";

/// Below this many vectors, search is exact.
pub(crate) const ANN_MIN: usize = 50_000;
/// Lists a query probes: with `sqrt(n) / 2` lists, `2 * NPROBE / sqrt(n)`
/// of the store (5% at 1M vectors).
const NPROBE: usize = 24;
/// k-means rounds when training.
const KMEANS_ROUNDS: usize = 8;
/// Training vectors per centroid.
const SAMPLE_PER_LIST: usize = 32;
/// Vectors assigned per step while training, each step taking the read
/// lock only to copy their codes.
pub(crate) const ASSIGN_STEP: usize = 4096;
/// A saved index is used while the vector file holds at most this many
/// records per 100 vectors it knows, and the other way round: new vectors
/// find their list by a scan of every centroid while the store opens (~2 s
/// for 5% of a million).
const IVF_STALE_PERCENT: usize = 105;
/// The index is saved again when the store holds this many vectors per 100
/// the saved file names, so that a restart can still use it.
const IVF_RESAVE_PERCENT: usize = 104;

/// A chunk's key: the first 8 bytes of sha256(chunk_id), little-endian.
pub(crate) fn chunk_key(chunk_id: &str) -> u64 {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(chunk_id.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_le_bytes(b)
}

/// Chunk keys are sha256 prefixes, uniform already: hashing them again for a
/// map is wasted work.
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

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
pub(crate) type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;

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

/// Dot product of int8 codes. Written as i16 products summed in 16 lanes so
/// the compiler emits `pmaddwd` (4.9 G multiply-adds/s here with
/// x86-64-v2, against 1.9 for the plain i32 form).
fn dot(a: &[i8], b: &[i8]) -> i32 {
    let mut lanes = [0i32; 16];
    let (a16, b16) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: i32 = a16
        .remainder()
        .iter()
        .zip(b16.remainder())
        .map(|(&x, &y)| i32::from(x) * i32::from(y))
        .sum();
    for (ca, cb) in a16.zip(b16) {
        for i in 0..16 {
            lanes[i] += i32::from(i16::from(ca[i]) * i16::from(cb[i]));
        }
    }
    lanes.iter().sum::<i32>() + tail
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
pub(crate) struct Centroids {
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

    /// Each centroid's similarity to `codes`, by centroid.
    fn similarities<'a>(&'a self, codes: &'a [i8]) -> impl Iterator<Item = (usize, f32)> + 'a {
        (0..self.len()).map(move |i| (i, dot(codes, self.code(i)) as f32 * self.scales[i]))
    }

    /// The list of the vector with these codes: its nearest centroid.
    fn nearest(&self, codes: &[i8]) -> u32 {
        let best =
            self.similarities(codes)
                .fold((0, f32::MIN), |best, s| if s.1 > best.1 { s } else { best });
        best.0 as u32
    }

    fn nearest_lists(&self, probe: &Probe, n: usize) -> Vec<usize> {
        let mut best = Best::new(n);
        for (i, s) in self.similarities(&probe.codes) {
            best.offer(i, s);
        }
        best.items.into_iter().map(|(i, _)| i).collect()
    }

    /// The list of each vector in `codes` (`dim` codes each).
    pub(crate) fn assign(&self, codes: &[i8]) -> Vec<u32> {
        codes
            .chunks_exact(self.dim)
            .map(|c| self.nearest(c))
            .collect()
    }
}

/// Vectors with their codes contiguous, so a scan reads memory in order.
#[derive(Default)]
struct List {
    keys: Vec<u64>,
    codes: Vec<i8>,
    scales: Vec<f32>,
}

impl List {
    fn push(&mut self, key: u64, codes: &[i8], scale: f32) {
        self.keys.push(key);
        self.codes.extend_from_slice(codes);
        self.scales.push(scale);
    }
}

/// Where to resume copying codes out for assignment: (list, position).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cursor(usize, usize);

/// What training needs, copied out of the store under its read lock.
pub(crate) struct AnnSample {
    generation: u64,
    dim: usize,
    n_lists: usize,
    /// `dim` codes per sampled vector.
    codes: Vec<i8>,
    scales: Vec<f32>,
}

impl AnnSample {
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Spherical k-means over the sample: centroids are unit-length means of
    /// their members, seeded from evenly spread sample vectors.
    pub(crate) fn train(&self) -> Centroids {
        let dim = self.dim;
        let n = self.scales.len();
        let k = self.n_lists.min(n).max(1);
        let vector = |j: usize| -> Vec<f32> {
            self.codes[j * dim..(j + 1) * dim]
                .iter()
                .map(|&c| f32::from(c) * self.scales[j])
                .collect()
        };
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
            set(&mut centroids, i, &vector(i * n / k));
        }
        for round in 0..KMEANS_ROUNDS {
            let mut sums = vec![0f32; k * dim];
            let mut counts = vec![0usize; k];
            for (j, list) in centroids.assign(&self.codes).into_iter().enumerate() {
                let list = list as usize;
                counts[list] += 1;
                let code = &self.codes[j * dim..(j + 1) * dim];
                for (s, &c) in sums[list * dim..(list + 1) * dim].iter_mut().zip(code) {
                    *s += f32::from(c) * self.scales[j];
                }
            }
            for i in 0..k {
                if counts[i] > 0 {
                    set(&mut centroids, i, &sums[i * dim..(i + 1) * dim]);
                } else {
                    // An empty list takes over some sample vector instead.
                    set(&mut centroids, i, &vector((i * 7919 + round * 104_729) % n));
                }
            }
        }
        centroids
    }
}

pub(crate) struct VectorStore {
    path: PathBuf,
    model_id: String,
    dim: usize,
    /// One list while the store is searched exactly; one per centroid after.
    lists: Vec<List>,
    centroids: Option<Centroids>,
    /// Store size when the index was trained; it is retrained at 4x.
    trained_at: usize,
    /// Vectors the saved index names (0: none saved).
    saved_at: usize,
    /// (list, position) of each key's vector.
    at: KeyMap<(u32, u32)>,
    /// Bumped by `clear` and `install_ann`: a sample or assignment taken
    /// before it is stale.
    generation: u64,
    /// Records appended but not yet flushed to disk.
    out: Option<BufWriter<File>>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum VectorError {
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
    pub(crate) fn open(dir: &Path, model_id: &str, dim: usize) -> Result<Self, VectorError> {
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
        crate::private::create_dir_all(dir).map_err(io_err)?;
        let mut store = Self {
            path: path.clone(),
            model_id: model_id.to_owned(),
            dim,
            lists: vec![List::default()],
            centroids: None,
            trained_at: 0,
            saved_at: 0,
            at: KeyMap::default(),
            generation: 0,
            out: None,
        };
        match File::open(&path) {
            Ok(f) => {
                let saved = store.read_ivf(&f);
                store.load(f, saved).map_err(|e| match e {
                    LoadError::Io(e) => io_err(e),
                    LoadError::Foreign => VectorError::Foreign {
                        path: path.clone(),
                        model_id: model_id.to_owned(),
                        dim,
                    },
                })?
            }
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

    fn ivf_path(&self) -> PathBuf {
        self.path.with_extension("ivf")
    }

    /// The saved index: the vector file's header, the centroids, then each
    /// vector's (key, list), then the sha256 of all that.
    fn ivf_bytes(&self) -> Option<Vec<u8>> {
        let centroids = self.centroids.as_ref()?;
        let mut b = IVF_MAGIC.to_vec();
        b.extend_from_slice(&self.header());
        b.extend_from_slice(&(centroids.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.trained_at as u64).to_le_bytes());
        b.extend(centroids.codes.iter().map(|&c| c as u8));
        for scale in &centroids.scales {
            b.extend_from_slice(&scale.to_le_bytes());
        }
        b.extend_from_slice(&(self.at.len() as u64).to_le_bytes());
        for (key, (list, _)) in &self.at {
            b.extend_from_slice(&key.to_le_bytes());
            b.extend_from_slice(&list.to_le_bytes());
        }
        let sum = Sha256::digest(&b);
        b.extend_from_slice(&sum);
        Some(b)
    }

    /// Installs the saved index's centroids, and returns each saved
    /// vector's list; `None` (index to be trained again) when there is no
    /// usable file for `vectors`, the open vector file.
    fn read_ivf(&mut self, vectors: &File) -> Option<KeyMap<u32>> {
        let path = self.ivf_path();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the saved ANN index; training it again");
                return None;
            }
        };
        let parsed = parse_ivf(&bytes, &self.header(), self.dim);
        if parsed.is_none() {
            tracing::warn!(path = %path.display(), "the saved ANN index is damaged or foreign; training it again");
        }
        let (centroids, trained_at, lists) = parsed?;
        let header = self.header().len() as u64;
        let records =
            vectors.metadata().ok()?.len().saturating_sub(header) as usize / (8 + 4 * self.dim);
        // Within 5% either way: more records, new vectors without a list;
        // fewer, a file cleared (reindexed) since.
        if records * 100 > lists.len() * IVF_STALE_PERCENT
            || lists.len() * 100 > records * IVF_STALE_PERCENT
        {
            tracing::info!(path = %path.display(), "the saved ANN index is out of date; training it again");
            return None;
        }
        self.lists = (0..centroids.len()).map(|_| List::default()).collect();
        self.centroids = Some(centroids);
        self.trained_at = trained_at;
        self.saved_at = lists.len();
        Some(lists)
    }

    /// Reads the file record by record (a million vectors are 1.5 GB of f32:
    /// never all in memory at once), each vector into the list `saved`
    /// names, if any.
    fn load(&mut self, f: File, saved: Option<KeyMap<u32>>) -> Result<(), LoadError> {
        let len = f.metadata()?.len() as usize;
        let mut r = BufReader::with_capacity(1 << 20, f);
        let header = self.header();
        if len < header.len() {
            return Err(LoadError::Foreign);
        }
        let mut got = vec![0; header.len()];
        r.read_exact(&mut got)?;
        if got != header {
            return Err(LoadError::Foreign);
        }
        let record = 8 + 4 * self.dim;
        let body = len - header.len();
        let saved = saved.unwrap_or_default();
        let mut rec = vec![0u8; record];
        let mut v = vec![0f32; self.dim];
        for _ in 0..body / record {
            r.read_exact(&mut rec)?;
            let mut k = [0u8; 8];
            k.copy_from_slice(&rec[..8]);
            for (x, b) in v.iter_mut().zip(rec[8..].chunks_exact(4)) {
                *x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            let key = u64::from_le_bytes(k);
            if v.iter().all(|x| *x == 0.0) {
                self.take(key);
            } else {
                self.insert(key, &v, saved.get(&key).copied());
            }
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

    /// Adds or replaces a vector, in `list` if given (and valid), else in
    /// the list of its nearest centroid.
    fn insert(&mut self, key: u64, v: &[f32], list: Option<u32>) {
        let mut codes = vec![0i8; self.dim];
        let scale = quantize(v, &mut codes);
        let list = match (&self.centroids, list) {
            (None, _) => 0,
            (Some(c), Some(list)) if (list as usize) < c.len() => list,
            (Some(c), _) => c.nearest(&codes),
        };
        if let Some(&(old, pos)) = self.at.get(&key) {
            if old == list {
                let l = &mut self.lists[list as usize];
                let pos = pos as usize;
                l.codes[pos * self.dim..(pos + 1) * self.dim].copy_from_slice(&codes);
                l.scales[pos] = scale;
                return;
            }
            self.remove(old, pos);
        }
        let l = &mut self.lists[list as usize];
        self.at.insert(key, (list, l.keys.len() as u32));
        l.push(key, &codes, scale);
    }

    /// Takes the vector of `key` out of the store, if it has one.
    fn take(&mut self, key: u64) {
        if let Some((list, pos)) = self.at.remove(&key) {
            self.remove(list, pos);
        }
    }

    /// Takes the vector at (list, pos) out of its list; the list's last
    /// vector moves into its place.
    fn remove(&mut self, list: u32, pos: u32) {
        let dim = self.dim;
        let l = &mut self.lists[list as usize];
        let (pos, last) = (pos as usize, l.keys.len() - 1);
        l.keys.swap_remove(pos);
        l.scales.swap_remove(pos);
        if pos != last {
            l.codes.copy_within(last * dim..(last + 1) * dim, pos * dim);
            self.at.insert(l.keys[pos], (list, pos as u32));
        }
        l.codes.truncate(last * dim);
    }

    pub(crate) fn model_id(&self) -> &str {
        &self.model_id
    }

    pub(crate) fn dim(&self) -> usize {
        self.dim
    }

    pub(crate) fn len(&self) -> usize {
        self.at.len()
    }

    pub(crate) fn contains(&self, key: u64) -> bool {
        self.at.contains_key(&key)
    }

    /// Adds (or replaces) vectors; durable after `flush`. An all-zero
    /// vector (no embedder gives one) would read back as a removal.
    pub(crate) fn put(&mut self, items: &[(u64, Vec<f32>)]) -> Result<(), VectorError> {
        for (_, v) in items {
            if v.len() != self.dim {
                return Err(VectorError::Dim {
                    got: v.len(),
                    want: self.dim,
                });
            }
        }
        for (key, v) in items {
            self.append(*key, v)?;
            self.insert(*key, v, None);
        }
        Ok(())
    }

    /// Drops the vectors of `keys` (chunks whose text changed, so that they
    /// are embedded again): they leave memory, and a removal record (the
    /// key with an all-zero vector) is appended for each, durable after
    /// `flush`, so that a restart does not bring them back. Returns how
    /// many went.
    pub(crate) fn invalidate(&mut self, keys: &[u64]) -> Result<usize, VectorError> {
        let zero = vec![0.0; self.dim];
        let mut n = 0;
        for &key in keys {
            if self.contains(key) {
                self.append(key, &zero)?;
                self.take(key);
                n += 1;
            }
        }
        Ok(n)
    }

    /// Appends one record to the file (buffered).
    fn append(&mut self, key: u64, v: &[f32]) -> Result<(), VectorError> {
        let io_err = |source| VectorError::Io {
            path: self.path.clone(),
            source,
        };
        if self.out.is_none() {
            let f = OpenOptions::new()
                .append(true)
                .open(&self.path)
                .map_err(io_err)?;
            self.out = Some(BufWriter::new(f));
        }
        if let Some(out) = self.out.as_mut() {
            out.write_all(&key.to_le_bytes()).map_err(io_err)?;
            for x in v {
                out.write_all(&x.to_le_bytes()).map_err(io_err)?;
            }
        }
        Ok(())
    }

    pub(crate) fn flush(&mut self) -> Result<(), VectorError> {
        match self.write_out()? {
            Some(synced) => synced.sync(),
            None => Ok(()),
        }
    }

    /// Writes the appended records to the file (not yet synced): `flush`
    /// in two halves, so a caller can sync after releasing the lock that
    /// searches wait on.
    pub(crate) fn write_out(&mut self) -> Result<Option<Unsynced>, VectorError> {
        let Some(out) = self.out.as_mut() else {
            return Ok(None);
        };
        let io_err = |source| VectorError::Io {
            path: self.path.clone(),
            source,
        };
        out.flush().map_err(io_err)?;
        let file = out.get_ref().try_clone().map_err(io_err)?;
        Ok(Some(Unsynced {
            file,
            path: self.path.clone(),
        }))
    }

    /// Removes every vector.
    pub(crate) fn clear(&mut self) -> Result<(), VectorError> {
        self.out = None;
        self.lists = vec![List::default()];
        self.centroids = None;
        self.trained_at = 0;
        self.saved_at = 0;
        self.at.clear();
        self.generation += 1;
        match std::fs::remove_file(self.ivf_path()) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                tracing::warn!(error = %e, "cannot remove the saved ANN index");
            }
            _ => {}
        }
        self.write_header().map_err(|source| VectorError::Io {
            path: self.path.clone(),
            source,
        })
    }

    /// Keeps only the vectors whose key `keep` accepts (a forget): they
    /// leave memory, and the file is written again without their records
    /// (temp file, sync, rename), so no vector of forgotten text stays on
    /// disk. Returns how many went. O(file) when any go, nothing otherwise.
    pub(crate) fn retain(&mut self, keep: impl Fn(u64) -> bool) -> Result<usize, VectorError> {
        let gone: std::collections::HashSet<u64> =
            self.at.keys().copied().filter(|k| !keep(*k)).collect();
        if gone.is_empty() {
            return Ok(0);
        }
        self.flush()?;
        self.out = None;
        for key in &gone {
            self.take(*key);
        }
        self.generation += 1;
        self.rewrite_without(&gone)
            .map_err(|source| VectorError::Io {
                path: self.path.clone(),
                source,
            })?;
        Ok(gone.len())
    }

    /// The vector file again, record by record, without `gone`'s records.
    fn rewrite_without(&self, gone: &std::collections::HashSet<u64>) -> io::Result<()> {
        let header = self.header();
        let record = 8 + 4 * self.dim;
        let tmp = self.path.with_extension("bin.tmp");
        let mut r = BufReader::with_capacity(1 << 20, File::open(&self.path)?);
        let mut got = vec![0; header.len()];
        r.read_exact(&mut got)?;
        let mut w = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
        w.write_all(&header)?;
        let mut rec = vec![0u8; record];
        loop {
            match r.read_exact(&mut rec) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e),
            }
            let mut k = [0u8; 8];
            k.copy_from_slice(&rec[..8]);
            if !gone.contains(&u64::from_le_bytes(k)) {
                w.write_all(&rec)?;
            }
        }
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    /// The `k` vectors among `keys` most similar to `query`, best first, as
    /// (key, cosine); keys without a vector are skipped. Exact.
    pub(crate) fn top_k(
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
            if let Some(&(list, pos)) = self.at.get(&key) {
                let l = &self.lists[list as usize];
                let pos = pos as usize;
                let code = &l.codes[pos * self.dim..(pos + 1) * self.dim];
                best.offer(
                    key,
                    dot(&probe.codes, code) as f32 * probe.scale * l.scales[pos],
                );
            }
        }
        best.items
    }

    /// The `n` vectors most similar to `query` by the IVF index, best first,
    /// unfiltered: the caller keeps those its viewer may read. `None` until
    /// an index is trained.
    pub(crate) fn ann_candidates(&self, query: &[f32], n: usize) -> Option<Vec<(u64, f32)>> {
        let centroids = self.centroids.as_ref()?;
        if query.len() != self.dim {
            return Some(Vec::new());
        }
        let probe = Probe::new(query);
        let mut best = Best::new(n);
        for list in centroids.nearest_lists(&probe, NPROBE) {
            let l = &self.lists[list];
            for ((key, code), scale) in l
                .keys
                .iter()
                .zip(l.codes.chunks_exact(self.dim))
                .zip(&l.scales)
            {
                best.offer(*key, dot(&probe.codes, code) as f32 * probe.scale * scale);
            }
        }
        Some(best.items)
    }

    /// Whether an ANN index is due: none yet and `ANN_MIN` vectors, or the
    /// store has grown 4x since the last one.
    pub(crate) fn ann_due(&self) -> bool {
        match self.centroids {
            None => self.len() >= ANN_MIN,
            Some(_) => self.len() >= 4 * self.trained_at,
        }
    }

    /// A training sample, when an index is due: vectors spread evenly over
    /// the store.
    pub(crate) fn ann_sample(&self) -> Option<AnnSample> {
        self.ann_due().then(|| {
            let n_lists = ((self.len() as f64).sqrt() as usize / 2).clamp(16, 2048);
            // Positions j * len / n: an even spread that a whole-number
            // stride would not give (a stride sharing a factor with a
            // period in the data samples only part of it).
            let n = (n_lists * SAMPLE_PER_LIST).min(self.len());
            let (mut codes, mut scales) = (Vec::new(), Vec::new());
            let every = self
                .lists
                .iter()
                .flat_map(|l| l.codes.chunks_exact(self.dim).zip(&l.scales));
            for (i, (code, scale)) in every.enumerate() {
                if i == scales.len() * self.len() / n {
                    codes.extend_from_slice(code);
                    scales.push(*scale);
                }
            }
            AnnSample {
                generation: self.generation,
                dim: self.dim,
                n_lists,
                codes,
                scales,
            }
        })
    }

    /// The keys and codes of up to `ASSIGN_STEP` vectors from `from`, and
    /// where to continue; `None` when the store changed generation. Vectors
    /// moved meanwhile may be skipped or seen twice: `install_ann` assigns
    /// whatever has no list yet.
    pub(crate) fn assign_step(
        &self,
        generation: u64,
        from: Cursor,
    ) -> Option<(Vec<u64>, Vec<i8>, Cursor)> {
        if generation != self.generation {
            return None;
        }
        let (mut keys, mut codes) = (Vec::new(), Vec::new());
        let Cursor(mut list, mut pos) = from;
        while keys.len() < ASSIGN_STEP && list < self.lists.len() {
            let l = &self.lists[list];
            let end = l.keys.len().min(pos + ASSIGN_STEP - keys.len());
            if pos < end {
                keys.extend_from_slice(&l.keys[pos..end]);
                codes.extend_from_slice(&l.codes[pos * self.dim..end * self.dim]);
            }
            if end >= l.keys.len() {
                (list, pos) = (list + 1, 0);
            } else {
                pos = end;
            }
        }
        Some((keys, codes, Cursor(list, pos)))
    }

    /// Regroups the vectors into the lists of `centroids`, using the list
    /// `assigned` gives each key (and the nearest centroid for keys it does
    /// not know). Ignored when the store changed generation since the sample.
    /// A vector replaced after its assignment (the same chunk embedded
    /// again, after its text changed) keeps the list of its old value.
    /// Returns whether it installed the index.
    pub(crate) fn install_ann(
        &mut self,
        generation: u64,
        centroids: Centroids,
        assigned: &KeyMap<u32>,
    ) -> bool {
        if generation != self.generation {
            return false;
        }
        let mut lists: Vec<List> = (0..centroids.len()).map(|_| List::default()).collect();
        for l in std::mem::take(&mut self.lists) {
            for ((key, code), scale) in l
                .keys
                .iter()
                .zip(l.codes.chunks_exact(self.dim))
                .zip(&l.scales)
            {
                let list = assigned
                    .get(key)
                    .copied()
                    .unwrap_or_else(|| centroids.nearest(code));
                let at = &mut lists[list as usize];
                self.at.insert(*key, (list, at.keys.len() as u32));
                at.push(*key, code, *scale);
            }
        }
        self.lists = lists;
        self.centroids = Some(centroids);
        self.trained_at = self.len();
        self.generation += 1;
        true
    }
}

/// Records written to a vector file but not yet on disk.
pub(crate) struct Unsynced {
    file: File,
    path: PathBuf,
}

impl Unsynced {
    pub(crate) fn sync(self) -> Result<(), VectorError> {
        self.file.sync_data().map_err(|source| VectorError::Io {
            path: self.path,
            source,
        })
    }
}

/// Trains an ANN index for the store behind `lock` if one is due, holding
/// the lock only to copy codes out and, at the end, to regroup the store.
/// Returns the number of vectors indexed, `None` when no index was due or
/// the store was cleared meanwhile.
pub(crate) fn train_ann(lock: &RwLock<Option<VectorStore>>) -> Option<usize> {
    let read = || lock.read().unwrap_or_else(|p| p.into_inner());
    let sample = read().as_ref()?.ann_sample()?;
    let generation = sample.generation();
    let centroids = sample.train();
    drop(sample);
    let mut assigned = KeyMap::default();
    let mut cursor = Cursor::default();
    loop {
        let (keys, codes, next) = read().as_ref()?.assign_step(generation, cursor)?;
        if keys.is_empty() {
            break;
        }
        assigned.extend(keys.into_iter().zip(centroids.assign(&codes)));
        cursor = next;
    }
    let n = {
        let mut guard = lock.write().unwrap_or_else(|p| p.into_inner());
        let store = guard.as_mut()?;
        store
            .install_ann(generation, centroids, &assigned)
            .then(|| {
                store.saved_at = store.len();
                store.len()
            })?
    };
    save_ann(lock);
    Some(n)
}

/// Saves the index again once the store has grown `IVF_RESAVE_PERCENT` past
/// what the saved file names (new vectors join their lists as they come,
/// but past `IVF_STALE_PERCENT` a restart would ignore the file and train
/// again). Returns whether it saved.
pub(crate) fn resave_ann(lock: &RwLock<Option<VectorStore>>) -> bool {
    let due =
        |s: &VectorStore| s.centroids.is_some() && s.len() * 100 >= s.saved_at * IVF_RESAVE_PERCENT;
    if !lock
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .is_some_and(due)
    {
        return false;
    }
    {
        // Claimed under the write lock: one caller saves.
        let mut guard = lock.write().unwrap_or_else(|p| p.into_inner());
        match guard.as_mut() {
            Some(s) if due(s) => s.saved_at = s.len(),
            _ => return false,
        }
    }
    save_ann(lock);
    true
}

/// Writes the index beside the vector file: serialized under the read lock,
/// written outside it (temp file, then rename; not fsynced: a lost file
/// only means training again). One save at a time, so the newest wins.
fn save_ann(lock: &RwLock<Option<VectorStore>>) {
    static SAVING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = SAVING.lock().unwrap_or_else(|p| p.into_inner());
    let saved = lock
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .and_then(|s| Some((s.ivf_path(), s.ivf_bytes()?)));
    if let Some((path, bytes)) = saved {
        let tmp = path.with_extension("ivf.tmp");
        if let Err(e) = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, &path)) {
            tracing::warn!(error = %e, "cannot save the ANN index; a restart will train it again");
        }
    }
}

/// A saved index: its centroids, the store size it was trained at, and each
/// vector's list. `None` unless the checksum holds and it was saved for a
/// vector file with this `header`.
fn parse_ivf(bytes: &[u8], header: &[u8], dim: usize) -> Option<(Centroids, usize, KeyMap<u32>)> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(32)?)?;
    if Sha256::digest(body).as_slice() != sum {
        return None;
    }
    let mut rest = body.strip_prefix(IVF_MAGIC)?.strip_prefix(header)?;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, tail) = rest.split_at_checked(n)?;
        rest = tail;
        Some(head)
    };
    let k = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
    let trained_at = u64::from_le_bytes(take(8)?.try_into().ok()?) as usize;
    let codes = take(k.checked_mul(dim)?)?
        .iter()
        .map(|&b| b as i8)
        .collect();
    let scales = take(k.checked_mul(4)?)?
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let n = u64::from_le_bytes(take(8)?.try_into().ok()?) as usize;
    let pairs = take(n.checked_mul(12)?)?;
    if k == 0 || !rest.is_empty() {
        return None;
    }
    let lists = pairs
        .chunks_exact(12)
        .map(|p| {
            let key = u64::from_le_bytes(p[..8].try_into().unwrap_or_default());
            let list = u32::from_le_bytes(p[8..].try_into().unwrap_or_default());
            (key, list)
        })
        .collect();
    Some((Centroids { dim, codes, scales }, trained_at, lists))
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
pub(crate) mod tests {
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

    /// An invalidated vector leaves the store and stays gone after a reopen;
    /// put again, it is back.
    #[test]
    fn invalidated_vectors_stay_gone_until_put_again() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut s = VectorStore::open(dir.path(), "m", 3).unwrap_or_else(|e| panic!("{e}"));
        s.put(&[(1, unit(&[1.0, 0.0, 0.0])), (2, unit(&[0.0, 1.0, 0.0]))])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.invalidate(&[2, 7]).unwrap_or_else(|e| panic!("{e}")), 1);
        assert!(s.contains(1) && !s.contains(2));
        s.flush().unwrap_or_else(|e| panic!("{e}"));
        drop(s);
        let mut s = VectorStore::open(dir.path(), "m", 3).unwrap_or_else(|e| panic!("{e}"));
        assert!(s.contains(1) && !s.contains(2), "still gone");
        assert_eq!(s.len(), 1);
        s.put(&[(2, unit(&[0.0, 0.0, 1.0]))])
            .unwrap_or_else(|e| panic!("{e}"));
        s.flush().unwrap_or_else(|e| panic!("{e}"));
        drop(s);
        let s = VectorStore::open(dir.path(), "m", 3).unwrap_or_else(|e| panic!("{e}"));
        let q = unit(&[0.0, 0.0, 1.0]);
        assert_eq!(keys(s.top_k(&q, 1, [1, 2])), vec![2], "its new value");
    }

    /// A forget's vectors leave memory and the file: a reopen does not
    /// bring them back, the others stay, and appends after it line up.
    #[test]
    fn retained_vectors_are_the_only_ones_left_in_the_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut s = VectorStore::open(dir.path(), "m", 3).unwrap_or_else(|e| panic!("{e}"));
        s.put(&[
            (1, unit(&[1.0, 0.0, 0.0])),
            (2, unit(&[0.9, 0.1, 0.0])),
            (3, unit(&[0.0, 1.0, 0.0])),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let gone = s.retain(|k| k != 2).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(gone, 1);
        assert!(!s.contains(2) && s.contains(1) && s.contains(3));
        assert_eq!(s.retain(|k| k != 2).unwrap_or_else(|e| panic!("{e}")), 0);
        let q = unit(&[1.0, 0.05, 0.0]);
        assert_eq!(keys(s.top_k(&q, 3, [1, 2, 3])), vec![1, 3]);
        s.put(&[(4, unit(&[0.0, 0.0, 1.0]))])
            .unwrap_or_else(|e| panic!("{e}"));
        s.flush().unwrap_or_else(|e| panic!("{e}"));
        drop(s);
        let bytes = std::fs::read(dir.path().join("vectors-m.bin")).unwrap_or_default();
        let header = MAGIC.len() + 4 + 4 + "m".len();
        assert_eq!(
            bytes.len(),
            header + 3 * (8 + 4 * 3),
            "three records (1, 3, 4): the forgotten one is gone from the file"
        );
        let s = VectorStore::open(dir.path(), "m", 3).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.len(), 3);
        assert_eq!(keys(s.top_k(&q, 4, [1, 2, 3, 4])), vec![1, 3, 4]);
    }

    /// Deterministic pseudo-random unit vectors around `n_topics` topics,
    /// like chunk embeddings of a corpus about a few things.
    pub(crate) fn corpus(n: usize, dim: usize, n_topics: usize, seed: u64) -> Vec<Vec<f32>> {
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

        // A vector that arrives after the sample is listed at install.
        let sample = s.ann_sample().unwrap_or_else(|| panic!("due at ANN_MIN"));
        let centroids = sample.train();
        let mut assigned = KeyMap::default();
        let mut cursor = Cursor::default();
        while let Some((keys, codes, next)) = s
            .assign_step(sample.generation(), cursor)
            .filter(|(k, _, _)| !k.is_empty())
        {
            assigned.extend(keys.into_iter().zip(centroids.assign(&codes)));
            cursor = next;
        }
        let late = n as u64 + 1;
        s.put(&[(late, queries[0].clone())])
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(s.install_ann(sample.generation(), centroids, &assigned));
        assert!(s.ann_sample().is_none(), "not due again until 4x");
        assert!(
            s.assign_step(sample.generation(), Cursor::default())
                .is_none(),
            "an installed index makes its sample stale"
        );

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

        // Reopened: the vectors come back, the index is trained again.
        drop(s);
        let lock = RwLock::new(Some(
            VectorStore::open(dir.path(), "m", dim).unwrap_or_else(|e| panic!("{e}")),
        ));
        assert_eq!(train_ann(&lock), Some(n + 1));
        let mut guard = lock.write().unwrap_or_else(|p| p.into_inner());
        let s = guard.as_mut().unwrap_or_else(|| panic!("open"));
        assert_eq!(
            keys(s.ann_candidates(&queries[1], 1).unwrap_or_default()),
            vec![late]
        );
        let candidates = |s: &VectorStore| -> Vec<Vec<(u64, f32)>> {
            queries
                .iter()
                .map(|q| s.ann_candidates(q, 10).unwrap_or_default())
                .collect()
        };
        let before = candidates(s);
        drop(guard);

        // Reopened after training: the saved index is there at once, the
        // same lists, and not trained again.
        let reopen = || VectorStore::open(dir.path(), "m", dim).unwrap_or_else(|e| panic!("{e}"));
        let lock = RwLock::new(Some(reopen()));
        {
            let guard = lock.read().unwrap_or_else(|p| p.into_inner());
            let s = guard.as_ref().unwrap_or_else(|| panic!("open"));
            assert_eq!(candidates(s), before);
            assert_eq!(s.len(), n + 1);
        }
        assert_eq!(train_ann(&lock), None, "not due: the index was saved");
        drop(lock);

        // A damaged or empty saved index is ignored: the vectors load, and
        // the index is trained again.
        let ivf = dir.path().join("vectors-m.ivf");
        let mut bytes = std::fs::read(&ivf).unwrap_or_else(|e| panic!("{e}"));
        let middle = bytes.len() / 2;
        bytes[middle] ^= 1;
        std::fs::write(&ivf, &bytes).unwrap_or_else(|e| panic!("{e}"));
        let s = reopen();
        assert!(
            s.ann_candidates(&queries[0], 1).is_none(),
            "damaged: no index"
        );
        assert_eq!(s.len(), n + 1);
        drop(s);
        std::fs::write(&ivf, b"").unwrap_or_else(|e| panic!("{e}"));
        assert!(
            reopen().ann_candidates(&queries[0], 1).is_none(),
            "empty: no index"
        );

        // Grown by more than 5% since it was saved: trained again (finding
        // the lists of the new vectors would slow the start).
        // `m` new vectors, keys from `late + 1 + from`.
        let grow = |lock: &RwLock<Option<VectorStore>>, from: usize, m: usize, seed: u64| {
            let more: Vec<(u64, Vec<f32>)> = corpus(m, dim, 40, seed)
                .into_iter()
                .enumerate()
                .map(|(i, v)| (late + 1 + (from + i) as u64, v))
                .collect();
            if let Some(s) = lock.write().unwrap_or_else(|p| p.into_inner()).as_mut() {
                s.put(&more).unwrap_or_else(|e| panic!("{e}"));
                s.flush().unwrap_or_else(|e| panic!("{e}"));
            }
        };
        let lock = RwLock::new(Some(reopen()));
        assert_eq!(train_ann(&lock), Some(n + 1));
        assert!(ivf.exists(), "saved after training");
        grow(&lock, 0, n / 10, 8);
        drop(lock);
        let s = reopen();
        assert!(
            s.ann_candidates(&queries[0], 1).is_none(),
            "out of date: no index"
        );
        assert_eq!(s.len(), n + 1 + n / 10);

        // Saved again as the store grows, the index stays usable after a
        // restart: not after 2% more vectors, after 7%.
        let lock = RwLock::new(Some(s));
        let total = n + 1 + n / 10;
        assert_eq!(train_ann(&lock), Some(total));
        grow(&lock, n / 10, total / 50, 9);
        assert!(!resave_ann(&lock), "2% more: not saved yet");
        grow(&lock, n / 10 + total / 50, total / 20, 10);
        assert!(resave_ann(&lock), "7% more: saved again");
        assert!(!resave_ann(&lock), "just saved");
        let grown = total + total / 50 + total / 20;
        let before = lock
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(candidates);
        drop(lock);
        let lock = RwLock::new(Some(reopen()));
        {
            let guard = lock.read().unwrap_or_else(|p| p.into_inner());
            let s = guard.as_ref().unwrap_or_else(|| panic!("open"));
            assert_eq!(s.len(), grown);
            assert_eq!(Some(candidates(s)), before);
        }
        assert_eq!(train_ann(&lock), None, "not trained again");
        let mut s = lock
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .unwrap_or_else(|| panic!("open"));

        // Cleared: the index goes, saved copy included.
        let saved = std::fs::read(&ivf).unwrap_or_else(|e| panic!("{e}"));
        s.clear().unwrap_or_else(|e| panic!("{e}"));
        assert!(s.ann_candidates(&queries[0], 1).is_none());
        assert_eq!(s.len(), 0);
        assert!(!ivf.exists(), "the saved index goes with the vectors");

        // A saved index for far more vectors than the file holds (one left
        // from before a clear) is ignored too.
        s.put(&items[..10]).unwrap_or_else(|e| panic!("{e}"));
        s.flush().unwrap_or_else(|e| panic!("{e}"));
        drop(s);
        std::fs::write(&ivf, saved).unwrap_or_else(|e| panic!("{e}"));
        let s = reopen();
        assert_eq!(s.len(), 10);
        assert!(
            s.ann_candidates(&queries[0], 1).is_none(),
            "cleared since: no index"
        );
    }
}
