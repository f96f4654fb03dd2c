//! One growing agent session: its first turn from a starting history, and each next turn that
//! turn's `input` plus the answer's output items and an output for each function call.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// Marks where a session's tag goes in an id of the starting history. It serializes as
/// `\u0001`, which the bodies of `bench/load/bodies.py` (prose, code, paths) never hold.
const MARK: char = '\u{1}';
const MARK_JSON: &str = "\\u0001";

/// What a starting history could not be read as.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    #[error("the starting body is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the starting body is not an object with an `input` array of items")]
    Shape,
}

/// What an answer could not be read as.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnswerError {
    #[error("the answer is not a response with an `output` array: {0}")]
    Json(#[from] serde_json::Error),
}

/// A starting history with a place for a tag in each of its ids, so every session starts
/// with ids of its own (the same items otherwise).
pub(crate) struct Start {
    /// The body up to its `input` array's first item: `{"model":...,"tools":...,"input":[`.
    head: Vec<u8>,
    /// The items, comma-joined, cut where a session's tag goes (after an id's `prefix_`).
    items: Vec<String>,
    /// What follows the items: `],"store":false}` and the like.
    tail: Vec<u8>,
}

impl Start {
    /// Reads a request body (bench/load/bodies.py's), and marks the ids of its items.
    pub(crate) fn parse(body: &[u8]) -> Result<Start, StartError> {
        let Value::Object(mut fields) = serde_json::from_slice(body)? else {
            return Err(StartError::Shape);
        };
        let Some(Value::Array(mut items)) = fields.remove("input") else {
            return Err(StartError::Shape);
        };
        for item in &mut items {
            for key in ["id", "call_id"] {
                if let Some(Value::String(id)) = item.get_mut(key) {
                    if let Some(cut) = id.find('_') {
                        id.insert(cut + 1, MARK);
                    }
                }
            }
        }
        let items = serde_json::to_string(&items)?;
        let items = items[1..items.len() - 1]
            .split(MARK_JSON)
            .map(str::to_owned)
            .collect();
        let mut head = serde_json::to_vec(&fields)?;
        head.pop(); // the closing brace
        if !fields.is_empty() {
            head.push(b',');
        }
        head.extend_from_slice(br#""input":["#);
        Ok(Start {
            head,
            items,
            tail: b"]}".to_vec(),
        })
    }

    /// A new session's first turn, each id tagged with `tag` (e.g. `fc_TAG000001`).
    pub(crate) fn session(&self, tag: &str) -> Session {
        let mut body = self.head.clone();
        body.extend_from_slice(self.items.join(tag).as_bytes());
        let items = body.len() > self.head.len();
        body.extend_from_slice(&self.tail);
        Session {
            body,
            tail: self.tail.len(),
            items,
            turns: 0,
        }
    }
}

/// A session's next request body, grown turn by turn.
pub(crate) struct Session {
    body: Vec<u8>,
    /// The length of the closing `]...}` after the last item.
    tail: usize,
    /// Whether the `input` array holds an item (so the next takes a comma first).
    items: bool,
    turns: u32,
}

/// The parts of an output item the next turn needs: its type, and a function call's id.
#[derive(Deserialize)]
struct ItemHead<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    call_id: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow)]
    output: Vec<&'a RawValue>,
}

impl Session {
    /// The body of the turn to send now.
    pub(crate) fn body(&self) -> &[u8] {
        &self.body
    }

    /// The turns sent and answered so far.
    pub(crate) fn turns(&self) -> u32 {
        self.turns
    }

