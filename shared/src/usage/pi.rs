//! pi's usage: assistant messages' `usage{input, output, cacheRead,
//! cacheWrite, cost{total}}`, each message written once (append-only; a
//! branch of the v3 tree that was left was still paid for).

use serde_json::Value;

use super::{
    count, recorded_cost, str_at, time_of, Merge, Out, Reader, Refused, Tokens, UsageFact,
    MAX_RESPONSE_TOKENS,
};

pub(super) struct Pi;

impl Reader for Pi {
    fn record(&mut self, v: &Value, out: &mut Out) {
        if str_at(v, "type") != Some("message") {
            return;
        }
        let m = v.get("message").unwrap_or(&Value::Null);
        if str_at(m, "role") != Some("assistant") {
            return;
        }
        let Some(usage) = m.get("usage").filter(|u| !u.is_null()) else {
            return;
        };
        out.push(fact(v, m, usage));
    }
}

fn fact(v: &Value, m: &Value, usage: &Value) -> Result<UsageFact, Refused> {
    if !usage.is_object() {
        return Err(Refused);
    }
    let tokens = Tokens {
        input: count(usage, "input")?,
        output: count(usage, "output")?,
        // pi prices its cache writes as Anthropic's 5-minute ones.
        cache_write_5m: count(usage, "cacheWrite")?,
        cache_read: count(usage, "cacheRead")?,
        ..Tokens::default()
    }
    .within(MAX_RESPONSE_TOKENS)?;
    let cost = recorded_cost(usage.pointer("/cost/total"), &tokens)?;
    // v1 entries have no id; the message's own time (ms) is kept when a
    // file is migrated to v3.
    let key = str_at(m, "responseId")
        .map(str::to_owned)
        .or_else(|| {
            m.get("timestamp")
                .and_then(Value::as_i64)
                .map(|ms| format!("t{ms}"))
        })
        .or_else(|| str_at(v, "id").map(str::to_owned))
        .or_else(|| str_at(v, "timestamp").map(str::to_owned))
        .unwrap_or_default();
    Ok(UsageFact {
        key,
        merge: Merge::Each,
        model: str_at(m, "model").map(str::to_owned),
        time: time_of(v.get("timestamp")).or_else(|| time_of(m.get("timestamp"))),
        tokens,
        n_requests: Some(1),
        cost_usd: cost,
    })
}

#[cfg(test)]
mod tests {
    use super::super::facts;
    use crate::transcript::Format;

    fn entry(usage: &str) -> String {
        format!(
            r#"{{"type":"message","timestamp":"2026-05-07T19:20:07.618Z","message":{{"role":"assistant","model":"claude-sonnet-4-6","timestamp":1778181607618,"usage":{usage}}}}}"#
        )
    }

    #[test]
    fn messages_with_their_recorded_costs() {
        let input = [
            entry(
                r#"{"input":10,"output":2,"cacheRead":100,"cacheWrite":40,"cost":{"total":0.5}}"#,
            ),
            // Two records on one line, as real pi files have.
            entry(r#"{"input":1,"output":1,"cost":{"total":0}}"#)
                + &entry(r#"{"input":0,"output":0,"cost":{"total":0}}"#),
            entry(r#"{"input":1,"output":1,"cost":{"total":-0.5}}"#),
            entry(r#"{"input":1,"output":1,"cost":{"total":"free"}}"#),
            r#"{"type":"message","message":{"role":"user","content":"hi","usage":{"input":9}}}"#
                .to_owned(),
        ]
        .join("\n");
        let r = facts(Format::Pi, input.as_bytes());
        assert_eq!(r.n_refused, 1);
        let got: Vec<([u64; 5], Option<f64>)> = r
            .facts
            .iter()
            .map(|f| (f.tokens.counts(), f.cost_usd))
            .collect();
        assert_eq!(
            got,
            [
                ([10, 2, 40, 0, 100], Some(0.5)),
                // 0 for tokens: pi knew no price.
                ([1, 1, 0, 0, 0], None),
                ([0; 5], Some(0.0)),
                ([1, 1, 0, 0, 0], None),
            ]
        );
        assert_eq!(r.facts[0].time.as_deref(), Some("2026-05-07T19:20:07.618Z"));
        assert_eq!(r.facts[0].key, "t1778181607618");
    }
}
