//! The BERT tokenizer of the embedded model: normalise, split into words,
//! WordPiece, `[CLS] … [SEP]`, reading its vocabulary from `tokenizer.json`.
//!
//! Self-written rather than the `tokenizers` crate on purpose. That crate
//! brings a C regex engine (onig) or fancy-regex, rayon, esaxx and
//! sentencepiece support, minutes of compile time on two cores, for the one
//! pipeline all-MiniLM-L6-v2 uses (`BertNormalizer` + `BertPreTokenizer` +
//! `WordPiece`), which fits in this file. Writing it ourselves also lets it
//! stream: it stops reading a text once the 256-token window is full, so a
//! 100 KB tool output costs no more than a short one. The tests pin it to the
//! ids the reference implementation gives for the same vocabulary.
//!
//! Behaviour, in the reference's order: drop NUL, U+FFFD and control/format
//! characters, turn whitespace into word breaks, make each CJK ideograph its
//! own word, strip accents (canonical decomposition, then drop non-spacing
//! marks), lowercase, make each punctuation character its own word; then
//! greedy longest-match WordPiece with `##` continuations, and `[UNK]` for a
//! word that cannot be covered or is longer than 100 characters.

use std::collections::HashMap;

use serde::Deserialize;
use unicode_general_category::{get_general_category, GeneralCategory};

use super::EmbedError;

/// A BERT WordPiece tokenizer for one vocabulary.
#[derive(Debug)]
pub(super) struct WordPiece {
    /// Pieces that may start a word.
    starts: HashMap<String, u32>,
    /// Pieces that continue a word, stored without their `##` prefix so a
    /// lookup is a slice of the word, not a fresh string.
    continuations: HashMap<String, u32>,
    /// The special tokens every sequence needs.
    cls: u32,
    sep: u32,
    unk: u32,
    /// Id used to pad a batch to its longest sequence.
    pub pad: u32,
    /// Uncased models lowercase before lookup.
    lowercase: bool,
    /// Uncased models also strip accents ("café" is "cafe").
    strip_accents: bool,
    /// Longer words become `[UNK]` without being split.
    max_word_chars: usize,
}

/// The parts of `tokenizer.json` this tokenizer reads.
#[derive(Deserialize)]
struct TokenizerFile {
    normalizer: Option<NormalizerSection>,
    model: ModelSection,
}

#[derive(Deserialize)]
struct NormalizerSection {
    #[serde(default = "yes")]
    lowercase: bool,
    /// `null` means "same as lowercase", as in the reference implementation.
    strip_accents: Option<bool>,
}

#[derive(Deserialize)]
struct ModelSection {
    #[serde(rename = "type")]
    kind: String,
    vocab: HashMap<String, u32>,
    #[serde(default = "unk_token")]
    unk_token: String,
    #[serde(default = "continuing_prefix")]
    continuing_subword_prefix: String,
    #[serde(default = "max_input_chars")]
    max_input_chars_per_word: usize,
}

fn yes() -> bool {
    true
}

fn unk_token() -> String {
    "[UNK]".to_owned()
}

fn continuing_prefix() -> String {
    "##".to_owned()
}

fn max_input_chars() -> usize {
    100
}

impl WordPiece {
    /// Reads the vocabulary and settings from a Hugging Face `tokenizer.json`
    /// whose model is WordPiece.
    pub(super) fn from_tokenizer_json(bytes: &[u8]) -> Result<Self, EmbedError> {
        let file: TokenizerFile = serde_json::from_slice(bytes)
            .map_err(|e| EmbedError::ModelLoad(format!("tokenizer.json is not readable: {e}")))?;
        if file.model.kind != "WordPiece" {
            return Err(EmbedError::ModelLoad(format!(
                "tokenizer.json has a {} model; only WordPiece is supported",
                file.model.kind
            )));
        }
        let (lowercase, strip_accents) = match file.normalizer {
            Some(n) => (n.lowercase, n.strip_accents.unwrap_or(n.lowercase)),
            None => (false, false),
        };
        let prefix = file.model.continuing_subword_prefix;
        let vocab = file.model.vocab;
        let special = |token: &str| {
            vocab.get(token).copied().ok_or_else(|| {
                EmbedError::ModelLoad(format!("tokenizer.json has no {token} token"))
            })
        };
        let cls = special("[CLS]")?;
        let sep = special("[SEP]")?;
        let pad = special("[PAD]")?;
        let unk = special(&file.model.unk_token)?;

        let mut starts = HashMap::with_capacity(vocab.len());
        let mut continuations = HashMap::new();
        for (piece, id) in vocab {
            match piece.strip_prefix(prefix.as_str()) {
                Some(rest) if !prefix.is_empty() => {
                    continuations.insert(rest.to_owned(), id);
                }
                _ => {
                    starts.insert(piece, id);
                }
            }
        }
        Ok(Self {
            starts,
            continuations,
            cls,
            sep,
            unk,
            pad,
            lowercase,
            strip_accents,
            max_word_chars: file.model.max_input_chars_per_word,
        })
    }

