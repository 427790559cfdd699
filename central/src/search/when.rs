//! Time in queries and in what they find.
//!
//! A date named in a query: "what did we deploy on 7 July, 2023",
//! "the outage in March 2024", "2024-03-07". Search ranks what happened
//! then first: the runs started within the date (a few days either side)
//! come before the rest, which still follow.
//!
//! A date with a year names one window: on the LoCoMo dev half (79 of 760
//! questions name such a date, sessions dated as the data dates them):
//! hybrid Recall@10 0.782 -> 0.800, and within the first 20 distinct turns
//! 0.810 -> 0.829. The window's slack (0 / 3 / 10 days) gave 0.796 / 0.799
//! / 0.799 offline. A month without a year ("camping in June") names that
//! month in every year: among the hits ranked, those of runs started then
//! come first (`month_without_year`, `in_month`); on LoCoMo dev 3 tuning
//! and 2 held-out questions name one, and this puts an evidence session
//! first for 2 of the 3 and both of the 2, which had none first ("may"
//! is also a verb, so "May" counts only after "in", "during" or "of").
//!
//! A time relative to today ("what did we fix yesterday", "last week",
//! "3 days ago", "last Tuesday") is read against the server's date (UTC,
//! a day of slack for the asker's time zone) and ranks that time's runs
//! first like a date (`find_relative`). LoCoMo cannot measure it: its
//! questions' "last year" is relative to the conversation, not to today.
//!
//! A question asking when ("When did we move to tokio?") is answered by a
//! passage that says when: "yesterday", "two weeks ago", "last Friday", a
//! date. Such hits are lifted (`lift_timed`), the answer-type match of
//! question answering systems. On the LoCoMo dev tuning split, 82% of the
//! evidence hits among "when" questions' first 20 mention a time against
//! 22% of the others; lifting them by 0.5 raised grouped session hit@1
//! from 0.749 to 0.760 (0.3: 0.757, 1.0: 0.752), chunk Recall@10
//! unchanged.

use std::sync::LazyLock;

use regex::{Captures, Regex};
use time::{Date, Duration, Month, Time};

use crate::index::IndexHit;

/// Days either side of the named date or month: time zones, and a
/// conversation about a day held the day after.
pub(crate) const SLACK_DAYS: i64 = 3;

/// The date a query names, and the query without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dated {
    /// The query with the date (and a preposition before it) taken out;
    /// the whole query when nothing else is left.
    pub rest: String,
    /// Milliseconds since the epoch: start inclusive, end exclusive, slack
    /// included.
    pub since_ms: i64,
    pub until_ms: i64,
}

/// The months' names but May, which is more often a verb ("may I …").
const MONTHS_BUT_MAY: &str =
    "january|february|march|april|june|july|august|september|october|november|december";

static DATE: LazyLock<Regex> = LazyLock::new(|| {
    let day = r"(\d{1,2})(?:st|nd|rd|th)?";
    // A month's name or its abbreviation.
    let month =
        format!(r"({MONTHS_BUT_MAY}|may|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)\.?");
    let year = r"(\d{4})";
    let pattern = format!(
        r"(?ix)\b (?:(?:on|in|during|of|since)\s+)?
        (?: {day}\s+{month}(?:,\s*|\s+){year}
          | {month}\s+{day}(?:,\s*|\s+){year}
          | {month},?\s+{year}
          | (\d{{4}})-(\d{{2}})-(\d{{2}})
        )\b"
    );
    Regex::new(&pattern).expect("date pattern")
});

/// How much a hit that mentions a time gains when the query asks when:
/// this share of its score (of its magnitude: a cosine may be negative).
pub(crate) const TIMED_LIFT: f32 = 0.5;

/// A question asking when: "When did …", "What date …", "How long ago …".
static ASKS_WHEN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\W*(?:when|since when|what (?:date|day|year|month|time)|how long ago)\b")
        .expect("question pattern")
});

