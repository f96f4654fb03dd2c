//! The official OpenAI Python SDK against replaygate and an in-process fake provider:
//! `responses.create` plain and streaming, and gated requests raising
//! `UnprocessableEntityError` with the right `code` and `param`.
//!
//! Needs `python3` with the packages in `tests/e2e/requirements.txt` (`scripts/test` installs
//! them).

mod support;

use std::time::Duration;

use bytes::Bytes;
use support::proxy::Proxy;
use support::upstream::{json_response, sse_response, Upstream};

const RESPONSE: &str = r#"{"id":"resp_e2e","object":"response","created_at":1764000000,"status":"completed","model":"gpt-5","output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[]}]}],"parallel_tool_calls":true,"tool_choice":"auto","tools":[]}"#;

fn sse_events() -> Vec<String> {
    let created = RESPONSE.replace(r#""status":"completed""#, r#""status":"in_progress""#);
    let events = [
        ("response.created", format!(r#"{{"type":"response.created","sequence_number":0,"response":{created}}}"#)),
        ("response.output_text.delta", r#"{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hel","logprobs":[]}"#.to_owned()),
        ("response.output_text.delta", r#"{"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"lo","logprobs":[]}"#.to_owned()),
        ("response.completed", format!(r#"{{"type":"response.completed","sequence_number":3,"response":{RESPONSE}}}"#)),
    ];
    let mut frames: Vec<String> = events
        .iter()
        .map(|(event, data)| format!("event: {event}\ndata: {data}\n\n"))
        .collect();
    frames.push("data: [DONE]\n\n".to_owned());
    frames
}

async fn fake_provider() -> Upstream {
    Upstream::start(|request| async move {
        let streaming = String::from_utf8_lossy(&request.body).contains(r#""stream":true"#);
        if !streaming {
            return json_response(200, RESPONSE);
        }
        let (events, response) = sse_response();
        tokio::spawn(async move {
            for frame in sse_events() {
                if events.send(Bytes::from(frame)).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        response
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_works_through_the_proxy() {
    let openai = fake_provider().await;
    let bedrock = fake_provider().await;
    let config = format!(
        "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\n[providers.bedrock]\nbase_url = \"{}\"\n",
        openai.base_url(),
        bedrock.base_url()
    );
    let proxy = Proxy::start(&config, &[]).await;
    let base_url = proxy.url("/v1");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/openai_sdk.py");
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("python3")
            .arg(script)
            .arg(&base_url)
            .output(),
    )
    .await
    .expect("the SDK script finished within 60 s")
    .expect("python3 runs (install tests/e2e/requirements.txt: scripts/test does)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "SDK script failed:\n{stderr}\n{}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("openai sdk e2e: ok"));
    // Two plain/streamed calls reached OpenAI; the refused ones reached no one.
    assert_eq!(openai.received().len(), 2);
    assert!(bedrock.received().is_empty());
}
