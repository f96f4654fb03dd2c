//! Incremental judging through the proxy (docs/incremental-judging.md): a session's turns,
//! each re-sending the history before it, are read and judged only for their new items, and
//! get what a whole check gives: the same 200 with the bytes forwarded as sent, the same 422
//! with the same violations at the same positions.

use serde_json::{json, Value};

use crate::support::metrics::counter;
use crate::support::proxy::{one_provider, Proxy};
use crate::support::upstream::Upstream;

fn tools() -> Value {
    json!([{"type": "function", "name": "read_file", "parameters": {"type": "object",
        "properties": {"path": {"type": "string"}}, "required": ["path"]}}])
}

/// One turn of an agent's tool loop: its answer (a call) and the client's output.
fn turn_items(n: usize) -> [Value; 2] {
    [
        json!({"type": "function_call", "id": format!("fc_{n:04}_0123456789abcdef"), "call_id": format!("call_{n}"),
               "name": "read_file", "arguments": format!("{{\"path\":\"src/{n}.rs\"}}"), "status": "completed"}),
        json!({"type": "function_call_output", "call_id": format!("call_{n}"), "output": format!("contents of {n}")}),
    ]
}

fn body(items: &[Value]) -> String {
    // Spacing of a client's own, kept byte for byte.
    format!(
        "{{\"model\": \"gpt-5\", \"tools\": {}, \"input\": [ {} ]}}",
        tools(),
        items.iter().map(Value::to_string).collect::<Vec<_>>().join(" , ")
    )
}

async fn session(ledger: &str) {
    let upstream = Upstream::json(200, r#"{"id":"resp_1","object":"response","output":[]}"#).await;
    let config = format!(
        "default_provider = \"openai\"\n{ledger}[providers.openai]\nbase_url = \"{}\"\nauth = \"none\"\nitem_profile = \"openai\"\n",
        upstream.base_url()
    );
    let mut proxy = Proxy::start(&config, &[]).await;
    let admin = proxy.admin().await;
    let mut items = vec![json!({"role": "user", "content": "Fix the failing test."})];
    let mut sent = Vec::new();
    for n in 0..8 {
        items.extend(turn_items(n));
        let text = body(&items);
        let (status, answer) = proxy.post_json("/v1/responses", text.clone()).await;
        assert_eq!(status, 200, "turn {n}: {answer}");
        sent.push(text);
    }
    let received: Vec<String> = upstream
        .received()
        .iter()
        .map(|r| String::from_utf8(r.body.to_vec()).unwrap())
        .collect();
    assert_eq!(received, sent, "every body forwarded byte for byte");
    // The first turn is judged whole (its leading items never seen), the second too (and kept),
    // and from the third on each turn's old items are passed over: 5 + 7 + ... + 15.
    let before = counter(admin, "replaygate_gate_items_judged_before_total").await;
    assert_eq!(before, (2..8).map(|n| 1 + 2 * n).sum::<u64>(), "{ledger}");
    assert_eq!(
        counter(admin, "replaygate_gate_items_judged_total").await,
        3 + 5 + 6 * 2
    );
    // The last body sent again (a client's retry): its whole input was judged before, so none
    // of it is read again, and it is forwarded as sent.
    let (status, answer) = proxy.post_json("/v1/responses", sent[7].clone()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        counter(admin, "replaygate_gate_items_judged_before_total").await,
        before + 17
    );
    assert_eq!(
        counter(admin, "replaygate_gate_items_judged_total").await,
        3 + 5 + 6 * 2
    );
    assert_eq!(upstream.received()[8].body, sent[7].as_bytes());

    // The next turn with the tools changed (no `read_file`): every call is judged again, for
    // the tool it no longer declares.
    let mut other_tools = items.clone();
    other_tools.push(json!({"role": "user", "content": "go on"}));
    let text = body(&other_tools).replacen("\"read_file\"", "\"write_file\"", 1);
    let (status, answer) = proxy.post_json("/v1/responses", text).await;
    assert_eq!(status, 200, "{answer}");
    let judged = counter(admin, "replaygate_gate_items_judged_total").await;
    assert_eq!(judged, 3 + 5 + 6 * 2 + other_tools.len() as u64, "judged whole");

    // A turn whose new items are refused gets the whole check's answer: the same violations at
    // their positions in the whole input.
    let mut refused = items.clone();
    refused.push(json!({"type": "function_call_output", "call_id": "call_nobody", "output": "x"}));
    refused.push(json!({"type": "openai:web_search_call", "id": "ws_0123456789abcdef"}));
    let text = body(&refused);
    let (status, answer) = proxy.post_json("/v1/responses", text.clone()).await;
    assert_eq!(status, 422, "{answer}");
    let expected = replaygate::gate::Gate::default()
        .check(
            text.as_bytes(),
            &replaygate::gate::Target::provider(
                &replaygate::gate::ProviderProfile::own_namespace("openai")
                    .with_item_profile(Some(replaygate::gate::ItemProfile::built_in("openai").unwrap())),
            ),
        )
        .unwrap();
    let listed: Vec<(Option<u64>, String)> = answer["error"]["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["index"].as_u64(), v["reason"].as_str().unwrap().to_owned()))
        .collect();
    let whole: Vec<(Option<u64>, String)> = expected
        .violations
        .iter()
        .map(|v| (v.index.map(|i| i as u64), v.reason.as_str().to_owned()))
        .collect();
    assert_eq!(listed, whole);
    assert_eq!(
        listed[0],
        (Some(items.len() as u64), "call_id_mismatch".to_owned())
    );
    assert_eq!(upstream.received().len(), 10, "the refused body reached no one");
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_sessions_turns_are_judged_for_their_new_items_with_the_ledger_off() {
    session("[ledger]\nenabled = false\n").await;
}

#[tokio::test]
async fn a_sessions_turns_are_judged_for_their_new_items_with_the_ledger_on() {
    session("[state]\nbackend = \"memory\"\n[ledger]\nenabled = true\n").await;
}

#[tokio::test]
async fn with_no_memory_for_judged_inputs_every_body_is_judged_whole() {
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let config = one_provider(
        &upstream.base_url(),
        "\"none\"",
        "[gate]\njudged_prefix_bytes = 0\n",
    );
    let mut proxy = Proxy::start(&config, &[]).await;
    let admin = proxy.admin().await;
    let mut items = vec![json!({"role": "user", "content": "hi"})];
    for n in 0..3 {
        items.extend(turn_items(n));
        let (status, _) = proxy.post_json("/v1/responses", body(&items)).await;
        assert_eq!(status, 200);
    }
    assert_eq!(
        counter(admin, "replaygate_gate_items_judged_before_total").await,
        0
    );
    assert_eq!(
        counter(admin, "replaygate_gate_items_judged_total").await,
        3 + 5 + 7
    );
    proxy.shutdown().await;
}
