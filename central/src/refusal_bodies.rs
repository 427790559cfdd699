//! Kith's error body on the two refusals hyper makes itself. A request
//! head hyper cannot take (a target over its 64 KiB, more headers than
//! `http_limits::PARSED_HEADERS`, a head past its buffer) never reaches
//! kith's routes: hyper answers 414 or 431 with no body and closes the
//! connection. [`RefusalBodies`] sits between hyper and the socket and
//! sends those answers with `{"error": {"code", "message"}}` as every other
//! refusal has (`routes` gives kith's body to the ones below the handlers
//! it sees).
//!
//! Such an answer is told from the bytes hyper writes: a write that is
//! exactly one response head, of status 414 or 431, with `content-length:
//! 0` (kith's own 414 and 431 carry a JSON body, so never match).

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::Error;
use crate::http_limits::{MAX_HEADER_BYTES, MAX_URI_BYTES};

/// The longest head hyper writes for a refusal (status line, date,
/// content-length, connection): anything longer is not one.
const MAX_REFUSAL_HEAD: usize = 256;

/// An HTTP/1.1 connection's socket, with hyper's bodiless 414 and 431
/// given kith's error body.
pub(crate) struct RefusalBodies<I> {
    io: I,
    /// The answer written in place of hyper's, and how much of it is out.
    pending: Option<(Vec<u8>, usize)>,
}

impl<I> RefusalBodies<I> {
    pub(crate) fn new(io: I) -> Self {
        Self { io, pending: None }
    }
}

/// Kith's answer in place of `head`, if `head` is hyper's own refusal.
fn answer_for(head: &[u8]) -> Option<Vec<u8>> {
    if head.len() > MAX_REFUSAL_HEAD || !head.ends_with(b"\r\n\r\n") {
        return None;
    }
    let head = std::str::from_utf8(head).ok()?;
    let mut lines = head.split("\r\n");
    let error = match lines.next()?.get(..13)? {
        "HTTP/1.1 414 " => Error::UriTooLong {
            limit: MAX_URI_BYTES,
        },
        "HTTP/1.1 431 " => Error::HeadersTooLarge {
            limit: MAX_HEADER_BYTES,
        },
        _ => return None,
    };
    if !lines.any(|l| l.eq_ignore_ascii_case("content-length: 0")) {
        return None;
    }
    let status = crate::http_error::status(error.kind());
    let body = serde_json::to_vec(&crate::http_error::body(&error)).ok()?;
    let mut out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    Some(out)
}

impl<I: AsyncWrite + Unpin> RefusalBodies<I> {
    /// Writes what is left of a replaced answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while let Some((bytes, done)) = &mut self.pending {
            if *done == bytes.len() {
                self.pending = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &bytes[*done..]))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            *done += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for RefusalBodies<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for RefusalBodies<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        if let Some(answer) = answer_for(buf) {
            self.pending = Some((answer, 0));
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        let mut full = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (full.next(), full.next()) {
            if let Some(answer) = answer_for(only) {
                self.pending = Some((answer, 0));
                return Poll::Ready(Ok(only.len()));
            }
        }
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_bodiless_414_and_431_are_answered_anew() {
        let hyper = |status: &str| {
            format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\ndate: Sun, 29 Nov 2026 06:00:00 GMT\r\n\r\n")
        };
        for (status, code) in [
            ("414 URI Too Long", "uri_too_long"),
            ("431 Request Header Fields Too Large", "headers_too_large"),
        ] {
            let answer = answer_for(hyper(status).as_bytes()).unwrap_or_default();
            let answer = String::from_utf8_lossy(&answer);
            assert!(
                answer.starts_with(&format!("HTTP/1.1 {status}\r\n")),
                "{answer}"
            );
            assert!(answer.contains("content-type: application/json\r\n"));
            let (_, body) = answer.split_once("\r\n\r\n").unwrap_or_default();
            let body: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
            assert_eq!(body["error"]["code"], code, "{answer}");
        }
        // Not hyper's refusals: another status, a body, kith's own 431,
        // a head cut short, and body bytes that merely start alike.
        for other in [
            hyper("400 Bad Request"),
            hyper("404 Not Found"),
            "HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\ncontent-length: 80\r\n\r\n".to_owned(),
            "HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\n".to_owned(),
            format!("{}{{\"later\": 1}}", hyper("414 URI Too Long")),
            format!("{}{}", hyper("431 Request Header Fields Too Large"), " ".repeat(300)),
        ] {
            assert_eq!(answer_for(other.as_bytes()), None, "{other}");
        }
    }
}
