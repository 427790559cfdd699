//! What a fact cost: the cost the agent recorded, else its tokens at the
//! list prices of a dated table. The built-in table is `shared/prices.toml`
//! (compiled in); central's config may give another in the same form
//! ([`PriceTable::parse`]), or its own prices of some models in place of
//! the table's ([`PriceTable::with_overrides`]).
//!
//! A model is found by its name as the agent wrote it, lowercased, without
//! a provider prefix up to the last `/` (`anthropic/claude-sonnet-4-5`):
//! first exactly (a table name or one of its aliases), then without one
//! date suffix: `-YYYYMMDD` (`claude-sonnet-4-5-20250929`), `-YYYY-MM-DD`
//! (`gpt-5-2025-08-07`) or `@YYYYMMDD` (Vertex). No other prefix matches:
//! `claude-sonnet-4-7` never takes `claude-sonnet-4`'s price.
//!
//! A fact gets no price (`None`), never a guess, when its model is unknown,
//! when it holds a kind of token its price has no rate for (a cache read
//! on a model whose cache price the table leaves out), or when its prompt
//! is past the model's long-context threshold and the table has no rates
//! for it, or it sums several requests whose prompts may be.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;

use super::{Tokens, UsageFact};

const BUILTIN: &str = include_str!("../../prices.toml");

/// USD per million tokens of each kind; `None` where the table gives no
/// price (the model has no such tokens, or its price is not known).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    pub input: f64,
    pub output: f64,
    pub cache_write_5m: Option<f64>,
    pub cache_write_1h: Option<f64>,
    pub cache_read: Option<f64>,
}

