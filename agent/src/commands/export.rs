//! `kith export [ID…] [--since WHEN] --out FILE`: your own conversations
//! (or the ones named, which may be others' shared with you) as one tar
//! archive: each conversation's exact bytes as its agent wrote them, as
//! central stores them, with kith's metadata beside them. Central decides
//! what may be read, as for `kith show --raw`: another's conversation that
//! is not shared with you is not found, and a shared one holds only what
//! the share covers.
//!
//! The archive (POSIX ustar, readable by `tar -xf`):
//! - `kith-export/manifest.json`: `version` (1), `exported_at`, `user`
//!   (who exported), `central`, and `conversations`: each one's `id`,
//!   `owner`, `title`, `agent_runtime`, `started_at`, `last_activity_at`,
//!   its `jsonl` and `metadata` files, and the JSONL's `bytes` and `sha256`;
//! - `kith-export/conversations/<id>.jsonl`: the conversation's bytes, its
//!   deltas one after another (`GET /api/conversations/{id}/jsonl`);
//! - `kith-export/conversations/<id>.json`: the conversation as central
//!   describes it (`GET /api/conversations/{id}`).
//!
//! A conversation's subagents come with it. The file is written whole or
//! not at all, 0600: it holds private text.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Result};
use kith_proto::{Conversation, ConversationResponse, ConversationsResponse, StatusResponse};
use serde_json::json;
use time::OffsetDateTime;

use crate::client::{path_part, Client};
use crate::when::{parse_since, WHEN_HINT};

/// `kith export`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct ExportArgs {
    /// Conversations to export (ids, run ids or unique prefixes); without
    /// any, every one of your own.
    ids: Vec<String>,
    /// Only conversations active since then: an RFC 3339 time, a date, or
    /// an age like 7d.
    #[arg(long)]
    since: Option<String>,
    /// The archive to write (a tar file).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

/// How many conversations a page of the listing asks for.
const PAGE: u32 = 200;

pub(crate) fn run(args: ExportArgs, client: &Client) -> Result<()> {
    let now = OffsetDateTime::now_utc();
    let since = match &args.since {
        Some(s) => Some(
            parse_since(s, now)
                .ok_or_else(|| crate::Error::Usage(format!("--since {s:?}: {WHEN_HINT}")))?,
        ),
        None => None,
    };
    let status: StatusResponse = client.json(client.get("/api/status"))?;
    // The conversations by id, with the subagents under each.
    let mut found: BTreeMap<String, Conversation> = BTreeMap::new();
    let named: Vec<String> = if args.ids.is_empty() {
        own_conversations(client, &status.user, since.as_deref())?
    } else {
        args.ids.clone()
    };
    for id in &named {
        let c: ConversationResponse =
            client.json(client.get(&format!("/api/conversations/{}", path_part(id))))?;
        if since
            .as_deref()
            .is_some_and(|s| c.conversation.last_activity_at.as_str() < s)
        {
            continue;
        }
        for c in std::iter::once(c.conversation).chain(c.subagents) {
            found.insert(c.id.clone(), c);
        }
    }
    if found.is_empty() {
        bail!(
            "nothing to export: {}; {} was not written",
            match since {
                Some(s) => format!("no conversation of yours active since {s}"),
                None => "you have no conversation yet".to_owned(),
            },
            args.out.display()
        );
    }
    let mut archive = Tar::default();
    let mut listed = Vec::new();
    for (id, c) in &found {
        let bytes =
            client.bytes(client.get(&format!("/api/conversations/{}/jsonl", path_part(id))))?;
        let jsonl = format!("conversations/{id}.jsonl");
        let metadata = format!("conversations/{id}.json");
        archive.add(&format!("kith-export/{jsonl}"), &bytes, now)?;
        let mut described = serde_json::to_vec_pretty(c)?;
        described.push(b'\n');
        archive.add(&format!("kith-export/{metadata}"), &described, now)?;
        listed.push(json!({
            "id": id,
            "owner": c.owner,
            "title": c.title,
            "agent_runtime": c.agent_runtime,
            "started_at": c.started_at,
            "last_activity_at": c.last_activity_at,
            "jsonl": jsonl,
            "metadata": metadata,
            "bytes": bytes.len(),
            "sha256": kith_shared::hash::sha256_hex(&bytes),
        }));
    }
    let manifest = json!({
        "version": 1,
        "exported_at": kith_shared::timestamp::render(now),
        "user": status.user,
        "central": client.link(""),
        "conversations": listed,
    });
    let mut manifest = serde_json::to_vec_pretty(&manifest)?;
    manifest.push(b'\n');
    archive.add("kith-export/manifest.json", &manifest, now)?;
    crate::config::write_file(
        &args.out,
        &archive.finish(),
        0o600,
        crate::config::Durability::Durable,
    )?;
    println!(
        "exported {} conversations into {}",
        found.len(),
        args.out.display()
    );
    Ok(())
}

