//! Embedding servers over HTTP: Ollama's `POST /api/embed` and the
//! OpenAI-compatible `POST /v1/embeddings` (OpenAI, vLLM, llama.cpp, TEI…),
//! with an optional bearer key that never reaches a log or an error.
//!
//! Uses reqwest's blocking client: embedders are called from the queue's own
//! thread, never from the async executor.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use reqwest::blocking::Client;
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

use super::{l2_normalise, EmbedError, Embedder};

/// A refused or unreachable server is reported fast.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// A whole request; generous enough for a server loading the model for its
/// first request, short enough that a hung server frees the queue.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of an error body goes into an error message.
const MAX_ERROR_BODY: usize = 200;

/// The two wire protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HttpApi {
    /// `POST {url}/api/embed {model, input}` -> `{embeddings}`.
    Ollama,
    /// `POST {url}/v1/embeddings {model, input}` -> `{data: [{embedding, index}]}`.
    OpenAi,
}

/// A bearer key. Its `Debug` is redacted and it has no `Display`, so it
/// cannot end up in a log line or an error by accident.
#[derive(Clone)]
pub(crate) struct ApiKey(String);

impl ApiKey {
    /// Reads a key from a file, trimmed (a trailing newline is common).
    pub(crate) fn read(path: &Path) -> Result<Self, EmbedError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| EmbedError::Config(format!("api key file {}: {e}", path.display())))?;
        let key = text.trim();
        if key.is_empty() {
            return Err(EmbedError::Config(format!(
                "api key file {} is empty",
                path.display()
            )));
        }
        Ok(Self(key.to_owned()))
    }

    /// A key held in memory, for the tests.
    #[cfg(test)]
    pub(crate) fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// An embedder on a remote (or local) HTTP server.
pub(crate) struct HttpEmbedder {
    api: HttpApi,
    client: Client,
    /// The full endpoint.
    endpoint: String,
    /// The base URL without credentials or query, for messages.
    shown_url: String,
    /// Model name sent with every request.
    model: String,
    key: Option<ApiKey>,
    /// `ollama:<model>` or `openai:<model>`.
    model_id: String,
    /// Learned from the server when connecting.
    dim: usize,
}

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    input: &'a [&'a str],
}

#[derive(Deserialize)]
struct OllamaResponse {
    embeddings: Vec<Vec<f32>>,
}

#[derive(Deserialize)]
struct OpenAiResponse {
    data: Vec<OpenAiEmbedding>,
}

#[derive(Deserialize)]
struct OpenAiEmbedding {
    embedding: Vec<f32>,
    /// Position of the input; servers may answer out of order.
    index: Option<usize>,
}

