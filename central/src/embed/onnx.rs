//! The embedded default embedder: all-MiniLM-L6-v2 (int8 ONNX, 384-d) run in
//! process by ONNX Runtime, from the files deploy/install-model.sh installs
//! and this module checks against the same pinned checksums.
//!
//! ONNX Runtime is loaded at run time (`ort`'s `load-dynamic`) from the
//! installed `libonnxruntime.so`, never downloaded at build time. `ort`
//! allows one runtime library and one environment per process: the first
//! successful load wins and later loads reuse it.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use ort::environment::Environment;
use ort::logging::LogLevel;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{RunOptions, Session};
use ort::value::Tensor;
use sha2::{Digest, Sha256};

use super::wordpiece::WordPiece;
use super::{l2_normalise, EmbedError, Embedder};

/// What `model_id()` reports for this model.
pub(super) const MODEL_ID: &str = "all-minilm-l6-v2-int8";
/// Folder under the model dir that deploy/install-model.sh fills.
pub(super) const MODEL_SUBDIR: &str = "all-minilm-l6-v2";
/// The model's output width.
const DIM: usize = 384;
/// Token window, `[CLS]` and `[SEP]` included. The model was trained at 256;
/// longer chunks are cut (chunk near the window, notes/embeddings.md).
pub(super) const MAX_TOKENS: usize = 256;
/// Intra-op threads: both cores for one batch, since there is one model
/// writer at a time (notes/embeddings.md: 16.7 vs 11.0 chunks/s, 2.2 vs
/// 3.7 ms per query, against one thread).
const INTRA_OP_THREADS: usize = 2;
/// Texts per ONNX run, bounding the padded input tensors' memory when a
/// caller outside the queue passes many texts at once.
const RUN_BATCH: usize = 16;

