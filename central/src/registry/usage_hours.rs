//! `usage_hour_sums`: the counted usage facts summed by conversation and UTC
//! hour (and within those by agent, model, machine and project), which is
//! what a report reads instead of every fact: a year of a heavy user's
//! million responses is some tens of thousands of rows.
//!
//! A row keeps what a report needs to cut its facts exactly as it would
//! cut them one by one: the first and last fact's time (a billing block's
//! gap of five hours is measured between them), and, when its facts fall
//! in more than one quarter hour, each quarter's figures (every time
//! zone's day starts on a quarter hour, so a day, week or month splits a
//! row only between quarters). The facts at exactly an hour's first
//! millisecond are a row of their own (`edge`), so a billing block's five
//! hours, which end on the hour, never end inside a row.
//!
//! A fact is counted (`usage.counted`) unless another of its owner's
//! conversations holds the same response from a later run (see
//! `registry::usage`). Every write of facts names the hours and the
//! response groups it touched ([`Touched`]); [`Touched::settle`] counts
//! those groups again and sums those hours again from their facts, in the
//! same transaction, so the rollup is always its facts' sum.

use std::collections::{BTreeMap, BTreeSet};

use kith_shared::usage::Tokens;
use rusqlite::{params, Transaction};

use super::to_i64;
use crate::error::Result;

pub(super) const SCHEMA: &str = "
-- The layout before the sums were one column.
DROP TABLE IF EXISTS usage_hours;
CREATE TABLE IF NOT EXISTS usage_hour_sums (
    user_id TEXT NOT NULL,
    conversation TEXT NOT NULL,
    -- The UTC hour's first millisecond since the epoch.
    hour_ms INTEGER NOT NULL,
    -- 1 for the facts at exactly hour_ms.
    edge INTEGER NOT NULL,
    agent_runtime TEXT NOT NULL,
    model TEXT,
    machine TEXT NOT NULL,
    project TEXT,
    -- The first and last fact's time, the figures at the price table in
    -- effect (`usage_prices`), and each quarter's start and figures when
    -- the facts fall in more than one (`encode`): one column, which a
    -- report reads at the cost of one.
    sums BLOB NOT NULL
);
-- A report reads a member's hours from this index alone (every column it
-- reads is in it): no lookup of each row in the table.
CREATE INDEX IF NOT EXISTS usage_hour_sums_report ON usage_hour_sums (user_id, hour_ms, edge,
    agent_runtime, model, sums, conversation, machine, project);
CREATE INDEX IF NOT EXISTS usage_hour_sums_conversation ON usage_hour_sums (conversation,
    hour_ms);
CREATE TABLE IF NOT EXISTS usage_prices (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    -- `PriceTable::fingerprint` of the table `usage.price_usd` was priced
    -- at, with the sums' `LAYOUT`.
    fingerprint TEXT NOT NULL
);
";

/// What `usage_prices.fingerprint` adds to the price table's: the sums are
/// summed again when it changes, as when the prices do.
pub(super) const LAYOUT: &str = "sums-1";

pub(super) const HOUR_MS: i64 = 3_600_000;
const QUARTER_MS: i64 = 900_000;

/// The start of the UTC hour `at_ms` falls in.
pub(super) fn hour_of(at_ms: i64) -> i64 {
    at_ms.div_euclid(HOUR_MS) * HOUR_MS
}

/// Tokens and what they cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Figures {
    pub tokens: Tokens,
    /// At the price table in effect: what the agents recorded, else list
    /// prices.
    pub cost_usd: f64,
    /// Facts with no price, whose cost is not in `cost_usd`.
    pub n_unpriced: u64,
}

impl Figures {
    /// One fact's: its tokens, and its price (`None`: it has none).
    pub fn of(tokens: Tokens, price: Option<f64>) -> Self {
        Self {
            tokens,
            cost_usd: price.unwrap_or(0.0),
            n_unpriced: u64::from(price.is_none()),
        }
    }

    pub fn add(&mut self, other: &Figures) {
        self.tokens = self.tokens.saturating_add(other.tokens);
        self.cost_usd += other.cost_usd;
        self.n_unpriced = self.n_unpriced.saturating_add(other.n_unpriced);
    }
}

/// A counted fact, as an hour's row is summed from.
pub(super) struct Fact {
    pub at_ms: i64,
    pub agent_runtime: String,
    pub model: Option<String>,
    pub machine: String,
    pub project: Option<String>,
    pub figures: Figures,
}