/// The ids of `user`'s own conversations (active since `since`), every
/// page of the listing.
fn own_conversations(client: &Client, user: &str, since: Option<&str>) -> Result<Vec<String>> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut query = vec![("owner", user.to_owned()), ("limit", PAGE.to_string())];
        if let Some(s) = since {
            query.push(("since", s.to_owned()));
        }
        if let Some(c) = cursor.take() {
            query.push(("cursor", c));
        }
        let page: ConversationsResponse =
            client.json(client.get("/api/conversations").query(&query))?;
        ids.extend(
            page.conversations
                .into_iter()
                .filter(|c| c.owner == user)
                .map(|c| c.id),
        );
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(ids),
        }
    }
}

/// A POSIX ustar archive built in memory: 512-byte headers, contents
/// padded to 512 bytes, two zero blocks at the end.
#[derive(Default)]
struct Tar {
    bytes: Vec<u8>,
}

impl Tar {
    /// Adds a regular file (0600) named `name` (at most 100 bytes).
    fn add(&mut self, name: &str, contents: &[u8], mtime: OffsetDateTime) -> Result<()> {
        if name.len() > 100 {
            bail!("{name}: a name longer than a tar header holds");
        }
        let mut header = [0u8; 512];
        header[..name.len()].copy_from_slice(name.as_bytes());
        let octal = |field: &mut [u8], n: u64| {
            let width = field.len() - 1;
            let text = format!("{n:0width$o}");
            field[..width].copy_from_slice(&text.as_bytes()[text.len() - width..]);
        };
        octal(&mut header[100..108], 0o600);
        octal(&mut header[108..116], 0);
        octal(&mut header[116..124], 0);
        octal(&mut header[124..136], contents.len() as u64);
        octal(&mut header[136..148], mtime.unix_timestamp().max(0) as u64);
        header[156] = b'0';
        header[257..263].copy_from_slice(b"ustar\0");
        header[263..265].copy_from_slice(b"00");
        // The checksum is taken with its own field as spaces.
        header[148..156].copy_from_slice(b"        ");
        let sum: u64 = header.iter().map(|&b| u64::from(b)).sum();
        let text = format!("{sum:06o}\0 ");
        header[148..156].copy_from_slice(text.as_bytes());
        self.bytes.extend_from_slice(&header);
        self.bytes.extend_from_slice(contents);
        let pad = (512 - contents.len() % 512) % 512;
        self.bytes.extend(std::iter::repeat_n(0u8, pad));
        Ok(())
    }

    fn finish(mut self) -> Vec<u8> {
        self.bytes.extend(std::iter::repeat_n(0u8, 1024));
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archive_holds_each_file_at_a_block_with_a_header_tar_reads() -> Result<()> {
        let mut tar = Tar::default();
        let at = OffsetDateTime::UNIX_EPOCH;
        tar.add("kith-export/a.jsonl", b"{\"a\":1}\n", at)?;
        tar.add("kith-export/b.json", &[b'x'; 513], at)?;
        assert!(tar.add(&"n".repeat(101), b"", at).is_err());
        let bytes = tar.finish();
        assert_eq!(bytes.len(), 512 + 512 + 512 + 1024 + 1024);
        assert!(bytes.starts_with(b"kith-export/a.jsonl\0"));
        assert_eq!(&bytes[512..520], b"{\"a\":1}\n");
        assert_eq!(&bytes[124..135], b"00000000010", "the size, in octal");
        let sum: u64 = bytes[..512]
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u64::from(b)
                }
            })
            .sum();
        let said = std::str::from_utf8(&bytes[148..154])?;
        assert_eq!(u64::from_str_radix(said, 8)?, sum);
        assert_eq!(&bytes[1024..1024 + 18], b"kith-export/b.json");
        assert!(bytes[bytes.len() - 1024..].iter().all(|&b| b == 0));
        Ok(())
    }
}
