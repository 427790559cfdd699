//! English irregular forms to their base form, ahead of the stemmer: "won"
//! is indexed and searched as "win", "went" and "gone" as "go", "children"
//! as "child". The Snowball stemmer only cuts suffixes, so it leaves "When
//! did Nate win?" and "I won the tournament" without a word in common.
//!
//! The list leaves out forms that are more often another word in the text
//! kith indexes: "bit" (64-bit), "left" (left join), "saw", "lay", "rose",
//! "ground", "wound", "spoke", "stole", "bore", "led", "shot", "fell", and
//! the auxiliaries (be, have, do), which carry nothing to search for.

use std::collections::HashMap;

use tantivy::tokenizer::{Token, TokenFilter, TokenStream, Tokenizer};

/// One list, read two ways: `base_form`, a `match` on strings (next to
/// nothing per token, measured against tantivy's tokenizer and stemmer
/// alone, within the noise), and `FORMS`, for a backend that takes them as
/// synonyms.
macro_rules! forms {
    ($(($form:literal, $base:literal)),* $(,)?) => {
        /// (irregular form, base form) pairs.
        pub(crate) const FORMS: &[(&str, &str)] = &[$(($form, $base)),*];

        /// The base form of an irregular `word` (lowercase), if it is one.
        pub(crate) fn base_form(word: &str) -> Option<&'static str> {
            Some(match word {
                $($form => $base,)*
                _ => return None,
            })
        }
    };
}

forms![
    ("ate", "eat"),
    ("awoke", "awake"),
    ("awoken", "awake"),
    ("became", "become"),
    ("began", "begin"),
    ("begun", "begin"),
    ("bent", "bend"),
    ("bitten", "bite"),
    ("blew", "blow"),
    ("blown", "blow"),
    ("bought", "buy"),
    ("broke", "break"),
    ("broken", "break"),
    ("brought", "bring"),
    ("built", "build"),
    ("burnt", "burn"),
    ("came", "come"),
    ("caught", "catch"),
    ("children", "child"),
    ("chose", "choose"),
    ("chosen", "choose"),
    ("clung", "cling"),
    ("dealt", "deal"),
    ("drank", "drink"),
    ("drawn", "draw"),
    ("dreamt", "dream"),
    ("drew", "draw"),
    ("driven", "drive"),
    ("drove", "drive"),
    ("dug", "dig"),
    ("eaten", "eat"),
    ("fed", "feed"),
    ("feet", "foot"),
    ("felt", "feel"),
    ("flew", "fly"),
    ("flown", "fly"),
    ("forgave", "forgive"),
    ("forgiven", "forgive"),
    ("forgot", "forget"),
    ("forgotten", "forget"),
    ("fought", "fight"),
    ("found", "find"),
    ("froze", "freeze"),
    ("frozen", "freeze"),
    ("gave", "give"),
    ("given", "give"),
    ("gone", "go"),
    ("got", "get"),
    ("gotten", "get"),
    ("grew", "grow"),
    ("grown", "grow"),
    ("heard", "hear"),
    ("held", "hold"),
    ("hid", "hide"),
    ("hidden", "hide"),
    ("hung", "hang"),
    ("kept", "keep"),
    ("knew", "know"),
    ("known", "know"),
    ("learnt", "learn"),
    ("lent", "lend"),
    ("lit", "light"),
    ("lost", "lose"),
    ("made", "make"),
    ("meant", "mean"),
    ("men", "man"),
    ("met", "meet"),
    ("mice", "mouse"),
    ("paid", "pay"),
    ("ran", "run"),
    ("rang", "ring"),
    ("ridden", "ride"),
    ("risen", "rise"),
    ("rode", "ride"),
    ("rung", "ring"),
    ("said", "say"),
    ("sang", "sing"),
    ("sat", "sit"),
    ("seen", "see"),
    ("sent", "send"),
    ("shaken", "shake"),
    ("shook", "shake"),
    ("shown", "show"),
    ("slept", "sleep"),
    ("sold", "sell"),
    ("sought", "seek"),
    ("spent", "spend"),
    ("stood", "stand"),
    ("stuck", "stick"),
    ("sung", "sing"),
    ("swam", "swim"),
    ("swum", "swim"),
    ("taken", "take"),
    ("taught", "teach"),
    ("teeth", "tooth"),
    ("thought", "think"),
    ("threw", "throw"),
    ("thrown", "throw"),
    ("told", "tell"),
    ("took", "take"),
    ("tore", "tear"),
    ("torn", "tear"),
    ("understood", "understand"),
    ("went", "go"),
    ("woke", "wake"),
    ("woken", "wake"),
    ("women", "woman"),
    ("won", "win"),
    ("wore", "wear"),
    ("worn", "wear"),
    ("written", "write"),
    ("wrote", "write"),
];