/// One model's list price.
#[derive(Debug, Clone, PartialEq)]
pub struct Price {
    /// The table's name for it.
    pub model: String,
    /// Where the prices were read.
    pub source: String,
    pub rates: Rates,
    /// Requests whose prompt ([`Tokens::prompt`]) is over this many tokens
    /// are billed at `long_rates`.
    pub long_above: Option<u64>,
    /// `None` with a `long_above`: such requests have no known price.
    pub long_rates: Option<Rates>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PriceError {
    #[error("price table is not TOML of the expected form: {0}")]
    Toml(String),
    #[error("price table's as_of {0:?} is not a date (YYYY-MM-DD)")]
    AsOf(String),
    #[error("price of {model}: {field} must be a finite number >= 0")]
    Rate { model: String, field: &'static str },
    #[error("price of {0}: long_context needs valid input and output, or no rates at all")]
    LongContext(String),
    #[error("price of {0}: no source")]
    NoSource(String),
    #[error("model name {0:?} is given twice")]
    Duplicate(String),
    #[error("price of {model}: {field} of {value} per million tokens is past any model's (at most {MAX_RATE})")]
    Absurd {
        model: String,
        field: &'static str,
        value: f64,
    },
    #[error("a price's model name must not be empty")]
    NoName,
}

/// The most a price given in place of the table's may ask per million
/// tokens of a kind (the dearest list price is a few hundred dollars).
pub const MAX_RATE: f64 = 10_000.0;

/// Dated list prices, by model.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceTable {
    as_of: String,
    prices: Vec<Price>,
    /// The models whose prices were given in place of the table's, by name.
    overridden: Vec<String>,
    /// Lowercased names and aliases -> index in `prices`.
    by_name: HashMap<String, usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    as_of: String,
    #[serde(default)]
    model: Vec<RawPrice>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrice {
    name: String,
    #[serde(default)]
    aliases: Vec<String>,
    source: String,
    input: Option<f64>,
    output: Option<f64>,
    cache_write_5m: Option<f64>,
    cache_write_1h: Option<f64>,
    cache_read: Option<f64>,
    long_context: Option<RawLong>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLong {
    above: u64,
    input: Option<f64>,
    output: Option<f64>,
    cache_write_5m: Option<f64>,
    cache_write_1h: Option<f64>,
    cache_read: Option<f64>,
}

/// Rates as written: `None` when the table gives both `input` and
/// `output` no value, an error when only one or a bad one.
fn read_rates(model: &str, given: [Option<f64>; 5]) -> Result<Option<Rates>, PriceError> {
    const FIELDS: [&str; 5] = [
        "input",
        "output",
        "cache_write_5m",
        "cache_write_1h",
        "cache_read",
    ];
    for (v, field) in given.iter().zip(FIELDS) {
        if v.is_some_and(|x| !x.is_finite() || x < 0.0) {
            return Err(PriceError::Rate {
                model: model.to_owned(),
                field,
            });
        }
    }
    let [input, output, cache_write_5m, cache_write_1h, cache_read] = given;
    match (input, output) {
        (Some(input), Some(output)) => Ok(Some(Rates {
            input,
            output,
            cache_write_5m,
            cache_write_1h,
            cache_read,
        })),
        (None, None) if given.iter().all(Option::is_none) => Ok(None),
        _ => Err(PriceError::Rate {
            model: model.to_owned(),
            field: "input and output",
        }),
    }
}

impl PriceTable {
    /// Reads a table in the form of `shared/prices.toml`.
    pub fn parse(text: &str) -> Result<PriceTable, PriceError> {
        let raw: RawTable = toml::from_str(text).map_err(|e| PriceError::Toml(e.to_string()))?;
        if !is_date(&raw.as_of) {
            return Err(PriceError::AsOf(raw.as_of));
        }
        let mut table = PriceTable {
            as_of: raw.as_of,
            prices: Vec::with_capacity(raw.model.len()),
            overridden: Vec::new(),
            by_name: HashMap::new(),
        };
        for p in raw.model {
            let name = p.name.trim().to_lowercase();
            if p.source.trim().is_empty() {
                return Err(PriceError::NoSource(name));
            }
            let given = [
                p.input,
                p.output,
                p.cache_write_5m,
                p.cache_write_1h,
                p.cache_read,
            ];
            let rates = read_rates(&name, given)?.ok_or_else(|| PriceError::Rate {
                model: name.clone(),
                field: "input and output",
            })?;
            let (long_above, long_rates) = match &p.long_context {
                Some(l) => {
                    let given = [
                        l.input,
                        l.output,
                        l.cache_write_5m,
                        l.cache_write_1h,
                        l.cache_read,
                    ];
                    let long = read_rates(&name, given)
                        .map_err(|_| PriceError::LongContext(name.clone()))?;
                    (Some(l.above), long)
                }
                None => (None, None),
            };
            let at = table.prices.len();
            for alias in std::iter::once(&name).chain(&p.aliases) {
                let alias = alias.trim().to_lowercase();
                if table.by_name.insert(alias.clone(), at).is_some() {
                    return Err(PriceError::Duplicate(alias));
                }
            }
            table.prices.push(Price {
                model: name,
                source: p.source,
                rates,
                long_above,
                long_rates,
            });
        }
        Ok(table)
    }

    /// The table compiled in (`shared/prices.toml`); empty, dated
    /// `0000-00-00`, if it ever failed to parse (a test keeps it parsing).
    pub fn builtin() -> &'static PriceTable {
        static TABLE: OnceLock<PriceTable> = OnceLock::new();
        TABLE.get_or_init(|| {
            PriceTable::parse(BUILTIN).unwrap_or_else(|_| PriceTable {
                as_of: "0000-00-00".to_owned(),
                prices: Vec::new(),
                overridden: Vec::new(),
                by_name: HashMap::new(),
            })
        })
    }

    /// The day the prices were read (`YYYY-MM-DD`).
    pub fn as_of(&self) -> &str {
        &self.as_of
    }

    pub fn prices(&self) -> &[Price] {
        &self.prices
    }

    /// A digest of all that prices a fact (the date, the prices, every name
    /// and alias): tables with the same fingerprint price every fact alike.
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut names: Vec<(&String, &usize)> = self.by_name.iter().collect();
        names.sort_unstable();
        let digest = Sha256::digest(format!("{}\n{:?}\n{names:?}", self.as_of, self.prices));
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The models priced by [`PriceTable::with_overrides`], by name.
    pub fn overridden(&self) -> &[String] {
        &self.overridden
    }

    /// This table with `overrides` (a model's name, and its rates per
    /// million tokens; a provider prefix up to a `/` is dropped, as
    /// `price_of` drops it) in place of its prices: a model the table
    /// names (or an alias of it) takes the rates given, flat at any prompt length; a
    /// model it does not is added. Rates must be finite, at least 0 and at
    /// most [`MAX_RATE`].
    pub fn with_overrides<'a>(
        &self,
        overrides: impl IntoIterator<Item = (&'a str, Rates)>,
    ) -> Result<PriceTable, PriceError> {
        let mut table = self.clone();
        for (name, rates) in overrides {
            // As `price_of` looks names up: no provider prefix.
            let name = name.trim().to_lowercase();
            let name = name.rsplit('/').next().unwrap_or_default().to_owned();
            if name.is_empty() {
                return Err(PriceError::NoName);
            }
            let given = [
                ("input", Some(rates.input)),
                ("output", Some(rates.output)),
                ("cache_write_5m", rates.cache_write_5m),
                ("cache_write_1h", rates.cache_write_1h),
                ("cache_read", rates.cache_read),
            ];
            for (field, value) in given {
                let Some(value) = value else { continue };
                if !value.is_finite() || value < 0.0 {
                    return Err(PriceError::Rate { model: name, field });
                }
                if value > MAX_RATE {
                    return Err(PriceError::Absurd {
                        model: name,
                        field,
                        value,
                    });
                }
            }
            let price = Price {
                model: name.clone(),
                source: "central's config".to_owned(),
                rates,
                long_above: None,
                long_rates: None,
            };
            match table.by_name.get(&name) {
                Some(&at) => {
                    table.prices[at] = Price {
                        model: table.prices[at].model.clone(),
                        ..price
                    }
                }
                None => {
                    table.by_name.insert(name.clone(), table.prices.len());
                    table.prices.push(price);
                }
            }
            table.overridden.push(name);
        }
        table.overridden.sort();
        table.overridden.dedup();
        Ok(table)
    }

    /// The price of `model` as an agent named it (see the module
    /// documentation for how names match).
    pub fn price_of(&self, model: &str) -> Option<&Price> {
        let name = model.trim().to_lowercase();
        let name = name.rsplit('/').next().unwrap_or(&name);
        let at = self
            .by_name
            .get(name)
            .or_else(|| self.by_name.get(without_date(name)?))?;
        self.prices.get(*at)
    }
}

impl Default for PriceTable {
    /// The built-in table.
    fn default() -> Self {
        PriceTable::builtin().clone()
    }
}

/// The built-in table's price of `model`.
pub fn price_of(model: &str) -> Option<&'static Price> {
    PriceTable::builtin().price_of(model)
}

/// What `fact` cost in USD: the cost the agent recorded, else its tokens
/// at `table`'s prices, else `None` (see the module documentation).
pub fn cost(fact: &UsageFact, table: &PriceTable) -> Option<f64> {
    if let Some(usd) = fact.cost_usd {
        return Some(usd);
    }
    if fact.tokens.is_zero() {
        return Some(0.0);
    }
    let price = table.price_of(fact.model.as_deref()?)?;
    let rates = match price.long_above {
        Some(above) if fact.tokens.prompt() > above => match fact.n_requests {
            Some(1) => price.long_rates?,
            // Several requests, or not known how many: which were long
            // cannot be told.
            _ => return None,
        },
        _ => price.rates,
    };
    priced(&fact.tokens, &rates)
}

fn priced(t: &Tokens, r: &Rates) -> Option<f64> {
    let part = |n: u64, rate: Option<f64>| match (n, rate) {
        (0, _) => Some(0.0),
        (n, Some(rate)) => Some(n as f64 * rate),
        (_, None) => None,
    };
    let sum = part(t.input, Some(r.input))?
        + part(t.output, Some(r.output))?
        + part(t.cache_write_5m, r.cache_write_5m)?
        + part(t.cache_write_1h, r.cache_write_1h)?
        + part(t.cache_read, r.cache_read)?;
    Some(sum / 1_000_000.0)
}

/// `name` without one date suffix, if it has one.
fn without_date(name: &str) -> Option<&str> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    if let Some((head, date)) = name.rsplit_once(['-', '@']) {
        if date.len() == 8 && digits(date) {
            return Some(head);
        }
    }
    // -YYYY-MM-DD
    let cut = name.len().checked_sub(11)?;
    let (head, date) = name.split_at_checked(cut)?;
    let date = date.strip_prefix('-')?;
    is_date(date).then_some(head)
}

fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

#[cfg(test)]
mod tests {
    use super::super::{Merge, Tokens, UsageFact};
    use super::*;

    fn fact(model: &str, tokens: [u64; 5], n_requests: Option<u64>) -> UsageFact {
        let [input, output, cache_write_5m, cache_write_1h, cache_read] = tokens;
        UsageFact {
            key: "k".into(),
            merge: Merge::Last,
            model: Some(model.into()),
            time: None,
            tokens: Tokens {
                input,
                output,
                cache_write_5m,
                cache_write_1h,
                cache_read,
            },
            n_requests,
            cost_usd: None,
        }
    }

    fn close(a: Option<f64>, b: Option<f64>) -> bool {
        match (a, b) {
            (Some(a), Some(b)) => (a - b).abs() < 1e-9,
            (a, b) => a == b,
        }
    }

    #[test]
    fn the_builtin_table_parses_is_dated_and_has_a_source_for_every_model() {
        let table = PriceTable::parse(BUILTIN).expect("shared/prices.toml parses");
        assert_eq!(table.as_of(), "2026-11-28");
        assert_eq!(PriceTable::builtin(), &table);
        assert!(table.prices().len() >= 20);
        for p in table.prices() {
            assert!(
                p.source.starts_with("https://"),
                "{}: {}",
                p.model,
                p.source
            );
        }
    }

