//! How kith reads the words of chunk text, for both backends: the analyzer
//! the embedded index indexes and searches with, and which the Meilisearch
//! backend scores its candidates with (`meili::bm25`), and a hit's snippet
//! around the query's words.

use std::collections::BTreeMap;

use tantivy::schema::Field;
use tantivy::snippet::{Snippet, SnippetGenerator};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, TextAnalyzer,
};

use super::base_form::BaseForm;

/// Characters of a snippet.
const SNIPPET_CHARS: usize = 240;

/// The analyzer of chunk text: words lowercased, an irregular form as its
/// base form ("won" as "win", `base_form`), then the English (Snowball)
/// stem.
pub(crate) fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(BaseForm)
        .filter(Stemmer::new(Language::English))
        .build()
}

/// The words of `text` as `analyzer` reads them, in order.
pub(crate) fn tokens(analyzer: &mut TextAnalyzer, text: &str) -> Vec<String> {
    let mut stream = analyzer.token_stream(text);
    let mut out = Vec::new();
    while stream.advance() {
        out.push(stream.token().text.clone());
    }
    out
}

/// The pieces of a typed query: each "quoted phrase" (`true`) and each
/// word outside quotes (`false`); an unclosed quote quotes nothing.
pub(crate) fn pieces(query: &str) -> Vec<(&str, bool)> {
    let parts: Vec<&str> = query.split('"').collect();
    let mut out = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if i % 2 == 1 && i + 1 < parts.len() {
            out.push((*part, true));
        } else {
            out.extend(part.split_whitespace().map(|word| (word, false)));
        }
    }
    out
}

/// Snippets of texts around the words of one query, read by `analyzer`.
pub(crate) struct Snippets(SnippetGenerator);

impl Snippets {
    pub(crate) fn new(query: &str, mut analyzer: TextAnalyzer) -> Self {
        let words: BTreeMap<String, f32> = tokens(&mut analyzer, query)
            .into_iter()
            .map(|w| (w, 1.0))
            .collect();
        // The field only names where `snippet_from_doc` reads; `snippet`
        // is given the text.
        Self(SnippetGenerator::new(
            words,
            analyzer,
            Field::from_field_id(0),
            SNIPPET_CHARS,
        ))
    }

    pub(crate) fn of(&self, text: &str) -> String {
        highlight(&self.0.snippet(text), text)
    }
}

/// The snippet with matches wrapped in `«` and `»`; the start of the text
/// when nothing matched (a semantic hit, say).
fn highlight(snippet: &Snippet, text: &str) -> String {
    let fragment = snippet.fragment();
    if fragment.is_empty() {
        return text_start(text);
    }
    let mut out = String::with_capacity(fragment.len() + 16);
    let mut at = 0;
    for range in snippet.highlighted() {
        out.push_str(&fragment[at..range.start]);
        out.push('«');
        out.push_str(&fragment[range.clone()]);
        out.push('»');
        at = range.end;
    }
    out.push_str(&fragment[at..]);
    out
}

/// A hit's snippet before (or without) highlighting.
pub(crate) fn text_start(text: &str) -> String {
    text.chars().take(SNIPPET_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_read_as_their_stem_and_base_form() {
        let read = tokens(&mut analyzer(), "We WON the Camping trips");
        assert_eq!(read, ["we", "win", "the", "camp", "trip"]);
    }

    #[test]
    fn a_snippet_marks_every_form_of_the_query_words() {
        let snippets = Snippets::new("win camping", analyzer());
        let text = "Nothing here. We won again and went camped by the lake.";
        let s = snippets.of(text);
        assert!(s.contains("«won»") && s.contains("«camped»"), "{s}");
        assert!(!s.contains("«went»"), "{s}");
        assert_eq!(snippets.of("no match at all"), "no match at all");
    }
}
