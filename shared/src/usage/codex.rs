//! Codex's usage: `event_msg` `token_count` events, whose
//! `info.total_token_usage` is the thread's running total (`input_tokens`
//! holding the cached input, `output_tokens` the reasoning); the model is
//! the last `turn_context`'s. The fold counts differences
//! ([`super::Merge::RunningTotal`]).

use serde_json::Value;

use super::{
    count, str_at, time_of, Context, Merge, Out, Reader, Refused, Tokens, UsageFact,
    MAX_RUNNING_TOKENS,
};

#[derive(Default)]
pub(super) struct Codex {
    /// The model of the last `turn_context` in these bytes.
    model: Option<String>,
}

impl Reader for Codex {
    fn record(&mut self, v: &Value, out: &mut Out) {
        let payload = v.get("payload").unwrap_or(&Value::Null);
        match str_at(v, "type") {
            Some("turn_context") => {
                if let Some(model) = str_at(payload, "model") {
                    self.model = Some(model.to_owned());
                    out.context = Some(Context {
                        model: self.model.clone(),
                        time: None,
                    });
                }
            }
            Some("event_msg") if str_at(payload, "type") == Some("token_count") => {
                // `info` is null on events that carry only rate limits.
                let Some(total) = payload
                    .pointer("/info/total_token_usage")
                    .filter(|t| !t.is_null())
                else {
                    return;
                };
                out.push(self.fact(v, total));
            }
            _ => {}
        }
    }
}

impl Codex {
    fn fact(&self, v: &Value, total: &Value) -> Result<UsageFact, Refused> {
        if !total.is_object() {
            return Err(Refused);
        }
        let input = count(total, "input_tokens")?;
        let cached = count(total, "cached_input_tokens")?;
        let tokens = Tokens {
            // Cached input is part of the input OpenAI reports.
            input: input.checked_sub(cached).ok_or(Refused)?,
            output: count(total, "output_tokens")?,
            cache_read: cached,
            ..Tokens::default()
        }
        .within(MAX_RUNNING_TOKENS)?;
        let ts = str_at(v, "timestamp").unwrap_or_default();
        Ok(UsageFact {
            key: format!("{ts}#{}", tokens.total()),
            merge: Merge::RunningTotal(tokens),
            model: self.model.clone(),
            time: time_of(v.get("timestamp")),
            tokens,
            n_requests: None,
            cost_usd: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{facts, Fold, Tokens};
    use crate::transcript::Format;

    fn turn(model: &str) -> String {
        format!(
            r#"{{"timestamp":"2026-05-11T12:00:00Z","type":"turn_context","payload":{{"model":"{model}"}}}}"#
        ) + "\n"
    }

    fn count(ts: &str, input: i64, cached: i64, output: i64) -> String {
        format!(
            r#"{{"timestamp":"{ts}","type":"event_msg","payload":{{"type":"token_count","info":{{"total_token_usage":{{"input_tokens":{input},"cached_input_tokens":{cached},"output_tokens":{output},"reasoning_output_tokens":1,"total_tokens":0}},"last_token_usage":{{}}}}}}}}"#
        ) + "\n"
    }

    #[test]
    fn differences_of_running_totals_and_a_restart_counted_from_its_new_value() {
        let input = [
            turn("gpt-5.5"),
            r#"{"timestamp":"2026-05-11T12:00:01Z","type":"event_msg","payload":{"type":"token_count","info":null,"rate_limits":{}}}"#.to_owned() + "\n",
            count("2026-05-11T12:00:02Z", 1000, 200, 50),
            // Written again unchanged: nothing added.
            count("2026-05-11T12:00:03Z", 1000, 200, 50),
            count("2026-05-11T12:00:04Z", 2500, 1200, 80),
            turn("gpt-5.3-codex"),
            // Went down: a new series, counted from its new value.
            count("2026-05-11T12:00:05Z", 300, 0, 10),
            count("2026-05-11T12:00:06Z", 700, 100, 30),
        ]
        .concat();
        let r = facts(Format::Codex, input.as_bytes());
        assert_eq!(r.n_refused, 0);
        let got: Vec<(&str, [u64; 5], Option<u64>)> = r
            .facts
            .iter()
            .map(|f| {
                (
                    f.model.as_deref().unwrap_or("?"),
                    f.tokens.counts(),
                    f.n_requests,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("gpt-5.5", [800, 50, 0, 0, 200], None),
                ("gpt-5.5", [500, 30, 0, 0, 1000], Some(1)),
                ("gpt-5.3-codex", [300, 10, 0, 0, 0], None),
                ("gpt-5.3-codex", [300, 20, 0, 0, 100], Some(1)),
            ]
        );
        // The series' last totals, less their cached input, summed ...
        assert_eq!(
            r.tokens(),
            Tokens {
                input: 1900,
                output: 110,
                cache_read: 1300,
                ..Tokens::default()
            }
        );
        // ... and the fold of its own output is itself.
        let mut again = Fold::default();
        again.add(r.clone());
        assert_eq!(again.into_reading(), r);
    }

    #[test]
    fn bad_totals_are_refused_and_do_not_move_the_running_total() {
        let input = [
            count("2026-05-11T12:00:02Z", 1000, 0, 50),
            count("2026-05-11T12:00:03Z", -5, 0, 60),
            count("2026-05-11T12:00:04Z", 100, 200, 60),
            count("2026-05-11T12:00:05Z", 1_000_000_000_000_000, 0, 60),
            r#"{"timestamp":"2026-05-11T12:00:05Z","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":[1,2]}}}"#.to_owned() + "\n",
            count("2026-05-11T12:00:06Z", 1500, 0, 70),
        ]
        .concat();
        let r = facts(Format::Codex, input.as_bytes());
        assert_eq!(r.n_refused, 4);
        let outputs: Vec<u64> = r.facts.iter().map(|f| f.tokens.output).collect();
        assert_eq!(outputs, [50, 20]);
        assert_eq!(r.tokens().input, 1500);
        // No turn_context in the bytes: no model, no price.
        assert_eq!(r.facts[0].model, None);
    }
}