/// The installed files and their sha256, as extracted from the wheels pinned
/// in deploy/install-model.sh. A mismatch means a damaged or foreign install;
/// the runtime library in particular is native code we are about to load.
const INSTALLED_FILES: [(&str, &str); 4] = [
    (
        "model.onnx",
        "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
    ),
    (
        "tokenizer.json",
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    ),
    (
        "config.json",
        "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    ),
    (
        "libonnxruntime.so",
        "fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3",
    ),
];

/// all-MiniLM-L6-v2 in process.
pub(crate) struct OnnxEmbedder {
    /// `Session::run` takes `&mut`; the queue has one worker, so the lock is
    /// never contended in service.
    session: Mutex<Session>,
    /// Shared by every run, so `preempt` can stop the one in progress...
    run_options: RunOptions,
    /// ...and the runs of the same `embed` call that have not started.
    preempted: AtomicBool,
    tokenizer: WordPiece,
    /// Some BERT exports take `token_type_ids`, some do not.
    takes_token_type_ids: bool,
}

impl OnnxEmbedder {
    /// Loads the model from `model_dir/all-minilm-l6-v2/` after checking the
    /// installed files. Blocking: hashes ~50 MB and builds the session.
    pub(crate) fn load(model_dir: &Path) -> Result<Self, EmbedError> {
        let dir = model_dir.join(MODEL_SUBDIR);
        verify_install(&dir, model_dir)?;
        let tokenizer_json = fs::read(dir.join("tokenizer.json")).map_err(|e| {
            EmbedError::ModelLoad(format!("{}: {e}", dir.join("tokenizer.json").display()))
        })?;
        let tokenizer = WordPiece::from_tokenizer_json(&tokenizer_json)?;
        let environment = environment(&dir.join("libonnxruntime.so"))?;
        // ONNX Runtime starts its worker threads with the session: built on
        // a thread at background priority, they inherit it.
        let build = || {
            crate::priority::lower(crate::priority::MODEL);
            Session::builder(&environment)
                .map_err(load_error)?
                .with_optimization_level(GraphOptimizationLevel::Level3)
                .map_err(load_error)?
                .with_intra_threads(INTRA_OP_THREADS)
                .map_err(load_error)?
                // Idle workers sleep instead of spinning on a core that a
                // search could use.
                .with_intra_op_spinning(false)
                .map_err(load_error)?
                .with_inter_threads(1)
                .map_err(load_error)?
                .commit_from_file(dir.join("model.onnx"))
                .map_err(load_error)
        };
        let session = std::thread::scope(|s| s.spawn(build).join())
            .map_err(|_| EmbedError::ModelLoad("building the ONNX session panicked".into()))??;
        let takes_token_type_ids = session
            .inputs()
            .iter()
            .any(|i| i.name() == "token_type_ids");
        Ok(Self {
            session: Mutex::new(session),
            run_options: RunOptions::new().map_err(load_error)?,
            preempted: AtomicBool::new(false),
            tokenizer,
            takes_token_type_ids,
        })
    }

    /// One ONNX run over texts padded to the longest of them.
    fn run(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let encoded: Vec<Vec<u32>> = texts
            .iter()
            .map(|t| self.tokenizer.encode(t, MAX_TOKENS))
            .collect();
        let n_texts = encoded.len();
        let seq_len = encoded.iter().map(Vec::len).max().unwrap_or(0);
        let mut input_ids = Vec::with_capacity(n_texts * seq_len);
        let mut attention_mask = Vec::with_capacity(n_texts * seq_len);
        for ids in &encoded {
            let n_pad = seq_len - ids.len();
            input_ids.extend(ids.iter().map(|&id| i64::from(id)));
            input_ids.extend(std::iter::repeat_n(i64::from(self.tokenizer.pad), n_pad));
            attention_mask.extend(std::iter::repeat_n(1i64, ids.len()));
            attention_mask.extend(std::iter::repeat_n(0i64, n_pad));
        }
        let shape = [n_texts as i64, seq_len as i64];
        let mut inputs = vec![
            (
                "input_ids",
                Tensor::from_array((shape, input_ids))
                    .map_err(inference_error)?
                    .into_dyn(),
            ),
            (
                "attention_mask",
                Tensor::from_array((shape, attention_mask.clone()))
                    .map_err(inference_error)?
                    .into_dyn(),
            ),
        ];
        if self.takes_token_type_ids {
            let type_ids = vec![0i64; n_texts * seq_len];
            inputs.push((
                "token_type_ids",
                Tensor::from_array((shape, type_ids))
                    .map_err(inference_error)?
                    .into_dyn(),
            ));
        }

        let mut session = self
            .session
            .lock()
            .map_err(|_| EmbedError::Inference("an earlier embedding panicked".into()))?;
        let outputs = session
            .run_with_options(inputs, &self.run_options)
            .map_err(|e| {
                if e.to_string().contains("terminate flag") {
                    EmbedError::Preempted
                } else {
                    inference_error(e)
                }
            })?;
        let hidden = outputs.get("last_hidden_state").ok_or_else(|| {
            EmbedError::Inference("the model has no last_hidden_state output".into())
        })?;
        let (out_shape, data) = hidden
            .try_extract_tensor::<f32>()
            .map_err(inference_error)?;
        if **out_shape != [n_texts as i64, seq_len as i64, DIM as i64] {
            return Err(EmbedError::Inference(format!(
                "last_hidden_state has shape {:?}, expected [{n_texts}, {seq_len}, {DIM}]",
                &**out_shape
            )));
        }
        Ok(mean_pool(data, &attention_mask, seq_len))
    }
}

impl Embedder for OnnxEmbedder {
    fn model_id(&self) -> &str {
        MODEL_ID
    }

    fn dim(&self) -> usize {
        DIM
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // A preemption meant for an earlier call must not stop this one.
        self.preempted.store(false, Ordering::SeqCst);
        self.run_options.unterminate().map_err(inference_error)?;
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(RUN_BATCH) {
            if self.preempted.load(Ordering::SeqCst) {
                return Err(EmbedError::Preempted);
            }
            vectors.extend(self.run(batch)?);
        }
        Ok(vectors)
    }

    fn preempt(&self) {
        self.preempted.store(true, Ordering::SeqCst);
        // ONNX Runtime checks the flag between nodes and fails the run.
        let _ = self.run_options.terminate();
    }

    /// One text per call. On a CPU a batch embeds no faster (200 chunks of
    /// 200 words: 10.2 chunks/s one at a time, 9.8 four at a time, and real
    /// chunks of unequal length pad less alone), while each node of the
    /// graph takes a quarter as long, so a preempted call stops sooner, and
    /// it loses one text's work instead of four.
    fn max_batch(&self) -> usize {
        1
    }
}

/// Mean of the token states the attention mask keeps (not the `[PAD]`s),
/// L2-normalised: sentence-transformers' pooling for this model.
fn mean_pool(hidden: &[f32], attention_mask: &[i64], seq_len: usize) -> Vec<Vec<f32>> {
    hidden
        .chunks_exact(seq_len * DIM)
        .zip(attention_mask.chunks_exact(seq_len))
        .map(|(states, mask)| {
            let mut sum = vec![0f32; DIM];
            let mut n_tokens = 0f32;
            for (state, &keep) in states.chunks_exact(DIM).zip(mask) {
                if keep == 1 {
                    sum.iter_mut().zip(state).for_each(|(s, x)| *s += x);
                    n_tokens += 1.0;
                }
            }
            if n_tokens > 0.0 {
                sum.iter_mut().for_each(|s| *s /= n_tokens);
            }
            l2_normalise(&mut sum);
            sum
        })
        .collect()
}

/// Checks that every installed file is there with its pinned checksum.
fn verify_install(dir: &Path, model_dir: &Path) -> Result<(), EmbedError> {
    let install_hint = format!("run deploy/install-model.sh {}", model_dir.display());
    for (name, want) in INSTALLED_FILES {
        let path = dir.join(name);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(EmbedError::ModelLoad(format!(
                    "the embedded model is not installed ({} is missing): {install_hint}",
                    path.display()
                )));
            }
            Err(e) => return Err(EmbedError::ModelLoad(format!("{}: {e}", path.display()))),
        };
        if hex::encode(Sha256::digest(&bytes)) != want {
            return Err(EmbedError::ModelLoad(format!(
                "{} does not match its pinned sha256 (damaged or foreign install): {install_hint}",
                path.display()
            )));
        }
    }
    Ok(())
}

