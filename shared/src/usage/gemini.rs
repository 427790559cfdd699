//! Gemini CLI's usage: the `tokens` of each `gemini` message
//! (`{input, output, cached, thoughts, tool, total}`, `input` holding the
//! cached part), in a message appended again under its id whenever it
//! changes, or listed again in a `$set`. Rewinds are not followed: a
//! rewound answer was paid for.

use serde_json::Value;

use super::{
    count, str_at, time_of, Merge, Out, Reader, Refused, Tokens, UsageFact, MAX_RESPONSE_TOKENS,
};

pub(super) struct Gemini;

impl Reader for Gemini {
    fn record(&mut self, v: &Value, out: &mut Out) {
        // A `$set` that lists the messages again; a whole session object
        // (the legacy file, if its bytes ever come as one line).
        let listed = v
            .get("$set")
            .unwrap_or(v)
            .get("messages")
            .and_then(Value::as_array);
        for m in listed.into_iter().flatten() {
            message(m, out);
        }
        message(v, out);
    }
}

fn message(m: &Value, out: &mut Out) {
    if str_at(m, "type") != Some("gemini") {
        return;
    }
    let Some(tokens) = m.get("tokens").filter(|t| !t.is_null()) else {
        return;
    };
    out.push(fact(m, tokens));
}

fn fact(m: &Value, tokens: &Value) -> Result<UsageFact, Refused> {
    // A message is appended again as it changes: without its id the copies
    // would each count.
    let id = str_at(m, "id").ok_or(Refused)?;
    if !tokens.is_object() {
        return Err(Refused);
    }
    let input = count(tokens, "input")?;
    let cached = count(tokens, "cached")?;
    let tokens = Tokens {
        input: input
            .checked_sub(cached)
            .ok_or(Refused)?
            .saturating_add(count(tokens, "tool")?),
        output: count(tokens, "output")?.saturating_add(count(tokens, "thoughts")?),
        cache_read: cached,
        ..Tokens::default()
    }
    .within(MAX_RESPONSE_TOKENS)?;
    Ok(UsageFact {
        key: id.to_owned(),
        merge: Merge::Last,
        model: str_at(m, "model").map(str::to_owned),
        time: time_of(m.get("timestamp")),
        tokens,
        n_requests: Some(1),
        cost_usd: None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::facts;
    use crate::transcript::Format;

    #[test]
    fn the_last_copy_of_each_message_counts_and_rewound_ones_still_do() {
        let input = concat!(
            r#"{"sessionId":"s1","projectHash":"p","startTime":"2026-05-13T09:14:00Z","kind":"main"}"#,
            "\n",
            r#"{"id":"u1","type":"user","timestamp":"2026-05-13T09:14:01Z","content":"hi"}"#,
            "\n",
            r#"{"id":"g1","type":"gemini","timestamp":"2026-05-13T09:14:02Z","model":"gemini-2.5-pro","content":"..."}"#,
            "\n",
            r#"{"id":"g1","type":"gemini","timestamp":"2026-05-13T09:14:02Z","model":"gemini-2.5-pro","content":"done","tokens":{"input":1000,"output":50,"cached":400,"thoughts":30,"tool":5,"total":1085}}"#,
            "\n",
            r#"{"id":"g2","type":"gemini","timestamp":"2026-05-13T09:15:00Z","model":"gemini-2.5-flash","tokens":{"input":10,"output":1,"cached":0,"thoughts":0,"tool":0,"total":11}}"#,
            "\n",
            r#"{"$rewindTo":"g2"}"#,
            "\n",
            r#"{"$set":{"lastUpdated":"2026-05-13T09:16:00Z","messages":[{"id":"g1","type":"gemini","model":"gemini-2.5-pro","tokens":{"input":1000,"output":50,"cached":400,"thoughts":30,"tool":5}}]}}"#,
            "\n",
            r#"{"id":"g3","type":"gemini","tokens":{"input":5,"cached":9}}"#,
            "\n",
            r#"{"type":"gemini","tokens":{"input":5}}"#,
            "\n",
            r#"{"id":"g4","type":"gemini","tokens":{"input":5,"thoughts":-2}}"#,
            "\n",
        );
        let r = facts(Format::Gemini, input.as_bytes());
        assert_eq!(r.n_refused, 3);
        let got: Vec<(&str, [u64; 5], Option<&str>)> = r
            .facts
            .iter()
            .map(|f| (f.key.as_str(), f.tokens.counts(), f.time.as_deref()))
            .collect();
        // g1: input 1000 - 400 cached + 5 tool; output 50 + 30 thoughts. Its
        // `$set` copy, undated, keeps the time of the copy before.
        assert_eq!(
            got,
            [
                ("g1", [605, 80, 0, 0, 400], Some("2026-05-13T09:14:02.000Z")),
                ("g2", [10, 1, 0, 0, 0], Some("2026-05-13T09:15:00.000Z")),
            ]
        );
    }
}
