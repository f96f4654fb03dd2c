//! A fake Responses provider that mints new ids on every answer, as a real one does: its Nth
//! answer is response `resp_{name}_N` whose output is a message and a function call, each with
//! an item id of its own. It records what it receives (see [`Upstream::received`]), and
//! [`answer`] tells a test which body its Nth answer was.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

use super::upstream::Upstream;

/// Starts the provider called `name`.
pub async fn start(name: &'static str) -> Upstream {
    let counter = Arc::new(AtomicU64::new(0));
    Upstream::start(move |request| {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            let answer = answer(name, n, &body["model"]);
            let mut response = Response::new(Full::new(Bytes::from(answer.to_string())).boxed_unsync());
            response
                .headers_mut()
                .insert("content-type", "application/json".parse().unwrap());
            response
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
