//! `kith usage`: what your agents spent, by day, week, month or session,
//! as a table (`GET /api/usage`): tokens by kind and dollars, the time
//! zone and the price table's date in its header, and the models it could
//! not price named under it. Only your own usage, unless an admin asks for
//! every member's (`--by person`, `--family`): central decides.

use std::fmt::Write as _;
use std::io::Write as _;

use anyhow::Result;
use kith_proto::{AgentRuntime, UsageBy, UsageQuery, UsageReport, UsageResponse, UsageTotals};
use time::OffsetDateTime;

use crate::client::Client;
use crate::render::term::{printable, Style};
use crate::when::{parse_since, WHEN_HINT};

/// `kith usage`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct UsageArgs {
    /// A row per day (the default), week (from Monday), month, session or
    /// 5-hour billing block.
    #[arg(value_enum, default_value_t = Report::Daily)]
    report: Report,
    /// Split each row by model, agent, machine or project; or, for an
    /// admin, by person (every member's usage).
    #[arg(long, value_enum)]
    by: Option<By>,
    /// Every member's usage, each row under its member (admins only).
    #[arg(long)]
    family: bool,
    /// Only this agent's usage (claude-code, codex, pi, ...).
    #[arg(long, value_parser = parse_agent)]
    agent: Option<AgentRuntime>,
    /// From then: a day (2026-05-01, in --timezone), 30m, 12h, 7d, 2w or RFC 3339.
    #[arg(long)]
    since: Option<String>,
    /// Until then: a day (through its end, in --timezone), or RFC 3339.
    #[arg(long)]
    until: Option<String>,
    /// Days are cut in this zone: a name (Europe/Berlin), UTC or a fixed
    /// offset like +02:00. By default the machine's ($TZ, else
    /// /etc/localtime).
    #[arg(long, allow_hyphen_values = true)]
    timezone: Option<String>,
    /// Central's answer, as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Report {
    Daily,
    Weekly,
    Monthly,
    Session,
    /// 5-hour billing blocks, each from the hour of its first response.
    Blocks,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum By {
    Model,
    Agent,
    Machine,
    Project,
    Person,
}

fn parse_agent(s: &str) -> Result<AgentRuntime, String> {
    AgentRuntime::parse(s).ok_or_else(|| {
        let names: Vec<&str> = AgentRuntime::ALL.iter().map(|r| r.as_str()).collect();
        format!("one of {}", names.join(", "))
    })
}

/// A `--since` or `--until`: a day as it is (central reads it in the
/// report's zone), else a time as `when` reads one.
pub(crate) fn when(flag: &str, s: &str, now: OffsetDateTime) -> Result<String> {
    let format = time::macros::format_description!("[year]-[month]-[day]");
    if time::Date::parse(s.trim(), format).is_ok() {
        return Ok(s.trim().to_owned());
    }
    parse_since(s, now)
        .ok_or_else(|| crate::Error::Usage(format!("--{flag} {s:?}: {WHEN_HINT}")).into())
}

pub(crate) fn run(args: UsageArgs, client: &Client) -> Result<()> {
    let now = OffsetDateTime::now_utc();
    let query = UsageQuery {
        report: Some(match args.report {
            Report::Daily => UsageReport::Daily,
            Report::Weekly => UsageReport::Weekly,
            Report::Monthly => UsageReport::Monthly,
            Report::Session => UsageReport::Session,
            Report::Blocks => UsageReport::Blocks,
        }),
        by: args.by.map(|b| match b {
            By::Model => UsageBy::Model,
            By::Agent => UsageBy::Agent,
            By::Machine => UsageBy::Machine,
            By::Project => UsageBy::Project,
            By::Person => UsageBy::Person,
        }),
        agent: args.agent,
        since: args.since.map(|s| when("since", &s, now)).transpose()?,
        until: args.until.map(|s| when("until", &s, now)).transpose()?,
        timezone: args.timezone.clone(),
        family: args.family.then_some(true),
    };
    let (query, res) = match (&args.timezone, machine_zone()) {
        (None, Some(zone)) => {
            let local = UsageQuery {
                timezone: Some(zone.clone()),
                ..query.clone()
            };
            match client.json::<UsageResponse>(client.get("/api/usage").query(&local)) {
                Ok(res) => (local, res),
                // Central's tz database lacks this machine's zone: UTC, said.
                Err(e) if e.code() == "invalid_timezone" => {
                    eprintln!("kith: central does not know this machine's time zone {zone:?}; days are cut in UTC (--timezone to choose)");
                    let res = client.json(client.get("/api/usage").query(&query))?;
                    (query, res)
                }
                Err(e) => return Err(e.into()),
            }
        }
        _ => {
            let res = client.json(client.get("/api/usage").query(&query))?;
            (query, res)
        }
    };
    let mut stdout = std::io::stdout().lock();
    if args.json {
        writeln!(stdout, "{}", serde_json::to_string(&res)?)?;
    } else {
        write!(stdout, "{}", render(&res, &query, Style::detect()))?;
    }
    Ok(())
}

