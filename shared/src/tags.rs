//! What a tag may be: the one rule for central's ingest and tag edits, its
//! search filter, and the agent's tag rules (checked when `config.toml` is
//! read, so a bad rule is reported there and not as deltas central refuses).

/// Most tags on one run.
pub const MAX_TAGS: usize = 64;
/// Longest tag, in bytes.
pub const MAX_TAG_LEN: usize = 100;

/// What `valid` checks, for error messages.
pub fn rule() -> String {
    format!("at most {MAX_TAGS} tags of 1-{MAX_TAG_LEN} bytes each, without '|' or ':'")
}

/// `|` and `:` are taken: `|` separates tags in central's registry and `:`
/// separates a share scope's kind from its value.
pub fn valid(tags: &[String]) -> bool {
    tags.len() <= MAX_TAGS
        && tags
            .iter()
            .all(|t| !t.is_empty() && t.len() <= MAX_TAG_LEN && !t.contains(['|', ':']))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_short_non_empty_words_without_separators() {
        let ok = |t: &[&str]| valid(&t.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(ok(&["work", "client-acme", "a b"]));
        assert!(ok(&[]));
        assert!(!ok(&[""]));
        assert!(!ok(&["a|b"]));
        assert!(!ok(&["tag:x"]));
        assert!(!ok(&[&"x".repeat(MAX_TAG_LEN + 1)]));
        assert!(!ok(&vec!["t"; MAX_TAGS + 1]));
    }
}
