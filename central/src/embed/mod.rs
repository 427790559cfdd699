//! Text embedding: the `Embedder` trait, its implementations (the in-process
//! default model, Ollama, OpenAI-compatible servers), their configuration, and
//! the priority queue that is the only way the rest of central reaches them.
//!
//! Invariants: every vector an embedder returns is L2-normalised and has
//! exactly `dim()` components; `model_id()` changes whenever the vectors
//! would (other model, other truncation), so stored vectors tagged with an
//! old id are re-embedded. Embedders block: only the queue's worker thread
//! (or `spawn_blocking`) calls them. No error message carries a key.

mod http;
mod matryoshka;
mod onnx;
mod queue;
mod wordpiece;

use std::path::PathBuf;

use serde::Deserialize;

pub(crate) use http::{ApiKey, HttpApi, HttpEmbedder};
pub(crate) use matryoshka::Matryoshka;
pub(crate) use onnx::OnnxEmbedder;
pub(crate) use queue::{EmbedQueue, Lane, MAX_BATCH};

/// Turns texts into vectors. Implementations block while they work.
pub trait Embedder: Send + Sync {
    /// Names the model and everything else that shapes its vectors, e.g.
    /// `all-minilm-l6-v2-int8` or `ollama:nomic-embed-text@256`.
    fn model_id(&self) -> &str;
    /// Components per vector, after Matryoshka truncation if configured.
    fn dim(&self) -> usize;
    /// One L2-normalised vector per text, in order.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// Asks the `embed` call in progress (on another thread) to give up
    /// soon with `EmbedError::Preempted`, because a query is waiting. Calls
    /// that start later are not affected. Embedders that cannot stop early
    /// ignore it.
    fn preempt(&self) {}
    /// Most texts the queue puts in one call. A preempted call loses its
    /// work, and a query waits until the call in flight stops: the fewer
    /// texts, the less of both. Embedders that gain from batching (a server
    /// per request) keep `MAX_BATCH`.
    fn max_batch(&self) -> usize {
        MAX_BATCH
    }
}

/// Why embedding did not happen. Messages name servers and files, never
/// credentials.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The embedding server did not answer (down, refused, timed out).
    #[error("embedding server {url} is unavailable: {reason}")]
    Unavailable { url: String, reason: String },
    /// The embedding server answered, but not with usable vectors.
    #[error("embedding server {url} gave a bad response: {reason}")]
    BadResponse { url: String, reason: String },
    /// The embedding server refused these texts (HTTP 400, 413 or 422: too
    /// long for its model, say): the input, not the server.
    #[error("embedding server {url} refused the input: {reason}")]
    Refused { url: String, reason: String },
    /// The model (files, runtime library, tokenizer) could not be loaded.
    #[error("embedding model could not be loaded: {0}")]
    ModelLoad(String),
    /// The loaded model failed on an input.
    #[error("embedding failed: {0}")]
    Inference(String),
    /// The configuration cannot work (unknown key file, impossible truncation).
    #[error("embedding configuration is invalid: {0}")]
    Config(String),
    /// The queue's worker is gone; nothing can be embedded any more.
    #[error("the embed queue has stopped")]
    QueueClosed,
    /// The call gave way to a query (see `Embedder::preempt`); run it again.
    #[error("embedding gave way to a query")]
    Preempted,
}

/// Which embedder central uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// all-MiniLM-L6-v2 in process, from the files deploy/install-model.sh
    /// installs: no server to run.
    #[default]
    Embedded,
    /// An Ollama server's `/api/embed`.
    Ollama,
    /// Any server speaking OpenAI's `/v1/embeddings`.
    Openai,
    /// No embedder: keyword search only.
    None,
}

/// The `[embed]` section of central's configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbedConfig {
    /// Which embedder to build.
    pub provider: Provider,
    /// Base URL of the server (`ollama`, `openai`); defaults to Ollama's
    /// local port or OpenAI's API.
    pub url: Option<String>,
    /// Model name on the server (`ollama`, `openai`); defaults to
    /// `nomic-embed-text` and `text-embedding-3-small`.
    pub model: Option<String>,
    /// File holding the bearer key for an OpenAI-compatible server; a file,
    /// not a value, so the key stays out of the config and the process list.
    pub api_key_file: Option<PathBuf>,
    /// Where deploy/install-model.sh put the embedded model (`embedded`).
    pub model_dir: PathBuf,
    /// Keep only the first N components (Matryoshka models), renormalised.
    pub truncate_dim: Option<usize>,
}

impl Default for EmbedConfig {
    fn default() -> Self {
        Self {
            provider: Provider::default(),
            url: None,
            model: None,
            api_key_file: None,
            model_dir: default_model_dir(),
            truncate_dim: None,
        }
    }
}

