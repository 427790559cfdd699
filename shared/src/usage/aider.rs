//! Aider's usage: the report it prints after each answer into
//! `.aider.chat.history.md`,
//!
//! ```text
//! > Tokens: 4.5k sent, 1.2k cache write, 3.0k cache hit, 250 received. Cost: $0.01 message, $0.03 session.
//! ```
//!
//! (the cost on its own line, without `> `, when both cache counts are
//! there; no cost when Aider knows no price). Counts are as printed: under
//! 1,000 exact, then rounded (`2.1k`, `12k`, `1.5M`). `sent` is read as the
//! whole prompt, its cache writes and hits taken out of it (saturating, as
//! the rounded parts may add up to more than the rounded whole); the
//! message's cost is the fact's, the session's is its running sum. The
//! model is the session's `Main model:` (or `Model:`) line, the time its
//! header's.

use super::{checked_cost, Context, Merge, Out, Refused, Tokens, UsageFact, MAX_RESPONSE_TOKENS};
use crate::transcript;

pub(super) fn read(bytes: &[u8]) -> Out {
    let mut out = Out::default();
    let mut session: Option<String> = None;
    let mut model: Option<String> = None;
    // The fact of the line before, while its cost may still follow.
    let mut costless: Option<usize> = None;
    for line in transcript::lines(bytes) {
        let Ok(line) = std::str::from_utf8(line) else {
            costless = None;
            continue;
        };
        let line = line.strip_suffix('\r').unwrap_or(line);
        if let Some(at) = transcript::session_start(line) {
            session = Some(at);
            model = None;
            costless = None;
            out.context = Some(Context {
                model: None,
                time: session.clone(),
            });
            continue;
        }
        let aider_says = line.strip_prefix("> ").map(str::trim_end);
        let text = aider_says.unwrap_or(line).trim_end();
        // The cost Aider puts on a line of its own after a report with both
        // cache counts, in the same write (so in the same delta).
        if let (Some(i), Some(cost)) = (costless.take(), text.strip_prefix("Cost: ")) {
            match message_cost(cost) {
                Some(usd) => match checked_cost(usd, &out.facts[i].tokens) {
                    Ok(usd) => out.facts[i].cost_usd = usd,
                    Err(Refused) => {
                        out.facts.remove(i);
                        out.n_refused += 1;
                    }
                },
                None => out.n_refused += 1,
            }
            continue;
        }
        let Some(said) = aider_says else {
            continue;
        };
        if let Some(name) = said
            .strip_prefix("Main model: ")
            .or_else(|| said.strip_prefix("Model: "))
        {
            let name = name.split(" with ").next().unwrap_or(name).trim();
            model = (!name.is_empty()).then(|| name.to_owned());
            out.context = Some(Context {
                model: model.clone(),
                time: session.clone(),
            });
            continue;
        }
        let Some(report) = report(said) else {
            continue;
        };
        let fact = report.and_then(|(tokens, cost)| {
            Ok(UsageFact {
                // Aider writes no ids: the line itself, which the fold never
                // merges by.
                key: said.to_owned(),
                merge: Merge::Each,
                model: model.clone(),
                time: session.clone(),
                tokens,
                n_requests: None,
                cost_usd: match cost {
                    Some(usd) => checked_cost(usd, &tokens)?,
                    None => None,
                },
            })
        });
        let waits = matches!(&fact, Ok(f) if f.cost_usd.is_none() && !said.contains(" Cost: "));
        out.push(fact);
        if waits {
            costless = Some(out.facts.len() - 1);
        }
    }
    out
}

/// A `Tokens: …` report: `None` when the line is not one, refused when it
/// is one whose numbers cannot be read.
fn report(text: &str) -> Option<Result<(Tokens, Option<f64>), Refused>> {
    let rest = text.strip_prefix("Tokens: ")?;
    let (counts, cost) = match rest.split_once(" Cost: ") {
        Some((counts, cost)) => (counts, Some(cost)),
        None => (rest, None),
    };
    let items: Vec<(&str, &str)> = counts
        .strip_suffix('.')?
        .split(", ")
        .map(|item| item.split_once(' '))
        .collect::<Option<_>>()?;
    let labels: Vec<&str> = items.iter().map(|(_, label)| *label).collect();
    let known = matches!(
        labels.as_slice(),
        ["sent", "received"]
            | ["sent", "cache write", "received"]
            | ["sent", "cache hit", "received"]
            | ["sent", "cache write", "cache hit", "received"]
    );
    if !known {
        return None;
    }
    let of = |label: &str| -> Result<u64, Refused> {
        items
            .iter()
            .find(|(_, l)| *l == label)
            .map_or(Ok(0), |(n, _)| amount(n))
    };
    let read = || -> Result<(Tokens, Option<f64>), Refused> {
        let (write, hit) = (of("cache write")?, of("cache hit")?);
        let tokens = Tokens {
            input: of("sent")?.saturating_sub(write).saturating_sub(hit),
            output: of("received")?,
            cache_write_5m: write,
            cache_read: hit,
            ..Tokens::default()
        };
        let cost = cost.map(|c| message_cost(c).ok_or(Refused)).transpose()?;
        Ok((tokens, cost))
    };
    Some(read())
}

