//! On-device redaction of secrets in transcript lines before upload.
//!
//! Masks are length-preserving (`*` over the secret's characters), so byte
//! offsets in the source file still describe the shipped bytes, and they
//! never touch `"`, `\` or the character after a `\`, so a JSON line stays
//! valid JSON. What was masked is counted by kind for the run's metadata.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use regex::bytes::Regex;

/// (kind, pattern). Patterns match the secret itself, not its context.
const PATTERNS: &[(&str, &str)] = &[
    (
        "private_key",
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:[^-]|-[^-])*?-----END [A-Z ]*PRIVATE KEY-----",
    ),
    ("aws_access_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    (
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})\b",
    ),
    ("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),
    (
        "stripe_key",
        r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b",
    ),
    ("openai_key", r"\bsk-(?:proj-)?[A-Za-z0-9_-]{32,}\b"),
    ("anthropic_key", r"\bsk-ant-[A-Za-z0-9_-]{32,}\b"),
    ("kith_token", r"\bkith_[0-9a-f]{64}\b"),
    (
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    ),
    (
        "url_password",
        r"(?i)\b[a-z][a-z0-9+.-]*://[^\s:/@\x22\\]+:([^\s@/\x22\\]+)@",
    ),
    // Shell-style assignments to UPPER_CASE secret names (`export API_KEY=…`),
    // not code like `const apiKey = options.apiKey`.
    (
        "env_secret",
        r"\b(?:[A-Z][A-Z0-9_]*)?(?:PASSWORD|PASSWD|SECRET|TOKEN|API_KEY|APIKEY|ACCESS_KEY|PRIVATE_KEY)[A-Z0-9_]*=([^\s\x22'\\;,)]{8,})",
    ),
];

fn compiled() -> &'static [(&'static str, Regex)] {
    static RES: OnceLock<Vec<(&'static str, Regex)>> = OnceLock::new();
    RES.get_or_init(|| {
        PATTERNS
            .iter()
            .filter_map(|(kind, p)| Regex::new(p).ok().map(|r| (*kind, r)))
            .collect()
    })
}

/// Masks secrets in place; returns how many were found, by kind.
pub fn redact(bytes: &mut [u8]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for (kind, re) in compiled() {
        let spans: Vec<(usize, usize)> = re
            .captures_iter(bytes)
            .filter_map(|c| c.get(1).or_else(|| c.get(0)))
            .filter(|m| *kind != "env_secret" || looks_like_a_value(m.as_bytes()))
            .map(|m| (m.start(), m.end()))
            .collect();
        for (start, end) in spans {
            mask(&mut bytes[start..end]);
            *counts.entry((*kind).to_owned()).or_insert(0) += 1;
        }
    }
    counts
}

/// Placeholders (`sk-...`), references (`$TOKEN`, `${X}`) and code
/// (`process.env.X`) are not secrets; a real value has a digit or is long.
fn looks_like_a_value(v: &[u8]) -> bool {
    let placeholder =
        v.windows(3).any(|w| w == b"...") || v.starts_with(b"$") || v.starts_with(b"<");
    let code = v.starts_with(b"process.") || v.ends_with(b"(");
    !placeholder && !code && (v.iter().any(u8::is_ascii_digit) || v.len() >= 16)
}

fn mask(span: &mut [u8]) {
    let mut i = 0;
    while i < span.len() {
        match span[i] {
            b'\\' => i += 2,
            b'"' => i += 1,
            b if b.is_ascii_graphic() => {
                span[i] = b'*';
                i += 1;
            }
            _ => i += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, kind: Option<&str>, secret: &str) {
        let line = serde_json::json!({"type": "user", "message": {"content": input}}).to_string();
        let mut bytes = line.clone().into_bytes();
        let counts = redact(&mut bytes);
        let out = String::from_utf8(bytes).unwrap_or_default();
        assert_eq!(out.len(), line.len(), "length preserved");
        assert!(
            serde_json::from_str::<serde_json::Value>(&out).is_ok(),
            "still JSON: {out}"
        );
        match kind {
            Some(k) => {
                assert_eq!(counts.get(k), Some(&1), "{input}: {counts:?}");
                assert!(!out.contains(secret), "{secret} survived in {out}");
            }
            None => {
                assert!(counts.is_empty(), "false positive on {input}: {counts:?}");
                assert_eq!(out, line);
            }
        }
    }

    #[test]
    fn secrets_are_masked_and_ordinary_text_is_not() {
        let key =
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1x\n-----END RSA PRIVATE KEY-----";
        check(key, Some("private_key"), "MIIEpAIBAAKCAQEA1x");
        check(
            "aws AKIAIOSFODNN7EXAMPLE here",
            Some("aws_access_key"),
            "AKIAIOSFODNN7EXAMPLE",
        );
        check(
            "token ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            Some("github_token"),
            "ghp_abcdefghij",
        );
        check(
            "xoxb-1234567890-abcdefghij",
            Some("slack_token"),
            "xoxb-1234567890",
        );
        check(
            "sk_live_abcdefghijklmnop1234",
            Some("stripe_key"),
            "sk_live_abcdefghijklmnop1234",
        );
        check("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", Some("jwt"), "dozjgNryP4J3jVmNHl0w5N");
        check(
            "git clone https://bob:hunter2secret@example.com/repo.git",
            Some("url_password"),
            "hunter2secret",
        );
        check(
            "export DATABASE_PASSWORD=correct-horse-battery",
            Some("env_secret"),
            "correct-horse-battery",
        );
        check("API_KEY=abcd1234efgh", Some("env_secret"), "abcd1234efgh");
        for code in [
            "const apiKey = options?.apiKey || getKey()",
            "export ANTHROPIC_API_KEY=sk-ant-...",
            "env.CODEMIE_API_KEY = apiKeyValue;",
            "const csrfToken = document.querySelector(\"meta\")",
            "GITHUB_TOKEN=$GITHUB_TOKEN",
        ] {
            check(code, None, "");
        }
        for ordinary in [
            "/home/alice/src/kith/central/src/registry/mod.rs",
            "commit 8cc42b0bd39d04e71e509d7d58e6782ab435329f fixed it",
            "session 4d5611e5-241a-462a-8d15-5122611a9569",
            "https://example.com/docs/page",
            "PASSWORD_MIN_LENGTH = 8",
            "fn token_sha256(&self) -> String",
        ] {
            check(ordinary, None, "");
        }
    }
}