    #[test]
    fn names_match_exactly_then_without_a_date_and_provider() {
        let cases = [
            ("claude-sonnet-4-5", Some("claude-sonnet-4-5")),
            ("claude-sonnet-4-5-20250929", Some("claude-sonnet-4-5")),
            ("Claude-Sonnet-4-5@20250929", Some("claude-sonnet-4-5")),
            ("anthropic/claude-sonnet-4-5", Some("claude-sonnet-4-5")),
            ("claude-haiku-4-5-20251001", Some("claude-haiku-4-5")),
            ("claude-haiku-4.5", Some("claude-haiku-4-5")),
            ("claude-opus-4-20250514", Some("claude-opus-4")),
            ("claude-opus-4-6", Some("claude-opus-4-6")),
            ("gpt-5.5", Some("gpt-5.5")),
            ("gpt-5.4-2026-03-05", Some("gpt-5.4")),
            ("gemini-2.5-pro", Some("gemini-2.5-pro")),
            // No guesses.
            ("claude-sonnet-4-7", None),
            ("claude-opus-4.7-1m-internal", None),
            ("gpt-5.5-mini", None),
            ("gemini-3-pro", None),
            ("lm_studio/qwen3.6-35b-a3b", None),
            ("claude-sonnet-4-5-2025", None),
            ("", None),
        ];
        for (model, want) in cases {
            let got = price_of(model).map(|p| p.model.as_str());
            assert_eq!(got, want, "{model}");
        }
    }

    #[test]
    fn costs_table() {
        let table = PriceTable::builtin();
        let cases: &[(UsageFact, Option<f64>)] = &[
            // Opus 4.6: $5 in, $25 out, $6.25 / $10 cache writes, $0.50 reads.
            (
                fact(
                    "claude-opus-4-6",
                    [1_000_000, 1_000_000, 1_000_000, 1_000_000, 1_000_000],
                    Some(1),
                ),
                Some(5.0 + 25.0 + 6.25 + 10.0 + 0.5),
            ),
            (
                fact(
                    "claude-haiku-4-5-20251001",
                    [3, 12, 0, 2140, 18377],
                    Some(1),
                ),
                Some((3.0 * 1.0 + 12.0 * 5.0 + 2140.0 * 2.0 + 18377.0 * 0.1) / 1e6),
            ),
            (fact("unknown-model", [1, 1, 0, 0, 0], Some(1)), None),
            (fact("unknown-model", [0; 5], Some(1)), Some(0.0)),
            // Gemini 2.5 Flash: no confirmed cache price, so none for reads.
            (
                fact("gemini-2.5-flash", [1000, 10, 0, 0, 0], Some(1)),
                Some((300.0 + 25.0) / 1e6),
            ),
            (fact("gemini-2.5-flash", [1000, 10, 0, 0, 5], Some(1)), None),
            // GPT-5.5 past 272K of prompt: the long-context rates, for one
            // request; not for several.
            (
                fact("gpt-5.5", [100_000, 1000, 0, 0, 200_000], Some(1)),
                Some((100_000.0 * 10.0 + 1000.0 * 45.0 + 200_000.0 * 1.0) / 1e6),
            ),
            (fact("gpt-5.5", [100_000, 1000, 0, 0, 200_000], None), None),
            (
                fact("gpt-5.5", [100_000, 1000, 0, 0, 100_000], None),
                Some((100_000.0 * 5.0 + 1000.0 * 30.0 + 100_000.0 * 0.5) / 1e6),
            ),
            // Sonnet 4.5 past 200K: no confirmed long-context price.
            (
                fact("claude-sonnet-4-5", [250_000, 10, 0, 0, 0], Some(1)),
                None,
            ),
        ];
        for (f, want) in cases {
            let got = cost(f, table);
            assert!(close(got, *want), "{f:?}: {got:?} != {want:?}");
        }
        let mut recorded = fact("unknown-model", [1, 1, 0, 0, 0], Some(1));
        recorded.cost_usd = Some(0.25);
        assert_eq!(cost(&recorded, table), Some(0.25));
        let mut nameless = fact("x", [1, 1, 0, 0, 0], Some(1));
        nameless.model = None;
        assert_eq!(cost(&nameless, table), None);
    }