    /// Token ids of `text` as one sequence, `[CLS]` first and `[SEP]` last,
    /// at most `max_len` ids in all (the word pieces past the window are
    /// dropped, as the reference's truncation does).
    pub(super) fn encode(&self, text: &str, max_len: usize) -> Vec<u32> {
        let budget = max_len.saturating_sub(2);
        let mut ids = Vec::with_capacity(budget.min(text.len()) + 2);
        ids.push(self.cls);
        let mut word = String::new();
        let mut decomposed = Vec::with_capacity(4);
        for c in text.chars() {
            if ids.len() > budget {
                break;
            }
            if c == '\0' || c == '\u{fffd}' || is_control(c) {
                continue;
            }
            if is_cjk(c) {
                self.push_word(&mut word, &mut ids);
                word.push(c);
                self.push_word(&mut word, &mut ids);
                continue;
            }
            decomposed.clear();
            if self.strip_accents {
                unicode_normalization::char::decompose_canonical(c, |d| {
                    if get_general_category(d) != GeneralCategory::NonspacingMark {
                        decomposed.push(d);
                    }
                });
            } else {
                decomposed.push(c);
            }
            for &d in &decomposed {
                if self.lowercase {
                    for l in d.to_lowercase() {
                        self.push_char(l, &mut word, &mut ids);
                    }
                } else {
                    self.push_char(d, &mut word, &mut ids);
                }
            }
        }
        self.push_word(&mut word, &mut ids);
        ids.truncate(budget + 1);
        ids.push(self.sep);
        ids
    }

    /// Adds one normalised character: whitespace ends the word, punctuation
    /// is a word of its own, anything else grows the word.
    fn push_char(&self, c: char, word: &mut String, ids: &mut Vec<u32>) {
        if c.is_whitespace() {
            self.push_word(word, ids);
        } else if is_punctuation(c) {
            self.push_word(word, ids);
            word.push(c);
            self.push_word(word, ids);
        } else {
            word.push(c);
        }
    }

    /// WordPiece of one word onto `ids`; empties `word`.
    fn push_word(&self, word: &mut String, ids: &mut Vec<u32>) {
        if word.is_empty() {
            return;
        }
        if word.chars().count() > self.max_word_chars {
            ids.push(self.unk);
            word.clear();
            return;
        }
        let first = ids.len();
        let mut start = 0;
        while start < word.len() {
            let table = if start == 0 {
                &self.starts
            } else {
                &self.continuations
            };
            let mut end = word.len();
            let piece = loop {
                if let Some(&id) = table.get(&word[start..end]) {
                    break Some(id);
                }
                match word[start..end].char_indices().next_back() {
                    Some((last, _)) if last > 0 => end = start + last,
                    _ => break None,
                }
            };
            match piece {
                Some(id) => {
                    ids.push(id);
                    start = end;
                }
                None => {
                    ids.truncate(first);
                    ids.push(self.unk);
                    break;
                }
            }
        }
        word.clear();
    }
}

/// Control and format characters (and unassigned, private-use and surrogate
/// code points) are dropped; tab, newline and carriage return are whitespace.
fn is_control(c: char) -> bool {
    if matches!(c, '\t' | '\n' | '\r') {
        return false;
    }
    matches!(
        get_general_category(c),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::Unassigned
            | GeneralCategory::PrivateUse
            | GeneralCategory::Surrogate
    )
}

/// BERT counts all ASCII symbols (`$`, `+`, `^`, …) as punctuation, plus the
/// Unicode punctuation categories.
fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation()
        || matches!(
            get_general_category(c),
            GeneralCategory::ConnectorPunctuation
                | GeneralCategory::DashPunctuation
                | GeneralCategory::OpenPunctuation
                | GeneralCategory::ClosePunctuation
                | GeneralCategory::InitialPunctuation
                | GeneralCategory::FinalPunctuation
                | GeneralCategory::OtherPunctuation
        )
}