/// `$KITH_MODEL_DIR`, else `$XDG_DATA_HOME/kith/models`, else
/// `~/.local/share/kith/models`, the same default as deploy/install-model.sh.
pub(crate) fn default_model_dir() -> PathBuf {
    let var = |name| std::env::var_os(name).filter(|d| !d.is_empty());
    if let Some(dir) = var("KITH_MODEL_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(data) = var("XDG_DATA_HOME") {
        return PathBuf::from(data).join("kith/models");
    }
    let home = var("HOME").map(PathBuf::from).unwrap_or_default();
    home.join(".local/share/kith/models")
}

const OLLAMA_URL: &str = "http://127.0.0.1:11434";
const OLLAMA_MODEL: &str = "nomic-embed-text";
const OPENAI_URL: &str = "https://api.openai.com";
const OPENAI_MODEL: &str = "text-embedding-3-small";

/// Builds the configured embedder, or `None` for provider `none`.
///
/// Blocking: loads the model or asks the server for one vector to learn its
/// dimension, so call it from `spawn_blocking` or a plain thread.
pub(crate) fn build(config: &EmbedConfig) -> Result<Option<Box<dyn Embedder>>, EmbedError> {
    let embedder: Box<dyn Embedder> = match config.provider {
        Provider::None => return Ok(None),
        Provider::Embedded => Box::new(OnnxEmbedder::load(&config.model_dir)?),
        Provider::Ollama => Box::new(HttpEmbedder::connect(
            HttpApi::Ollama,
            config.url.as_deref().unwrap_or(OLLAMA_URL),
            config.model.as_deref().unwrap_or(OLLAMA_MODEL),
            None,
        )?),
        Provider::Openai => {
            let key = config
                .api_key_file
                .as_deref()
                .map(ApiKey::read)
                .transpose()?;
            Box::new(HttpEmbedder::connect(
                HttpApi::OpenAi,
                config.url.as_deref().unwrap_or(OPENAI_URL),
                config.model.as_deref().unwrap_or(OPENAI_MODEL),
                key,
            )?)
        }
    };
    match config.truncate_dim {
        Some(dim) => Ok(Some(Box::new(Matryoshka::new(embedder, dim)?))),
        None => Ok(Some(embedder)),
    }
}

/// Scales `v` to unit length; a zero vector stays zero.
pub(crate) fn l2_normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Cosine similarity of two L2-normalised vectors.
#[cfg(test)]
pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_to_the_embedded_model() -> anyhow::Result<()> {
        let config: EmbedConfig = toml::from_str("")?;
        assert_eq!(config.provider, Provider::Embedded);
        assert_eq!(config, EmbedConfig::default());
        Ok(())
    }

    #[test]
    fn config_reads_every_field() -> anyhow::Result<()> {
        let text = r#"
            provider = "openai"
            url = "http://127.0.0.1:8080"
            model = "bge-m3"
            api_key_file = "/etc/kith/openai.key"
            model_dir = "/srv/models"
            truncate_dim = 256
        "#;
        let config: EmbedConfig = toml::from_str(text)?;
        assert_eq!(
            config,
            EmbedConfig {
                provider: Provider::Openai,
                url: Some("http://127.0.0.1:8080".into()),
                model: Some("bge-m3".into()),
                api_key_file: Some("/etc/kith/openai.key".into()),
                model_dir: "/srv/models".into(),
                truncate_dim: Some(256),
            }
        );
        assert!(toml::from_str::<EmbedConfig>("provider = \"candle\"").is_err());
        assert!(
            toml::from_str::<EmbedConfig>("dims = 3").is_err(),
            "typos are rejected"
        );
        Ok(())
    }

    #[test]
    fn provider_none_builds_nothing() {
        let config = EmbedConfig {
            provider: Provider::None,
            ..EmbedConfig::default()
        };
        assert!(matches!(build(&config), Ok(None)));
    }

    #[test]
    fn missing_model_files_say_how_to_install_them() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let config = EmbedConfig {
            model_dir: dir.path().to_owned(),
            ..EmbedConfig::default()
        };
        let Err(err) = build(&config) else {
            anyhow::bail!("an empty model dir must not load")
        };
        let err = err.to_string();
        assert!(err.contains("run deploy/install-model.sh"), "{err}");
        assert!(err.contains(&dir.path().display().to_string()), "{err}");
        Ok(())
    }

    #[test]
    fn l2_normalise_gives_unit_length_and_keeps_zero() {
        let mut v = vec![3.0, 4.0];
        l2_normalise(&mut v);
        assert_eq!(v, vec![0.6, 0.8]);
        let mut zero = vec![0.0; 3];
        l2_normalise(&mut zero);
        assert_eq!(zero, vec![0.0; 3]);
    }
}
