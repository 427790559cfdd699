//! How many tokens a text costs an agent, approximately: characters / 4,
//! rounded up, the usual rule for the BPE tokenizers of the models that
//! read it, and no tokenizer is needed to count. Against the embedding
//! model's WordPiece (MiniLM) it counts 1.07 times as many on the LoCoMo
//! chat turns and 0.74 times as many on the transcript fixtures' strings
//! (WordPiece splits off every punctuation mark of code and JSON).
//! Central's context pack and `kith mcp`'s output budgets count this way.

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