/// Each word of a base form's family (the base form and its irregular
/// forms) as a synonym of every other, as the embedded index reads them as
/// one word ("went" finds "go" and "gone", "go" finds both): for
/// Meilisearch, which stems nothing and reads synonyms at query time.
pub(crate) fn synonyms() -> HashMap<String, Vec<String>> {
    let mut families: HashMap<&str, Vec<&str>> = HashMap::new();
    for (form, base) in FORMS {
        families
            .entry(base)
            .or_insert_with(|| vec![base])
            .push(form);
    }
    let mut out = HashMap::new();
    for family in families.values() {
        for word in family {
            let mut others: Vec<String> = family
                .iter()
                .filter(|w| *w != word)
                .map(|w| (*w).to_owned())
                .collect();
            others.sort();
            out.insert((*word).to_owned(), others);
        }
    }
    out
}

/// The token filter: each token in the table becomes its base form.
/// Tokens are expected lowercase.
#[derive(Clone, Copy, Default)]
pub(crate) struct BaseForm;

impl TokenFilter for BaseForm {
    type Tokenizer<T: Tokenizer> = BaseFormFilter<T>;

    fn transform<T: Tokenizer>(self, inner: T) -> BaseFormFilter<T> {
        BaseFormFilter { inner }
    }
}

#[derive(Clone)]
pub(crate) struct BaseFormFilter<T> {
    inner: T,
}

impl<T: Tokenizer> Tokenizer for BaseFormFilter<T> {
    type TokenStream<'a> = BaseFormStream<T::TokenStream<'a>>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        BaseFormStream {
            tail: self.inner.token_stream(text),
        }
    }
}

pub(crate) struct BaseFormStream<T> {
    tail: T,
}

impl<T: TokenStream> TokenStream for BaseFormStream<T> {
    fn advance(&mut self) -> bool {
        if !self.tail.advance() {
            return false;
        }
        let token = self.tail.token_mut();
        if let Some(base) = base_form(&token.text) {
            token.text.clear();
            token.text.push_str(base);
        }
        true
    }

    fn token(&self) -> &Token {
        self.tail.token()
    }

    fn token_mut(&mut self) -> &mut Token {
        self.tail.token_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn irregular_forms_have_a_base_form_and_other_words_none() {
        assert_eq!(base_form("won"), Some("win"));
        assert_eq!(base_form("went"), Some("go"));
        assert_eq!(base_form("written"), Some("write"));
        assert_eq!(base_form("children"), Some("child"));
        for word in [
            "win", "window", "left", "bit", "saw", "was", "had", "did", "",
        ] {
            assert_eq!(base_form(word), None, "{word}");
        }
    }

    /// Meilisearch's synonyms join a whole family, as the index does.
    #[test]
    fn synonyms_join_every_form_of_a_family() {
        let s = synonyms();
        assert_eq!(s["went"], ["go", "gone"]);
        assert_eq!(s["go"], ["gone", "went"]);
        assert_eq!(s["won"], ["win"]);
        assert!(!s.contains_key("window"));
        assert!(!s.contains_key("left"));
    }
}
