//! What the agents spent: usage facts (the tokens of each model response,
//! and its cost where the agent wrote one) read from the bytes kith
//! captured, folded across the deltas of one transcript, and priced from a
//! dated table ([`price`]). Pure: no IO, no clock, linear in its input,
//! never panics.
//!
//! # What each agent records, and how it is read
//!
//! | Agent | Where | One fact per | Key | Merge |
//! |---|---|---|---|---|
//! | Claude Code | `assistant` lines' `message.usage` | API response | `message.id` `/` `requestId` | [`Merge::Last`] |
//! | Codex | `event_msg` `token_count` `info.total_token_usage` | token count event | time `#` running total | [`Merge::RunningTotal`] |
//! | Gemini CLI | `tokens` of `gemini` messages | message | message `id` | [`Merge::Last`] |
//! | pi | assistant messages' `usage` (with `cost.total`) | message | `responseId`, else entry `id`, else the message's time | [`Merge::Each`] |
//! | OpenCode | assistant message rows (`tokens`, `cost`) and their `step-finish` parts, in kith's journal | message | message id | [`Merge::Last`] |
//! | Copilot CLI | `session.shutdown`'s `modelMetrics` (else its `tokenDetails`) | model per CLI process | event `id` `/` model | [`Merge::Each`] |
//! | Aider | `> Tokens: … sent, … received.` lines, `Cost: $… message` | usage report | the line (Aider writes no ids) | [`Merge::Each`] |
//! | Cursor | nothing: its transcripts hold no counts | | | |
//!
//! The counts mean what the provider bills:
//! - `input` is input read at full price: Claude's `input_tokens`; Codex's
//!   `input_tokens` less `cached_input_tokens` (OpenAI counts cached input
//!   inside input); Gemini's `input` less `cached`, plus `tool` (tool-use
//!   prompt tokens, which Gemini counts apart from the prompt); pi's and
//!   OpenCode's `input` (both already exclude the cache); Copilot's
//!   `tokenDetails.input` (else `inputTokens` less its cache reads and
//!   writes); Aider's `sent` less its cache writes and hits.
//! - `output` holds reasoning: Claude, Codex, pi, Copilot and Aider report
//!   output with the thinking inside it; Gemini reports `thoughts` apart and
//!   OpenCode `reasoning` apart, and both are added to output here (OpenCode
//!   charges its `reasoning` on top of output itself; for OpenAI models,
//!   whose output already holds it, OpenCode's own count and cost hold it
//!   twice, and kith's count follows OpenCode's).
//! - `cache_write_5m` / `cache_write_1h`: Claude's
//!   `cache_creation.ephemeral_5m_input_tokens` / `ephemeral_1h_input_tokens`,
//!   else its `cache_creation_input_tokens`, counted as 5 minutes; the cache
//!   writes of pi, OpenCode, Copilot and Aider, which say no duration, are
//!   5-minute writes (Anthropic's default; pi's recorded costs price them so).
//!   Codex and Gemini write none.
//! - `cache_read`: cache hits.
//!
//! Aider prints its counts rounded (`2.1k` is read as 2,100); its cost
//! with two decimals from a cent up. Copilot records no dollars (its
//! `totalNanoAiu` and premium requests are its own units) and its totals
//! cover a CLI process, so a fact there is many requests, dated at shutdown;
//! a resumed session writes another shutdown, and each counts. Claude Code's
//! `progress` lines repeat a subagent's messages and its Task results sum
//! them: only `assistant` lines count (the subagent's own file holds them);
//! `<synthetic>` messages, which Claude Code makes up without calling a
//! model, count nothing.
//!
//! # Counting once: [`facts`] and [`Fold`]
//!
//! [`facts`] reads one run of complete lines (a delta, or a whole
//! transcript). A [`Fold`] merges the facts of one transcript's deltas, in
//! byte order, by each fact's [`Merge`]:
//! - [`Merge::Last`]: the agent writes the same response more than once
//!   (Claude Code one line per content block, its usage growing as it
//!   streams; Gemini a message again whenever it changes; OpenCode a row
//!   whenever it changes), so each key is counted once, with the figures of
//!   its last copy, in the place of its first.
//! - [`Merge::RunningTotal`]: Codex writes running totals. The fold counts
//!   the difference from the total before it; a total that went down in
//!   any count starts a new series and is counted from its new value. The
//!   fact keeps the total it was computed from, so folding a fold's own
//!   output again gives the same facts: a caller that stores the folded
//!   [`Reading`] continues later by adding it back, then the new delta's.
//! - [`Merge::Each`]: written once, counted once.
//!
//! Some agents name the model, or the time, once for the facts after it:
//! Codex its model per turn (`turn_context`), Aider its model and time per
//! session; a delta can begin after that line. A [`Reading`] says what its
//! bytes leave in effect ([`Context`]), and the fold gives it to the next
//! delta's facts that name none. A later copy of a [`Merge::Last`] key
//! without a time or a model keeps the earlier copy's.
//!
//! Fold each transcript on its own
//! (a Codex subagent's rollout is its own series); the folded facts of a
//! session's transcripts can be summed, or folded together when they are
//! all [`Merge::Last`] (Claude Code, whose subagent files may repeat a
//! message of the parent's). Read OpenCode's journal whole, as its turns are
//! (`transcript::parse_chain`): a message's tokens are the sum of its
//! `step-finish` parts, which may sit in another delta than its row.
//!
//! Responses rewound (Gemini's `$rewindTo`), reverted (OpenCode's removed
//! rows) or left on another branch (pi's tree) still count: they were paid.
//!
//! # Bad input
//!
//! Nothing here fails or panics; what cannot be counted is skipped or
//! refused, never guessed:
//! - A line that is not JSON (or not UTF-8), or a record of a type that
//!   carries no usage, holds no fact and is skipped, as by
//!   `transcript::parse`.
//! - A count that is missing (or `null`) is 0: agents leave zero counts out.
//! - A usage record with a count that is not a non-negative integer
//!   (negative, with a decimal point, a string), or above the bound, is *refused*:
//!   it makes no fact and is counted in [`Reading::n_refused`]. So is one
//!   whose cached input exceeds its input, one that cannot be deduplicated
//!   (a Claude or Gemini usage without a message id), and one whose recorded
//!   cost is negative, not finite or above [`MAX_RECORDED_COST_USD`]. A
//!   refused copy of a [`Merge::Last`] key leaves the copy before it.
//! - Bounds: a count of one response at most [`MAX_RESPONSE_TOKENS`]; a
//!   running total (Codex) or a process's total (Copilot) at most
//!   [`MAX_RUNNING_TOKENS`].
//! - A recorded cost of exactly 0 for a fact with tokens is read as "the
//!   agent knew no price" (OpenCode, pi and Aider write 0 for models they
//!   cannot price): the fact is priced from the table instead. A cost that
//!   is not a number (an object, a string) is no recorded cost.
//! - A time that is missing or not RFC 3339 leaves the fact undated
//!   (`time: None`): the caller dates it, with the delta's capture time.
//!   Aider writes one time per session, in its header: its facts in a delta
//!   that starts after the header are undated unless a fold saw the header
//!   ([`Context`]).
//! - An unknown or missing model keeps its tokens; [`price::cost`] gives it
//!   no price (`None`) unless the agent recorded a cost.
//! - Sums saturate.