/// A time in a passage: a date, a weekday, a month, a year, or a time
/// relative to when it was said ("yesterday", "two weeks ago", "last
/// summer"). "May" counts only as "in May" or before a day, and a year
/// only from 1990 to 2039 (2048 is more often a size than a year).
static MENTIONS_TIME: LazyLock<Regex> = LazyLock::new(|| {
    let unit = "days?|weeks?|weekends?|months?|years?|nights?|hours?";
    let weekday = "monday|tuesday|wednesday|thursday|friday|saturday|sunday";
    let count = r"\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a few|few|a couple of|couple of|several";
    let pattern = format!(
        r"(?ix)\b(?:
            yesterday|today|tonight|tomorrow|recently|the\ other\ day
          | this\ (?:morning|afternoon|evening)|last\ night
          | (?:{count})\ (?:{unit})\ ago
          | (?:last|next|this|past)\ (?:{unit}|{weekday}|spring|summer|fall|autumn|winter)
          | on\ (?:{weekday})
          | {MONTHS_BUT_MAY}
          | in\ may|may\ \d{{1,2}}
          | 199\d|20[0-3]\d
        )\b"
    );
    Regex::new(&pattern).expect("time pattern")
});

/// Whether `query` asks when something happened.
pub(crate) fn asks_when(query: &str) -> bool {
    ASKS_WHEN.is_match(query)
}

/// Whether `text` says when something happened.
pub(crate) fn mentions_time(text: &str) -> bool {
    MENTIONS_TIME.is_match(text)
}

/// For a query asking when, lifts the hits that mention a time by
/// `TIMED_LIFT` and orders the hits by score again (ties keep their order);
/// any other query's hits are left as they are.
pub(crate) fn lift_timed(query: &str, hits: &mut [IndexHit]) {
    if !asks_when(query) {
        return;
    }
    for hit in hits.iter_mut() {
        if mentions_time(&hit.text) {
            hit.score += hit.score.abs() * TIMED_LIFT;
        }
    }
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
}

/// The first date in `query` that names a real day or month, if any; else
/// a time it names relative to today (UTC), see `find_relative`.
#[cfg(test)]
pub(crate) fn find(query: &str) -> Option<Dated> {
    find_at(query, time::OffsetDateTime::now_utc().date())
}

/// `find`, with `today` given.
pub(crate) fn find_at(query: &str, today: Date) -> Option<Dated> {
    DATE.captures_iter(query)
        .find_map(|c| {
            let (start, end) = since(&c, window(&c)?, today)?;
            dated(query, c.get(0)?, start, end, SLACK_DAYS)
        })
        .or_else(|| find_relative(query, today))
}

/// "since <a time>" runs from that time's start to the end of today
/// ("errors since last week"); any other window is as named.
fn since(c: &Captures, (start, end): (Date, Date), today: Date) -> Option<(Date, Date)> {
    let said = c.get(0)?.as_str();
    if said
        .get(..5)
        .is_some_and(|w| w.eq_ignore_ascii_case("since"))
    {
        Some((start, end.max(today.next_day()?)))
    } else {
        Some((start, end))
    }
}

/// Days either side of a time named relative to today: time zones.
pub(crate) const RELATIVE_SLACK_DAYS: i64 = 1;

static RELATIVE: LazyLock<Regex> = LazyLock::new(|| {
    let count = "\\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten";
    let weekday = "monday|tuesday|wednesday|thursday|friday|saturday|sunday";
    let pattern = format!(
        r"(?ix)\b (?:(?:on|in|during|from|since)\s+)?
        (?: (today|yesterday)
          | (this|last)\s+(week|month|year)
          | ({count})\s+(days?|weeks?|months?)\s+ago
          | (?:last|past)\s+({count})\s+(days|weeks|months)
          | last\s+({weekday})
        )\b"
    );
    Regex::new(&pattern).expect("relative time pattern")
});

