//! A usage report from the facts a viewer may count: bucketed by day, week
//! (from Monday), month, conversation or 5-hour billing block in a time
//! zone, split by model, agent, machine, project or person, priced. Pure.
//!
//! A fact costs what its agent recorded, else its tokens at the price
//! table's list prices; a fact with no price (an unknown model, a kind of
//! token the table has no rate for) adds its tokens and names its model in
//! `unpriced_models`, never a guessed dollar.
//!
//! Time zones are UTC, a fixed offset, or a zone by its IANA name
//! (`Europe/Berlin`), whose days are cut by its rules as the system's tz
//! database (`/usr/share/zoneinfo`) has them: a day of a DST change is 23
//! or 25 hours long.

use std::collections::BTreeSet;
use std::sync::Arc;

use foldhash::HashMap;
use kith_proto::{UsageBy, UsageReport, UsageResponse, UsageRow, UsageTotals};
use kith_shared::usage::PriceTable;
use time::{Date, OffsetDateTime, UtcOffset};

use crate::error::{Code, Error, Result};
use crate::registry::{CountedUsage, Figures};

/// What `timezone` accepts, for its error.
const ZONE_HINT: &str = "timezone must be UTC, a fixed offset like +02:00 or -0530, \
     or a time zone name of the tz database like Europe/Paris";

/// The time zone a report cuts days in.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Zone {
    Fixed(UtcOffset),
    /// A zone of the tz database, and its name as asked.
    Named(jiff::tz::TimeZone, String),
}

impl Zone {
    pub(crate) const UTC: Zone = Zone::Fixed(UtcOffset::UTC);

    /// `UTC`, `Z`, `±HH:MM`, `±HHMM`, `±HH`, or a tz database name.
    pub(crate) fn parse(s: &str) -> Result<Zone> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("utc") || s.eq_ignore_ascii_case("z") {
            return Ok(Zone::UTC);
        }
        let bad = || Error::invalid(Code::InvalidTimezone, ZONE_HINT);
        let (sign, rest) = match s.as_bytes().first() {
            Some(b'+') => (1, &s[1..]),
            Some(b'-') => (-1, &s[1..]),
            _ => return Self::named(s).ok_or_else(bad),
        };
        let digits: String = rest.chars().filter(|c| *c != ':').collect();
        let colons = rest.len() - digits.len();
        let well_formed = digits.bytes().all(|b| b.is_ascii_digit())
            && match (digits.len(), colons) {
                (2, 0) | (4, 0) => true,
                (4, 1) => rest.as_bytes().get(2) == Some(&b':'),
                _ => false,
            };
        if !well_formed {
            return Err(bad());
        }
        let hours: i8 = digits[..2].parse().map_err(|_| bad())?;
        let minutes: i8 = match digits.get(2..) {
            Some(m) if !m.is_empty() => m.parse().map_err(|_| bad())?,
            _ => 0,
        };
        if hours > 18 || minutes > 59 {
            return Err(bad());
        }
        UtcOffset::from_hms(sign * hours, sign * minutes, 0)
            .map(Zone::Fixed)
            .map_err(|_| bad())
    }

    /// A zone of the tz database by its name (`Europe/Berlin`,
    /// `America/Argentina/Buenos_Aires`); `None` for a name the database
    /// does not have, or that is no zone name (a path out of it).
    fn named(s: &str) -> Option<Zone> {
        let plausible = !s.is_empty()
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'-' | b'+'))
            && s.split('/')
                .all(|part| !part.is_empty() && part != "." && part != "..");
        if !plausible {
            return None;
        }
        let tz = jiff::tz::TimeZone::get(s).ok()?;
        Some(Zone::Named(tz, s.to_owned()))
    }

    /// `UTC`, `±HH:MM`, or the zone's name.
    pub(crate) fn name(&self) -> String {
        match self {
            Zone::Fixed(offset) if *offset == UtcOffset::UTC => "UTC".to_owned(),
            Zone::Fixed(offset) => {
                let (h, m, _) = offset.as_hms();
                let sign = if offset.is_negative() { '-' } else { '+' };
                format!("{sign}{:02}:{:02}", h.unsigned_abs(), m.unsigned_abs())
            }
            Zone::Named(_, name) => name.clone(),
        }
    }

    /// The wall clock at `at_ms` in this zone: its date, hour and minute.
    fn wall(&self, at_ms: i64) -> (Date, u8, u8) {
        match self {
            Zone::Fixed(offset) => {
                let t = OffsetDateTime::from_unix_timestamp_nanos(i128::from(at_ms) * 1_000_000)
                    .unwrap_or(OffsetDateTime::UNIX_EPOCH)
                    .to_offset(*offset);
                (t.date(), t.hour(), t.minute())
            }
            Zone::Named(tz, _) => {
                let t = jiff::Timestamp::from_millisecond(at_ms)
                    .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
                    .to_zoned_datetime(tz.clone());
                let date = time::Month::try_from(t.month() as u8)
                    .ok()
                    .and_then(|m| {
                        Date::from_calendar_date(i32::from(t.year()), m, t.day() as u8).ok()
                    })
                    .unwrap_or(Date::MIN);
                (date, t.hour() as u8, t.minute() as u8)
            }
        }
    }

    fn date_of(&self, at_ms: i64) -> Date {
        self.wall(at_ms).0
    }

    /// `2026-05-01 09:00`, in this zone.
    fn minute_of(&self, at_ms: i64) -> String {
        let (date, hour, minute) = self.wall(at_ms);
        format!("{date} {hour:02}:{minute:02}")
    }

    /// The first instant of `date` in this zone, in ms since the epoch (a
    /// day that starts in a DST gap starts when the gap ends).
    fn start_of(&self, date: Date) -> i64 {
        match self {
            Zone::Fixed(offset) => {
                kith_shared::timestamp::epoch_ms(date.midnight().assume_offset(*offset))
            }
            Zone::Named(tz, _) => {
                let civil = jiff::civil::Date::new(
                    date.year() as i16,
                    u8::from(date.month()) as i8,
                    date.day() as i8,
                );
                civil
                    .and_then(|d| d.to_zoned_datetime(tz.clone()))
                    .and_then(|z| z.start_of_day())
                    .map(|z| z.timestamp().as_millisecond())
                    .unwrap_or_else(|_| {
                        // Past jiff's calendar (years beyond ±9999): the
                        // offset the zone has now is as good as any.
                        kith_shared::timestamp::epoch_ms(date.midnight().assume_utc())
                    })
            }
        }
    }
}

