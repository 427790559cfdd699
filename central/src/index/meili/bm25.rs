//! Keyword ranking for the Meilisearch backend, done by central.
//!
//! Meilisearch ranks a query of several words by how many of them a chunk
//! holds, dropping words from the end of the query (matching strategy
//! `last`), so "When did Caroline go to the support group?" finds chunks
//! that say "when did Caroline" and little else. Its `frequency` strategy
//! drops the most frequent words first, but counts frequencies over the
//! whole index: other users' private runs would decide which of a viewer's
//! words count. So central asks Meilisearch one question per word of the
//! query, filtered to what the viewer may read (which chunks hold a word
//! starting like it, and how many), and ranks their union with BM25 as the
//! embedded index does: words read by the same analyzer (`words`), the
//! same k1 and b, frequencies counted over what the viewer may read.

use std::collections::HashMap;

use tantivy::tokenizer::{LowerCaser, RemoveLongFilter, SimpleTokenizer, TextAnalyzer};

use crate::index::base_form::base_form;
use crate::index::words::{analyzer, pieces, tokens};

/// Words (and phrases) of a query that are searched (each is a search of
/// its own): a longer query leaves out its stopwords and question words,
/// then its later words.
pub(super) const MAX_TERMS: usize = 16;
/// BM25's term-frequency saturation and length normalisation (tantivy's).
const K1: f32 = 1.2;
const B: f32 = 0.75;

/// One word or phrase of a query.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Term {
    /// What Meilisearch is asked: for a word, the start its forms share,
    /// searched as a prefix ("camp" for "camping" finds "camped";
    /// synonyms give "went" for "go"); for a phrase, the phrase in quotes.
    pub ask: String,
    /// What a chunk must hold, in a row, as the analyzer reads words.
    words: Vec<String>,
}

/// The terms of a typed query, as the embedded index reads one: words,
/// and "quoted phrases"; a word the tokenizer splits (`src/main.rs`) is
/// also a phrase of its pieces. Distinct as read ("library libraries" is
/// one term, as in the embedded index), at most `MAX_TERMS`: of a longer
/// query (a task described in a paragraph), the words that say what it is
/// about.
pub(super) fn terms(query: &str) -> Vec<Term> {
    let all = all_terms(query);
    if all.len() <= MAX_TERMS {
        return all;
    }
    let mut kept = all_terms(&crate::index::fusion::content_words(query));
    kept.truncate(MAX_TERMS);
    kept
}

/// `query` as Meilisearch is asked it when every word must match: its
/// "quoted phrases" in quotes and its other words as plain words, so that
/// `-rf` (Meilisearch's "without rf") and an unclosed quote read as the
/// embedded index reads them.
pub(super) fn every_word_query(query: &str) -> String {
    pieces(query)
        .into_iter()
        .map(|(piece, quoted)| {
            if quoted {
                format!("\"{piece}\"")
            } else {
                piece.trim_start_matches('-').to_owned()
            }
        })
        .filter(|p| !p.is_empty() && p != "\"\"")
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every term of `query`, distinct, in order.
fn all_terms(query: &str) -> Vec<Term> {
    let mut surface = surface();
    let mut words = analyzer();
    let mut out: Vec<Term> = Vec::new();
    let mut push = |term: Term| {
        if !term.words.is_empty() && !out.iter().any(|t| t.words == term.words) {
            out.push(term);
        }
    };
    for (piece, quoted) in pieces(query) {
        let read = tokens(&mut words, piece);
        if read.len() > 1 {
            push(Term {
                ask: format!("\"{piece}\""),
                words: read,
            });
            if quoted {
                continue;
            }
        }
        for word in tokens(&mut surface, piece) {
            if let Some(stem) = tokens(&mut words, &word).pop() {
                push(Term {
                    ask: prefix_of(&word, &stem),
                    words: vec![stem],
                });
            }
        }
    }
    out
}

/// The start of `word` that its other forms share: what its base form and
/// stem begin with ("camp" for "camping", "happ" for "happy", whose stem is
/// "happi", "go" for "went"), or the base form itself when that start is
/// shorter than three letters and not the whole base form.
fn prefix_of(word: &str, stem: &str) -> String {
    let base = base_form(word).unwrap_or(word);
    let shared: String = base
        .chars()
        .zip(stem.chars())
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| a)
        .collect();
    if shared.chars().count() >= 3 || shared == base {
        shared
    } else {
        base.to_owned()
    }
}

/// What Meilisearch answered for one term: how many readable chunks match
/// what it was asked, and which of the candidates it returned.
#[derive(Debug, Clone, Default)]
pub(super) struct Answer {
    pub total: u64,
    pub hits: Vec<usize>,
}