/// A time `query` names relative to `today`: "today", "yesterday", "this
/// week" or "last week" (weeks start on Monday), "this month", "last
/// month", "this year", "last year", "3 days ago", "two weeks ago" (that
/// week), "a month ago" (that month), "last 7 days", "past two weeks",
/// "last Tuesday" (the latest Tuesday before today). A week, month or year
/// that is still running ends today, and so does any time after "since".
pub(crate) fn find_relative(query: &str, today: Date) -> Option<Dated> {
    let c = RELATIVE.captures(query)?;
    let text = |i: usize| c.get(i).map(|m| m.as_str().to_ascii_lowercase());
    let count = |i: usize| -> Option<i64> {
        let t = text(i)?;
        let words = [
            "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        ];
        match t.as_str() {
            "a" | "an" => Some(1),
            t => t
                .parse()
                .ok()
                .or_else(|| words.iter().position(|w| *w == t).map(|n| n as i64)),
        }
    };
    let tomorrow = today.next_day()?;
    let monday = today.checked_sub(Duration::days(i64::from(
        today.weekday().number_days_from_monday(),
    )))?;
    let month_start = |d: Date| d.replace_day(1).ok();
    let months_back = |d: Date, n: i64| -> Option<Date> {
        let mut first = month_start(d)?;
        for _ in 0..n {
            first = month_start(first.previous_day()?)?;
        }
        Some(first)
    };
    let (start, end) = if let Some(day) = text(1) {
        match day.as_str() {
            "today" => (today, tomorrow),
            _ => (today.previous_day()?, today),
        }
    } else if let (Some(which), Some(unit)) = (text(2), text(3)) {
        let this = match unit.as_str() {
            "week" => monday,
            "month" => month_start(today)?,
            _ => Date::from_calendar_date(today.year(), Month::January, 1).ok()?,
        };
        if which == "this" {
            (this, tomorrow)
        } else {
            let last = match unit.as_str() {
                "week" => this.checked_sub(Duration::days(7))?,
                "month" => months_back(today, 1)?,
                _ => Date::from_calendar_date(today.year() - 1, Month::January, 1).ok()?,
            };
            (last, this)
        }
    } else if let (Some(n), Some(unit)) = (count(4), text(5)) {
        if unit.starts_with("day") {
            let day = today.checked_sub(Duration::days(n))?;
            (day, day.next_day()?)
        } else if unit.starts_with("week") {
            let week = monday.checked_sub(Duration::weeks(n))?;
            (week, week.checked_add(Duration::days(7))?)
        } else {
            let first = months_back(today, n)?;
            (first, months_back(today, n - 1)?)
        }
    } else if let (Some(n), Some(unit)) = (count(6), text(7)) {
        let start = match unit.as_str() {
            "days" => today.checked_sub(Duration::days(n))?,
            "weeks" => today.checked_sub(Duration::weeks(n))?,
            _ => months_back(today, n)?
                .replace_day(today.day().min(28))
                .ok()?,
        };
        (start, tomorrow)
    } else {
        let named = text(8)?;
        let mut day = today.previous_day()?;
        while !day.weekday().to_string().eq_ignore_ascii_case(&named) {
            day = day.previous_day()?;
        }
        (day, day.next_day()?)
    };
    let (start, end) = since(&c, (start, end), today)?;
    if start >= end {
        return None;
    }
    dated(query, c.get(0)?, start, end, RELATIVE_SLACK_DAYS)
}

/// The `Dated` of `query` whose words `found` name the days from `start`
/// to `end` (exclusive), `slack` days either side.
fn dated(
    query: &str,
    found: regex::Match<'_>,
    start: Date,
    end: Date,
    slack: i64,
) -> Option<Dated> {
    let slack = Duration::days(slack);
    let (since, until) = (start.checked_sub(slack)?, end.checked_add(slack)?);
    let rest = format!("{} {}", &query[..found.start()], &query[found.end()..]);
    let rest = rest.split_whitespace().collect::<Vec<_>>().join(" ");
    Some(Dated {
        rest: if rest.is_empty() {
            query.to_owned()
        } else {
            rest
        },
        since_ms: millis(since),
        until_ms: millis(until),
    })
}

/// The time a query names: a window (a date, or a time relative to
/// today: its runs are searched first) or a month of any year (its runs'
/// hits lead the ranked hits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Named {
    Window(Dated),
    Month(Month),
}

