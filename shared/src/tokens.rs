//! How many tokens a text costs an agent, approximately: characters / 4,
//! rounded up. The embedding model's WordPiece count is within ~20% of it
//! on English prose and code, and counting needs no tokenizer. Central's
//! context pack and `kith mcp`'s output budgets both count this way.

pub fn approx(text: &str) -> u32 {
    u32::try_from(text.chars().count().div_ceil(4)).unwrap_or(u32::MAX)
}

/// The longest prefix of `text` that costs at most `max` tokens.
pub fn prefix(text: &str, max: u32) -> &str {
    let end = text
        .char_indices()
        .nth(max as usize * 4)
        .map_or(text.len(), |(i, _)| i);
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_characters_over_four_rounded_up() {
        assert_eq!(approx(""), 0);
        assert_eq!(approx("abcd"), 1);
        assert_eq!(approx("abcde"), 2);
        assert_eq!(approx("ééééé"), 2);
        assert_eq!(prefix("ééééé", 1), "éééé");
        assert_eq!(prefix("abc", 9), "abc");
        assert_eq!(approx(prefix(&"x".repeat(99), 7)), 7);
    }
}