/// What a row of `usage_hour_sums` sums, within its conversation and hour.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    edge: bool,
    agent_runtime: String,
    model: Option<String>,
    machine: String,
    project: Option<String>,
}

/// A row being summed.
#[derive(Default)]
struct Sum {
    figures: Figures,
    first_ms: i64,
    last_ms: i64,
    /// By quarter start.
    quarters: BTreeMap<i64, Figures>,
}

/// One row's sums as a report reads them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Sums {
    pub figures: Figures,
    pub first_ms: i64,
    pub last_ms: i64,
    /// Each quarter's start and figures, when the facts fall in more than
    /// one.
    pub quarters: Vec<(i64, Figures)>,
}

/// Token counts as five little-endian numbers.
pub(super) fn put_tokens(out: &mut Vec<u8>, t: &Tokens) {
    for n in [
        t.input,
        t.output,
        t.cache_write_5m,
        t.cache_write_1h,
        t.cache_read,
    ] {
        out.extend_from_slice(&to_i64(n).to_le_bytes());
    }
}

/// The little-endian number at `i` (of 8 bytes each) in `bytes`, which
/// holds it.
fn number(bytes: &[u8], i: usize) -> i64 {
    let mut b = [0; 8];
    b.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
    i64::from_le_bytes(b)
}

/// What `put_tokens` wrote, when `bytes` is exactly that.
pub(super) fn get_tokens(bytes: &[u8]) -> Option<Tokens> {
    let n = |i| count(number(bytes, i));
    (bytes.len() == 40).then(|| Tokens {
        input: n(0),
        output: n(1),
        cache_write_5m: n(2),
        cache_write_1h: n(3),
        cache_read: n(4),
    })
}

/// Figures as eight little-endian numbers after `lead`: the five token
/// counts, facts unpriced, the cost as f64 bits.
fn put_figures(out: &mut Vec<u8>, lead: i64, f: &Figures) {
    out.extend_from_slice(&lead.to_le_bytes());
    put_tokens(out, &f.tokens);
    out.extend_from_slice(&to_i64(f.n_unpriced).to_le_bytes());
    out.extend_from_slice(&f.cost_usd.to_bits().to_le_bytes());
}

/// What `put_figures` wrote (64 bytes): the lead and the figures.
fn get_figures(entry: &[u8]) -> (i64, Figures) {
    (
        number(entry, 0),
        Figures {
            tokens: get_tokens(&entry[8..48]).unwrap_or_default(),
            n_unpriced: count(number(entry, 6)),
            cost_usd: f64::from_bits(number(entry, 7) as u64),
        },
    )
}

/// A row's `sums` as stored: 64 bytes of the first time and the figures,
/// 8 of the last time, then 64 for each quarter (its start and figures).
fn encode(sums: &Sum) -> Vec<u8> {
    let mut out = Vec::with_capacity(72 + sums.quarters.len() * 64);
    put_figures(&mut out, sums.first_ms, &sums.figures);
    out.extend_from_slice(&sums.last_ms.to_le_bytes());
    if sums.quarters.len() > 1 {
        for (start, f) in &sums.quarters {
            put_figures(&mut out, *start, f);
        }
    }
    out
}

/// What `encode` wrote, its quarters only when asked; `None` for a blob too
/// short to hold the sums, and a quarter cut short is left out.
pub(super) fn decode(bytes: &[u8], with_quarters: bool) -> Option<Sums> {
    let (head, quarters) = (bytes.get(..72)?, &bytes[72..]);
    let (first_ms, figures) = get_figures(&head[..64]);
    Some(Sums {
        figures,
        first_ms,
        last_ms: number(head, 8),
        quarters: match with_quarters {
            true => quarters.chunks_exact(64).map(get_figures).collect(),
            false => Vec::new(),
        },
    })
}

