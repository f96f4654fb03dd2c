//! A fake Responses provider scripted by the request body, for the SDK end-to-end tests.
//!
//! What it answers depends on the last item of `input`:
//! - a user message asking for the weather "in CITY": a `function_call` to `get_weather` with
//!   `{"city":"CITY"}`;
//! - a `function_call_output`: an assistant message, after checking, as OpenAI does, that the
//!   output answers a call (earlier in `input`, or in the `previous_response_id` response);
//! - anything else (a string `input` too): the assistant message `Hello`.
//!
//! `"stream": true` gets the same response as server-sent events.
//!
//! As a reasoning model ([`start_reasoning`]) each answer starts with a reasoning item, and the
//! answer keeps `store` as the request asked (true unless it says `false`); as OpenAI does, an
//! input reasoning item sent by `id` without `encrypted_content` of an answer not stored gets
//! 404 (its content only with `include: ["reasoning.encrypted_content"]`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

use super::upstream::{sse_response, UpBody, Upstream};

/// How the provider numbers the `call_id`s of the calls it makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallIds {
    /// A fresh id for every call, as OpenAI does.
    Fresh,
    /// Numbered per response from `call_0`, as Bedrock Mantle does.
    PerResponse,
}

/// What the provider remembers between requests.
struct Script {
    call_ids: CallIds,
    /// `(item type, member)` pairs it answers 400 `Unknown parameter` to, as OpenAI does.
    refused: &'static [(&'static str, &'static str)],
    counter: AtomicU64,
    /// The call ids each response it answered made, by response id.
    calls_by_response: Mutex<HashMap<String, Vec<String>>>,
    /// Whether it answers as a reasoning model (a reasoning item first, `store` honoured).
    reasoning: bool,
    /// The reasoning item ids of the answers it did not store.
    not_stored: Mutex<HashSet<String>>,
}

/// Starts a scripted provider on 127.0.0.1:0.
pub async fn start(call_ids: CallIds) -> Upstream {
    start_refusing(call_ids, &[]).await
}

/// The members OpenAI refuses in replayed items with `400 Unknown parameter` (docs/item-profiles.md).
pub const OPENAI_REFUSED: &[(&str, &str)] = &[("function_call", "parsed_arguments"), ("reasoning", "status")];

/// Starts a scripted provider that also refuses the `refused` members of input items.
pub async fn start_refusing(call_ids: CallIds, refused: &'static [(&'static str, &'static str)]) -> Upstream {
    serve(call_ids, refused, false).await
}

/// Starts a scripted reasoning model that keeps nothing of an answer to `store: false`, with
/// OpenAI's refused members and fresh call ids.
pub async fn start_reasoning() -> Upstream {
    serve(CallIds::Fresh, OPENAI_REFUSED, true).await
}

async fn serve(
    call_ids: CallIds,
    refused: &'static [(&'static str, &'static str)],
    reasoning: bool,
) -> Upstream {
    let script = Arc::new(Script {
        call_ids,
        refused,
        counter: AtomicU64::new(0),
        calls_by_response: Mutex::new(HashMap::new()),
        reasoning,
        not_stored: Mutex::new(HashSet::new()),
    });
    Upstream::start(move |request| {
        let script = script.clone();
        async move { script.answer(&request.body) }
    })
    .await
}

impl Script {
    fn answer(&self, body: &[u8]) -> Response<UpBody> {
        let Ok(request) = serde_json::from_slice::<Value>(body) else {
            return error(400, "input", "We could not parse the JSON body of your request.");
        };
        if let Some((param, message)) = self.unknown_parameter(&request) {
            return error(400, &param, &message);
        }
        if let Some(id) = self.unreadable_reasoning(&request) {
            let message = format!(
                "Item with id '{id}' not found. Items are not persisted when `store` is set to \
                 false. Try again with `store` set to true, or remove this item from your input."
            );
            return error(404, "input", &message);
        }
        let n = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        let item = match self.next_item(&request, n) {
            Ok(item) => item,
            Err(message) => return error(400, "input", &message),
        };
        let response_id = format!("resp_{n:04}");
        let calls = item
            .get("call_id")
            .and_then(Value::as_str)
            .map(|id| vec![id.to_owned()])
            .unwrap_or_default();
        self.calls_by_response
            .lock()
            .unwrap()
            .insert(response_id.clone(), calls);
        let stored = request["store"] != Value::Bool(false);
        let mut output = vec![item];
        if self.reasoning {
            let reasoning = reasoning_item(n, &request);
            if !stored {
                self.not_stored
                    .lock()
                    .unwrap()
                    .insert(reasoning["id"].as_str().unwrap().to_owned());
            }
            output.insert(0, reasoning);
        }
        let mut response = response_object(&response_id, &request, output);
        response["store"] = Value::Bool(stored);
        if request["stream"] == Value::Bool(true) {
            stream(response)
        } else {
            let mut answer = Response::new(Full::new(Bytes::from(response.to_string())).boxed_unsync());
            answer
                .headers_mut()
                .insert("content-type", "application/json".parse().unwrap());
            answer
        }
    }