    /// Makes the next turn: this turn's `input`, then the output items of `answer` (a
    /// Responses JSON) exactly as it sent them, then a `function_call_output` holding
    /// `tool_output` (a JSON string) for each function call among them.
    pub(crate) fn answered(&mut self, answer: &[u8], tool_output: &str) -> Result<(), AnswerError> {
        let answer: Answer = serde_json::from_slice(answer)?;
        let mut calls = Vec::new();
        for item in &answer.output {
            let head: ItemHead = serde_json::from_str(item.get())?;
            if let ("function_call", Some(call_id)) = (head.kind.as_ref(), head.call_id) {
                calls.push(serde_json::to_string(&call_id)?);
            }
        }
        let tail = self.body.split_off(self.body.len() - self.tail);
        for item in &answer.output {
            self.push(item.get().as_bytes());
        }
        for call_id in calls {
            let output =
                format!(r#"{{"type":"function_call_output","call_id":{call_id},"output":{tool_output}}}"#);
            self.push(output.as_bytes());
        }
        self.body.extend_from_slice(&tail);
        self.turns += 1;
        Ok(())
    }

    fn push(&mut self, item: &[u8]) {
        if self.items {
            self.body.push(b',');
        }
        self.body.extend_from_slice(item);
        self.items = true;
    }
}

/// What a tool answered to a call of `read_file` for lines 120 to 180, as a JSON string: the
/// lines asked for, numbered (about 2 KiB, the size of a file excerpt an agent reads).
pub(crate) fn tool_output() -> String {
    const CODE: [&str; 8] = [
        "    let mut attempts = 0;",
        "    while attempts < self.max_retries {",
        "        match self.pool.checkout(deadline) {",
        "            Ok(conn) => return Ok(conn),",
        "            Err(PoolError::Timeout) => attempts += 1,",
        "            Err(error) => return Err(error.into()),",
        "        }",
        "    }",
    ];
    let lines: Vec<String> = (120..=180)
        .map(|n| format!("{n}: {}", CODE[n % CODE.len()]))
        .collect();
    serde_json::to_string(&lines.join("\n")).expect("a string serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: &str = r#"{"model":"gpt-5","tools":[{"type":"function","name":"read_file"}],"input":[{"type":"message","role":"user","content":"hi"},{"type":"function_call","id":"fc_000001","call_id":"call_000001_ab","name":"read_file","arguments":"{}","status":"completed"},{"type":"function_call_output","call_id":"call_000001_ab","output":"x"}],"store":false}"#;
    const ANSWER: &str = r#"{"id":"resp_1","output":[{"id":"rs_1","type":"reasoning","summary":[]},{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"path\":\"a\"}","call_id":"call_\u0041","name":"read_file"},{"id":"msg_1","type":"message","role":"assistant","content":[]}],"usage":{}}"#;

    fn input(body: &[u8]) -> Vec<Value> {
        let body: Value = serde_json::from_slice(body).unwrap();
        body["input"].as_array().unwrap().clone()
    }

    #[test]
    fn each_session_starts_with_the_same_items_under_ids_of_its_own() {
        let start = Start::parse(START.as_bytes()).unwrap();
        let (one, two) = (start.session("s1_"), start.session("s2_"));
        let body: Value = serde_json::from_slice(one.body()).unwrap();
        assert_eq!(body["model"], "gpt-5");
        assert_eq!(body["store"], false);
        assert_eq!(body["tools"][0]["name"], "read_file");
        let (one, two) = (input(one.body()), input(two.body()));
        assert_eq!(one.len(), 3);
        assert_eq!(one[1]["id"], "fc_s1_000001");
        assert_eq!(one[1]["call_id"], "call_s1_000001_ab");
        assert_eq!(one[2]["call_id"], one[1]["call_id"]);
        assert_eq!(two[1]["id"], "fc_s2_000001");
        assert_eq!(one[0], two[0]);
        assert_eq!(one[0]["content"], "hi");
    }

    #[test]
    fn the_next_turn_is_this_input_then_the_answers_items_as_sent_then_the_call_outputs() {
        let start = Start::parse(START.as_bytes()).unwrap();
        let mut session = start.session("t_");
        let first = input(session.body());
        session.answered(ANSWER.as_bytes(), r#""120: fn""#).unwrap();
        assert_eq!(session.turns(), 1);
        let text = std::str::from_utf8(session.body()).unwrap();
        // The answer's items byte for byte (its escapes, its order of keys).
        assert!(
            text.contains(r#""call_id":"call_\u0041","name":"read_file"}"#),
            "{text}"
        );
        let next = input(session.body());
        assert_eq!(next[..3], first[..]);
        let answer: Value = serde_json::from_str(ANSWER).unwrap();
        assert_eq!(next[3..6], answer["output"].as_array().unwrap()[..]);
        assert_eq!(
            next[6],
            serde_json::json!({"type": "function_call_output", "call_id": "call_A", "output": "120: fn"})
        );
        assert_eq!(next.len(), 7);

        session.answered(ANSWER.as_bytes(), r#""done""#).unwrap();
        let third = input(session.body());
        assert_eq!(third[..7], next[..]);
        assert_eq!(third.len(), 11);
        assert_eq!(third[10]["output"], "done");
    }

    #[test]
    fn an_empty_history_takes_its_first_item_without_a_comma() {
        let start = Start::parse(br#"{"model":"m","input":[]}"#).unwrap();
        let mut session = start.session("x_");
        assert_eq!(input(session.body()).len(), 0);
        session.answered(ANSWER.as_bytes(), r#""o""#).unwrap();
        assert_eq!(input(session.body()).len(), 4);
    }

    #[test]
    fn an_answer_without_output_is_an_error_and_leaves_the_body_whole() {
        let start = Start::parse(START.as_bytes()).unwrap();
        let mut session = start.session("e_");
        assert!(session.answered(br#"{"error":{}}"#, r#""o""#).is_err());
        assert!(session.answered(br#"{"output":[{"type":1}]}"#, r#""o""#).is_err());
        assert!(Start::parse(br#"[1]"#).is_err());
        assert!(Start::parse(br#"{"input":"hi"}"#).is_err());
        assert_eq!(input(session.body()).len(), 3);
    }

    #[test]
    fn the_tool_output_is_the_lines_the_call_asks_for() {
        let output: String = serde_json::from_str(&tool_output()).unwrap();
        let lines: Vec<&str> = output.lines().collect();
        assert_eq!(lines.len(), 61);
        assert!(lines[0].starts_with("120: ") && lines[60].starts_with("180: "));
    }
}
