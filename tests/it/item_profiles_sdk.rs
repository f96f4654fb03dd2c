//! The OpenAI Node SDK's `responses.stream` helper in the documented tool loop, driven by the
//! real SDK (tests/e2e/node/stream_helper_loop.mjs) through replaygate against a scripted
//! provider that refuses `parsed_arguments` as OpenAI does: without an item profile the loop
//! fails on the provider's 400; with `item_profile = "openai"` replaygate cuts the member out
//! and the loop finishes.
//!
//! Needs `node` (>= 18) with `npm ci` run in `tests/e2e/node` (`scripts/test` does it).

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::proxy::Proxy;
use crate::support::scripted_provider::{self, CallIds, OPENAI_REFUSED};

const NODE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/node");

/// Runs the loop script through `proxy`: whether it succeeded, its output, and what it sent.
async fn run_loop(proxy: &Proxy) -> (bool, String, Vec<Value>) {
    assert!(
        Path::new(NODE_DIR).join("node_modules/openai").is_dir(),
        "the OpenAI Node SDK is not installed: run `npm ci` in tests/e2e/node (scripts/test does)"
    );
    let sent_log = tempfile::NamedTempFile::new().unwrap();
    let child = tokio::process::Command::new("node")
        .arg(format!("{NODE_DIR}/stream_helper_loop.mjs"))
        .arg(proxy.url("/v1"))
        .arg(sent_log.path())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(90), child)
        .await
        .expect("the loop finished within 90 s")
        .expect("node runs (install Node.js >= 18)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let sent = std::fs::read_to_string(sent_log.path())
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (output.status.success(), text, sent)
}

/// `text` with every member `"name":VALUE` (and the comma before it) cut out, VALUE being one
/// JSON value: the oracle for a repair, written independently of replaygate's cutting.
fn cut_members(text: &str, name: &str) -> String {
    let needle = format!(",\"{name}\":");
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(&needle) {
        out.push_str(&rest[..at]);
        let value = &rest[at + needle.len()..];
        let mut values = serde_json::Deserializer::from_str(value).into_iter::<Value>();
        values.next().unwrap().unwrap();
        rest = &value[values.byte_offset()..];
    }
    out.push_str(rest);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_stream_helper_loop_fails_upstream_without_a_profile_and_succeeds_with_it() {
    let provider = scripted_provider::start_refusing(CallIds::Fresh, OPENAI_REFUSED).await;
    let plain = format!(
        "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\n",
        provider.base_url()
    );

    // Without a profile the replayed parsed_arguments reach the provider, which refuses them.
    let proxy = Proxy::start(&plain, &[]).await;
    let (ok, text, sent) = run_loop(&proxy).await;
    assert!(!ok, "the loop should fail without a profile:\n{text}");
    assert!(
        text.contains("Unknown parameter: 'input[1].parsed_arguments'"),
        "{text}"
    );
    assert_eq!(sent.last().unwrap()["status"], 400);
    drop(proxy);

    // With the openai profile the member is cut out and every turn succeeds.
    let before = provider.received().len();
    let proxy = Proxy::start(&format!("{plain}item_profile = \"openai\"\n"), &[]).await;
    let (ok, text, sent) = run_loop(&proxy).await;
    assert!(ok, "the loop failed through the profile:\n{text}");
    let received = &provider.received()[before..];
    assert_eq!(received.len(), sent.len());
    let mut repaired = 0;
    for (sent, received) in sent.iter().zip(received) {
        assert_eq!(sent["status"], 200, "{sent}");
        let body = sent["body"].as_str().unwrap();
        let forwarded = std::str::from_utf8(&received.body).unwrap();
        assert_eq!(
            forwarded,
            cut_members(body, "parsed_arguments"),
            "every other byte as sent"
        );
        if body.contains("parsed_arguments") {
            repaired += 1;
            let header = sent["repaired"].as_str().unwrap();
            assert!(
                header
                    .split(',')
                    .all(|name| name.starts_with("item_field@input[") && name.ends_with("].parsed_arguments")),
                "{header}"
            );
        } else {
            assert!(sent["repaired"].is_null(), "{sent}");
        }
    }
    assert!(repaired >= 1, "no turn replayed parsed_arguments:\n{text}");
}