/// Ranks the candidates' `texts` for `terms` (`answers` in the same order),
/// best first, by BM25: `n` chunks readable, a term's document frequency
/// Meilisearch's count of its matches, less the share of the candidates it
/// returned for it that do not hold the term as the analyzer reads it (a
/// prefix or a typo match: "campus" for "camp"), and never fewer than the
/// candidates holding it; the candidates' mean length as the average.
/// Candidates holding no term are left out.
pub(super) fn rank(
    terms: &[Term],
    answers: &[Answer],
    n: u64,
    texts: &[&str],
) -> Vec<(usize, f32)> {
    let mut reader = Reader::default();
    let docs: Vec<Vec<u32>> = texts.iter().map(|t| reader.read(t)).collect();
    let avg_len =
        (docs.iter().map(Vec::len).sum::<usize>() as f32 / docs.len().max(1) as f32).max(1.0);
    let mut scores = vec![0f32; docs.len()];
    for (term, answer) in terms.iter().zip(answers) {
        // A word no candidate holds has no id: the term matches nothing.
        let Some(words) = term
            .words
            .iter()
            .map(|w| reader.stems.get(w).copied())
            .collect::<Option<Vec<u32>>>()
        else {
            continue;
        };
        let tf: Vec<usize> = docs.iter().map(|d| occurrences(d, &words)).collect();
        let holding = answer.hits.iter().filter(|&&i| tf[i] > 0).count() as u64;
        let estimate = if answer.hits.is_empty() {
            answer.total
        } else {
            (answer.total * holding).div_ceil(answer.hits.len() as u64)
        };
        let df = estimate.max(tf.iter().filter(|&&t| t > 0).count() as u64);
        let (df, n) = (df as f32, n.max(df) as f32);
        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
        for ((score, &tf), doc) in scores.iter_mut().zip(&tf).zip(&docs) {
            if tf > 0 {
                let tf = tf as f32;
                let norm = K1 * (1.0 - B + B * doc.len() as f32 / avg_len);
                *score += idf * tf * (K1 + 1.0) / (tf + norm);
            }
        }
    }
    let mut ranked: Vec<(usize, f32)> = scores
        .into_iter()
        .enumerate()
        .filter(|&(_, s)| s > 0.0)
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked
}

/// Reads texts as `analyzer` does, as ids of the words it reads, each
/// distinct word analysed once: the stemmer was most of the cost.
struct Reader {
    surface: TextAnalyzer,
    analyzer: TextAnalyzer,
    /// Each word as written (lowercase), as the id of what it reads as.
    seen: HashMap<String, u32>,
    /// Each word as read, by id.
    stems: HashMap<String, u32>,
}

impl Default for Reader {
    fn default() -> Self {
        Self {
            surface: surface(),
            analyzer: analyzer(),
            seen: HashMap::new(),
            stems: HashMap::new(),
        }
    }
}

impl Reader {
    fn read(&mut self, text: &str) -> Vec<u32> {
        let Self {
            surface,
            analyzer,
            seen,
            stems,
        } = self;
        let mut out = Vec::new();
        let mut stream = surface.token_stream(text);
        while stream.advance() {
            let word = &stream.token().text;
            let id = match seen.get(word.as_str()) {
                Some(&id) => id,
                None => {
                    // One word in, one out (or none: too long).
                    let Some(stem) = tokens(analyzer, word).pop() else {
                        continue;
                    };
                    let next = stems.len() as u32;
                    let id = *stems.entry(stem).or_insert(next);
                    seen.insert(word.clone(), id);
                    id
                }
            };
            out.push(id);
        }
        out
    }
}

/// Words as written, lowercase: the analyzer's first steps.
fn surface() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .build()
}

