//! Claude Code's usage: `message.usage` of `assistant` lines, one API
//! response written over as many lines as it has content blocks, keyed by
//! `message.id` and `requestId` (the last line's figures are the final).

use serde_json::Value;

use super::{
    count, str_at, time_of, Merge, Out, Reader, Refused, Tokens, UsageFact, MAX_RESPONSE_TOKENS,
};

pub(super) struct Claude;

impl Reader for Claude {
    fn record(&mut self, v: &Value, out: &mut Out) {
        // `progress` lines repeat a subagent's messages and user lines carry
        // a Task's summed usage: the subagent's own file counts them.
        if str_at(v, "type") != Some("assistant") {
            return;
        }
        let message = v.get("message").unwrap_or(&Value::Null);
        let Some(usage) = message.get("usage").filter(|u| !u.is_null()) else {
            return;
        };
        let model = str_at(message, "model");
        // Made up by Claude Code (an API error, "no response requested"):
        // no model was called.
        if model == Some("<synthetic>") {
            return;
        }
        out.push(fact(v, message, usage, model));
    }
}

fn fact(
    v: &Value,
    message: &Value,
    usage: &Value,
    model: Option<&str>,
) -> Result<UsageFact, Refused> {
    // Without an id the lines of one response cannot be told apart from
    // other responses: counting each would count it several times.
    let id = str_at(message, "id").ok_or(Refused)?;
    let key = match str_at(v, "requestId") {
        Some(request) => format!("{id}/{request}"),
        None => id.to_owned(),
    };
    Ok(UsageFact {
        key,
        merge: Merge::Last,
        model: model.map(str::to_owned),
        time: time_of(v.get("timestamp")),
        tokens: tokens(usage)?,
        n_requests: Some(1),
        cost_usd: None,
    })
}

fn tokens(usage: &Value) -> Result<Tokens, Refused> {
    if !usage.is_object() {
        return Err(Refused);
    }
    let split = usage.get("cache_creation").filter(|c| {
        c.get("ephemeral_5m_input_tokens").is_some() || c.get("ephemeral_1h_input_tokens").is_some()
    });
    let (cache_write_5m, cache_write_1h) = match split {
        Some(c) => (
            count(c, "ephemeral_5m_input_tokens")?,
            count(c, "ephemeral_1h_input_tokens")?,
        ),
        // Older builds write the total only; 5 minutes is the default.
        None => (count(usage, "cache_creation_input_tokens")?, 0),
    };
    Tokens {
        input: count(usage, "input_tokens")?,
        output: count(usage, "output_tokens")?,
        cache_write_5m,
        cache_write_1h,
        cache_read: count(usage, "cache_read_input_tokens")?,
    }
    .within(MAX_RESPONSE_TOKENS)
}

#[cfg(test)]
mod tests {
    use super::super::{facts, Reading, Tokens};
    use crate::transcript::Format;