/// What time `query` names, if any: a window when it names one (`find`),
/// else a month without a year. A date with a year that the calendar does
/// not hold ("31 February, 2023") names neither.
#[cfg(test)]
pub(crate) fn named(query: &str) -> Option<Named> {
    named_at(query, time::OffsetDateTime::now_utc().date())
}

/// `named`, with `today` given.
pub(crate) fn named_at(query: &str, today: time::Date) -> Option<Named> {
    if let Some(dated) = find_at(query, today) {
        return Some(Named::Window(dated));
    }
    if DATE.is_match(query) {
        return None;
    }
    month_without_year(query).map(Named::Month)
}

/// A month the query names ("camping in June", "the deal in December").
/// "May" counts only after "in", "during" or "of". Ask `named`: a month
/// inside a date with a year is that date's.
fn month_without_year(query: &str) -> Option<Month> {
    static MONTH_ONLY: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(&format!(
            r"(?i)\b(?:({MONTHS_BUT_MAY})|(?:in|during|of)\s+(may))\b"
        ))
        .expect("month pattern")
    });
    let c = MONTH_ONLY.captures(query)?;
    month(c.get(1).or_else(|| c.get(2))?.as_str())
}

/// Whether a run started at `started_at` (RFC 3339) falls in `month` of
/// any year, `SLACK_DAYS` either side.
pub(crate) fn in_month(started_at: &str, month: Month) -> bool {
    let Some(at) = kith_shared::timestamp::parse(started_at) else {
        return false;
    };
    let slack = Duration::days(SLACK_DAYS);
    // A run stored at the calendar's edge (9999-12-31) has no day after.
    [at.checked_sub(slack), Some(at), at.checked_add(slack)]
        .into_iter()
        .flatten()
        .any(|t| t.month() == month)
}

/// The first day named and the day after the window.
fn window(c: &Captures) -> Option<(Date, Date)> {
    let num = |i: usize| c.get(i)?.as_str().parse::<i32>().ok();
    let month = |i: usize| month(c.get(i)?.as_str());
    let day = |y: i32, m: Month, d: i32| Date::from_calendar_date(y, m, u8::try_from(d).ok()?).ok();
    // "7 July, 2023" or "July 7, 2023": one of the two matched.
    if let (Some(d), Some(m), Some(y)) =
        (num(1).or(num(5)), month(2).or(month(4)), num(3).or(num(6)))
    {
        let date = day(y, m, d)?;
        return Some((date, date.next_day()?));
    }
    if let (Some(m), Some(y)) = (month(7), num(8)) {
        let first = day(y, m, 1)?;
        let next = match m {
            Month::December => day(y + 1, Month::January, 1)?,
            _ => day(y, m.next(), 1)?,
        };
        return Some((first, next));
    }
    let m = Month::try_from(u8::try_from(num(10)?).ok()?).ok()?;
    let date = day(num(9)?, m, num(11)?)?;
    Some((date, date.next_day()?))
}

fn month(name: &str) -> Option<Month> {
    const PREFIXES: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let prefix = name.get(..3)?.to_ascii_lowercase();
    let at = PREFIXES.iter().position(|&p| p == prefix)?;
    Month::try_from(at as u8 + 1).ok()
}