mod aider;
mod claude;
mod codex;
mod copilot;
mod gemini;
mod opencode;
mod pi;
pub mod price;

use std::collections::HashMap;

use serde_json::Value;

use crate::transcript::{self, Format};

pub use price::{cost, price_of, Price, PriceError, PriceTable, Rates};

/// The most tokens of one kind one response may count: no model reads or
/// writes within a factor of 100 of it in one request.
pub const MAX_RESPONSE_TOKENS: u64 = 1_000_000_000;

/// The most tokens of one kind a running total (Codex) or a CLI process's
/// total (Copilot) may count.
pub const MAX_RUNNING_TOKENS: u64 = 1_000_000_000_000;

/// The most dollars an agent may have recorded for one fact.
pub const MAX_RECORDED_COST_USD: f64 = 1_000.0;

/// Token counts of one fact, by how the provider bills them (see the
/// module documentation for what each agent's fields become).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Input read at full price (no cache read or write in it).
    pub input: u64,
    /// Output, reasoning included.
    pub output: u64,
    /// Input written to a cache that lives 5 minutes.
    pub cache_write_5m: u64,
    /// Input written to a cache that lives an hour.
    pub cache_write_1h: u64,
    /// Input read from a cache.
    pub cache_read: u64,
}

impl Tokens {
    /// Every token, each kind once.
    pub fn total(&self) -> u64 {
        self.prompt().saturating_add(self.output)
    }

