//! A fake Responses provider that mints new ids on every answer, as a real one does: its Nth
//! answer is response `resp_{name}_N` whose output is a message and a function call, each with
//! an item id of its own. It records what it receives (see [`Upstream::received`]), and
//! [`answer`] tells a test which body its Nth answer was.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

use super::upstream::{json_response, Upstream};

/// Starts the provider called `name`.
pub async fn start(name: &'static str) -> Upstream {
    let counter = Arc::new(AtomicU64::new(0));
    Upstream::start(move |request| {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            json_response(200, answer(name, n, &body["model"]).to_string())
        }
    })
    .await
}

/// The body of the `n`th answer (counted from 1) of the provider `name` to a request for
/// `model`.
pub fn answer(name: &str, n: u64, model: &Value) -> Value {
    json!({
        "id": format!("resp_{name}_{n}"),
        "object": "response",
        "model": model,
        "status": "completed",
        "output": [
            {"type": "message", "id": format!("msg_{name}_{n:016}"), "role": "assistant",
             "status": "completed",
             "content": [{"type": "output_text", "text": format!("{name} says {n}"), "annotations": []}]},
            {"type": "function_call", "id": format!("fc_{name}_{n:016}"), "call_id": format!("call_{name}_{n}"),
             "name": "lookup", "arguments": format!("{{\"n\":{n}}}"), "status": "completed"}
        ]
    })
}