/// Which end of a range a `since` or `until` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Edge {
    /// From its instant, or from its day's start.
    Since,
    /// Before its instant, or through its day's end.
    Until,
}

/// `since` or `until` (RFC 3339, or a day `YYYY-MM-DD` in `zone`) in ms
/// since the epoch.
pub(crate) fn instant(s: &str, zone: &Zone, edge: Edge) -> Result<i64> {
    if let Some(t) = kith_shared::timestamp::parse(s.trim()) {
        return Ok(kith_shared::timestamp::epoch_ms(t));
    }
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let name = match edge {
        Edge::Since => "since",
        Edge::Until => "until",
    };
    let date = Date::parse(s.trim(), format).map_err(|_| {
        Error::invalid(
            Code::InvalidTimestamp,
            format!("{name} must be RFC 3339 or a date (YYYY-MM-DD)"),
        )
    })?;
    Ok(match (edge, date.next_day()) {
        (Edge::Since, _) => zone.start_of(date),
        (Edge::Until, Some(next)) => zone.start_of(next),
        (Edge::Until, None) => i64::MAX,
    })
}

/// What a report is asked for.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    pub report: UsageReport,
    pub by: Option<UsageBy>,
    pub zone: Zone,
    /// Every member's usage, each row under its member.
    pub family: bool,
}

/// The session of a fact whose run the reader may not read.
pub(crate) const NOT_SHARED: &str = "not shared";

/// One row being summed.
#[derive(Default)]
struct Sum {
    tokens: [u64; 4],
    cost_usd: f64,
    unpriced: BTreeSet<String>,
    /// The last response's time.
    last_ms: Option<i64>,
}

impl Sum {
    /// Adds `figures` of `model`'s.
    fn add(&mut self, figures: &Figures, model: Option<&str>) {
        let t = &figures.tokens;
        let add = [
            t.input,
            t.output,
            t.cache_write_5m.saturating_add(t.cache_write_1h),
            t.cache_read,
        ];
        for (sum, n) in self.tokens.iter_mut().zip(add) {
            *sum = sum.saturating_add(n);
        }
        self.cost_usd += figures.cost_usd;
        if figures.n_unpriced > 0 {
            self.unpriced.insert(model.unwrap_or("unknown").to_owned());
        }
    }

    fn totals(self) -> UsageTotals {
        let [input_tokens, output_tokens, cache_write_tokens, cache_read_tokens] = self.tokens;
        UsageTotals {
            input_tokens,
            output_tokens,
            cache_write_tokens,
            cache_read_tokens,
            cost_usd: self.cost_usd,
            unpriced_models: self.unpriced.into_iter().collect(),
        }
    }
}

/// How long a billing block lasts, and the gap that ends one.
const BLOCK_MS: i64 = 5 * 3_600_000;
const HOUR_MS: i64 = 3_600_000;