/// Writes the rows of `conversation`'s `facts` (of one owner), summed by
/// hour, after the rows they replace were deleted.
fn insert_sums(
    tx: &Transaction<'_>,
    user_id: &str,
    conversation: &str,
    facts: impl IntoIterator<Item = Fact>,
) -> Result<()> {
    let mut sums: BTreeMap<(i64, Key), Sum> = BTreeMap::new();
    for f in facts {
        let hour = hour_of(f.at_ms);
        let key = Key {
            edge: f.at_ms == hour,
            agent_runtime: f.agent_runtime,
            model: f.model,
            machine: f.machine,
            project: f.project,
        };
        let sum = sums.entry((hour, key)).or_insert_with(|| Sum {
            first_ms: f.at_ms,
            last_ms: f.at_ms,
            ..Sum::default()
        });
        sum.figures.add(&f.figures);
        sum.first_ms = sum.first_ms.min(f.at_ms);
        sum.last_ms = sum.last_ms.max(f.at_ms);
        sum.quarters
            .entry(f.at_ms.div_euclid(QUARTER_MS) * QUARTER_MS)
            .or_default()
            .add(&f.figures);
    }
    let mut stmt = tx.prepare_cached(
        "INSERT INTO usage_hour_sums (user_id, conversation, hour_ms, edge, agent_runtime, model,
             machine, project, sums)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?;
    for ((hour, key), sum) in sums {
        stmt.execute(params![
            user_id,
            conversation,
            hour,
            key.edge,
            key.agent_runtime,
            key.model,
            key.machine,
            key.project,
            encode(&sum),
        ])?;
    }
    Ok(())
}

/// The counted facts of `usage` rows matching `clause` (over `usage`),
/// each with its owner and conversation.
const FACTS: &str = "SELECT user_id, conversation, at_ms, agent_runtime, model, machine, project,
    input_tokens, output_tokens, cache_write_5m_tokens, cache_write_1h_tokens,
    cache_read_tokens, price_usd FROM usage WHERE counted = 1";

/// The five token counts at `first` and the four after.
pub(super) fn tokens_at(r: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<Tokens> {
    Ok(Tokens {
        input: count(r.get(first)?),
        output: count(r.get(first + 1)?),
        cache_write_5m: count(r.get(first + 2)?),
        cache_write_1h: count(r.get(first + 3)?),
        cache_read: count(r.get(first + 4)?),
    })
}

/// A stored count; a negative one (never written) reads as 0.
pub(super) fn count(n: i64) -> u64 {
    n.max(0) as u64
}

fn fact_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, String, Fact)> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        Fact {
            at_ms: r.get(2)?,
            agent_runtime: r.get(3)?,
            model: r.get(4)?,
            machine: r.get(5)?,
            project: r.get(6)?,
            figures: Figures::of(tokens_at(r, 7)?, r.get(12)?),
        },
    ))
}

/// A copy of a response, as counting reads it.
struct CopyRow {
    id: i64,
    conversation: String,
    run: String,
    at_ms: i64,
    counted: bool,
}

/// What a write of facts touched: the hours to sum again, and the groups
/// of copies of one response (owner, `dedupe`) to count again.
#[derive(Default)]
pub(super) struct Touched {
    hours: BTreeSet<(String, i64)>,
    groups: BTreeSet<(String, String)>,
}

impl Touched {
    /// A fact of `user_id`'s `conversation` at `at_ms` with `dedupe` was
    /// written, changed or deleted.
    pub(super) fn fact(&mut self, user_id: &str, conversation: &str, at_ms: i64, dedupe: &str) {
        self.hours.insert((conversation.to_owned(), hour_of(at_ms)));
        self.groups.insert((user_id.to_owned(), dedupe.to_owned()));
    }

    /// Counts each touched group's copies again (a copy counts unless
    /// another conversation's copy comes from a later run), then sums each
    /// touched hour again, of the hours whose counts changed too.
    pub(super) fn settle(mut self, tx: &Transaction<'_>) -> Result<()> {
        // Each member's touched groups' copies, in one read.
        let mut by_user: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (user, dedupe) in &self.groups {
            by_user.entry(user).or_default().push(dedupe);
        }
        let mut flipped = Vec::new();
        for (user, dedupes) in by_user {
            let mut groups: BTreeMap<String, Vec<CopyRow>> = BTreeMap::new();
            let list = serde_json::to_string(&dedupes)?;
            let mut stmt = tx.prepare_cached(
                "SELECT id, conversation, run_id, at_ms, counted, dedupe FROM usage
                 WHERE user_id = ?1 AND dedupe IN (SELECT value FROM json_each(?2))",
            )?;
            let mut rows = stmt.query(params![user, list])?;
            while let Some(r) = rows.next()? {
                groups.entry(r.get(5)?).or_default().push(CopyRow {
                    id: r.get(0)?,
                    conversation: r.get(1)?,
                    run: r.get(2)?,
                    at_ms: r.get(3)?,
                    counted: r.get(4)?,
                });
            }
            for copies in groups.values() {
                for copy in copies {
                    let now = !copies
                        .iter()
                        .any(|n| n.conversation != copy.conversation && n.run > copy.run);
                    if now != copy.counted {
                        flipped.push((copy.id, now));
                        self.hours
                            .insert((copy.conversation.clone(), hour_of(copy.at_ms)));
                    }
                }
            }
        }
        for (id, now) in flipped {
            tx.prepare_cached("UPDATE usage SET counted = ?2 WHERE id = ?1")?
                .execute(params![id, now])?;
        }
        for (conversation, hour) in &self.hours {
            tx.prepare_cached(
                "DELETE FROM usage_hour_sums WHERE conversation = ?1 AND hour_ms = ?2",
            )?
            .execute(params![conversation, hour])?;
            let facts: Vec<(String, String, Fact)> = tx
                .prepare_cached(&format!(
                    "{FACTS} AND conversation = ?1 AND at_ms >= ?2 AND at_ms < ?3"
                ))?
                .query_map(params![conversation, hour, hour + HOUR_MS], fact_of)?
                .collect::<rusqlite::Result<_>>()?;
            if let Some((user, _, _)) = facts.first() {
                let user = user.clone();
                insert_sums(tx, &user, conversation, facts.into_iter().map(|f| f.2))?;
            }
        }
        Ok(())
    }
}