/// How often `words` occur in a row in `doc`.
fn occurrences(doc: &[u32], words: &[u32]) -> usize {
    if words.is_empty() || doc.len() < words.len() {
        return 0;
    }
    doc.windows(words.len()).filter(|w| *w == words).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asks(query: &str) -> Vec<String> {
        terms(query).into_iter().map(|t| t.ask).collect()
    }

    #[test]
    fn each_word_is_asked_by_the_start_its_forms_share() {
        assert_eq!(
            asks("When did Nate go camping, happy?"),
            ["when", "did", "nate", "go", "camp", "happ"]
        );
        // An irregular form is asked as its base form (Meilisearch's
        // synonyms give the other forms back).
        assert_eq!(asks("we went and won"), ["we", "go", "and", "win"]);
        // Twice the same word is one term, however it is written.
        assert_eq!(asks("camp camping"), ["camp"]);
        assert_eq!(asks("library libraries"), ["librar"]);
    }

    #[test]
    fn phrases_and_split_words_are_asked_in_quotes() {
        assert_eq!(
            asks(r#"open src/main.rs "connection refused" "unclosed"#),
            [
                "open",
                r#""src/main.rs""#,
                "src",
                "main",
                "rs",
                r#""connection refused""#,
                "unclos"
            ]
        );
        assert!(terms("?! ...").is_empty());
        let long: String = (0..40).map(|i| format!("word{i} ")).collect();
        assert_eq!(terms(&long).len(), MAX_TERMS);
    }

    #[test]
    fn the_every_word_query_has_no_syntax_but_phrases() {
        assert_eq!(
            every_word_query("rm -rf node_modules --force"),
            "rm rf node_modules force"
        );
        assert_eq!(
            every_word_query(r#"say "connection refused" now"#),
            r#"say "connection refused" now"#
        );
        // An unclosed quote quotes nothing; a lone dash is nothing.
        assert_eq!(
            every_word_query(r#"say "hello world - "#),
            "say hello world"
        );
        assert_eq!(every_word_query(r#""" -"#), "");
    }

    #[test]
    fn a_long_query_keeps_the_words_it_is_about() {
        let task = "I want to fix the flaky test in the scheduler so that it is not \
                    failing on the CI and then we can look at the retry backoff";
        assert_eq!(
            asks(task),
            ["want", "fix", "flak", "test", "schedul", "fail", "ci", "look", "retr", "backoff"]
        );
        // Sixteen terms or fewer are all searched, stopwords too.
        assert_eq!(asks("fix the flaky test"), ["fix", "the", "flak", "test"]);
    }

    fn answered(texts: &[&str], query: &str) -> Vec<usize> {
        let terms = terms(query);
        // Meilisearch returned every candidate for every term here.
        let answers: Vec<Answer> = terms
            .iter()
            .map(|_| Answer {
                total: texts.len() as u64,
                hits: (0..texts.len()).collect(),
            })
            .collect();
        rank(&terms, &answers, 1000, texts)
            .into_iter()
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn rarer_words_and_more_of_them_rank_first() {
        let texts = [
            "the the the the",
            "Caroline went to the support group",
            "the group met",
            "a campus tour", // a prefix match of "camp", not the word
            "we go camping by the lake",
        ];
        assert_eq!(answered(&texts, "Caroline support group"), [1, 2]);
        assert_eq!(answered(&texts, "go camping"), [4, 1]);
        assert!(answered(&texts, "camp").iter().all(|&i| i != 3));
    }

    #[test]
    fn a_phrase_needs_its_words_in_a_row() {
        let texts = ["refused the connection", "connection refused by host"];
        let only_phrase = {
            let t = terms(r#""connection refused""#);
            assert_eq!(t.len(), 1);
            let answers = [Answer {
                total: 1,
                hits: vec![0, 1],
            }];
            rank(&t, &answers, 100, &texts)
        };
        assert_eq!(only_phrase.len(), 1);
        assert_eq!(only_phrase[0].0, 1);
    }

    #[test]
    fn matches_of_the_prefix_that_are_other_words_lower_the_frequency() {
        // Meilisearch counted 100 chunks for "camp", but half of what it
        // returned were "campus": "camp" is rarer than its count says.
        let texts = ["camp", "campus", "camp", "campus", "lake"];
        let t = terms("camp lake");
        let answers = [
            Answer {
                total: 100,
                hits: vec![0, 1, 2, 3],
            },
            Answer {
                total: 50,
                hits: vec![4],
            },
        ];
        let ranked = rank(&t, &answers, 1000, &texts);
        // camp's frequency reads 50, lake's 50: the same weight.
        let score = |i: usize| ranked.iter().find(|r| r.0 == i).map(|r| r.1);
        let (camp, lake) = (score(0).unwrap_or(0.0), score(4).unwrap_or(-1.0));
        assert!((camp - lake).abs() < 1e-5, "{ranked:?}");
    }

    #[test]
    fn a_word_counts_at_least_the_candidates_holding_it() {
        // Every "lib" match Meilisearch returned was "library", but two
        // candidates (found by another word) hold "lib" itself: its
        // frequency is 2, not 0 (which would weigh it most of all).
        let texts = ["library shelf", "library shelf", "lib docs", "lib docs"];
        let t = terms("lib docs");
        let answers = [
            Answer {
                total: 100,
                hits: vec![0, 1],
            },
            Answer {
                total: 2,
                hits: vec![2, 3],
            },
        ];
        let ranked = rank(&t, &answers, 1000, &texts);
        assert_eq!(ranked.len(), 2, "{ranked:?}");
        // Both words are in 2 of 1000 chunks, and every chunk is as long
        // as the average: each word adds its idf.
        let idf = (1.0f32 + (1000.0 - 2.0 + 0.5) / 2.5).ln();
        assert!((ranked[0].1 - 2.0 * idf).abs() < 1e-3, "{ranked:?}");
    }
}