/// The starts of the 5-hour billing blocks of responses at `times` (in
/// order of their first time; each the first and last time of responses
/// of one hour), in ms, as ccusage cuts them: a block starts at the hour
/// (UTC) of its first response; a response more than 5 hours past its
/// block's start, or more than 5 hours after the response before it,
/// starts the next. Within one hour's responses neither can happen but at
/// its first (`registry::usage_hours` keeps the responses at exactly the
/// hour's start apart), so each span falls in one block.
fn block_starts(times: impl IntoIterator<Item = (i64, i64)>) -> Vec<i64> {
    let mut starts: Vec<i64> = Vec::new();
    let mut last: Option<i64> = None;
    for (first, end) in times {
        let new = match (starts.last(), last) {
            (Some(&start), Some(before)) => first - start > BLOCK_MS || first - before > BLOCK_MS,
            _ => true,
        };
        if new {
            starts.push(first.div_euclid(HOUR_MS) * HOUR_MS);
        }
        last = Some(last.map_or(end, |l| l.max(end)));
    }
    starts
}

/// Each member's billing blocks (everyone's under `None` unless `family`).
struct Blocks(HashMap<Option<Arc<str>>, Vec<i64>>);

impl Blocks {
    fn of(facts: &[CountedUsage], family: bool) -> Self {
        let mut times: HashMap<Option<Arc<str>>, Vec<(i64, i64)>> = HashMap::default();
        for f in facts {
            let who = family.then(|| f.person.clone());
            times.entry(who).or_default().push((f.first_ms, f.last_ms));
        }
        Self(
            times
                .into_iter()
                .map(|(who, mut t)| {
                    t.sort_unstable();
                    (who, block_starts(t))
                })
                .collect(),
        )
    }

    /// The start of the block `fact` falls in.
    fn start_of(&self, fact: &CountedUsage, family: bool) -> i64 {
        let who = family.then(|| fact.person.clone());
        let starts = self.0.get(&who).map(Vec::as_slice).unwrap_or_default();
        match starts.partition_point(|s| *s <= fact.first_ms) {
            0 => fact.first_ms,
            n => starts[n - 1],
        }
    }
}

/// A report row's bucket, as it sorts; written out at the end.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Bucket {
    /// A day, or a week by its Monday.
    Day(Date),
    Month(i32, u8),
    /// A billing block by its start, in ms.
    Block(i64),
    Session(Option<Arc<str>>),
}

impl Bucket {
    fn name(&self, zone: &Zone) -> String {
        match self {
            Bucket::Day(date) => date.to_string(),
            Bucket::Month(year, month) => format!("{year:04}-{month:02}"),
            Bucket::Block(start) => zone.minute_of(*start),
            Bucket::Session(conversation) => {
                conversation.as_deref().unwrap_or(NOT_SHARED).to_owned()
            }
        }
    }
}

/// The day, week or month of responses, by the zone's date of each; the
/// instants of the last date asked kept (sums come in order of their hour).
struct Periods<'a> {
    shape: &'a Shape,
    last: Option<(i64, i64, Date)>,
}

impl Periods<'_> {
    fn of(&mut self, at_ms: i64) -> Bucket {
        let date = match self.last {
            Some((from, to, date)) if (from..to).contains(&at_ms) => date,
            _ => {
                let zone = &self.shape.zone;
                let date = zone.date_of(at_ms);
                let day = date
                    .next_day()
                    .map(|next| (zone.start_of(date), zone.start_of(next)));
                let (from, to) = match day {
                    Some((from, to)) if (from..to).contains(&at_ms) => (from, to),
                    // Past the calendars' ends: its quarter hour (a zone's
                    // date changes only on a quarter hour).
                    _ => {
                        let from = at_ms.div_euclid(QUARTER_MS) * QUARTER_MS;
                        (from, from + QUARTER_MS)
                    }
                };
                self.last = Some((from, to, date));
                date
            }
        };
        match self.shape.report {
            UsageReport::Weekly => {
                let back = i64::from(date.weekday().number_days_from_monday());
                Bucket::Day(date.checked_sub(time::Duration::days(back)).unwrap_or(date))
            }
            UsageReport::Monthly => Bucket::Month(date.year(), u8::from(date.month())),
            _ => Bucket::Day(date),
        }
    }
}

const QUARTER_MS: i64 = 900_000;

/// Whether a report of `kind` takes each hour's sums whole, never reading
/// their quarter hours (`add_to_buckets`): only a day, week or month can
/// begin inside an hour.
pub(crate) fn takes_hours_whole(kind: UsageReport) -> bool {
    match kind {
        UsageReport::Daily | UsageReport::Weekly | UsageReport::Monthly => false,
        UsageReport::Session | UsageReport::Blocks => true,
    }
}

