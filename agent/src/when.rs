//! Times as a person writes them in a flag or a tool argument (`30m`,
//! `12h`, `7d`, `2w`, `today`, `yesterday`, a date `2026-02-01` or RFC
//! 3339) -> the canonical RFC 3339 central takes:
//! `--since`, `--until` and `--expires` of the CLI, `since` and `until` of
//! `kith mcp`.

use time::OffsetDateTime;

/// What `--since`, `--until` and `--expires` accept, for their errors.
pub(crate) const WHEN_HINT: &str =
    "use 30m, 12h, 7d, 2w, today, yesterday, a date (2026-02-01) or RFC 3339, within the years 0 to 9999";

/// `--since` as a person writes it (`30m`, `12h`, `7d`, `2w`, or RFC 3339)
/// -> canonical RFC 3339; `None` for anything else, a duration too long
/// included.
/// A day (`today`, `yesterday`, `2026-02-01`) is its first instant, in UTC.
pub(crate) fn parse_since(s: &str, now: OffsetDateTime) -> Option<String> {
    let s = s.trim();
    if let Some(t) = kith_shared::timestamp::normalize(s) {
        return Some(t);
    }
    if let Some(day) = day(s, now) {
        return rfc3339(day.midnight().assume_utc());
    }
    rfc3339(now.checked_sub(duration(s)?)?)
}

/// `today`, `yesterday` (of `now`, in UTC) or a date `YYYY-MM-DD`.
fn day(s: &str, now: OffsetDateTime) -> Option<time::Date> {
    match s.to_ascii_lowercase().as_str() {
        "today" => Some(now.date()),
        "yesterday" => now.date().previous_day(),
        _ => {
            let format = time::macros::format_description!("[year]-[month]-[day]");
            time::Date::parse(s, format).ok()
        }
    }
}

/// `--expires` as a person writes it (`12h`, `7d`, or RFC 3339) -> RFC 3339.
pub(crate) fn parse_expires(s: &str, now: OffsetDateTime) -> Option<String> {
    if let Some(t) = kith_shared::timestamp::normalize(s) {
        return Some(t);
    }
    rfc3339(now.checked_add(duration(s)?)?)
}

/// `t` in canonical RFC 3339, which has only the years 0 to 9999.
fn rfc3339(t: OffsetDateTime) -> Option<String> {
    (0..=9999)
        .contains(&t.year())
        .then(|| kith_shared::timestamp::render(t))
}

/// `30m`, `12h`, `7d`, `2w`.
fn duration(s: &str) -> Option<time::Duration> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
    let n: i64 = num.parse().ok()?;
    let unit_secs = match unit {
        "s" => 1,
        "m" | "min" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return None,
    };
    Some(time::Duration::seconds(n.checked_mul(unit_secs)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-05-11 12:00:00 UTC);

    #[test]
    fn since_accepts_days() {
        for (input, want) in [
            ("today", "2026-05-11T00:00:00.000Z"),
            ("Yesterday", "2026-05-10T00:00:00.000Z"),
            ("2026-02-01", "2026-02-01T00:00:00.000Z"),
        ] {
            assert_eq!(parse_since(input, NOW).as_deref(), Some(want), "{input}");
        }
        for bad in ["2026-02-30", "2026-2-1", "tomorrowish", "02/01/2026"] {
            assert_eq!(parse_since(bad, NOW), None, "{bad}");
        }
    }

    #[test]
    fn since_accepts_durations_and_timestamps() {
        assert_eq!(
            parse_since("7d", NOW).as_deref(),
            Some("2026-05-04T12:00:00.000Z")
        );
        assert_eq!(
            parse_since("30m", NOW).as_deref(),
            Some("2026-05-11T11:30:00.000Z")
        );
        assert_eq!(
            parse_since("2026-01-01T00:00:00Z", NOW).as_deref(),
            Some("2026-01-01T00:00:00.000Z")
        );
        for bad in ["", "7", "d", "7y", "soon"] {
            assert_eq!(parse_since(bad, NOW), None, "{bad}");
        }
    }

    /// Regression: `--since 5000000d` panicked (a date before the year
    /// -9999), `999999999999999d` overflowed into a wrapped duration, and
    /// `1000000d` gave the year -712, which no RFC 3339 time has.
    #[test]
    fn a_duration_past_the_calendar_is_refused_not_a_panic() {
        let cases: &[(&str, Option<&str>, Option<&str>)] = &[
            (
                "730000d",
                Some("0027-09-08T12:00:00.000Z"),
                Some("4025-01-11T12:00:00.000Z"),
            ),
            ("1000000d", None, Some("4764-04-07T12:00:00.000Z")),
            ("2900000d", None, Some("9966-04-16T12:00:00.000Z")),
            ("5000000d", None, None),
            ("999999999999999d", None, None),
            ("15250284452472w", None, None),
            ("9223372036854775807s", None, None),
            ("99999999999999999999s", None, None),
        ];
        for (input, since, expires) in cases {
            assert_eq!(
                parse_since(input, NOW).as_deref(),
                *since,
                "--since {input}"
            );
            assert_eq!(
                parse_expires(input, NOW).as_deref(),
                *expires,
                "--expires {input}"
            );
        }
    }
}