impl HttpEmbedder {
    /// Connects to the server and asks for one vector to learn the model's
    /// dimension, so a wrong URL or model name fails here, at start-up.
    /// Blocking; not from inside the async executor.
    pub(crate) fn connect(
        api: HttpApi,
        url: &str,
        model: &str,
        key: Option<ApiKey>,
    ) -> Result<Self, EmbedError> {
        let base = url.trim_end_matches('/');
        let shown_url = shown(base);
        let endpoint = match api {
            HttpApi::Ollama => format!("{base}/api/embed"),
            HttpApi::OpenAi if base.ends_with("/v1") => format!("{base}/embeddings"),
            HttpApi::OpenAi => format!("{base}/v1/embeddings"),
        };
        let client = Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| EmbedError::Config(format!("http client: {}", e.without_url())))?;
        let prefix = match api {
            HttpApi::Ollama => "ollama",
            HttpApi::OpenAi => "openai",
        };
        let mut embedder = Self {
            api,
            client,
            endpoint,
            shown_url,
            model: model.to_owned(),
            key,
            model_id: format!("{prefix}:{model}"),
            dim: 0,
        };
        let probe = embedder.request(&["dimension probe"])?;
        embedder.dim = probe.first().map(Vec::len).unwrap_or(0);
        if embedder.dim == 0 {
            return Err(embedder.bad("the probe vector is empty"));
        }
        Ok(embedder)
    }

    /// One request; vectors normalised, count and widths checked.
    fn request(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut request = self.client.post(&self.endpoint).json(&Request {
            model: &self.model,
            input: texts,
        });
        if let Some(ApiKey(key)) = &self.key {
            request = request.bearer_auth(key);
        }
        let response = request.send().map_err(|e| EmbedError::Unavailable {
            url: self.shown_url.clone(),
            reason: self.redact(&e.without_url().to_string()),
        })?;
        let status = response.status();
        let body = response.bytes().map_err(|e| EmbedError::Unavailable {
            url: self.shown_url.clone(),
            reason: self.redact(&e.without_url().to_string()),
        })?;
        if !status.is_success() {
            return Err(self.status_error(status, &body));
        }
        let mut vectors = match self.api {
            HttpApi::Ollama => {
                serde_json::from_slice::<OllamaResponse>(&body)
                    .map_err(|e| self.bad(&format!("not an Ollama embed response: {e}")))?
                    .embeddings
            }
            HttpApi::OpenAi => {
                let mut data = serde_json::from_slice::<OpenAiResponse>(&body)
                    .map_err(|e| self.bad(&format!("not an OpenAI embeddings response: {e}")))?
                    .data;
                if data.iter().all(|d| d.index.is_some()) {
                    data.sort_by_key(|d| d.index);
                }
                data.into_iter().map(|d| d.embedding).collect()
            }
        };
        if vectors.len() != texts.len() {
            return Err(self.bad(&format!(
                "{} vectors for {} texts",
                vectors.len(),
                texts.len()
            )));
        }
        let width = self.dim.max(vectors.first().map(Vec::len).unwrap_or(0));
        if let Some(v) = vectors.iter().find(|v| v.len() != width) {
            return Err(self.bad(&format!(
                "a vector has {} components, expected {width}",
                v.len()
            )));
        }
        vectors.iter_mut().for_each(|v| l2_normalise(v));
        Ok(vectors)
    }

    fn status_error(&self, status: StatusCode, body: &[u8]) -> EmbedError {
        let text = String::from_utf8_lossy(body);
        let snippet: String = text.chars().take(MAX_ERROR_BODY).collect();
        let reason = self.redact(&format!("HTTP {status}: {}", snippet.trim()));
        if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            EmbedError::Unavailable {
                url: self.shown_url.clone(),
                reason,
            }
        } else if matches!(
            status,
            StatusCode::BAD_REQUEST
                | StatusCode::PAYLOAD_TOO_LARGE
                | StatusCode::UNPROCESSABLE_ENTITY
        ) {
            EmbedError::Refused {
                url: self.shown_url.clone(),
                reason,
            }
        } else {
            EmbedError::BadResponse {
                url: self.shown_url.clone(),
                reason,
            }
        }
    }

    fn bad(&self, reason: &str) -> EmbedError {
        EmbedError::BadResponse {
            url: self.shown_url.clone(),
            reason: self.redact(reason),
        }
    }

    /// Servers echo keys in error bodies ("invalid key sk-…"); cut them out.
    fn redact(&self, text: &str) -> String {
        match &self.key {
            Some(ApiKey(key)) if !key.is_empty() => text.replace(key.as_str(), "<redacted>"),
            _ => text.to_owned(),
        }
    }
}

impl Embedder for HttpEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        self.request(texts)
    }
}