/// Adds `fact`'s figures to its bucket, or (a day, week or month boundary
/// within its hour) each of its quarter hours' to theirs.
fn add_to_buckets(
    fact: &CountedUsage,
    shape: &Shape,
    blocks: &Blocks,
    periods: &mut Periods<'_>,
    mut add: impl FnMut(Bucket, &Figures),
) {
    let bucket = match shape.report {
        UsageReport::Blocks => Bucket::Block(blocks.start_of(fact, shape.family)),
        UsageReport::Session => Bucket::Session(fact.work.as_ref().map(|w| w.conversation.clone())),
        UsageReport::Daily | UsageReport::Weekly | UsageReport::Monthly => {
            let first = periods.of(fact.first_ms);
            if fact.quarters.is_empty() || periods.of(fact.last_ms) == first {
                first
            } else {
                // Every zone's day starts on a quarter hour.
                for (start, figures) in &fact.quarters {
                    add(periods.of(*start), figures);
                }
                return;
            }
        }
    };
    add(bucket, &fact.figures);
}

fn group_of(fact: &CountedUsage, by: Option<UsageBy>) -> Option<Arc<str>> {
    match by? {
        UsageBy::Model => fact.model.clone(),
        UsageBy::Agent => Some(fact.agent_runtime.clone()),
        UsageBy::Machine => fact.work.as_ref().map(|w| w.machine.clone()),
        UsageBy::Project => fact.work.as_ref().and_then(|w| w.project.clone()),
        UsageBy::Person => Some(fact.person.clone()),
    }
}

/// The report of `facts` (`n_refused` records left out), priced at
/// `table` (the facts carry their cost at it; the report names it).
pub(crate) fn report(
    facts: &[CountedUsage],
    shape: &Shape,
    table: &PriceTable,
    n_refused: u64,
) -> UsageResponse {
    let mut total = Sum::default();
    type Key = (Bucket, Option<Arc<str>>, Option<Arc<str>>);
    let mut rows: HashMap<Key, Sum> = HashMap::default();
    let blocks = if shape.report == UsageReport::Blocks {
        Blocks::of(facts, shape.family)
    } else {
        Blocks(HashMap::default())
    };
    let mut periods = Periods { shape, last: None };
    for fact in facts {
        let model = fact.model.as_deref();
        total.add(&fact.figures, model);
        // A family report's rows are each a member's; split by person, the
        // group says whose already.
        let person =
            (shape.family && shape.by != Some(UsageBy::Person)).then(|| fact.person.clone());
        let group = group_of(fact, shape.by);
        add_to_buckets(fact, shape, &blocks, &mut periods, |bucket, figures| {
            let sum = rows
                .entry((bucket, person.clone(), group.clone()))
                .or_default();
            sum.add(figures, model);
            sum.last_ms = Some(sum.last_ms.map_or(fact.last_ms, |l| l.max(fact.last_ms)));
        });
    }
    let rows: Vec<(Key, Sum)> = rows.into_iter().collect();
    // The rows' order, by index (a row is large to move about).
    let mut order: Vec<usize> = (0..rows.len()).collect();
    if shape.report == UsageReport::Session {
        // A session's last activity orders the session report.
        let mut last: HashMap<&Bucket, i64> = HashMap::default();
        for ((bucket, _, _), sum) in &rows {
            if let Some(at) = sum.last_ms {
                let l = last.entry(bucket).or_insert(at);
                *l = (*l).max(at);
            }
        }
        // By last activity; within a session, groups in order.
        let lasts: Vec<i64> = rows
            .iter()
            .map(|(key, _)| last.get(&key.0).copied().unwrap_or(0))
            .collect();
        order.sort_unstable_by(|&a, &b| (lasts[a], &rows[a].0).cmp(&(lasts[b], &rows[b].0)));
    } else {
        order.sort_unstable_by(|&a, &b| rows[a].0.cmp(&rows[b].0));
    }
    let mut rows: Vec<Option<(Key, Sum)>> = rows.into_iter().map(Some).collect();
    let rows = order
        .into_iter()
        .filter_map(|i| rows[i].take())
        .map(|((bucket, person, group), sum)| UsageRow {
            key: bucket.name(&shape.zone),
            group: group.map(|g| g.to_string()),
            person: person.map(|p| p.to_string()),
            totals: sum.totals(),
        })
        .collect();
    UsageResponse {
        price_table: table.as_of().to_owned(),
        price_overrides: table.overridden().to_vec(),
        timezone: shape.zone.name(),
        totals: total.totals(),
        rows,
        n_refused,
    }
}

#[cfg(test)]
mod tests {
    use kith_shared::usage::{cost, Merge, Tokens, UsageFact};

    use super::*;
    use crate::registry::Work;

    fn at(rfc3339: &str) -> i64 {
        kith_shared::timestamp::parse(rfc3339)
            .map(kith_shared::timestamp::epoch_ms)
            .unwrap_or_else(|| panic!("{rfc3339}"))
    }

