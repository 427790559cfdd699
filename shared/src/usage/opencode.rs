//! OpenCode's usage, from the journal kith keeps of its rows
//! (`transcript::opencode`): each assistant message's `cost` (OpenCode adds
//! every step's) and its tokens, the sum of its `step-finish` parts' when
//! it has any (OpenCode keeps only the last step's on the message), else
//! the message's own. Rows are folded to their last version; removed ones
//! still count (a reverted answer was paid for). Read the journal whole.

use std::collections::HashMap;

use serde_json::Value;

use super::{
    count, recorded_cost, str_at, time_of, Merge, Out, Reader, Refused, Tokens, UsageFact,
    MAX_RESPONSE_TOKENS,
};

#[derive(Default)]
pub(super) struct OpenCode {
    /// Message rows in order of first appearance, each its last version.
    messages: Vec<(String, Value)>,
    message_at: HashMap<String, usize>,
    /// `step-finish` parts as `(message id, data)`, each its last version.
    steps: Vec<(String, Value)>,
    step_at: HashMap<String, usize>,
}

impl Reader for OpenCode {
    fn record(&mut self, v: &Value, _out: &mut Out) {
        let (Some(id), Some(data)) = (str_at(v, "id"), v.get("data")) else {
            return;
        };
        match str_at(v, "kind") {
            Some("message") => match self.message_at.get(id) {
                Some(&i) => self.messages[i].1 = data.clone(),
                None => {
                    self.message_at.insert(id.to_owned(), self.messages.len());
                    self.messages.push((id.to_owned(), data.clone()));
                }
            },
            Some("part") if str_at(data, "type") == Some("step-finish") => {
                let message = str_at(v, "message_id").unwrap_or_default().to_owned();
                match self.step_at.get(id) {
                    Some(&i) => self.steps[i] = (message, data.clone()),
                    None => {
                        self.step_at.insert(id.to_owned(), self.steps.len());
                        self.steps.push((message, data.clone()));
                    }
                }
            }
            _ => {}
        }
    }

    fn finish(self, out: &mut Out) {
        let mut steps_of: HashMap<&str, Vec<&Value>> = HashMap::new();
        for (message, data) in &self.steps {
            steps_of.entry(message).or_default().push(data);
        }
        for (id, data) in &self.messages {
            let steps = steps_of.remove(id.as_str()).unwrap_or_default();
            if str_at(data, "role") != Some("assistant") {
                continue;
            }
            if steps.is_empty() && data.get("tokens").is_none_or(Value::is_null) {
                // Not answered yet, or aborted before any count.
                continue;
            }
            out.push(fact(id, data, &steps));
        }
        // Steps of a message the journal never had: no model, no time, and
        // the message's own cost unknown.
        out.n_refused = out
            .n_refused
            .saturating_add(steps_of.values().map(|s| s.len() as u64).sum());
    }
}

/// What of a journal its usage depends on: its message rows and
/// `step-finish` parts, each its last version where it first appeared
/// (the reader's order), one record a line; the other parts (the text,
/// the tool calls) dropped. Reading it and then more journal counts as
/// reading the whole journal would.
pub(super) fn carry(bytes: &[u8]) -> Vec<u8> {
    let mut kept: Vec<Value> = Vec::new();
    let mut at: HashMap<(bool, String), usize> = HashMap::new();
    for line in crate::transcript::lines(bytes) {
        crate::transcript::each_record(line, |v| {
            let (Some(id), Some(data)) = (str_at(&v, "id"), v.get("data")) else {
                return;
            };
            let is_message = match str_at(&v, "kind") {
                Some("message") => true,
                Some("part") if str_at(data, "type") == Some("step-finish") => false,
                _ => return,
            };
            match at.get(&(is_message, id.to_owned())) {
                Some(&i) => kept[i] = v,
                None => {
                    at.insert((is_message, id.to_owned()), kept.len());
                    kept.push(v);
                }
            }
        });
    }
    let mut out = Vec::new();
    for v in kept {
        if serde_json::to_writer(&mut out, &v).is_ok() {
            out.push(b'\n');
        }
    }
    out
}