/// Counts every fact again and sums every hour again.
pub(super) fn rebuild(tx: &Transaction<'_>) -> Result<()> {
    tx.execute(
        "UPDATE usage SET counted = NOT EXISTS (SELECT 1 FROM usage n
             WHERE n.user_id = usage.user_id AND n.dedupe = usage.dedupe
             AND n.run_id > usage.run_id AND n.conversation != usage.conversation)",
        [],
    )?;
    tx.execute("DELETE FROM usage_hour_sums", [])?;
    let mut stmt = tx.prepare(&format!("{FACTS} ORDER BY conversation"))?;
    let mut rows = stmt.query([])?;
    let mut current: Option<(String, String)> = None;
    let mut facts = Vec::new();
    while let Some(row) = rows.next()? {
        let (user, conversation, fact) = fact_of(row)?;
        if current.as_ref().is_some_and(|(_, c)| *c != conversation) {
            if let Some((u, c)) = current.take() {
                insert_sums(tx, &u, &c, facts.drain(..))?;
            }
        }
        current.get_or_insert((user, conversation));
        facts.push(fact);
    }
    if let Some((u, c)) = current {
        insert_sums(tx, &u, &c, facts)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_read_back_as_written_and_a_cut_entry_is_left_out() {
        let big = Figures {
            tokens: Tokens {
                input: 1,
                output: 2,
                cache_write_5m: 3,
                cache_write_1h: 4,
                cache_read: u64::MAX >> 1,
            },
            cost_usd: 0.125,
            n_unpriced: 1,
        };
        let small = Figures::of(Tokens::default(), Some(2.5));
        let mut total = big;
        total.add(&small);
        let mut sum = Sum {
            figures: total,
            first_ms: 900_000,
            last_ms: 1_800_001,
            quarters: BTreeMap::new(),
        };
        sum.quarters.insert(900_000, big);
        sum.quarters.insert(1_800_000, small);
        let bytes = encode(&sum);
        let back = decode(&bytes, true).unwrap_or_else(|| panic!("sums"));
        assert_eq!(
            (back.figures, back.first_ms, back.last_ms),
            (total, 900_000, 1_800_001)
        );
        assert_eq!(back.quarters, [(900_000, big), (1_800_000, small)]);
        // Without its quarters, the rest as it was.
        let whole = decode(&bytes, false).unwrap_or_else(|| panic!("sums"));
        assert_eq!(
            whole,
            Sums {
                quarters: Vec::new(),
                ..back
            }
        );
        assert_eq!(
            decode(&bytes[..100], true).map(|s| s.quarters.len()),
            Some(0)
        );
        assert_eq!(decode(&bytes[..71], true), None);
        // A running total as a fold keeps it.
        let mut running = Vec::new();
        put_tokens(&mut running, &big.tokens);
        assert_eq!(get_tokens(&running), Some(big.tokens));
        assert_eq!(get_tokens(&running[..39]), None);
        // Facts in one quarter keep none.
        sum.quarters.remove(&1_800_000);
        assert!(decode(&encode(&sum), true).is_some_and(|s| s.quarters.is_empty()));
    }

    #[test]
    fn an_hour_starts_on_the_hour_before_1970_too() {
        assert_eq!(hour_of(HOUR_MS + 1), HOUR_MS);
        assert_eq!(hour_of(HOUR_MS), HOUR_MS);
        assert_eq!(hour_of(-1), -HOUR_MS);
    }
}