    /// What the model read: input and cache reads and writes (what
    /// long-context prices are tiered by).
    pub fn prompt(&self) -> u64 {
        self.input
            .saturating_add(self.cache_write_5m)
            .saturating_add(self.cache_write_1h)
            .saturating_add(self.cache_read)
    }

    pub fn is_zero(&self) -> bool {
        self.counts() == [0; 5]
    }

    pub fn saturating_add(self, other: Tokens) -> Tokens {
        Tokens {
            input: self.input.saturating_add(other.input),
            output: self.output.saturating_add(other.output),
            cache_write_5m: self.cache_write_5m.saturating_add(other.cache_write_5m),
            cache_write_1h: self.cache_write_1h.saturating_add(other.cache_write_1h),
            cache_read: self.cache_read.saturating_add(other.cache_read),
        }
    }

    fn counts(&self) -> [u64; 5] {
        [
            self.input,
            self.output,
            self.cache_write_5m,
            self.cache_write_1h,
            self.cache_read,
        ]
    }

    /// What a running total added since `earlier`, or `None` when any
    /// count went down (a new series).
    fn since(self, earlier: Tokens) -> Option<Tokens> {
        Some(Tokens {
            input: self.input.checked_sub(earlier.input)?,
            output: self.output.checked_sub(earlier.output)?,
            cache_write_5m: self.cache_write_5m.checked_sub(earlier.cache_write_5m)?,
            cache_write_1h: self.cache_write_1h.checked_sub(earlier.cache_write_1h)?,
            cache_read: self.cache_read.checked_sub(earlier.cache_read)?,
        })
    }

    /// Itself when no count is above `bound`.
    fn within(self, bound: u64) -> Result<Tokens, Refused> {
        if self.counts().iter().all(|&n| n <= bound) {
            Ok(self)
        } else {
            Err(Refused)
        }
    }
}

/// How the facts of one transcript's deltas combine ([`Fold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// Written again as it grows: each key once, with its last figures.
    Last,
    /// Written once: each fact counts.
    Each,
    /// The agent's running total, as it wrote it; the fact counts what the
    /// total added since the one before it ([`Fold`]).
    RunningTotal(Tokens),
}

/// What one model response (or, for Copilot, one CLI process) took.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageFact {
    /// Says which writes are the same fact (see [`Merge`]); stable across
    /// deltas: the agent's message and request ids where it has them.
    pub key: String,
    pub merge: Merge,
    /// The model as the agent named it (`claude-sonnet-4-5-20250929`).
    pub model: Option<String>,
    /// When, in kith's canonical RFC 3339 (`crate::timestamp`); `None` when
    /// the agent wrote no time the bytes hold.
    pub time: Option<String>,
    pub tokens: Tokens,
    /// How many model requests the fact sums, when known: 1 for a response,
    /// Copilot's request count for a process. Long-context prices need it.
    pub n_requests: Option<u64>,
    /// The cost the agent itself recorded, in USD (pi, OpenCode, Aider).
    pub cost_usd: Option<f64>,
}

/// The facts of some bytes, or of a fold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// In order of first appearance.
    pub facts: Vec<UsageFact>,
    /// Usage records refused (see the module documentation): counted, so
    /// that a report can say its total leaves something out.
    pub n_refused: u64,
    /// What the bytes leave in effect for the facts after them; `None`
    /// when they say nothing of it.
    pub context: Option<Context>,
}

/// The model and time an agent wrote once for the facts after it (Codex's
/// `turn_context`, Aider's session header and `Main model:` line). In a
/// [`Reading`] added to a [`Fold`], a field left `None` leaves the one
/// before in effect.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Context {
    pub model: Option<String>,
    pub time: Option<String>,
}