fn fact(id: &str, data: &Value, steps: &[&Value]) -> Result<UsageFact, Refused> {
    let tokens = if steps.is_empty() {
        tokens_of(data.get("tokens").unwrap_or(&Value::Null))?
    } else {
        let mut sum = Tokens::default();
        for step in steps {
            sum = sum.saturating_add(tokens_of(step.get("tokens").unwrap_or(&Value::Null))?);
        }
        sum.within(MAX_RESPONSE_TOKENS)?
    };
    let mut cost = recorded_cost(data.get("cost"), &tokens)?;
    if cost.is_none() && !steps.is_empty() {
        let step_costs: Option<Vec<f64>> = steps
            .iter()
            .map(|s| s.get("cost").and_then(Value::as_f64))
            .collect();
        if let Some(costs) = step_costs {
            cost = recorded_cost(Some(&Value::from(costs.iter().sum::<f64>())), &tokens)?;
        }
    }
    let model =
        str_at(data, "modelID").or_else(|| data.pointer("/model/modelID").and_then(Value::as_str));
    Ok(UsageFact {
        key: id.to_owned(),
        merge: Merge::Last,
        model: model.map(str::to_owned),
        time: time_of(data.pointer("/time/created")),
        tokens,
        n_requests: (!steps.is_empty()).then_some(steps.len() as u64),
        cost_usd: cost,
    })
}

/// `{input, output, reasoning, cache{read, write}}`; OpenCode's `input`
/// excludes the cache, its `reasoning` is apart from `output`.
fn tokens_of(t: &Value) -> Result<Tokens, Refused> {
    if !t.is_object() {
        return Err(Refused);
    }
    let cache = t.get("cache").unwrap_or(&Value::Null);
    Tokens {
        input: count(t, "input")?,
        output: count(t, "output")?.saturating_add(count(t, "reasoning")?),
        cache_write_5m: count(cache, "write")?,
        cache_read: count(cache, "read")?,
        ..Tokens::default()
    }
    .within(MAX_RESPONSE_TOKENS)
}

#[cfg(test)]
mod tests {
    use super::super::facts;
    use crate::transcript::Format;

    fn message(id: &str, data: &str) -> String {
        format!(r#"{{"kind":"message","id":"{id}","session_id":"ses_1","data":{data}}}"#) + "\n"
    }

    fn step(id: &str, message: &str, data: &str) -> String {
        format!(
            r#"{{"kind":"part","id":"{id}","message_id":"{message}","session_id":"ses_1","data":{{"type":"step-finish",{data}}}}}"#
        ) + "\n"
    }

    #[test]
    fn messages_sum_their_steps_and_keep_their_recorded_cost() {
        let input = [
            message("m0", r#"{"role":"user","time":{"created":1778490001000}}"#),
            message("m1", r#"{"role":"assistant","modelID":"claude-sonnet-4-5","time":{"created":1778490002000}}"#),
            step("p1", "m1", r#""tokens":{"input":100,"output":10,"reasoning":5,"cache":{"read":1000,"write":50}},"cost":0.01"#),
            // The message as OpenCode leaves it: the last step's tokens,
            // every step's cost.
            message("m1", r#"{"role":"assistant","modelID":"claude-sonnet-4-5","time":{"created":1778490002000},"cost":0.03,"tokens":{"input":200,"output":20,"reasoning":0,"cache":{"read":1100,"write":0}}}"#),
            step("p2", "m1", r#""tokens":{"input":200,"output":20,"reasoning":0,"cache":{"read":1100,"write":0}},"cost":0.02"#),
            r#"{"kind":"removed","key":"message:m1"}"#.to_owned() + "\n",
            // No steps: its own tokens; a cost that is not a number.
            message("m2", r#"{"role":"assistant","model":{"modelID":"gpt-4o-mini"},"cost":{"input":24},"tokens":{"input":120,"output":16}}"#),
            message("m3", r#"{"role":"assistant","modelID":"x","tokens":{"input":-1}}"#),
            message("m4", r#"{"role":"assistant","modelID":"x"}"#),
            step("p9", "nobody", r#""tokens":{"input":1}"#),
        ]
        .concat();
        let r = facts(Format::OpenCode, input.as_bytes());
        assert_eq!(r.n_refused, 2);
        type Fact<'a> = (&'a str, &'a str, [u64; 5], Option<f64>, Option<u64>);
        let got: Vec<Fact> = r
            .facts
            .iter()
            .map(|f| {
                let model = f.model.as_deref().unwrap_or("?");
                (
                    f.key.as_str(),
                    model,
                    f.tokens.counts(),
                    f.cost_usd,
                    f.n_requests,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "m1",
                    "claude-sonnet-4-5",
                    [300, 35, 50, 0, 2100],
                    Some(0.03),
                    Some(2)
                ),
                ("m2", "gpt-4o-mini", [120, 16, 0, 0, 0], None, None),
            ]
        );
        assert_eq!(r.facts[0].time.as_deref(), Some("2026-05-11T09:00:02.000Z"));
    }
}