/// `2.1k` -> 2,100; `950` -> 950; `1.5M` -> 1,500,000; at most
/// [`MAX_RESPONSE_TOKENS`].
fn amount(s: &str) -> Result<u64, Refused> {
    let (digits, unit) = match s.strip_suffix('k') {
        Some(d) => (d, 1e3),
        None => match s.strip_suffix('M') {
            Some(d) => (d, 1e6),
            None => (s, 1.0),
        },
    };
    let plain = !digits.is_empty()
        && digits.bytes().all(|c| c.is_ascii_digit() || c == b'.')
        && digits.bytes().filter(|&c| c == b'.').count() <= 1
        && digits != ".";
    if !plain {
        return Err(Refused);
    }
    let n = (digits.parse::<f64>().map_err(|_| Refused)? * unit).round();
    if n > MAX_RESPONSE_TOKENS as f64 {
        return Err(Refused);
    }
    Ok(n as u64)
}

/// The message's dollars of `$0.0091 message, $0.03 session.`.
fn message_cost(s: &str) -> Option<f64> {
    let usd = s.strip_prefix('$')?.split_once(" message")?.0;
    if !usd.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
        return None;
    }
    usd.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::super::facts;
    use crate::transcript::Format;

    #[test]
    fn reports_table() {
        // (line, (tokens, cost) of its fact, or None for no fact; refused)
        type Want = Option<([u64; 5], Option<f64>)>;
        let cases: &[(&str, Want, u64)] = &[
            (
                "> Tokens: 2.1k sent, 250 received. Cost: $0.0091 message, $0.03 session.  ",
                Some(([2100, 250, 0, 0, 0], Some(0.0091))),
                0,
            ),
            ("> Tokens: 950 sent, 12k received.  ", Some(([950, 12000, 0, 0, 0], None)), 0),
            (
                "> Tokens: 1.5M sent, 1.2k cache write, 0.3k cache hit, 2 received.\nCost: $1.20 message, $4.00 session.  ",
                Some(([1_498_500, 2, 1200, 0, 300], Some(1.2))),
                0,
            ),
            ("> Tokens: 13k sent, 639 received.  ", Some(([13000, 639, 0, 0, 0], None)), 0),
            // Rounded parts bigger than the rounded whole.
            (
                "> Tokens: 1.0k sent, 0.6k cache write, 0.5k cache hit, 1 received.  ",
                Some(([0, 1, 600, 0, 500], None)),
                0,
            ),
            // Aider knew no price: the cost is 0.
            (
                "> Tokens: 100 sent, 10 received. Cost: $0.00 message, $0.00 session.  ",
                Some(([100, 10, 0, 0, 0], None)),
                0,
            ),
            ("> Tokens: -3k sent, 10 received.  ", None, 1),
            ("> Tokens: 1e99k sent, 10 received.  ", None, 1),
            ("> Tokens: 5000000M sent, 10 received.  ", None, 1),
            ("> Tokens: 1k sent, 10 received. Cost: $-1 message, $0 session.  ", None, 1),
            ("> Tokens: 1k sent, 10 received.\nCost: $9999 message, $0 session.", None, 1),
            // Not Aider's report: the model's words, another shape.
            ("Tokens: 2.1k sent, 250 received.", None, 0),
            ("> Tokens: a lot, and more.  ", None, 0),
            ("> Tokens: 1k sent, 10 thought.  ", None, 0),
        ];
        for (text, want, refused) in cases {
            let input = format!("# aider chat started at 2026-05-14 10:02:11\n> Main model: anthropic/claude-sonnet-4-5 with diff edit format\n{text}\n");
            let r = facts(Format::Aider, input.as_bytes());
            let got: Vec<([u64; 5], Option<f64>)> = r
                .facts
                .iter()
                .map(|f| (f.tokens.counts(), f.cost_usd))
                .collect();
            assert_eq!(got, want.iter().copied().collect::<Vec<_>>(), "{text}");
            assert_eq!(r.n_refused, *refused, "{text}");
            for f in &r.facts {
                assert_eq!(f.model.as_deref(), Some("anthropic/claude-sonnet-4-5"));
                assert_eq!(f.time.as_deref(), Some("2026-05-14T10:02:11.000Z"));
            }
        }
    }

    #[test]
    fn a_delta_after_the_session_header_has_undated_facts() {
        let r = facts(
            Format::Aider,
            b"> Tokens: 3.2k sent, 210 received. Cost: $0.01 message, $0.01 session.  \n",
        );
        assert_eq!(r.facts.len(), 1);
        assert_eq!(r.facts[0].time, None);
        assert_eq!(r.facts[0].model, None);
        assert_eq!(r.facts[0].cost_usd, Some(0.01));
    }
}