/// The process's ONNX Runtime environment, loading the library on first use.
fn environment(library: &Path) -> Result<Environment, EmbedError> {
    static ENVIRONMENT: Mutex<Option<(Environment, PathBuf)>> = Mutex::new(None);
    let mut slot = ENVIRONMENT
        .lock()
        .map_err(|_| EmbedError::ModelLoad("onnx runtime set-up panicked".into()))?;
    if let Some((environment, loaded_from)) = slot.as_ref() {
        if loaded_from != library {
            tracing::warn!(
                loaded = %loaded_from.display(),
                requested = %library.display(),
                "onnx runtime is already loaded from another file; reusing it"
            );
        }
        return Ok(environment.clone());
    }
    let environment = ort::init_from(library)
        .map_err(|e| EmbedError::ModelLoad(format!("onnx runtime library: {e}")))?
        .with_name("kith")
        .with_telemetry(false)
        .build()
        .map_err(load_error)?;
    // The runtime logs at verbose into `tracing` (ort's `tracing` feature);
    // below a warning it is set-up narration, dropped at the source.
    environment.set_log_level(LogLevel::Warning);
    *slot = Some((environment.clone(), library.to_owned()));
    Ok(environment)
}

fn load_error(e: impl std::fmt::Display) -> EmbedError {
    EmbedError::ModelLoad(format!("onnx runtime: {e}"))
}

