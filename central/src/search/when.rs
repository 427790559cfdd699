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
//! first for 2 of the 3 and both of the 2, which had none first. "Last week" names no window without
//! the asker's calendar and is left alone, and "may" is also a verb.
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
pub const SLACK_DAYS: i64 = 3;

/// The date a query names, and the query without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dated {
    /// The query with the date (and a preposition before it) taken out;
    /// the whole query when nothing else is left.
    pub rest: String,
    /// Milliseconds since the epoch: start inclusive, end exclusive, slack
    /// included.
    pub since_ms: i64,
    pub until_ms: i64,
}

const MONTH: &str = "january|february|march|april|may|june|july|august|september|october|\
    november|december|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec";

static DATE: LazyLock<Regex> = LazyLock::new(|| {
    let day = r"(\d{1,2})(?:st|nd|rd|th)?";
    let month = format!(r"({MONTH})\.?");
    let year = r"(\d{4})";
    let pattern = format!(
        r"(?ix)\b (?:(?:on|in|during|of)\s+)?
        (?: {day}\s+{month},?\s*{year}
          | {month}\s+{day},?\s*{year}
          | {month},?\s+{year}
          | (\d{{4}})-(\d{{2}})-(\d{{2}})
        )\b"
    );
    Regex::new(&pattern).expect("date pattern")
});

/// How much a hit that mentions a time gains when the query asks when:
/// this share of its score (of its magnitude: a cosine may be negative).
pub const TIMED_LIFT: f32 = 0.5;

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
          | january|february|march|april|june|july|august|september|october|november|december
          | in\ may|may\ \d{{1,2}}
          | 199\d|20[0-3]\d
        )\b"
    );
    Regex::new(&pattern).expect("time pattern")
});

/// Whether `query` asks when something happened.
pub fn asks_when(query: &str) -> bool {
    ASKS_WHEN.is_match(query)
}

/// Whether `text` says when something happened.
pub fn mentions_time(text: &str) -> bool {
    MENTIONS_TIME.is_match(text)
}

/// For a query asking when, lifts the hits that mention a time by
/// `TIMED_LIFT` and orders the hits by score again (ties keep their order);
/// any other query's hits are left as they are.
pub fn lift_timed(query: &str, hits: &mut [IndexHit]) {
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

/// The first date in `query` that names a real day or month, if any.
pub fn find(query: &str) -> Option<Dated> {
    DATE.captures_iter(query).find_map(|c| {
        let (start, end) = window(&c)?;
        let slack = Duration::days(SLACK_DAYS);
        let (since, until) = (start.checked_sub(slack)?, end.checked_add(slack)?);
        let whole = c.get(0)?;
        let rest = format!("{} {}", &query[..whole.start()], &query[whole.end()..]);
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
    })
}

/// A month the query names without a year ("camping in June", "the deal
/// in December"), when it names no date with a year. "May" counts only
/// after "in", "during" or "of".
pub fn month_without_year(query: &str) -> Option<Month> {
    static MONTH_ONLY: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"(?i)\b(?:(january|february|march|april|june|july|august|september|october|november|december)|(?:in|during|of)\s+(may))\b",
        )
        .expect("month pattern")
    });
    if find(query).is_some() {
        return None;
    }
    let c = MONTH_ONLY.captures(query)?;
    month(c.get(1).or_else(|| c.get(2))?.as_str())
}

/// Whether a run started at `started_at` (RFC 3339) falls in `month` of
/// any year, `SLACK_DAYS` either side.
pub fn in_month(started_at: &str, month: Month) -> bool {
    let Some(at) = kith_shared::timestamp::parse(started_at) else {
        return false;
    };
    let slack = Duration::days(SLACK_DAYS);
    [at - slack, at, at + slack]
        .iter()
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
    (date
        .with_time(Time::MIDNIGHT)
        .assume_utc()
        .unix_timestamp_nanos()
        / 1_000_000) as i64
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
            assert_eq!(month_without_year(query), Some(month), "{query}");
        }
        for query in [
            "May I see the logs?",
            "what broke on 7 March, 2024",
            "the outage in March 2024",
            "Where was John between August 11 and August 15 2023?",
            "what broke last week",
            "marching orders",
        ] {
            assert_eq!(month_without_year(query), None, "{query}");
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