impl Reading {
    /// The tokens of every fact.
    pub fn tokens(&self) -> Tokens {
        self.facts
            .iter()
            .fold(Tokens::default(), |sum, f| sum.saturating_add(f.tokens))
    }
}

/// The usage facts of `bytes`, complete lines cut from a transcript in
/// `format` (a delta, or the whole file), already folded among themselves.
pub fn facts(format: Format, bytes: &[u8]) -> Reading {
    let out = match format {
        Format::ClaudeCode => read_json(bytes, claude::Claude),
        Format::Codex => read_json(bytes, codex::Codex::default()),
        Format::Gemini => read_json(bytes, gemini::Gemini),
        Format::Pi => read_json(bytes, pi::Pi),
        Format::OpenCode => read_json(bytes, opencode::OpenCode::default()),
        Format::Copilot => read_json(bytes, copilot::Copilot),
        Format::Aider => aider::read(bytes),
        Format::Cursor | Format::Other => Out::default(),
    };
    let mut fold = Fold::default();
    fold.add(Reading {
        facts: out.facts,
        n_refused: out.n_refused,
        context: out.context,
    });
    fold.into_reading()
}

/// Whether a transcript's usage must be read with its earlier deltas, not
/// one delta at a time: OpenCode's, whose message's tokens may sit in
/// another delta than its row. (Gemini CLI's messages each read alone,
/// their later copies merged by id as any [`Merge::Last`] fact.)
pub fn reads_whole(format: Format) -> bool {
    matches!(format, Format::OpenCode)
}

/// For a format that [`reads_whole`], what of a transcript's bytes its
/// usage depends on, to read before the next delta instead of every delta
/// so far: bounded by the transcript's responses, not its text. `facts` of
/// `carry(a)` then `b` is `facts` of `a` then `b`. Empty for the others.
pub fn carry(format: Format, bytes: &[u8]) -> Vec<u8> {
    match format {
        Format::OpenCode => opencode::carry(bytes),
        _ => Vec::new(),
    }
}

/// The facts of one transcript's deltas, merged as their [`Merge`] says.
/// Add each delta's [`facts`] in byte order.
#[derive(Debug, Clone, Default)]
pub struct Fold {
    facts: Vec<UsageFact>,
    /// Where each [`Merge::Last`] key's fact is in `facts`.
    last: HashMap<String, usize>,
    /// The running total of the last [`Merge::RunningTotal`] fact.
    running: Option<Tokens>,
    n_refused: u64,
    /// What the deltas added so far left in effect.
    context: Option<Context>,
}

impl Fold {
    /// A fold that continues after facts it is not given all of: `kept`,
    /// earlier facts as folded (at least those the next delta may change:
    /// its [`Merge::Last`] keys') with the count refused and what the bytes
    /// before left in effect, and `running`, the total of the last
    /// [`Merge::RunningTotal`] fact before ([`Fold::running`]). Adding a
    /// delta then gives what a fold of every delta gives for the facts the
    /// delta wrote or changed, and the kept facts it did not change as
    /// they were.
    pub fn resume(kept: Reading, running: Option<Tokens>) -> Self {
        let mut fold = Fold {
            running,
            n_refused: kept.n_refused,
            context: kept.context,
            ..Fold::default()
        };
        for fact in kept.facts {
            if matches!(fact.merge, Merge::Last) {
                fold.last.insert(fact.key.clone(), fold.facts.len());
            }
            fold.facts.push(fact);
        }
        fold
    }

    /// The running total the next [`Merge::RunningTotal`] fact is counted
    /// from, `None` before any.
    pub fn running(&self) -> Option<Tokens> {
        self.running
    }

    /// Adds the next delta's reading (or a fold's own, to continue it).
    pub fn add(&mut self, reading: Reading) {
        self.n_refused = self.n_refused.saturating_add(reading.n_refused);
        for fact in reading.facts {
            self.push(fact);
        }
        if let Some(new) = reading.context {
            let old = self.context.take().unwrap_or_default();
            self.context = Some(Context {
                model: new.model.or(old.model),
                time: new.time.or(old.time),
            });
        }
    }