fn inference_error(e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Inference(format!("onnx runtime: {e}"))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::OnceLock;
    use std::time::Instant;

    use super::*;
    use crate::embed::cosine;

    /// The installed model, shared by the tests that need it; `None` (after
    /// one line saying so) when `KITH_MODEL_DIR` is unset. When it is set,
    /// the model must load: a missing or broken install fails the test.
    pub(crate) fn installed() -> Option<&'static OnnxEmbedder> {
        static MODEL: OnceLock<Result<OnnxEmbedder, String>> = OnceLock::new();
        let Some(dir) = std::env::var_os("KITH_MODEL_DIR").filter(|d| !d.is_empty()) else {
            eprintln!("KITH_MODEL_DIR is unset: skipping the real-model check (run deploy/install-model.sh and set it)");
            return None;
        };
        match MODEL.get_or_init(|| OnnxEmbedder::load(Path::new(&dir)).map_err(|e| e.to_string())) {
            Ok(model) => Some(model),
            Err(e) => panic!("KITH_MODEL_DIR is set but the model does not load: {e}"),
        }
    }

    #[test]
    fn preempt_stops_the_run_in_progress_and_not_the_next() -> anyhow::Result<()> {
        let Some(dir) = std::env::var_os("KITH_MODEL_DIR").filter(|d| !d.is_empty()) else {
            eprintln!("KITH_MODEL_DIR is unset: skipping the preemption check");
            return Ok(());
        };
        // Its own instance: a preemption must not reach the shared model.
        let model = std::sync::Arc::new(OnnxEmbedder::load(Path::new(&dir))?);
        let long = "word ".repeat(300);
        let texts: Vec<&str> = vec![long.as_str(); 32];
        let m = model.clone();
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            m.preempt();
        });
        let started = Instant::now();
        let first = model.embed(&texts);
        stopper
            .join()
            .map_err(|_| anyhow::anyhow!("stopper panicked"))?;
        assert!(
            matches!(first, Err(EmbedError::Preempted)),
            "not preempted: {:?}",
            first.map(|v| v.len())
        );
        eprintln!("preempted after {:?}", started.elapsed());
        assert_eq!(
            model.embed(&["after"])?.len(),
            1,
            "the next run is not stopped"
        );
        Ok(())
    }

    fn embed_one(model: &OnnxEmbedder, text: &str) -> anyhow::Result<Vec<f32>> {
        let mut vectors = model.embed(&[text])?;
        anyhow::ensure!(vectors.len() == 1, "one text, {} vectors", vectors.len());
        Ok(vectors.remove(0))
    }

    #[test]
    fn related_texts_are_closer_than_unrelated_ones() -> anyhow::Result<()> {
        let Some(model) = installed() else {
            return Ok(());
        };
        let query = embed_one(model, "how do I fix the failing build")?;
        let related = embed_one(model, "the CI build is broken, how to repair it")?;
        let unrelated = embed_one(model, "my favourite pasta recipe")?;
        let (near, far) = (cosine(&query, &related), cosine(&query, &unrelated));
        assert!(near > far, "related {near} vs unrelated {far}");
        // The reference (Python tokenizers + onnxruntime) gives 0.671 and 0.099.
        assert!(
            (near - 0.671).abs() < 0.01 && (far - 0.099).abs() < 0.01,
            "{near} {far}"
        );
        Ok(())
    }

    #[test]
    fn vectors_are_384_dim_unit_length_and_match_the_reference() -> anyhow::Result<()> {
        let Some(model) = installed() else {
            return Ok(());
        };
        assert_eq!(model.dim(), 384);
        assert_eq!(model.model_id(), "all-minilm-l6-v2-int8");
        let texts = [
            "hello world",
            "a much longer sentence, so that the batch gets padded to it",
            "",
        ];
        let vectors = model.embed(&texts)?;
        assert_eq!(vectors.len(), 3);
        for v in &vectors {
            assert_eq!(v.len(), 384);
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
        }
        // First components of "hello world" from the reference pipeline.
        let want = [
            -0.034816, 0.030138, 0.012998, 0.025378, -0.037454, -0.158731,
        ];
        assert!(
            vectors[0]
                .iter()
                .zip(want)
                .all(|(x, y)| (x - y).abs() < 2e-3),
            "{:?}",
            &vectors[0][..6]
        );
        // Padding must not leak into a short text's vector.
        let alone = embed_one(model, "hello world")?;
        assert!(cosine(&alone, &vectors[0]) > 0.9999);
        Ok(())
    }

    #[test]
    fn a_100_kb_input_is_cut_to_the_window() -> anyhow::Result<()> {
        let Some(model) = installed() else {
            return Ok(());
        };
        let words = [
            "cargo", "build", "failed", "with", "exit", "code", "101", "in", "ci",
        ];
        let long: String = words
            .iter()
            .cycle()
            .take(25_000)
            .map(|w| format!("{w} "))
            .collect();
        assert!(long.len() > 100_000);
        let prefix: String = words
            .iter()
            .cycle()
            .take(400)
            .map(|w| format!("{w} "))
            .collect();
        let started = Instant::now();
        let (a, b) = (embed_one(model, &long)?, embed_one(model, &prefix)?);
        assert!(
            cosine(&a, &b) > 0.9999,
            "only the first {MAX_TOKENS} tokens count"
        );
        eprintln!("100 KB input embedded in {:?}", started.elapsed());
        Ok(())
    }

    #[test]
    fn tokenizer_matches_the_reference_on_the_real_vocabulary() -> anyhow::Result<()> {
        let Some(dir) = std::env::var_os("KITH_MODEL_DIR").filter(|d| !d.is_empty()) else {
            eprintln!("KITH_MODEL_DIR is unset: skipping the real-vocabulary tokenizer check");
            return Ok(());
        };
        let bytes = fs::read(Path::new(&dir).join(MODEL_SUBDIR).join("tokenizer.json"))?;
        let t = WordPiece::from_tokenizer_json(&bytes)?;
        // Ids from the reference implementation (Hugging Face tokenizers)
        // with this tokenizer.json, truncation and padding off.
        let cases: &[(&str, &[u32])] = &[
            ("unaffable", &[101, 14477, 20961, 3468, 102]),
            ("Héllo, World!", &[101, 7592, 1010, 2088, 999, 102]),
            ("naïve café résumé", &[101, 15743, 7668, 13746, 102]),
            (
                "don't stop-believing...",
                &[
                    101, 2123, 1005, 1056, 2644, 1011, 8929, 1012, 1012, 1012, 102,
                ],
            ),
            ("我爱你 ok", &[101, 1855, 100, 100, 7929, 102]),
            ("", &[101, 102]),
            ("   \t\n ", &[101, 102]),
            (
                "fn main() { println!(\"hi\"); }",
                &[
                    101, 1042, 2078, 2364, 1006, 1007, 1063, 6140, 19666, 999, 1006, 1000, 7632,
                    1000, 1007, 1025, 1065, 102,
                ],
            ),
            ("emoji 🙂 here", &[101, 7861, 29147, 2072, 100, 2182, 102]),
            (
                "tab\there\u{0}null\u{fffd}rep",
                &[101, 21628, 2182, 11231, 3363, 2890, 2361, 102],
            ),
            ("Ｆｕｌｌwidth", &[101, 100, 102]),
            (
                "CI failed: cargo test --workspace exited 101",
                &[
                    101, 25022, 3478, 1024, 6636, 3231, 1011, 1011, 2573, 15327, 15284, 7886, 102,
                ],
            ),
            (
                "ÅNGSTRÖM Ωmega",
                &[101, 17076, 15687, 1179, 4168, 3654, 102],
            ),
            ("thé\u{301}", &[101, 1996, 102]),
        ];
        for (text, want) in cases {
            assert_eq!(t.encode(text, 512), *want, "{text:?}");
        }
        let long_word = format!("{} b", "a".repeat(101));
        assert_eq!(t.encode(&long_word, 512), [101, 100, 1038, 102]);
        Ok(())
    }

    /// Timings on this machine, printed, not asserted. Runs only with
    /// `KITH_EMBED_BENCH=1` (it takes ~15 s): `KITH_EMBED_BENCH=1
    /// cargo test -p kith-central embed::onnx::tests::speed -- --nocapture`.
    #[test]
    fn speed() -> anyhow::Result<()> {
        if std::env::var_os("KITH_EMBED_BENCH").is_none() {
            eprintln!("KITH_EMBED_BENCH is unset: not measuring embedding speed");
            return Ok(());
        }
        let Some(model) = installed() else {
            return Ok(());
        };
        let vocabulary = [
            "the", "build", "failed", "because", "cargo", "could", "not", "find", "crate", "we",
            "fixed", "tests", "error", "function", "returns", "result", "index", "query", "search",
            "user", "file", "path", "config", "server", "token", "vector", "model", "run", "agent",
            "session",
        ];
        let mut latencies = Vec::new();
        for i in 0..50 {
            let query = format!(
                "how did we fix the {} {} problem",
                vocabulary[i % 30],
                vocabulary[(i * 7) % 30]
            );
            let started = Instant::now();
            model.embed(&[&query])?;
            latencies.push(started.elapsed());
        }
        latencies.sort();
        let chunks: Vec<String> = (0..200)
            .map(|i| {
                (0..200)
                    .map(|j| vocabulary[(i * 13 + j * 7) % 30])
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        let started = Instant::now();
        for batch in chunks.chunks(model.max_batch()) {
            let texts: Vec<&str> = batch.iter().map(String::as_str).collect();
            model.embed(&texts)?;
        }
        let elapsed = started.elapsed();
        eprintln!(
            "embedded model: query median {:?}, p95 {:?} (50 queries); bulk {:.1} chunks/s (200 chunks of 200 words, batches of {})",
            latencies[25],
            latencies[47],
            200.0 / elapsed.as_secs_f64(),
            model.max_batch()
        );
        Ok(())
    }
}