/// This machine's time zone by its tz database name: `$TZ`, else where
/// `/etc/localtime` links to; `None` for UTC (central's default) or a zone
/// that has no name here.
fn machine_zone() -> Option<String> {
    let link = std::fs::read_link("/etc/localtime").ok();
    zone_name(std::env::var("TZ").ok().as_deref(), link.as_deref())
}

/// The zone name of a `TZ` value (`Europe/Berlin`, `:Europe/Berlin`, a
/// path into a zoneinfo folder), else of the `/etc/localtime` link;
/// `None` for UTC and for what names no zone (a POSIX rule like
/// `CET-1CEST`).
fn zone_name(tz: Option<&str>, localtime: Option<&std::path::Path>) -> Option<String> {
    const UTC: [&str; 12] = [
        "UTC",
        "Etc/UTC",
        "UCT",
        "Etc/UCT",
        "Universal",
        "Etc/Universal",
        "Zulu",
        "Etc/Zulu",
        "GMT",
        "Etc/GMT",
        "Etc/GMT0",
        "GMT0",
    ];
    let from_path = |p: &str| p.rsplit_once("zoneinfo/").map(|(_, name)| name.to_owned());
    let name = match tz.map(str::trim).filter(|t| !t.is_empty()) {
        Some(t) => {
            let t = t.strip_prefix(':').unwrap_or(t);
            if t.starts_with('/') {
                from_path(t)?
            } else if (t.contains('/') || UTC.contains(&t))
                && t.starts_with(|c: char| c.is_ascii_alphabetic())
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'-' | b'+'))
            {
                t.to_owned()
            } else {
                return None;
            }
        }
        None => from_path(&localtime?.to_string_lossy())?,
    };
    (!UTC.contains(&name.as_str())).then_some(name)
}

/// `1234567` -> `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Dollars, with a `+` when some of the tokens had no price.
fn dollars(t: &UsageTotals) -> String {
    let more = if t.unpriced_models.is_empty() {
        ""
    } else {
        "+"
    };
    format!("${:.2}{more}", t.cost_usd)
}