    /// A fact of `model` at `time` with `input` and `output` tokens and,
    /// maybe, a recorded cost.
    fn fact(
        model: Option<&str>,
        time: &str,
        input: u64,
        output: u64,
        usd: Option<f64>,
    ) -> CountedUsage {
        let fact = UsageFact {
            key: String::new(),
            merge: Merge::Each,
            model: model.map(str::to_owned),
            time: None,
            tokens: Tokens {
                input,
                output,
                ..Tokens::default()
            },
            n_requests: Some(1),
            cost_usd: usd,
        };
        CountedUsage {
            model: fact.model.as_deref().map(Arc::from),
            figures: Figures::of(fact.tokens, cost(&fact, PriceTable::builtin())),
            first_ms: at(time),
            last_ms: at(time),
            quarters: Vec::new(),
            agent_runtime: "claude-code".into(),
            person: "alice.test".into(),
            work: Some(Work {
                conversation: "c1".into(),
                machine: "laptop".into(),
                project: Some("/home/a/proj".into()),
            }),
        }
    }

    fn shape(report: UsageReport, by: Option<UsageBy>, zone: &str) -> Shape {
        Shape {
            report,
            by,
            zone: Zone::parse(zone).unwrap_or_else(|e| panic!("{e}")),
            family: false,
        }
    }

    fn keys(res: &UsageResponse) -> Vec<(String, Option<String>, u64)> {
        res.rows
            .iter()
            .map(|r| (r.key.clone(), r.group.clone(), r.totals.input_tokens))
            .collect()
    }

    #[test]
    fn days_are_cut_at_midnight_in_the_asked_offset() {
        // 22:30 and 23:59 UTC on May 1st are May 2nd at +02:00; 21:59 is not.
        let facts = [
            fact(Some("claude-opus-4-6"), "2026-05-01T21:59:00Z", 1, 0, None),
            fact(Some("claude-opus-4-6"), "2026-05-01T22:30:00Z", 10, 0, None),
            fact(
                Some("claude-opus-4-6"),
                "2026-05-01T23:59:00Z",
                100,
                0,
                None,
            ),
        ];
        let table = PriceTable::builtin();
        let res = report(&facts, &shape(UsageReport::Daily, None, "+02:00"), table, 0);
        assert_eq!(res.timezone, "+02:00");
        assert_eq!(
            keys(&res),
            [
                ("2026-05-01".to_owned(), None, 1),
                ("2026-05-02".to_owned(), None, 110)
            ]
        );
        let utc = report(&facts, &shape(UsageReport::Daily, None, "UTC"), table, 0);
        assert_eq!(keys(&utc), [("2026-05-01".to_owned(), None, 111)]);
        // West of UTC the same instants fall a day earlier.
        let west = report(&facts, &shape(UsageReport::Daily, None, "-0530"), table, 0);
        assert_eq!(keys(&west), [("2026-05-01".to_owned(), None, 111)]);
        assert_eq!(west.timezone, "-05:30");
    }

    #[test]
    fn weeks_start_on_monday_and_months_are_the_zones() {
        // 2026-05-03 is a Sunday; 2026-05-04 a Monday.
        let facts = [
            fact(None, "2026-05-03T12:00:00Z", 1, 0, None),
            fact(None, "2026-05-04T12:00:00Z", 2, 0, None),
            fact(None, "2026-04-30T23:30:00Z", 4, 0, None),
        ];
        let table = PriceTable::builtin();
        let weekly = report(&facts, &shape(UsageReport::Weekly, None, "UTC"), table, 0);
        assert_eq!(
            keys(&weekly),
            [
                ("2026-04-27".to_owned(), None, 5),
                ("2026-05-04".to_owned(), None, 2)
            ]
        );
        let monthly = report(
            &facts,
            &shape(UsageReport::Monthly, None, "+01:00"),
            table,
            0,
        );
        assert_eq!(keys(&monthly), [("2026-05".to_owned(), None, 7)]);
    }