    #[test]
    fn prices_given_in_place_of_the_tables_replace_or_add_and_absurd_ones_are_refused() {
        let flat = |input, output| Rates {
            input,
            output,
            cache_write_5m: None,
            cache_write_1h: None,
            cache_read: Some(0.1),
        };
        let builtin = PriceTable::builtin();
        let table = builtin
            .with_overrides([
                ("Claude-Opus-4-6", flat(1.0, 2.0)),
                ("my-local-model", flat(0.0, 0.0)),
            ])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(table.as_of(), builtin.as_of());
        assert_eq!(table.overridden(), ["claude-opus-4-6", "my-local-model"]);
        // The table's model, by a dated name too, at the rates given.
        let opus = table.price_of("claude-opus-4-6-20260101");
        assert_eq!(opus.map(|p| p.rates), Some(flat(1.0, 2.0)));
        assert_eq!(opus.map(|p| p.source.as_str()), Some("central's config"));
        let fact = |model: &str| UsageFact {
            key: String::new(),
            merge: super::super::Merge::Each,
            model: Some(model.to_owned()),
            time: None,
            tokens: Tokens {
                input: 1_000_000,
                output: 1_000_000,
                ..Tokens::default()
            },
            n_requests: Some(1),
            cost_usd: None,
        };
        assert!(close(cost(&fact("claude-opus-4-6"), &table), Some(3.0)));
        assert!(close(cost(&fact("my-local-model"), &table), Some(0.0)));
        assert_eq!(cost(&fact("my-local-model"), builtin), None);
        // Others keep the table's prices.
        assert_eq!(
            table.price_of("claude-sonnet-4-5"),
            builtin.price_of("claude-sonnet-4-5")
        );
        for (rates, why) in [
            (flat(-1.0, 2.0), "input must be"),
            (flat(f64::NAN, 2.0), "input must be"),
            (flat(1.0, f64::INFINITY), "output must be"),
            (flat(1.0, 1e12), "past any model's"),
        ] {
            let err = builtin
                .with_overrides([("m", rates)])
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(why), "{rates:?}: {err}");
        }
        assert_eq!(
            builtin.with_overrides([(" ", flat(1.0, 1.0))]).err(),
            Some(PriceError::NoName)
        );
    }

    #[test]
    fn a_table_from_config_replaces_the_builtin_and_bad_ones_say_why() {
        let table = PriceTable::parse(
            r#"
            as_of = "2027-01-02"
            [[model]]
            name = "my-model"
            aliases = ["mine"]
            source = "https://example.com/prices"
            input = 1.0
            output = 2.0
            "#,
        )
        .expect("parses");
        assert_eq!(table.as_of(), "2027-01-02");
        assert_eq!(
            table.price_of("MINE").map(|p| p.model.as_str()),
            Some("my-model")
        );
        assert_eq!(table.price_of("claude-opus-4-6"), None);

        let bad = [
            ("as_of = \"2027-1-2\"", "not a date"),
            ("as_of = \"2027-01-02\"\nbogus = 1", "expected form"),
            ("as_of = \"2027-01-02\"\n[[model]]\nname = \"a\"\nsource = \"s\"\ninput = 1.0", "input and output"),
            ("as_of = \"2027-01-02\"\n[[model]]\nname = \"a\"\nsource = \"s\"\ninput = -1.0\noutput = 1.0", "input must be"),
            ("as_of = \"2027-01-02\"\n[[model]]\nname = \"a\"\nsource = \" \"\ninput = 1.0\noutput = 1.0", "no source"),
            ("as_of = \"2027-01-02\"\n[[model]]\nname = \"a\"\nsource = \"s\"\ninput = 1.0\noutput = 1.0\n[[model]]\nname = \"b\"\naliases = [\"A\"]\nsource = \"s\"\ninput = 1.0\noutput = 1.0", "twice"),
            ("as_of = \"2027-01-02\"\n[[model]]\nname = \"a\"\nsource = \"s\"\ninput = 1.0\noutput = 1.0\nlong_context = { above = 5, input = 2.0 }", "long_context"),
        ];
        for (text, says) in bad {
            let err = PriceTable::parse(text).expect_err(text).to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