/// The CJK Unified Ideograph blocks BERT splits into single-character words
/// (not Hangul, kana or CJK punctuation).
fn is_cjk(c: char) -> bool {
    matches!(
        u32::from(c),
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B820..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vocabulary small enough to check every split by eye.
    fn tiny() -> WordPiece {
        let vocab = [
            "[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", "aff", "hello", "world",
            ",", "!", "'", "t", "don", "cafe", "naive", "我", "x", "##x", "-", ".", "$", "a", "ab",
            "##bc",
        ];
        let vocab: serde_json::Map<String, serde_json::Value> = vocab
            .iter()
            .enumerate()
            .map(|(i, t)| ((*t).to_owned(), serde_json::json!(i)))
            .collect();
        let file = serde_json::json!({
            "normalizer": {"type": "BertNormalizer", "lowercase": true, "strip_accents": null},
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                      "max_input_chars_per_word": 100, "vocab": vocab},
        });
        match WordPiece::from_tokenizer_json(file.to_string().as_bytes()) {
            Ok(t) => t,
            Err(e) => panic!("tiny vocabulary: {e}"),
        }
    }

    /// Tokens (not ids) of `text`, between `[CLS]` and `[SEP]`.
    fn check(text: &str, expected: &[&str]) {
        let t = tiny();
        let mut names: HashMap<u32, &str> =
            t.starts.iter().map(|(k, v)| (*v, k.as_str())).collect();
        let continued: HashMap<u32, String> = t
            .continuations
            .iter()
            .map(|(k, v)| (*v, format!("##{k}")))
            .collect();
        names.extend(continued.iter().map(|(k, v)| (*k, v.as_str())));
        let ids = t.encode(text, 256);
        let got: Vec<&str> = ids.iter().map(|id| names[id]).collect();
        let mut want = vec!["[CLS]"];
        want.extend_from_slice(expected);
        want.push("[SEP]");
        assert_eq!(got, want, "tokens of {text:?}");
    }

    #[test]
    fn splits_words_into_longest_pieces() {
        check("unaffable", &["un", "##aff", "##able"]);
        check("affable", &["aff", "##able"]);
        check("abbc", &["ab", "##bc"]);
        // Greedy, as the reference: "ab" is taken first and "##c" does not
        // exist, so the word is [UNK] although "a" + "##bc" would cover it.
        check("abc", &["[UNK]"]);
        check("xxx", &["x", "##x", "##x"]);
    }

    #[test]
    fn a_word_that_cannot_be_covered_is_one_unk() {
        check("unaffablez hello", &["[UNK]", "hello"]);
        check("zzz", &["[UNK]"]);
    }

    #[test]
    fn punctuation_is_split_off() {
        check("Hello, World!", &["hello", ",", "world", "!"]);
        check("don't", &["don", "'", "t"]);
        check("x-x.", &["x", "-", "x", "."]);
        check("$a", &["$", "a"]);
    }

    #[test]
    fn accents_are_stripped_and_case_folded() {
        check("CAFÉ naïve", &["cafe", "naive"]);
        check("he\u{301}llo", &["hello"]);
    }

    #[test]
    fn cjk_ideographs_are_words_of_their_own() {
        check("我我x", &["我", "我", "x"]);
    }

    #[test]
    fn control_characters_vanish_and_whitespace_separates() {
        check("hel\u{0}lo\u{fffd}\tworld\u{200b}", &["hello", "world"]);
        check("  \n\t ", &[]);
        check("", &[]);
    }

    #[test]
    fn words_over_100_chars_are_unk() {
        check(&"x".repeat(101), &["[UNK]"]);
        let hundred = tiny().encode(&"x".repeat(100), 256);
        assert_eq!(hundred.len(), 102, "100 chars still split into pieces");
    }

    #[test]
    fn long_text_is_cut_to_the_window() {
        let t = tiny();
        let ids = t.encode(&"hello ".repeat(50_000), 256);
        assert_eq!(ids.len(), 256);
        assert_eq!(ids.first(), Some(&t.cls));
        assert_eq!(ids.last(), Some(&t.sep));
        assert_eq!(
            t.encode("hello world", 3),
            vec![t.cls, t.starts["hello"], t.sep]
        );
    }

    #[test]
    fn tokenizer_json_without_wordpiece_is_refused() {
        let bpe = br#"{"model": {"type": "BPE", "vocab": {}}}"#;
        let err = WordPiece::from_tokenizer_json(bpe)
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert_eq!(err, Err("embedding model could not be loaded: tokenizer.json has a BPE model; only WordPiece is supported".to_owned()));
        assert!(WordPiece::from_tokenizer_json(b"{not json").is_err());
    }
}