    #[test]
    fn a_recorded_cost_wins_a_known_model_is_priced_an_unknown_one_is_listed() {
        let facts = [
            // Opus 4.6 at $5 / $25 per million: 1M in + 1M out = $30.
            fact(
                Some("claude-opus-4-6"),
                "2026-05-01T10:00:00Z",
                1_000_000,
                1_000_000,
                None,
            ),
            // The agent said $0.42: that, whatever the table says.
            fact(
                Some("claude-opus-4-6"),
                "2026-05-01T11:00:00Z",
                1_000_000,
                0,
                Some(0.42),
            ),
            fact(Some("qwen3.7-plus"), "2026-05-01T12:00:00Z", 7, 3, None),
            fact(None, "2026-05-01T13:00:00Z", 5, 0, None),
        ];
        let table = PriceTable::builtin();
        let res = report(
            &facts,
            &shape(UsageReport::Daily, Some(UsageBy::Model), "UTC"),
            table,
            2,
        );
        let by_group: Vec<(Option<&str>, f64, Vec<String>)> = res
            .rows
            .iter()
            .map(|r| {
                (
                    r.group.as_deref(),
                    (r.totals.cost_usd * 1e6).round() / 1e6,
                    r.totals.unpriced_models.clone(),
                )
            })
            .collect();
        assert_eq!(
            by_group,
            [
                (None, 0.0, vec!["unknown".to_owned()]),
                (Some("claude-opus-4-6"), 30.42, vec![]),
                (Some("qwen3.7-plus"), 0.0, vec!["qwen3.7-plus".to_owned()]),
            ]
        );
        assert_eq!(res.totals.input_tokens, 2_000_012);
        assert_eq!(res.totals.output_tokens, 1_000_003);
        assert_eq!((res.totals.cost_usd * 1e6).round() / 1e6, 30.42);
        assert_eq!(res.totals.unpriced_models, ["qwen3.7-plus", "unknown"]);
        assert_eq!(res.n_refused, 2);
        assert_eq!(res.price_table, table.as_of());
    }

    #[test]
    fn sessions_come_in_order_of_last_activity() {
        let in_conversation = |mut f: CountedUsage, c: &str| {
            if let Some(w) = f.work.as_mut() {
                w.conversation = c.into();
            }
            f
        };
        let a = in_conversation(fact(None, "2026-05-02T10:00:00Z", 1, 0, None), "ca");
        let b = in_conversation(fact(None, "2026-05-01T10:00:00Z", 2, 0, None), "cb");
        let res = report(
            &[a, b],
            &shape(UsageReport::Session, None, "UTC"),
            PriceTable::builtin(),
            0,
        );
        assert_eq!(
            keys(&res),
            [("cb".to_owned(), None, 2), ("ca".to_owned(), None, 1)]
        );
    }

