//! GitHub Copilot CLI's usage: the `session.shutdown` event each CLI
//! process writes as it exits, with per-model totals in `modelMetrics`
//! (`tokenDetails`, else `usage`), else the process's `tokenDetails` under
//! its `currentModel`. No dollars: Copilot bills in premium requests
//! (`totalNanoAiu`), which are not USD. A resumed session's next process
//! writes its own shutdown, and each counts. Reasoning tokens
//! (`usage.reasoningTokens`) are read as part of `outputTokens`, as the
//! OpenAI and Anthropic APIs behind it count them.

use serde_json::Value;

use super::{
    count, str_at, time_of, Merge, Out, Reader, Refused, Tokens, UsageFact, MAX_RUNNING_TOKENS,
};

pub(super) struct Copilot;

impl Reader for Copilot {
    fn record(&mut self, v: &Value, out: &mut Out) {
        if str_at(v, "type") != Some("session.shutdown") {
            return;
        }
        let data = v.get("data").unwrap_or(&Value::Null);
        let mut any = false;
        // By name: the same order whatever map serde_json was built with.
        let mut metrics: Vec<(&String, &Value)> = data
            .get("modelMetrics")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .collect();
        metrics.sort_by_key(|(model, _)| *model);
        for (model, m) in metrics {
            let counted = m
                .get("tokenDetails")
                .filter(|d| d.is_object())
                .map(details)
                .or_else(|| m.get("usage").filter(|u| u.is_object()).map(usage));
            // A model with only a request count.
            let Some(tokens) = counted else {
                continue;
            };
            any = true;
            let requests = m.pointer("/requests/count").or_else(|| m.get("requests"));
            out.push(tokens.map(|t| fact(v, model, t, requests.and_then(Value::as_u64))));
        }
        if !any {
            if let Some(d) = data.get("tokenDetails").filter(|d| d.is_object()) {
                let model = str_at(data, "currentModel").unwrap_or_default();
                out.push(details(d).map(|t| fact(v, model, t, None)));
            }
        }
    }
}

fn fact(v: &Value, model: &str, tokens: Tokens, n_requests: Option<u64>) -> UsageFact {
    UsageFact {
        key: format!("{}/{model}", str_at(v, "id").unwrap_or_default()),
        merge: Merge::Each,
        model: (!model.is_empty()).then(|| model.to_owned()),
        time: time_of(v.get("timestamp")),
        tokens,
        n_requests,
        cost_usd: None,
    }
}

/// `{input, output, cache_read, cache_write: {tokenCount}}`; `input` is
/// without the cache.
fn details(d: &Value) -> Result<Tokens, Refused> {
    let at = |kind: &str| count(d.get(kind).unwrap_or(&Value::Null), "tokenCount");
    Tokens {
        input: at("input")?,
        output: at("output")?,
        cache_write_5m: at("cache_write")?,
        cache_read: at("cache_read")?,
        ..Tokens::default()
    }
    .within(MAX_RUNNING_TOKENS)
}

/// `{inputTokens, outputTokens, cacheReadTokens, cacheWriteTokens}`;
/// `inputTokens` holds the cache reads and writes.
fn usage(u: &Value) -> Result<Tokens, Refused> {
    let read = count(u, "cacheReadTokens")?;
    let write = count(u, "cacheWriteTokens")?;
    let input = count(u, "inputTokens")?
        .checked_sub(read.saturating_add(write))
        .ok_or(Refused)?;
    Tokens {
        input,
        output: count(u, "outputTokens")?,
        cache_write_5m: write,
        cache_read: read,
        ..Tokens::default()
    }
    .within(MAX_RUNNING_TOKENS)
}

#[cfg(test)]
mod tests {
    use super::super::facts;
    use crate::transcript::Format;

    #[test]
    fn shutdowns_per_model_else_per_process() {
        let input = concat!(
            r#"{"type":"session.start","data":{"sessionId":"s"},"id":"e1","timestamp":"2026-05-26T16:14:00Z"}"#,
            "\n",
            r#"{"type":"session.shutdown","id":"e2","timestamp":"2026-05-26T16:14:48.681Z","data":{"totalNanoAiu":21893915000,"tokenDetails":{"input":{"tokenCount":25}},"modelMetrics":{"#,
            r#""claude-opus-4.7":{"requests":{"count":3,"cost":1},"usage":{"inputTokens":81666,"outputTokens":521,"cacheReadTokens":54064,"cacheWriteTokens":27594},"tokenDetails":{"input":{"tokenCount":8},"cache_read":{"tokenCount":54064},"cache_write":{"tokenCount":27594},"output":{"tokenCount":521}}},"#,
            r#""claude-haiku-4.5":{"requests":{"count":2},"usage":{"inputTokens":17050,"outputTokens":226,"cacheReadTokens":13964,"cacheWriteTokens":3069}},"#,
            r#""gpt-5-mini":{"requests":{"count":1}}}}}"#,
            "\n",
            // A resumed session's second process, with totals only.
            r#"{"type":"session.shutdown","id":"e3","timestamp":"2026-05-27T10:00:00Z","data":{"currentModel":"gpt-5-mini","modelMetrics":{"gpt-5-mini":{"requests":2}},"tokenDetails":{"input":{"tokenCount":100},"output":{"tokenCount":15},"cache_read":{"tokenCount":5}}}}"#,
            "\n",
            r#"{"type":"session.shutdown","id":"e4","data":{"modelMetrics":{"m":{"usage":{"inputTokens":5,"cacheReadTokens":9}}}}}"#,
            "\n",
        );
        let r = facts(Format::Copilot, input.as_bytes());
        assert_eq!(r.n_refused, 1);
        let got: Vec<(&str, [u64; 5], Option<u64>)> = r
            .facts
            .iter()
            .map(|f| (f.key.as_str(), f.tokens.counts(), f.n_requests))
            .collect();
        assert_eq!(
            got,
            [
                ("e2/claude-haiku-4.5", [17, 226, 3069, 0, 13964], Some(2)),
                ("e2/claude-opus-4.7", [8, 521, 27594, 0, 54064], Some(3)),
                ("e3/gpt-5-mini", [100, 15, 0, 0, 5], None),
            ]
        );
        assert!(r.facts.iter().all(|f| f.cost_usd.is_none()));
    }
}
