//! `kith context --hook`, Claude Code's SessionStart hook (installed by
//! `kith install claude-code --recall-on-start`): what it prints begins the
//! new session's context, so it is short (at most `MAX_TOKENS`), names the
//! recent conversations in the session's folder, and is empty when central
//! cannot say: a session never waits long on kith or sees a kith error.

use std::path::PathBuf;
use std::time::Duration;

use kith_proto::ConversationsResponse;

use crate::family::Remote;

/// Most tokens the block may cost a new session.
pub const MAX_TOKENS: u32 = 800;
/// Conversations listed.
const RECENT: u32 = 8;

/// The block for the session whose hook payload is on stdin, or nothing.
pub fn session_start(remote: &Remote<'_>) -> String {
    let payload = crate::hook::read_payload();
    let cwd = serde_json::from_slice::<serde_json::Value>(&payload)
        .ok()
        .and_then(|v| v.get("cwd")?.as_str().map(PathBuf::from))
        .or_else(|| std::env::current_dir().ok());
    let Some(cwd) = cwd else {
        return String::new();
    };
    recent(remote, &cwd.to_string_lossy()).unwrap_or_default()
}

fn recent(remote: &Remote<'_>, project: &str) -> anyhow::Result<String> {
    let http = remote.client_within(Duration::from_secs(5))?;
    let res: ConversationsResponse = remote
        .send(
            http.get(remote.url("/api/conversations"))
                .query(&[("project", project), ("limit", &RECENT.to_string())]),
        )?
        .json()?;
    if res.conversations.is_empty() {
        return Ok(String::new());
    }
    let block = format!(
        "Recent work in this project (kith; `kith show ID` or the kith MCP tools read more):\n{}",
        crate::mcp::render::recent(&res)
    );
    Ok(crate::mcp::render::bounded(&block, MAX_TOKENS))
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::net::TcpListener;
    use std::path::Path;
    use std::process::Command;
    use std::sync::Arc;

    use anyhow::{ensure, Context as _};
    use kith_proto::{AgentRuntime, Conversation};
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    use super::*;

    /// A private CA (`ca.pem`) and a certificate it signed for 127.0.0.1
    /// (`cert.pem`, `key.pem`), as a family serving central on its own
    /// network makes them.
    fn private_ca(dir: &Path) -> anyhow::Result<()> {
        std::fs::write(
            dir.join("leaf.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
        )?;
        for args in [
            "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=kith-test-ca -keyout ca.key -out ca.pem",
            "req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=localhost -keyout key.pem -out leaf.csr",
            "x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -extfile leaf.ext -out cert.pem",
        ] {
            let made = Command::new("openssl")
                .args(args.split(' '))
                .current_dir(dir)
                .output()
                .context("cannot run openssl")?;
            ensure!(
                made.status.success(),
                "openssl {args}: {}",
                String::from_utf8_lossy(&made.stderr)
            );
        }
        Ok(())
    }

    /// An HTTPS server with `dir`'s certificate that answers every request
    /// with `body`, as central answers `GET /api/conversations`; its URL.
    fn central(dir: &Path, body: String) -> anyhow::Result<String> {
        let certs = CertificateDer::pem_file_iter(dir.join("cert.pem"))?
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_file(dir.join("key.pem"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()?
                .with_no_client_auth()
                .with_single_cert(certs, key)?,
        );
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("https://{}", listener.local_addr()?);
        std::thread::spawn(move || {
            for tcp in listener.incoming().flatten() {
                let Ok(conn) = rustls::ServerConnection::new(config.clone()) else {
                    continue;
                };
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                let mut head = Vec::new();
                let mut byte = [0u8];
                while !head.ends_with(b"\r\n\r\n") && matches!(tls.read(&mut byte), Ok(1)) {
                    head.push(byte[0]);
                }
                let _ = write!(
                    tls,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        });
        Ok(url)
    }

    fn conversation(title: &str) -> Conversation {
        Conversation {
            id: "c0123456789abcdef0123456789abcdef".into(),
            title: Some(title.into()),
            owner: "alice.test".into(),
            machine: "laptop".into(),
            agent_runtime: AgentRuntime::ClaudeCode,
            session_id: None,
            cwd: Some("/home/sam/src/tally".into()),
            git_branch: None,
            model: None,
            started_at: "2026-03-01T10:00:00.000Z".into(),
            last_activity_at: "2026-03-01T11:00:00.000Z".into(),
            turn_count: 3,
            delta_count: 1,
            parent_id: None,
            depth: 0,
            files_touched: vec![],
            tools_used: vec![],
            commands: vec![],
            tags: vec![],
            run_ids: vec![],
            inline_subagents: vec![],
        }
    }

    /// Regression: the hook built a client of its own, without the CA of
    /// `kith login --ca-cert`, so against a central with a private CA it
    /// printed nothing.
    #[test]
    fn recall_trusts_the_private_ca_of_the_login() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        private_ca(tmp.path())?;
        let listing = ConversationsResponse {
            conversations: vec![conversation("tally import")],
            next_cursor: None,
        };
        let url = central(tmp.path(), serde_json::to_string(&listing)?)?;
        let pem = std::fs::read(tmp.path().join("ca.pem"))?;
        let trusting = Remote {
            central_url: &url,
            token: "kith_test",
            certificates: crate::client::parse_certificates(&pem).map_err(anyhow::Error::msg)?,
        };
        let block = recent(&trusting, "/home/sam/src/tally")?;
        assert!(block.starts_with("Recent work in this project"), "{block}");
        assert!(block.contains("tally import"), "{block}");

        // The same central without its CA: refused for its certificate.
        let untrusting = Remote {
            certificates: Vec::new(),
            ..trusting
        };
        let refused = recent(&untrusting, "/home/sam/src/tally").map_err(|e| e.to_string());
        assert!(
            refused.as_ref().is_err_and(|e| e.contains("certificate")),
            "{refused:?}"
        );
        Ok(())
    }
}