    fn push(&mut self, mut fact: UsageFact) {
        let earlier = match fact.merge {
            Merge::Last => self.last.get(&fact.key).map(|&i| &self.facts[i]),
            _ => None,
        };
        let context = self.context.as_ref();
        if fact.time.is_none() {
            fact.time = earlier
                .and_then(|f| f.time.clone())
                .or_else(|| context.and_then(|c| c.time.clone()));
        }
        if fact.model.is_none() {
            fact.model = earlier
                .and_then(|f| f.model.clone())
                .or_else(|| context.and_then(|c| c.model.clone()));
        }
        match fact.merge {
            Merge::Last => match self.last.get(&fact.key) {
                Some(&i) => self.facts[i] = fact,
                None => {
                    self.last.insert(fact.key.clone(), self.facts.len());
                    self.facts.push(fact);
                }
            },
            Merge::Each => self.facts.push(fact),
            Merge::RunningTotal(total) => {
                match self.running.and_then(|before| total.since(before)) {
                    Some(added) => {
                        fact.tokens = added;
                        fact.n_requests = Some(1);
                    }
                    // The first total, or a new series: how many requests
                    // it sums is not known.
                    None => {
                        fact.tokens = total;
                        fact.n_requests = None;
                    }
                }
                self.running = Some(total);
                // A total written again unchanged added nothing.
                if !fact.tokens.is_zero() {
                    self.facts.push(fact);
                }
            }
        }
    }

    pub fn facts(&self) -> &[UsageFact] {
        &self.facts
    }

    pub fn n_refused(&self) -> u64 {
        self.n_refused
    }

    pub fn into_reading(self) -> Reading {
        Reading {
            facts: self.facts,
            n_refused: self.n_refused,
            context: self.context,
        }
    }
}

/// A usage record that cannot be counted (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Refused;

/// What a reader found, before folding.
#[derive(Debug, Default)]
struct Out {
    facts: Vec<UsageFact>,
    n_refused: u64,
    context: Option<Context>,
}

impl Out {
    fn push(&mut self, fact: Result<UsageFact, Refused>) {
        match fact {
            Ok(fact) => self.facts.push(fact),
            Err(Refused) => self.n_refused += 1,
        }
    }
}

/// One agent's reading of decoded JSON records, in order.
trait Reader {
    fn record(&mut self, v: &Value, out: &mut Out);

    /// Called once after the last record.
    fn finish(self, _out: &mut Out)
    where
        Self: Sized,
    {
    }
}

fn read_json(bytes: &[u8], mut reader: impl Reader) -> Out {
    let mut out = Out::default();
    for line in transcript::lines(bytes) {
        transcript::each_record(line, |v| reader.record(&v, &mut out));
    }
    reader.finish(&mut out);
    out
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The count at `key`: 0 when missing or null, refused when it is not a
/// non-negative integer.
fn count(v: &Value, key: &str) -> Result<u64, Refused> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(0),
        Some(n) => n.as_u64().ok_or(Refused),
    }
}

/// A time as the agents write it: RFC 3339, or milliseconds since the
/// epoch (pi's messages, OpenCode's rows).
fn time_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => crate::timestamp::normalize(s),
        Value::Number(n) => {
            let ms = n.as_i64()?;
            let t =
                time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()?;
            Some(crate::timestamp::render(t))
        }
        _ => None,
    }
}

/// A cost the agent recorded for `tokens`: none when it is not a number,
/// or is 0 while there are tokens (the agent knew no price); refused when
/// negative, not finite or absurd.
fn recorded_cost(v: Option<&Value>, tokens: &Tokens) -> Result<Option<f64>, Refused> {
    match v.and_then(Value::as_f64) {
        Some(usd) => checked_cost(usd, tokens),
        None => Ok(None),
    }
}

/// [`recorded_cost`] of a number already read.
fn checked_cost(usd: f64, tokens: &Tokens) -> Result<Option<f64>, Refused> {
    // NaN is in no range.
    if !(0.0..=MAX_RECORDED_COST_USD).contains(&usd) {
        return Err(Refused);
    }
    Ok((usd > 0.0 || tokens.is_zero()).then_some(usd))
}

#[cfg(test)]
mod tests;