    /// The first refused member among the input items, as OpenAI names it.
    fn unknown_parameter(&self, request: &Value) -> Option<(String, String)> {
        let items = request["input"].as_array()?;
        items.iter().enumerate().find_map(|(i, item)| {
            self.refused
                .iter()
                .find(|(kind, member)| item["type"] == *kind && item.get(*member).is_some())
                .map(|(_, member)| {
                    let param = format!("input[{i}].{member}");
                    let message = format!("Unknown parameter: '{param}'.");
                    (param, message)
                })
        })
    }

    /// The id of the first input reasoning item sent by id alone of an answer not stored.
    fn unreadable_reasoning(&self, request: &Value) -> Option<String> {
        let not_stored = self.not_stored.lock().unwrap();
        request["input"].as_array()?.iter().find_map(|item| {
            let id = item["id"].as_str()?;
            let by_id_alone = item["type"] == "reasoning" && !item["encrypted_content"].is_string();
            (by_id_alone && not_stored.contains(id)).then(|| id.to_owned())
        })
    }

    /// The one output item for this request, or the message of a 400.
    fn next_item(&self, request: &Value, n: u64) -> Result<Value, String> {
        let items = match &request["input"] {
            Value::Array(items) => items.as_slice(),
            _ => &[],
        };
        let Some(last) = items.last() else {
            return Ok(message(n, "Hello"));
        };
        if last["type"] == "function_call_output" {
            for output in items
                .iter()
                .rev()
                .take_while(|i| i["type"] == "function_call_output")
            {
                self.check_answers_a_call(request, items, output)?;
            }
            return Ok(message(n, "It is sunny."));
        }
        let is_user = last["role"] == "user" && (last["type"].is_null() || last["type"] == "message");
        match text_of(&last["content"]).and_then(|text| city_asked(&text)) {
            Some(city) if is_user => Ok(self.function_call(n, &city)),
            _ => Ok(message(n, "Hello")),
        }
    }

    /// OpenAI's rule: an output answers a call in `input` or in the previous response.
    fn check_answers_a_call(&self, request: &Value, items: &[Value], output: &Value) -> Result<(), String> {
        let call_id = output["call_id"].as_str().unwrap_or_default();
        let in_input = items
            .iter()
            .any(|i| i["type"] == "function_call" && i["call_id"] == call_id);
        let in_previous = request["previous_response_id"]
            .as_str()
            .and_then(|id| self.calls_by_response.lock().unwrap().get(id).cloned())
            .is_some_and(|calls| calls.iter().any(|c| c == call_id));
        if in_input || in_previous {
            Ok(())
        } else {
            Err(format!(
                "No tool call found for function call output with call_id {call_id}."
            ))
        }
    }

    fn function_call(&self, n: u64, city: &str) -> Value {
        let (call_id, id) = match self.call_ids {
            CallIds::Fresh => (format!("call_{n:04}"), format!("fc_{n:04}")),
            CallIds::PerResponse => ("call_0".to_owned(), "fc_0".to_owned()),
        };
        json!({
            "type": "function_call",
            "id": id,
            "call_id": call_id,
            "name": "get_weather",
            "arguments": json!({ "city": city }).to_string(),
            "status": "completed",
        })
    }
}

/// The text of a message's `content`, a string or a list of text parts.
fn text_of(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => Some(parts.iter().filter_map(|p| p["text"].as_str()).collect()),
        _ => None,
    }
}

/// `CITY` in a question about "the weather in CITY?".
fn city_asked(text: &str) -> Option<String> {
    if !text.contains("weather") {
        return None;
    }
    let (_, after) = text.rsplit_once(" in ")?;
    let city = after.trim().trim_end_matches(['?', '.', '!']).trim();
    (!city.is_empty()).then(|| city.to_owned())
}

fn message(n: u64, text: &str) -> Value {
    json!({
        "type": "message",
        "id": format!("msg_{n:04}"),
        "status": "completed",
        "role": "assistant",
        "content": [{ "type": "output_text", "text": text, "annotations": [], "logprobs": [] }],
    })
}