/// The table: a header naming the zone and the price table, a line per
/// row, the totals, and the models without a price.
pub(crate) fn render(res: &UsageResponse, q: &UsageQuery, style: Style) -> String {
    let mut out = String::new();
    let what = match q.report.unwrap_or_default() {
        UsageReport::Daily => "day",
        UsageReport::Weekly => "week (from Monday)",
        UsageReport::Monthly => "month",
        UsageReport::Session => "session",
        UsageReport::Blocks => "5-hour block",
    };
    let _ = writeln!(
        out,
        "{}",
        style.bold(&format!(
            "Usage by {what}, time zone {}, prices as of {}{}",
            res.timezone,
            res.price_table,
            if res.price_overrides.is_empty() {
                String::new()
            } else {
                format!(
                    " (central's own for {})",
                    printable(&res.price_overrides.join(", "))
                )
            }
        ))
    );
    if res.rows.is_empty() {
        let _ = writeln!(out, "no usage recorded");
        return out;
    }
    let by = q.by.map(|b| match b {
        UsageBy::Model => "model",
        UsageBy::Agent => "agent",
        UsageBy::Machine => "machine",
        UsageBy::Project => "project",
        UsageBy::Person => "person",
    });
    let key_title = match q.report.unwrap_or_default() {
        UsageReport::Daily => "date",
        UsageReport::Weekly => "week",
        UsageReport::Monthly => "month",
        UsageReport::Session => "session",
        UsageReport::Blocks => "block from",
    };
    // A family report's rows are each a member's: the member leads the split.
    let family = res.rows.iter().any(|r| r.person.is_some());
    let split_title = match (family, by) {
        (true, Some(b)) => format!("person {b}"),
        (true, None) => "person".to_owned(),
        (false, b) => b.unwrap_or_default().to_owned(),
    };
    let mut lines: Vec<[String; 7]> = vec![[
        key_title.to_owned(),
        split_title,
        "input".to_owned(),
        "output".to_owned(),
        "cache write".to_owned(),
        "cache read".to_owned(),
        "cost".to_owned(),
    ]];
    let cells = |key: String, group: String, t: &UsageTotals| {
        [
            key,
            group,
            thousands(t.input_tokens),
            thousands(t.output_tokens),
            thousands(t.cache_write_tokens),
            thousands(t.cache_read_tokens),
            dollars(t),
        ]
    };
    let mut previous: Option<&str> = None;
    for row in &res.rows {
        // A key is written once over its groups.
        let key = if previous == Some(row.key.as_str()) {
            String::new()
        } else {
            row.key.clone()
        };
        previous = Some(&row.key);
        let group = match (by, &row.group) {
            (None, _) => String::new(),
            (Some(_), Some(g)) => printable(g).into_owned(),
            (Some(_), None) => "-".to_owned(),
        };
        let group = match &row.person {
            Some(p) => format!("{} {group}", printable(p)).trim_end().to_owned(),
            None => group,
        };
        lines.push(cells(key, group, &row.totals));
    }
    lines.push(cells("total".to_owned(), String::new(), &res.totals));
    let shown: Vec<usize> = (0..7)
        .filter(|&i| i != 1 || by.is_some() || family)
        .collect();
    let width = |i: usize| {
        lines
            .iter()
            .map(|l| l[i].chars().count())
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..7).map(width).collect();
    let n_lines = lines.len();
    for (n, line) in lines.iter().enumerate() {
        let text: Vec<String> = shown
            .iter()
            .map(|&i| {
                if i < 2 {
                    format!("{:<w$}", line[i], w = widths[i])
                } else {
                    format!("{:>w$}", line[i], w = widths[i])
                }
            })
            .collect();
        let text = text.join("  ").trim_end().to_owned();
        let text = if n == 0 || n + 1 == n_lines {
            style.bold(&text)
        } else {
            text
        };
        let _ = writeln!(out, "{text}");
    }
    if !res.totals.unpriced_models.is_empty() {
        let _ = writeln!(
            out,
            "{}",
            style.dim(&format!(
                "+ tokens without a price (not in the cost): {}",
                printable(&res.totals.unpriced_models.join(", "))
            ))
        );
    }
    if res.n_refused > 0 {
        let _ = writeln!(
            out,
            "{}",
            style.dim(&format!(
                "{} usage records could not be counted",
                res.n_refused
            ))
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use kith_proto::UsageRow;

    use super::*;
    use crate::commands::tests::PLAIN;

    fn totals(input: u64, usd: f64, unpriced: &[&str]) -> UsageTotals {
        UsageTotals {
            input_tokens: input,
            output_tokens: 20,
            cache_write_tokens: 3,
            cache_read_tokens: 1_000_000,
            cost_usd: usd,
            unpriced_models: unpriced.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn the_machines_zone_is_tz_else_localtimes_link_and_utc_is_none() {
        use std::path::Path;
        let berlin = Path::new("/usr/share/zoneinfo/Europe/Berlin");
        let utc = Path::new("/usr/share/zoneinfo/Etc/UTC");
        let cases: [(Option<&str>, Option<&Path>, Option<&str>); 10] = [
            (None, Some(berlin), Some("Europe/Berlin")),
            (None, Some(utc), None),
            (None, None, None),
            (Some(""), Some(berlin), Some("Europe/Berlin")),
            (
                Some("America/New_York"),
                Some(berlin),
                Some("America/New_York"),
            ),
            (Some(":Asia/Tokyo"), None, Some("Asia/Tokyo")),
            (
                Some("/usr/share/zoneinfo/Asia/Kolkata"),
                None,
                Some("Asia/Kolkata"),
            ),
            (Some("UTC"), Some(berlin), None),
            // A POSIX rule names no zone: central's default, not a guess.
            (Some("CET-1CEST,M3.5.0,M10.5.0/3"), Some(berlin), None),
            (Some("/etc/mytz"), Some(berlin), None),
        ];
        for (tz, link, want) in cases {
            assert_eq!(zone_name(tz, link).as_deref(), want, "{tz:?} {link:?}");
        }
    }

    #[test]
    fn the_table_names_its_zone_and_prices_and_what_it_could_not_price() {
        let res = UsageResponse {
            price_table: "2026-05-20".into(),
            price_overrides: Vec::new(),
            timezone: "+02:00".into(),
            totals: totals(1234, 1.5, &["qwen3.7-plus"]),
            rows: vec![
                UsageRow {
                    key: "2026-05-01".into(),
                    group: Some("claude-opus-4-6".into()),
                    person: None,
                    totals: totals(1200, 1.5, &[]),
                },
                UsageRow {
                    key: "2026-05-01".into(),
                    group: Some("qwen3.7-plus".into()),
                    person: None,
                    totals: totals(34, 0.0, &["qwen3.7-plus"]),
                },
            ],
            n_refused: 2,
        };
        let q = UsageQuery {
            by: Some(UsageBy::Model),
            ..UsageQuery::default()
        };
        let text = render(&res, &q, PLAIN);
        assert_eq!(
            text,
            "Usage by day, time zone +02:00, prices as of 2026-05-20\n\
             date        model            input  output  cache write  cache read    cost\n\
             2026-05-01  claude-opus-4-6  1,200      20            3   1,000,000   $1.50\n\
             \x20           qwen3.7-plus        34      20            3   1,000,000  $0.00+\n\
             total                        1,234      20            3   1,000,000  $1.50+\n\
             + tokens without a price (not in the cost): qwen3.7-plus\n\
             2 usage records could not be counted\n"
        );
    }

    #[test]
    fn nothing_yet_says_so() {
        let res = UsageResponse {
            price_table: "2026-05-20".into(),
            price_overrides: Vec::new(),
            timezone: "UTC".into(),
            totals: UsageTotals::default(),
            rows: vec![],
            n_refused: 0,
        };
        let text = render(&res, &UsageQuery::default(), PLAIN);
        assert_eq!(
            text,
            "Usage by day, time zone UTC, prices as of 2026-05-20\nno usage recorded\n"
        );
    }
}