fn millis(date: Date) -> i64 {
    kith_shared::timestamp::epoch_ms(date.with_time(Time::MIDNIGHT).assume_utc())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::rerank::tests::hit;

    fn day_ms(y: i32, m: Month, d: u8) -> i64 {
        millis(Date::from_calendar_date(y, m, d).expect("a real day"))
    }

    const SLACK_MS: i64 = SLACK_DAYS * 86_400_000;

    #[test]
    fn days_months_and_iso_dates_are_found_and_taken_out() {
        let cases = [
            (
                "What did Gina find on 1 February, 2023?",
                "What did Gina find ?",
                (2023, Month::February, 1),
                (2023, Month::February, 2),
            ),
            (
                "topic on December 1,2023 between us",
                "topic between us",
                (2023, Month::December, 1),
                (2023, Month::December, 2),
            ),
            (
                "book finished 8th December, 2023",
                "book finished",
                (2023, Month::December, 8),
                (2023, Month::December, 9),
            ),
            (
                "deploy 2024-03-07 rollback",
                "deploy rollback",
                (2024, Month::March, 7),
                (2024, Month::March, 8),
            ),
            (
                "outage in Dec. 2023",
                "outage",
                (2023, Month::December, 1),
                (2024, Month::January, 1),
            ),
            (
                "what failed in February 2024",
                "what failed",
                (2024, Month::February, 1),
                (2024, Month::March, 1),
            ),
        ];
        for (query, rest, (y0, m0, d0), (y1, m1, d1)) in cases {
            let found = find(query).unwrap_or_else(|| panic!("no date in {query:?}"));
            assert_eq!(found.rest, rest, "{query}");
            assert_eq!(found.since_ms, day_ms(y0, m0, d0) - SLACK_MS, "{query}");
            assert_eq!(found.until_ms, day_ms(y1, m1, d1) + SLACK_MS, "{query}");
        }
    }

    #[test]
    fn no_window_without_a_real_day_or_month_the_calendar_holds() {
        for query in [
            "May I see the 2023 logs?",
            "what broke in June",
            "build 20230701 failed",
            "on 31 February, 2023",
            "2024-13-01 migration",
            "on 30 December, 9999",
            "9999-12-31",
            "cargo build --release",
        ] {
            assert_eq!(find(query), None, "{query}");
        }
    }

    #[test]
    fn times_relative_to_today_are_found_and_taken_out() {
        // A Thursday.
        let today = Date::from_calendar_date(2026, Month::November, 26).expect("a day");
        const DAY: i64 = 86_400_000;
        let slack = RELATIVE_SLACK_DAYS * DAY;
        let ms = |m: Month, d: u8| day_ms(2026, m, d);
        let cases = [
            (
                "what did we fix yesterday",
                "what did we fix",
                ms(Month::November, 25),
                ms(Month::November, 26),
            ),
            (
                "deploys today",
                "deploys",
                ms(Month::November, 26),
                ms(Month::November, 27),
            ),
            (
                "the outage last week",
                "the outage",
                ms(Month::November, 16),
                ms(Month::November, 23),
            ),
            (
                "this week's merges",
                "'s merges",
                ms(Month::November, 23),
                ms(Month::November, 27),
            ),
            (
                "invoices from last month",
                "invoices",
                ms(Month::October, 1),
                ms(Month::November, 1),
            ),
            (
                "this month",
                "this month",
                ms(Month::November, 1),
                ms(Month::November, 27),
            ),
            (
                "the bug 3 days ago",
                "the bug",
                ms(Month::November, 23),
                ms(Month::November, 24),
            ),
            (
                "two weeks ago",
                "two weeks ago",
                ms(Month::November, 9),
                ms(Month::November, 16),
            ),
            (
                "a month ago the cache",
                "the cache",
                ms(Month::October, 1),
                ms(Month::November, 1),
            ),
            (
                "errors in the last 7 days",
                "errors in the",
                ms(Month::November, 19),
                ms(Month::November, 27),
            ),
            (
                "past two weeks of CI",
                "of CI",
                ms(Month::November, 12),
                ms(Month::November, 27),
            ),
            (
                "standup last Tuesday",
                "standup",
                ms(Month::November, 24),
                ms(Month::November, 25),
            ),
            (
                "review last Thursday",
                "review",
                ms(Month::November, 19),
                ms(Month::November, 20),
            ),
        ];
        for (query, rest, since, until) in cases {
            let found = find_at(query, today).unwrap_or_else(|| panic!("no time in {query:?}"));
            assert_eq!(found.rest, rest, "{query}");
            assert_eq!(
                (found.since_ms, found.until_ms),
                (since - slack, until + slack),
                "{query}"
            );
        }
        let last_year = find_at("tax forms last year", today).expect("last year");
        assert_eq!(last_year.since_ms, day_ms(2025, Month::January, 1) - slack);
        assert_eq!(last_year.until_ms, day_ms(2026, Month::January, 1) + slack);
        // A date with a year comes first; words that only look relative are not.
        let both = find_at("on 7 March, 2024, not yesterday", today).expect("a date");
        assert_eq!(both.since_ms, day_ms(2024, Month::March, 7) - SLACK_MS);
        for query in [
            "the last commit",
            "a few days ago",
            "weekly report",
            "last weekday",
            "in the past",
            "ten years ago",
        ] {
            assert_eq!(find_at(query, today), None, "{query}");
        }
    }

    #[test]
    fn a_month_without_a_year_is_found_and_only_then() {
        for (query, month) in [
            ("When did Melanie go camping in June?", Month::June),
            (
                "what kind of deal did John get in December",
                Month::December,
            ),
            ("the second week of November", Month::November),
            ("releases during May", Month::May),
        ] {
            assert_eq!(named(query), Some(Named::Month(month)), "{query}");
        }
        // A month inside a date is the date's window.
        for query in [
            "what broke on 7 March, 2024",
            "the outage in March 2024",
            "Where was John between August 11 and August 15 2023?",
            "what broke last week in June",
        ] {
            assert!(
                matches!(named(query), Some(Named::Window(_))),
                "{query}: {:?}",
                named(query)
            );
        }
        for query in ["May I see the logs?", "marching orders", "cargo build"] {
            assert_eq!(named(query), None, "{query}");
        }
    }

    #[test]
    fn a_run_is_in_a_month_of_any_year_with_slack() {
        assert!(in_month("2023-06-15T10:00:00Z", Month::June));
        assert!(in_month("2019-06-01T00:00:00Z", Month::June));
        assert!(
            in_month("2023-07-02T10:00:00Z", Month::June),
            "3 days after"
        );
        assert!(
            in_month("2023-05-29T10:00:00Z", Month::June),
            "3 days before"
        );
        assert!(!in_month("2023-07-05T10:00:00Z", Month::June));
        assert!(!in_month("2023-03-15T10:00:00Z", Month::June));
        assert!(!in_month("not a time", Month::June));
        // The calendar's last days: no day after them to look at.
        assert!(in_month("9999-12-30T00:00:00Z", Month::December));
        assert!(!in_month("9999-12-30T00:00:00Z", Month::June));
        assert!(in_month("0000-01-01T00:00:00Z", Month::January));
    }

    #[test]
    fn since_a_time_runs_to_today() {
        // A Thursday.
        let today = Date::from_calendar_date(2026, Month::November, 26).expect("a day");
        let day = 86_400_000;
        let window = |query| {
            let found = find_at(query, today).expect(query);
            (found.rest, found.since_ms, found.until_ms)
        };
        let tomorrow = day_ms(2026, Month::November, 27);
        assert_eq!(
            window("errors since last week"),
            (
                "errors".into(),
                day_ms(2026, Month::November, 16) - day,
                tomorrow + day
            )
        );
        let july_7 = day_ms(2023, Month::July, 7) - SLACK_MS;
        assert_eq!(
            window("Since 7 July, 2023 what broke"),
            ("what broke".into(), july_7, tomorrow + SLACK_MS)
        );
        // "on" keeps the one day, and a date after today is the date.
        let july_8 = day_ms(2023, Month::July, 8) + SLACK_MS;
        assert_eq!(window("on 7 July, 2023").2, july_8);
        assert_eq!(
            window("since 1 March, 2027").2,
            day_ms(2027, Month::March, 2) + SLACK_MS
        );
    }

    #[test]
    fn a_day_and_a_year_are_never_cut_from_one_number() {
        for query in [
            "in February 99999",
            "March 12023",
            "June 20231",
            "on 7 July20231",
        ] {
            assert_eq!(find(query), None, "{query}");
        }
        assert!(find("March 12, 2023").is_some());
        assert!(find("March 12 2023").is_some());
        assert!(find("12 March 2023").is_some());
    }

    #[test]
    fn a_date_the_calendar_lacks_names_no_month_either() {
        assert_eq!(named("on 31 February, 2023"), None);
        assert_eq!(named("what shipped on 30 February 2024"), None);
        assert_eq!(named("camping in June"), Some(Named::Month(Month::June)));
        assert!(matches!(named("on 7 July, 2023"), Some(Named::Window(_))));
    }

    #[test]
    fn a_query_that_is_only_a_date_keeps_its_text() {
        let found = find("on 7 July, 2023").expect("a date");
        assert_eq!(found.rest, "on 7 July, 2023");
        assert_eq!(found.since_ms, day_ms(2023, Month::July, 7) - SLACK_MS);
    }

    #[test]
    fn questions_asking_when_are_told_from_the_rest() {
        for q in [
            "When did Caroline go to the LGBTQ support group?",
            "when was the migration to tokio",
            "What date did we ship 0.3?",
            "what year did the outage happen",
            "How long ago did we drop the cache?",
            "  Since when does CI fail on main?",
        ] {
            assert!(asks_when(q), "{q}");
        }
        for q in [
            "What did Melanie paint recently?",
            "whenever the build fails",
            "Where did John go camping?",
            "what is the date format in logs",
            "how long does the build take",
        ] {
            assert!(!asks_when(q), "{q}");
        }
    }

    #[test]
    fn passages_that_say_when_are_told_from_the_rest() {
        for text in [
            "I went to a LGBTQ support group yesterday",
            "we went camping two weekends ago",
            "I read it last year",
            "the release is next Friday",
            "Last weekend I joined a mentorship program",
            "I went to a council meeting on Tuesday",
            "deployed in May, rolled back in June",
            "it broke in 2023",
            "a few weeks ago we moved to tokio",
        ] {
            assert!(mentions_time(text), "{text}");
        }
        for text in [
            "May I see the logs?",
            "Our group, 'Connected LGBTQ Activists', is great",
            "cargo build --release took 300 seconds",
            "port 8080 is taken",
            "a 2048-token context",
            "in 1850 the first",
            "I loved reading Charlotte's Web as a kid",
        ] {
            assert!(!mentions_time(text), "{text}");
        }
    }

    #[test]
    fn a_when_question_lifts_the_hits_that_say_when_and_nothing_else() {
        let hit = |run: &str, score: f32, text: &str| hit(run, score, text, "2023-05-08T13:56:00Z");
        let hits = || {
            vec![
                hit(
                    "group",
                    1.0,
                    "Our group, 'Connected LGBTQ Activists', meets weekly",
                ),
                hit("went", 0.8, "I went to a LGBTQ support group yesterday"),
                hit("far", 0.3, "We met two years ago"),
            ]
        };
        let ids = |hits: &[IndexHit]| hits.iter().map(|h| h.run_id.clone()).collect::<Vec<_>>();

        let mut asked = hits();
        lift_timed(
            "When did Caroline go to the LGBTQ support group?",
            &mut asked,
        );
        assert_eq!(ids(&asked), ["went", "group", "far"]);
        assert!((asked[0].score - 1.2).abs() < 1e-6);
        assert_eq!(asked[1].score, 1.0);

        // A cosine below zero is lifted too, not pushed further down.
        let mut below = vec![
            hit("far", -0.2, "two years ago"),
            hit("near", -0.15, "no time"),
        ];
        lift_timed("when did we meet", &mut below);
        assert_eq!(ids(&below), ["far", "near"]);
        assert!((below[0].score + 0.1).abs() < 1e-6);

        let mut other = hits();
        lift_timed("What does Caroline's LGBTQ group do?", &mut other);
        assert_eq!(ids(&other), ["group", "went", "far"]);
        assert_eq!(other[1].score, 0.8);
    }
}
