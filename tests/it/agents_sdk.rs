//! The OpenAI Agents SDK's `store=False` loop (`tests/e2e/agents_sdk.py`) through replaygate
//! under the repository's own `proxy.toml` (the `openai` item profile on, the ledger on; its
//! state in memory), against a scripted reasoning model that, as OpenAI does, answers 404 to a
//! reasoning item sent by id alone of an answer it did not store. Straight to the provider the
//! loop fails on its second turn; through replaygate every turn is answered, the reasoning items
//! cut (`state_not_stored`, docs/reasons.md#state_not_stored).
//!
//! Needs `python3` with the packages in `tests/e2e/requirements.txt` (`scripts/test` installs
//! them).

use std::process::Output;
use std::time::Duration;

use serde_json::Value;

use crate::support::proxy::{with_state_in_memory, Proxy};
use crate::support::scripted_provider;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/agents_sdk.py");

async fn run_loop(base_url: &str) -> Output {
    let child = tokio::process::Command::new("python3")
        .arg(SCRIPT)
        .arg(base_url)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(120), child)
        .await
        .expect("agents_sdk.py did not finish within 120 s")
        .expect("python3 runs (scripts/test installs tests/e2e/requirements.txt)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_sdk_store_false_loop_fails_at_the_provider_and_passes_through_the_repos_proxy_toml() {
    // Straight to the provider: the second turn sends the first answer's reasoning item back
    // by id, and the provider kept nothing of it.
    let direct = scripted_provider::start_reasoning().await;
    let output = run_loop(&format!("{}/v1", direct.base_url())).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("404") && stderr.contains("Items are not persisted"),
        "the loop should fail at the provider as it does at OpenAI ({}):\n{stderr}",
        output.status
    );
    assert_eq!(direct.received().len(), 2, "it failed on the second turn");

    let upstream = scripted_provider::start_reasoning().await;
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/proxy.toml")).unwrap();
    let text = with_state_in_memory(&text).replace("https://api.openai.com/v1", &upstream.base_url());
    let proxy = Proxy::start(&text, &[("OPENAI_API_KEY", "sk-test-provider-key")]).await;
    let output = run_loop(&proxy.url("/v1")).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("agents sdk e2e: ok"),
        "agents_sdk.py failed through replaygate ({}):\n{}\n{stdout}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    // Two runs of a call, its output and the answer: every turn reached the provider, each
    // asking not to be stored, none with a reasoning item it cannot read.
    let received = upstream.received();
    assert_eq!(received.len(), 4, "every turn reached the provider");
    for request in &received {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body["store"], false, "{body}");
        let items = body["input"].as_array().unwrap();
        assert!(
            items.iter().all(|item| item["type"] != "reasoning"),
            "a reasoning item by id alone left: {body}"
        );
    }
    // The last turn replays the whole history, calls and outputs paired.
    let last: Value = serde_json::from_slice(&received[3].body).unwrap();
    let items = last["input"].as_array().unwrap();
    let count = |kind: &str| items.iter().filter(|item| item["type"] == kind).count();
    assert_eq!(
        (count("function_call"), count("function_call_output")),
        (2, 2),
        "{last}"
    );
}