/// `url` without user info, query or fragment: safe to print.
fn shown(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.set_query(None);
            parsed.set_fragment(None);
            parsed.as_str().trim_end_matches('/').to_owned()
        }
        Err(_) => "<invalid url>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    //! Ollama and the OpenAI API cannot run here, so a small fake speaking
    //! their wire format stands in; it records what it was sent.

    use std::sync::{Arc, Mutex};

    use axum::extract::State;
    use axum::http::HeaderMap;
    use axum::routing::post;
    use axum::{Json, Router};
    use serde_json::{json, Value};

    use super::*;

    /// What the fake saw: (path, bearer header, body).
    type Seen = Arc<Mutex<Vec<(String, Option<String>, Value)>>>;

    /// How the fake answers.
    #[derive(Clone, Copy)]
    enum Mode {
        /// Vectors [n_words, 1, 0, 1] (unnormalised) per input.
        Good,
        /// One vector too few.
        Short,
        /// 401 with the key echoed in the body.
        Unauthorised,
        /// 503.
        Overloaded,
        /// 413 for an input of more than three words, else `Good`.
        TooLong,
    }

    /// Starts the fake on 127.0.0.1:0 in its own thread; returns its URL.
    fn fake(mode: Mode) -> anyhow::Result<(String, Seen)> {
        let seen: Seen = Arc::default();
        let state = (mode, seen.clone());
        let app = Router::new()
            .route("/api/embed", post(answer))
            .route("/v1/embeddings", post(answer))
            .with_state(state);
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let url = format!("http://{}", listener.local_addr()?);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::spawn(move || {
            runtime.block_on(async move {
                if let Ok(listener) = tokio::net::TcpListener::from_std(listener) {
                    let _ = axum::serve(listener, app).await;
                }
            })
        });
        Ok((url, seen))
    }

    async fn answer(
        State((mode, seen)): State<(Mode, Seen)>,
        uri: axum::http::Uri,
        headers: HeaderMap,
        Json(body): Json<Value>,
    ) -> (StatusCode, Json<Value>) {
        let bearer = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if let Ok(mut seen) = seen.lock() {
            seen.push((uri.path().to_owned(), bearer.clone(), body.clone()));
        }
        let inputs: Vec<String> = body["input"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        let mut vectors: Vec<Value> = inputs
            .iter()
            .map(|t| json!([t.split_whitespace().count() as f32, 1.0, 0.0, 1.0]))
            .collect();
        match mode {
            Mode::Good => {}
            Mode::Short => {
                vectors.pop();
            }
            Mode::Unauthorised => {
                let echoed = bearer.unwrap_or_default();
                return (
                    StatusCode::UNAUTHORIZED,
                    Json(json!({"error": format!("invalid key: {echoed}")})),
                );
            }
            Mode::Overloaded => {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    Json(json!({"error": "busy"})),
                )
            }
            Mode::TooLong if inputs.iter().any(|t| t.split_whitespace().count() > 3) => {
                return (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    Json(json!({"error": "input exceeds the context length"})),
                )
            }
            Mode::TooLong => {}
        }
        if uri.path() == "/api/embed" {
            (
                StatusCode::OK,
                Json(json!({ "model": body["model"], "embeddings": vectors })),
            )
        } else {
            // Out of order on purpose: the index decides.
            let data: Vec<Value> = vectors
                .into_iter()
                .enumerate()
                .rev()
                .map(|(i, v)| json!({"embedding": v, "index": i}))
                .collect();
            (StatusCode::OK, Json(json!({ "data": data })))
        }
    }

    fn seen(seen: &Seen) -> Vec<(String, Option<String>, Value)> {
        seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    #[test]
    fn ollama_round_trip() -> anyhow::Result<()> {
        let (url, log) = fake(Mode::Good)?;
        let e = HttpEmbedder::connect(
            HttpApi::Ollama,
            &format!("{url}/"),
            "nomic-embed-text",
            None,
        )?;
        assert_eq!((e.model_id(), e.dim()), ("ollama:nomic-embed-text", 4));
        let vectors = e.embed(&["one", "two words"])?;
        let (third, sixth) = (1.0 / 3f32.sqrt(), 1.0 / 6f32.sqrt());
        let want = [[third, third, 0.0, third], [2.0 * sixth, sixth, 0.0, sixth]];
        assert_eq!(vectors.len(), 2);
        for (got, want) in vectors.iter().zip(want) {
            assert!(
                got.iter().zip(want).all(|(x, y)| (x - y).abs() < 1e-6),
                "normalised server vectors: {got:?}"
            );
        }
        let requests = seen(&log);
        assert_eq!(requests.len(), 2, "the probe, then the texts");
        assert_eq!(
            requests[1],
            (
                "/api/embed".to_owned(),
                None,
                json!({"model": "nomic-embed-text", "input": ["one", "two words"]})
            )
        );
        Ok(())
    }

    #[test]
    fn openai_round_trip_sends_the_key_and_orders_by_index() -> anyhow::Result<()> {
        let (url, log) = fake(Mode::Good)?;
        let e = HttpEmbedder::connect(
            HttpApi::OpenAi,
            &url,
            "bge-m3",
            Some(ApiKey::new("sk-test-123")),
        )?;
        assert_eq!((e.model_id(), e.dim()), ("openai:bge-m3", 4));
        let vectors = e.embed(&["a b c", "d"])?;
        assert!(
            vectors[0][0] > vectors[1][0],
            "input order kept: {vectors:?}"
        );
        let requests = seen(&log);
        assert_eq!(requests[1].0, "/v1/embeddings");
        assert_eq!(requests[1].1.as_deref(), Some("Bearer sk-test-123"));
        Ok(())
    }

    #[test]
    fn errors_never_contain_the_key() -> anyhow::Result<()> {
        let (url, _) = fake(Mode::Unauthorised)?;
        let Err(err) = HttpEmbedder::connect(
            HttpApi::OpenAi,
            &url,
            "m",
            Some(ApiKey::new("sk-secret-999")),
        ) else {
            anyhow::bail!("a 401 must fail");
        };
        let message = err.to_string();
        assert!(matches!(err, EmbedError::BadResponse { .. }), "{message}");
        assert!(
            message.contains("401") && message.contains("<redacted>"),
            "{message}"
        );
        assert!(!message.contains("sk-secret-999"), "{message}");
        assert_eq!(
            format!("{:?}", ApiKey::new("sk-secret-999")),
            "ApiKey(<redacted>)"
        );
        Ok(())
    }

    #[test]
    fn credentials_in_the_url_are_not_shown() {
        assert_eq!(
            shown("https://bob:hunter2@example.com/base?key=abc"),
            "https://example.com/base"
        );
    }

    #[test]
    fn a_wrong_vector_count_is_a_bad_response() -> anyhow::Result<()> {
        let (url, _) = fake(Mode::Short)?;
        let err = HttpEmbedder::connect(HttpApi::Ollama, &url, "m", None).map(|_| ());
        assert!(
            matches!(err, Err(EmbedError::BadResponse { .. })),
            "{err:?}"
        );
        Ok(())
    }

    /// A text the server refuses is the input's fault (the vectorizer sets
    /// that run aside); a bad key is not (`errors_never_contain_the_key`).
    #[test]
    fn a_refused_input_is_refused_not_a_bad_server() -> anyhow::Result<()> {
        let (url, _) = fake(Mode::TooLong)?;
        let e = HttpEmbedder::connect(HttpApi::Ollama, &url, "m", None)?;
        assert!(e.embed(&["short text"]).is_ok());
        let err = e.embed(&["a text far too long for it"]).map(|_| ());
        assert!(matches!(err, Err(EmbedError::Refused { .. })), "{err:?}");
        Ok(())
    }

    #[test]
    fn a_busy_or_absent_server_is_unavailable() -> anyhow::Result<()> {
        let (url, _) = fake(Mode::Overloaded)?;
        let err = HttpEmbedder::connect(HttpApi::Ollama, &url, "m", None).map(|_| ());
        assert!(
            matches!(err, Err(EmbedError::Unavailable { .. })),
            "{err:?}"
        );

        let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let err = HttpEmbedder::connect(HttpApi::Ollama, &format!("http://{closed}"), "m", None)
            .map(|_| ());
        assert!(
            matches!(err, Err(EmbedError::Unavailable { .. })),
            "{err:?}"
        );
        Ok(())
    }

    #[test]
    fn api_key_file_is_read_trimmed_and_an_empty_one_refused() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("key");
        std::fs::write(&path, "sk-abc\n")?;
        let key = ApiKey::read(&path)?;
        assert_eq!(key.0, "sk-abc");
        std::fs::write(&path, "\n")?;
        assert!(matches!(ApiKey::read(&path), Err(EmbedError::Config(_))));
        assert!(matches!(
            ApiKey::read(&dir.path().join("absent")),
            Err(EmbedError::Config(_))
        ));
        Ok(())
    }
}