/// The reasoning item of answer `n`, with its content when the request asked for it. Its id is
/// as long as OpenAI's (the ledger indexes no id shorter than 16 bytes).
fn reasoning_item(n: u64, request: &Value) -> Value {
    let id = format!("rs_68e1f2a3b4c5d6e7f8a9{n:04}");
    let mut item = json!({ "type": "reasoning", "id": id, "summary": [] });
    let asked = request["include"]
        .as_array()
        .is_some_and(|include| include.iter().any(|i| i == "reasoning.encrypted_content"));
    if asked {
        item["encrypted_content"] = json!(format!("gAAAAB-sealed-{n:04}"));
    }
    item
}

/// A Responses `response` object as the SDKs parse it.
fn response_object(id: &str, request: &Value, output: Vec<Value>) -> Value {
    json!({
        "id": id,
        "object": "response",
        "created_at": 1_764_000_000,
        "status": "completed",
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "model": request["model"],
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": request["previous_response_id"],
        "store": true,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": request.get("tools").cloned().unwrap_or(json!([])),
        "top_p": 1.0,
        "metadata": {},
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": { "cached_tokens": 0 },
            "output_tokens": 5,
            "output_tokens_details": { "reasoning_tokens": 0 },
            "total_tokens": 15,
        },
    })
}

/// The events of a streamed response, in the order OpenAI sends them.
fn events(response: &Value) -> Vec<Value> {
    let mut events = Vec::new();
    let mut pending = response.clone();
    pending["status"] = json!("in_progress");
    pending["output"] = json!([]);
    events.push(json!({ "type": "response.created", "response": pending }));
    events.push(json!({ "type": "response.in_progress", "response": pending }));
    for (index, item) in response["output"].as_array().into_iter().flatten().enumerate() {
        let item_id = &item["id"];
        if item["type"] == "reasoning" {
            events.push(json!({ "type": "response.output_item.added", "output_index": index, "item": item }));
            events.push(json!({ "type": "response.output_item.done", "output_index": index, "item": item }));
            continue;
        }
        let mut added = item.clone();
        added["status"] = json!("in_progress");
        if item["type"] == "message" {
            added["content"] = json!([]);
        } else {
            added["arguments"] = json!("");
        }
        events.push(json!({ "type": "response.output_item.added", "output_index": index, "item": added }));
        if item["type"] == "message" {
            let part = &item["content"][0];
            let text = part["text"].as_str().unwrap_or_default();
            let (head, tail) = text.split_at(text.len() / 2);
            let at = json!({ "item_id": item_id, "output_index": index, "content_index": 0 });
            let with = |kind: &str, extra: Value| {
                let mut event = at.clone();
                event["type"] = json!(kind);
                event
                    .as_object_mut()
                    .unwrap()
                    .extend(extra.as_object().unwrap().clone());
                event
            };
            let empty = json!({ "type": "output_text", "text": "", "annotations": [], "logprobs": [] });
            events.push(with("response.content_part.added", json!({ "part": empty })));
            for delta in [head, tail] {
                events.push(with(
                    "response.output_text.delta",
                    json!({ "delta": delta, "logprobs": [] }),
                ));
            }
            events.push(with(
                "response.output_text.done",
                json!({ "text": text, "logprobs": [] }),
            ));
            events.push(with("response.content_part.done", json!({ "part": part })));
        } else {
            let arguments = &item["arguments"];
            let at = json!({ "item_id": item_id, "output_index": index });
            let mut delta = at.clone();
            delta["type"] = json!("response.function_call_arguments.delta");
            delta["delta"] = arguments.clone();
            let mut done = at;
            done["type"] = json!("response.function_call_arguments.done");
            done["arguments"] = arguments.clone();
            events.extend([delta, done]);
        }
        events.push(json!({ "type": "response.output_item.done", "output_index": index, "item": item }));
    }
    events.push(json!({ "type": "response.completed", "response": response }));
    for (sequence, event) in events.iter_mut().enumerate() {
        event["sequence_number"] = json!(sequence);
    }
    events
}

/// `response` as a `text/event-stream` answer, one event at a time.
fn stream(response: Value) -> Response<UpBody> {
    let (sender, answer) = sse_response();
    tokio::spawn(async move {
        for event in events(&response) {
            let frame = format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap_or_default()
            );
            if sender.send(Bytes::from(frame)).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let _ = sender.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
    });
    answer
}

/// An OpenAI error envelope with `status`.
fn error(status: u16, param: &str, message: &str) -> Response<UpBody> {
    let body = json!({
        "error": { "type": "invalid_request_error", "code": null, "param": param, "message": message }
    });
    let mut answer = Response::new(Full::new(Bytes::from(body.to_string())).boxed_unsync());
    *answer.status_mut() = StatusCode::from_u16(status).unwrap();
    answer
        .headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    answer
}
