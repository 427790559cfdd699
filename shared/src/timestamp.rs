//! Timestamps as kith stores them: RFC 3339 in UTC with milliseconds
//! (`2026-05-11T08:26:55.123Z`), so that string order is time order.

use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, UtcOffset};

/// Parses any RFC 3339 timestamp and renders it in kith's canonical form.
pub fn normalize(s: &str) -> Option<String> {
    OffsetDateTime::parse(s.trim(), &Rfc3339).ok().map(render)
}

/// Now, in canonical form.
pub fn now() -> String {
    render(OffsetDateTime::now_utc())
}

/// `yyyy-mm` of a canonical timestamp (the blob store's month folder).
pub fn month(canonical: &str) -> &str {
    canonical.get(..7).unwrap_or("0000-00")
}

pub fn render(t: OffsetDateTime) -> String {
    let t = t.to_offset(UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// Parses a canonical or any RFC 3339 timestamp.
pub fn parse(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s.trim(), &Rfc3339).ok()
}

/// Milliseconds since the Unix epoch: what indexes filter time by.
pub fn epoch_ms(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_offsets_and_precision() {
        let cases = [
            ("2026-05-11T08:26:55Z", Some("2026-05-11T08:26:55.000Z")),
            (
                "2026-05-11T10:26:55.5+02:00",
                Some("2026-05-11T08:26:55.500Z"),
            ),
            (
                "2026-05-11T08:26:55.123456Z",
                Some("2026-05-11T08:26:55.123Z"),
            ),
            ("yesterday", None),
            ("", None),
        ];
        for (input, want) in cases {
            assert_eq!(normalize(input).as_deref(), want, "{input}");
        }
        assert_eq!(month("2026-05-11T08:26:55.000Z"), "2026-05");
    }
}
