//! The HTTP client the SDK talks to Meilisearch through: reqwest, as the
//! SDK's own client, with two differences that keep a search at the
//! server's speed. It asks for uncompressed replies: Meilisearch sends a
//! compressed body in a write of its own after the headers, and on a busy
//! keep-alive connection Nagle's algorithm on the server's side and delayed
//! acknowledgements on ours then held every reply ~40 ms (a search's reply
//! is a few KB, on loopback or a local network). And it sends each body
//! whole, with its length, instead of as a chunked stream.

use futures_util::io::{AsyncRead, AsyncReadExt};
use meilisearch_sdk::errors::Error as SdkError;
use meilisearch_sdk::request::{parse_response, HttpClient, Method};
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::MeiliKey;

#[derive(Clone)]
pub(super) struct Http(reqwest::Client);

impl Http {
    pub(super) fn new(key: Option<&MeiliKey>) -> Result<Self, reqwest::Error> {
        let mut headers = HeaderMap::new();
        if let Some(key) = key {
            // `MeiliKey` is visible ASCII, so this is a valid header value.
            if let Ok(mut bearer) = HeaderValue::from_str(&format!("Bearer {}", key.expose())) {
                bearer.set_sensitive(true);
                headers.insert(AUTHORIZATION, bearer);
            }
        }
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .user_agent(concat!("kith-central/", env!("CARGO_PKG_VERSION")))
            .no_gzip()
            .build()?;
        Ok(Self(client))
    }

    /// Sends one request to `url` (its query string included) and parses
    /// the reply as the SDK's own client does.
    async fn send<Output: DeserializeOwned>(
        &self,
        url: String,
        verb: reqwest::Method,
        body: Option<(Vec<u8>, &str)>,
        expected_status_code: u16,
    ) -> Result<Output, SdkError> {
        let mut request = self.0.request(verb, &url);
        if let Some((bytes, content_type)) = body {
            request = request.header(CONTENT_TYPE, content_type).body(bytes);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        let text = if text.is_empty() { "null" } else { &text };
        parse_response(status, expected_status_code, text, url)
    }
}

/// The method's HTTP verb.
fn verb<Query, Body>(method: &Method<Query, Body>) -> reqwest::Method {
    match method {
        Method::Get { .. } => reqwest::Method::GET,
        Method::Delete { .. } => reqwest::Method::DELETE,
        Method::Post { .. } => reqwest::Method::POST,
        Method::Put { .. } => reqwest::Method::PUT,
        Method::Patch { .. } => reqwest::Method::PATCH,
    }
}

/// `url` with the method's query string.
fn with_query<Query: Serialize, Body>(
    url: &str,
    method: &Method<Query, Body>,
) -> Result<String, SdkError> {
    Ok(format!("{url}{}", yaup::to_string(method.query())?))
}

#[async_trait::async_trait]
impl HttpClient for Http {
    async fn request<Query, Body, Output>(
        &self,
        url: &str,
        method: Method<Query, Body>,
        expected_status_code: u16,
    ) -> Result<Output, SdkError>
    where
        Query: Serialize + Send + Sync,
        Body: Serialize + Send + Sync,
        Output: DeserializeOwned + 'static + Send,
    {
        let body = match method.body() {
            Some(body) => Some((serde_json::to_vec(body)?, "application/json")),
            None => None,
        };
        let url = with_query(url, &method)?;
        self.send(url, verb(&method), body, expected_status_code)
            .await
    }

    async fn stream_request<
        Query: Serialize + Send + Sync,
        Body: AsyncRead + Send + Sync + 'static,
        Output: DeserializeOwned + 'static,
    >(
        &self,
        url: &str,
        method: Method<Query, Body>,
        content_type: &str,
        expected_status_code: u16,
    ) -> Result<Output, SdkError> {
        let (url, verb) = (with_query(url, &method)?, verb(&method));
        let body = match method.into_body() {
            Some(body) => {
                let mut bytes = Vec::new();
                std::pin::pin!(body)
                    .read_to_end(&mut bytes)
                    .await
                    .map_err(|e| SdkError::Other(Box::new(e)))?;
                Some((bytes, content_type))
            }
            None => None,
        };
        self.send(url, verb, body, expected_status_code).await
    }

    fn is_tokio(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use anyhow::{bail, Context};

    use super::*;

    /// The request `Http` sends for a search, as a server reads it.
    fn request_as_received() -> anyhow::Result<String> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}/indexes/i/search", listener.local_addr()?);
        let server = std::thread::spawn(move || -> anyhow::Result<String> {
            let (mut conn, _) = listener.accept()?;
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            // The body is `{"q":"x"}`: the request ends with it.
            while !seen.ends_with(br#"{"q":"x"}"#) {
                let n = conn.read(&mut buf)?;
                if n == 0 {
                    bail!("the connection closed before the body");
                }
                seen.extend_from_slice(&buf[..n]);
            }
            conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")?;
            Ok(String::from_utf8(seen)?.to_ascii_lowercase())
        });
        let http = Http::new(Some(&MeiliKey::new("k3y")?))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let reply: serde_json::Value = rt.block_on(http.request(
            &url,
            Method::Post {
                query: (),
                body: serde_json::json!({"q": "x"}),
            },
            200,
        ))?;
        assert_eq!(reply, serde_json::json!({}));
        server
            .join()
            .map_err(|_| anyhow::anyhow!("the server thread panicked"))?
            .context("serving one request")
    }

    #[test]
    fn asks_for_an_uncompressed_reply_and_sends_the_body_whole() -> anyhow::Result<()> {
        let request = request_as_received()?;
        assert!(
            request.starts_with("post /indexes/i/search http/1.1\r\n"),
            "{request}"
        );
        assert!(
            request.contains("authorization: bearer k3y\r\n"),
            "{request}"
        );
        assert!(
            request.contains("content-type: application/json\r\n"),
            "{request}"
        );
        assert!(request.contains("content-length: 9\r\n"), "{request}");
        assert!(!request.contains("transfer-encoding"), "{request}");
        assert!(!request.contains("accept-encoding"), "{request}");
        Ok(())
    }
}
