//! An HTTP/1.1 stand-in on loopback for a server that cannot run here, or
//! a central that misbehaves on purpose.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

/// An HTTP/1.1 stand-in on loopback, for a server that cannot run here (an
/// embedding server) or a central that misbehaves on purpose: each
/// request's body goes to its answer function, and what that returns
/// (status line, headers and body) is written back; `None` holds the
/// connection without an answer until the client gives up. Stops taking
/// connections when dropped.
pub struct StandIn {
    pub url: String,
    /// Connections taken, so a test knows the client did reach it.
    connections: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What a stand-in answers to a request's body.
type Answer = dyn Fn(&[u8]) -> Option<String> + Send + Sync;

impl StandIn {
    pub fn start(
        listener: TcpListener,
        answer: impl Fn(&[u8]) -> Option<String> + Send + Sync + 'static,
    ) -> Result<Self> {
        listener.set_nonblocking(true)?;
        let url = format!("http://{}", listener.local_addr()?);
        let connections = Arc::<AtomicUsize>::default();
        let stop = Arc::<AtomicBool>::default();
        let answer: Arc<Answer> = Arc::new(answer);
        let (taken, stopped) = (connections.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                let Ok((stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                taken.fetch_add(1, Ordering::SeqCst);
                let answer = answer.clone();
                std::thread::spawn(move || serve_connection(&stream, &*answer));
            }
        });
        Ok(Self {
            url,
            connections,
            stop,
            thread: Some(thread),
        })
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Answers one connection's requests in turn (clients keep connections
/// alive). The whole request is read before answering, so the client reads
/// the answer rather than a reset of a body it was still sending.
fn serve_connection(stream: &TcpStream, answer: &Answer) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut length = 0;
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            if line.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        match answer(&body) {
            Some(response) => (&*stream).write_all(response.as_bytes())?,
            // Held: wait for the client to hang up.
            None => {
                std::io::copy(&mut reader, &mut std::io::sink())?;
                return Ok(());
            }
        }
    }
}

/// An HTTP response with a JSON body.
pub fn json_response(status: &str, body: &serde_json::Value) -> String {
    let body = body.to_string();
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}