    fn line(id: &str, request: Option<&str>, ts: &str, usage: &str) -> String {
        let request = request.map_or(String::new(), |r| format!(r#""requestId":"{r}","#));
        format!(
            r#"{{"type":"assistant",{request}"timestamp":"{ts}","message":{{"id":"{id}","model":"claude-sonnet-4-5-20250929","usage":{usage}}}}}"#
        ) + "\n"
    }

    fn read(lines: &[String]) -> Reading {
        facts(Format::ClaudeCode, lines.concat().as_bytes())
    }

    #[test]
    fn a_streamed_response_counts_once_with_its_last_lines_figures() {
        let u = |out: u64| {
            format!(
                r#"{{"input_tokens":3,"output_tokens":{out},"cache_read_input_tokens":100,"cache_creation_input_tokens":40,"cache_creation":{{"ephemeral_5m_input_tokens":10,"ephemeral_1h_input_tokens":30}}}}"#
            )
        };
        let r = read(&[
            line("m1", Some("r1"), "2026-05-10T08:40:12.718Z", &u(2)),
            line("m1", Some("r1"), "2026-05-10T08:40:13Z", &u(40)),
            line("m2", Some("r2"), "2026-05-10T08:40:14Z", &u(7)),
            line("m1", Some("r1"), "2026-05-10T08:40:15Z", &u(95)),
        ]);
        assert_eq!(r.n_refused, 0);
        let got: Vec<(&str, u64, Option<&str>)> = r
            .facts
            .iter()
            .map(|f| (f.key.as_str(), f.tokens.output, f.time.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("m1/r1", 95, Some("2026-05-10T08:40:15.000Z")),
                ("m2/r2", 7, Some("2026-05-10T08:40:14.000Z")),
            ]
        );
        assert_eq!(
            r.facts[0].tokens,
            Tokens {
                input: 3,
                output: 95,
                cache_write_5m: 10,
                cache_write_1h: 30,
                cache_read: 100,
            }
        );
    }

    #[test]
    fn usage_lines_table() {
        // (line, facts as (key, tokens), refused)
        type Facts<'a> = &'a [(&'a str, [u64; 5])];
        let cases: &[(String, Facts, u64)] = &[
            // No split of the cache writes: all of it is 5-minute.
            (
                line("m", Some("r"), "2026-01-01T00:00:00Z", r#"{"input_tokens":1,"output_tokens":2,"cache_creation_input_tokens":7,"cache_read_input_tokens":9}"#),
                &[("m/r", [1, 2, 7, 0, 9])],
                0,
            ),
            // No requestId (Claude Code 2.0 through some proxies).
            (
                line("m", None, "2026-01-01T00:00:00Z", r#"{"input_tokens":1,"output_tokens":2}"#),
                &[("m", [1, 2, 0, 0, 0])],
                0,
            ),
            // Missing counts are 0.
            (line("m", Some("r"), "x", "{}"), &[("m/r", [0; 5])], 0),
            (line("m", Some("r"), "x", r#"{"input_tokens":-3,"output_tokens":2}"#), &[], 1),
            (line("m", Some("r"), "x", r#"{"input_tokens":1.5}"#), &[], 1),
            (line("m", Some("r"), "x", r#"{"input_tokens":"12"}"#), &[], 1),
            (line("m", Some("r"), "x", r#"{"output_tokens":1000000000000000}"#), &[], 1),
            (line("m", Some("r"), "x", r#"{"cache_creation":{"ephemeral_1h_input_tokens":-1}}"#), &[], 1),
            (line("m", Some("r"), "x", r#""lots""#), &[], 1),
            (
                r#"{"type":"assistant","message":{"model":"claude-opus-4-6","usage":{"input_tokens":5}}}"#.to_owned() + "\n",
                &[],
                1,
            ),
            (
                r#"{"type":"assistant","message":{"id":"m","model":"<synthetic>","usage":{"input_tokens":0}}}"#.to_owned() + "\n",
                &[],
                0,
            ),
            // A subagent's message repeated in the parent, and a Task's sum.
            (
                r#"{"type":"progress","data":{"message":{"type":"assistant","message":{"id":"m","usage":{"input_tokens":5}}}}}"#.to_owned() + "\n",
                &[],
                0,
            ),
            (
                r#"{"type":"user","toolUseResult":{"usage":{"input_tokens":5}},"message":{"content":"x"}}"#.to_owned() + "\n",
                &[],
                0,
            ),
            ("not json\n".to_owned(), &[], 0),
        ];
        for (input, want, refused) in cases {
            let r = facts(Format::ClaudeCode, input.as_bytes());
            let got: Vec<(&str, [u64; 5])> = r
                .facts
                .iter()
                .map(|f| (f.key.as_str(), f.tokens.counts()))
                .collect();
            assert_eq!(&got, want, "{input}");
            assert_eq!(r.n_refused, *refused, "{input}");
        }
    }

    #[test]
    fn a_refused_copy_leaves_the_copy_before_it_and_a_line_without_time_is_undated() {
        let r = read(&[
            line("m", Some("r"), "not a time", r#"{"output_tokens":5}"#),
            line(
                "m",
                Some("r"),
                "2026-01-01T00:00:00Z",
                r#"{"output_tokens":-1}"#,
            ),
        ]);
        assert_eq!(r.n_refused, 1);
        assert_eq!(r.facts.len(), 1);
        assert_eq!(r.facts[0].tokens.output, 5);
        assert_eq!(r.facts[0].time, None);
    }
}