    #[test]
    fn a_family_report_puts_each_row_under_its_member_and_names_no_unreadable_work() {
        let mine = fact(Some("claude-opus-4-6"), "2026-05-01T10:00:00Z", 1, 0, None);
        let mut theirs = fact(Some("claude-opus-4-6"), "2026-05-01T11:00:00Z", 2, 0, None);
        theirs.person = "bob.test".into();
        theirs.work = None;
        let facts = [mine, theirs];
        let table = PriceTable::builtin();
        let mut family = shape(UsageReport::Session, Some(UsageBy::Project), "UTC");
        family.family = true;
        let res = report(&facts, &family, table, 0);
        let rows: Vec<(&str, Option<&str>, Option<&str>, u64)> = res
            .rows
            .iter()
            .map(|r| {
                (
                    r.key.as_str(),
                    r.person.as_deref(),
                    r.group.as_deref(),
                    r.totals.input_tokens,
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("c1", Some("alice.test"), Some("/home/a/proj"), 1),
                (NOT_SHARED, Some("bob.test"), None, 2),
            ]
        );
        let by_person = report(
            &facts,
            &Shape {
                by: Some(UsageBy::Person),
                ..shape(UsageReport::Daily, None, "UTC")
            },
            table,
            0,
        );
        let people: Vec<(Option<&str>, Option<&str>, u64)> = by_person
            .rows
            .iter()
            .map(|r| {
                (
                    r.group.as_deref(),
                    r.person.as_deref(),
                    r.totals.input_tokens,
                )
            })
            .collect();
        assert_eq!(
            people,
            [(Some("alice.test"), None, 1), (Some("bob.test"), None, 2)]
        );
    }

    #[test]
    fn an_hours_sum_splits_by_quarter_where_a_zones_day_ends_inside_it() {
        // 18:10 to 18:50 UTC: midnight at +05:30 is 18:30 UTC.
        let quarter = |input| {
            Figures::of(
                Tokens {
                    input,
                    ..Tokens::default()
                },
                Some(1.0),
            )
        };
        let mut hour = fact(Some("claude-opus-4-6"), "2026-05-01T18:10:00Z", 0, 0, None);
        hour.last_ms = at("2026-05-01T18:50:00Z");
        hour.quarters = vec![
            (at("2026-05-01T18:00:00Z"), quarter(1)),
            (at("2026-05-01T18:15:00Z"), quarter(10)),
            (at("2026-05-01T18:30:00Z"), quarter(100)),
            (at("2026-05-01T18:45:00Z"), quarter(1000)),
        ];
        hour.figures = hour
            .quarters
            .iter()
            .fold(Figures::default(), |mut f, (_, q)| {
                f.add(q);
                f
            });
        let table = PriceTable::builtin();
        let days = |zone| {
            keys(&report(
                &[hour.clone()],
                &shape(UsageReport::Daily, None, zone),
                table,
                0,
            ))
        };
        assert_eq!(
            days("Asia/Kolkata"),
            [
                ("2026-05-01".into(), None, 11),
                ("2026-05-02".into(), None, 1100)
            ]
        );
        // Where the day does not end inside it, the hour is one row.
        assert_eq!(days("+02:00"), [("2026-05-01".into(), None, 1111)]);
        assert_eq!(days("UTC"), [("2026-05-01".into(), None, 1111)]);
        let res = report(
            &[hour.clone()],
            &shape(UsageReport::Daily, None, "+05:30"),
            table,
            0,
        );
        assert_eq!(res.totals.input_tokens, 1111);
        assert!((res.totals.cost_usd - 4.0).abs() < 1e-9);
        // A report that takes hours whole reads as much without the
        // quarters; one by day, week or month would not, of the hour in
        // which Monday 2026-06-01 begins in Kolkata.
        let shift = at("2026-05-31T18:00:00Z") - at("2026-05-01T18:00:00Z");
        hour.first_ms += shift;
        hour.last_ms += shift;
        for (start, _) in &mut hour.quarters {
            *start += shift;
        }
        let whole = CountedUsage {
            quarters: Vec::new(),
            ..hour.clone()
        };
        for kind in [
            UsageReport::Daily,
            UsageReport::Weekly,
            UsageReport::Monthly,
            UsageReport::Session,
            UsageReport::Blocks,
        ] {
            let kolkata = shape(kind, None, "Asia/Kolkata");
            let same = report(std::slice::from_ref(&hour), &kolkata, table, 0)
                == report(std::slice::from_ref(&whole), &kolkata, table, 0);
            assert_eq!(same, takes_hours_whole(kind), "{kind:?}");
        }
    }

    #[test]
    fn a_block_takes_an_hours_sum_whole_and_ends_five_hours_after_its_start() {
        let h = |t: &str| at(&format!("2026-05-01T{t}Z"));
        // A response at 10:05 starts a block at 10:00; an hour's sum from
        // 10:20 to 10:58 is in it; 15:00 is too, a millisecond later not.
        for (next, blocks) in [("15:00:00.000", 1), ("15:00:00.001", 2)] {
            let got = block_starts([
                (h("10:05:00"), h("10:05:00")),
                (h("10:20:00"), h("10:58:00")),
                (h(next), h(next)),
            ]);
            assert_eq!(got.len(), blocks, "after {next}");
            assert_eq!(got[0], h("10:00:00"));
        }
    }

    #[test]
    fn billing_blocks_start_at_the_hour_last_five_hours_and_end_after_a_gap() {
        let h = |t: &str| at(&format!("2026-05-01T{t}Z"));
        let cases: [(&str, &[&str], &[&str]); 6] = [
            ("nothing", &[], &[]),
            ("one response", &["09:41:00"], &["09:00:00"]),
            (
                "within five hours of the hour",
                &["09:41:00", "11:00:00", "13:59:59"],
                &["09:00:00"],
            ),
            (
                "five hours in is the block's still; past them, the next from its hour",
                &["09:41:00", "13:00:00", "14:00:00", "14:10:00"],
                &["09:00:00", "14:00:00"],
            ),
            (
                "a gap of more than five hours",
                &["00:10:00", "05:20:00"],
                &["00:00:00", "05:00:00"],
            ),
            (
                "steady work: a block each five hours",
                &["00:30:00", "04:30:00", "05:05:00", "09:30:00", "10:01:00"],
                &["00:00:00", "05:00:00", "10:00:00"],
            ),
        ];
        for (what, times, want) in cases {
            let got = block_starts(times.iter().map(|t| (h(t), h(t))));
            let want: Vec<i64> = want.iter().map(|t| h(t)).collect();
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn a_blocks_report_keys_each_block_by_its_start_in_the_zone_per_member() {
        let mut facts = vec![
            fact(None, "2026-05-01T09:41:00Z", 1, 0, None),
            fact(None, "2026-05-01T13:30:00Z", 2, 0, None),
            fact(None, "2026-05-01T14:10:00Z", 4, 0, None),
        ];
        let res = report(
            &facts,
            &shape(UsageReport::Blocks, None, "+05:30"),
            PriceTable::builtin(),
            0,
        );
        assert_eq!(
            keys(&res),
            [
                ("2026-05-01 14:30".to_owned(), None, 3),
                ("2026-05-01 19:30".to_owned(), None, 4),
            ]
        );
        // Bob's response at 12:00 is in a block of his own.
        let mut bobs = fact(None, "2026-05-01T12:00:00Z", 8, 0, None);
        bobs.person = "bob.test".into();
        facts.push(bobs);
        let family = Shape {
            family: true,
            ..shape(UsageReport::Blocks, None, "UTC")
        };
        let res = report(&facts, &family, PriceTable::builtin(), 0);
        let rows: Vec<(&str, Option<&str>, u64)> = res
            .rows
            .iter()
            .map(|r| (r.key.as_str(), r.person.as_deref(), r.totals.input_tokens))
            .collect();
        assert_eq!(
            rows,
            [
                ("2026-05-01 09:00", Some("alice.test"), 3),
                ("2026-05-01 12:00", Some("bob.test"), 8),
                ("2026-05-01 14:00", Some("alice.test"), 4),
            ]
        );
    }

    #[test]
    fn zones_are_utc_fixed_offsets_or_names_of_the_tz_database() {
        for (given, name) in [
            ("UTC", "UTC"),
            ("z", "UTC"),
            ("Z", "UTC"),
            ("+00:00", "UTC"),
            ("+02:00", "+02:00"),
            ("+0200", "+02:00"),
            ("+02", "+02:00"),
            ("-05:30", "-05:30"),
            ("+14:00", "+14:00"),
            ("Europe/Berlin", "Europe/Berlin"),
            (
                "America/Argentina/Buenos_Aires",
                "America/Argentina/Buenos_Aires",
            ),
            ("Etc/GMT+5", "Etc/GMT+5"),
        ] {
            let got = Zone::parse(given).map(|z| z.name()).ok();
            assert_eq!(got.as_deref(), Some(name), "{given}");
        }
        for bad in [
            "Mars/Olympus",
            "Europe/Berlin/Mitte",
            "../../../etc/passwd",
            "/usr/share/zoneinfo/UTC",
            "Europe/../Europe/Berlin",
            "Europe//Berlin",
            "Europe/Berlin\0",
            "",
            "+2",
            "+02:0",
            "02:00",
            "+25:00",
            "+02:60",
            "+0a:00",
            "+02::00",
        ] {
            let err = Zone::parse(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains("Europe/Paris"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_named_zones_days_follow_its_rules_across_a_dst_change() {
        // Berlin springs forward on 2026-03-29 at 01:00 UTC (02:00 CET to
        // 03:00 CEST): that day runs from 23:00 UTC the day before to 22:00
        // UTC, 23 hours; it falls back on 2026-10-25, a day of 25 hours.
        let berlin = Zone::parse("Europe/Berlin").unwrap_or_else(|e| panic!("{e}"));
        let facts = [
            fact(None, "2026-03-28T22:59:00Z", 1, 0, None),
            fact(None, "2026-03-28T23:00:00Z", 10, 0, None),
            fact(None, "2026-03-29T21:59:00Z", 100, 0, None),
            fact(None, "2026-03-29T22:00:00Z", 1_000, 0, None),
        ];
        let res = report(
            &facts,
            &shape(UsageReport::Daily, None, "Europe/Berlin"),
            PriceTable::builtin(),
            0,
        );
        assert_eq!(res.timezone, "Europe/Berlin");
        assert_eq!(
            keys(&res),
            [
                ("2026-03-28".to_owned(), None, 1),
                ("2026-03-29".to_owned(), None, 110),
                ("2026-03-30".to_owned(), None, 1_000),
            ]
        );
        let ok = |s: &str, edge| instant(s, &berlin, edge).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok("2026-03-29", Edge::Since), at("2026-03-28T23:00:00Z"));
        assert_eq!(ok("2026-03-29", Edge::Until), at("2026-03-29T22:00:00Z"));
        assert_eq!(ok("2026-10-25", Edge::Since), at("2026-10-24T22:00:00Z"));
        assert_eq!(ok("2026-10-25", Edge::Until), at("2026-10-25T23:00:00Z"));
        // A block's start reads on the wall clock of its day.
        let blocks = report(
            &facts[2..],
            &shape(UsageReport::Blocks, None, "Europe/Berlin"),
            PriceTable::builtin(),
            0,
        );
        assert_eq!(blocks.rows[0].key, "2026-03-29 23:00");
    }

    #[test]
    fn a_day_bounds_a_range_in_the_zone_and_an_instant_is_itself() {
        let zone = Zone::parse("+02:00").unwrap_or_else(|e| panic!("{e}"));
        let ok = |s: &str, edge| instant(s, &zone, edge).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok("2026-05-02", Edge::Since), at("2026-05-01T22:00:00Z"));
        assert_eq!(ok("2026-05-02", Edge::Until), at("2026-05-02T22:00:00Z"));
        assert_eq!(
            ok("2026-05-02T10:00:00Z", Edge::Until),
            at("2026-05-02T10:00:00Z")
        );
        assert!(instant("last tuesday", &zone, Edge::Since).is_err());
    }
}
