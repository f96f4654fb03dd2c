//! Agent frameworks on the Responses API through replaygate under the repository's own
//! `proxy.toml` (the `openai` item profile on, the ledger on; its state in memory): LangChain
//! (`langchain-openai`) and pydantic-ai (its OpenAI Responses model), driven by
//! `tests/e2e/frameworks.py` in tool loops that replay their whole history, against a scripted
//! provider that refuses, as OpenAI does, an output answering no call. Every turn must pass.
//!
//! Needs `python3` with the packages in `tests/e2e/requirements.txt` (`scripts/test` installs
//! them).

use std::time::Duration;

use serde_json::Value;

use crate::support::proxy::{with_state_in_memory, Proxy};
use crate::support::scripted_provider::{self, CallIds};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/frameworks.py");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langchain_and_pydantic_ai_tool_loops_pass_through_the_repos_proxy_toml() {
    let upstream = scripted_provider::start(CallIds::Fresh).await;
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/proxy.toml")).unwrap();
    let text = with_state_in_memory(&text).replace("https://api.openai.com/v1", &upstream.base_url());
    let proxy = Proxy::start(&text, &[("OPENAI_API_KEY", "sk-test-provider-key")]).await;
    let child = tokio::process::Command::new("python3")
        .arg(SCRIPT)
        .arg(proxy.url("/v1"))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), child)
        .await
        .expect("frameworks.py did not finish within 120 s")
        .expect("python3 runs (scripts/test installs tests/e2e/requirements.txt)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("frameworks e2e: ok"),
        "frameworks.py failed ({}):\n{}\n{stdout}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    // LangChain: two loops of a call and its answer; pydantic-ai: two runs of the same.
    let received = upstream.received();
    assert_eq!(received.len(), 8, "every turn reached the provider");
    // The last turn of each replays the whole history, calls and outputs paired.
    for body in [&received[3].body, &received[7].body] {
        let body: Value = serde_json::from_slice(body).unwrap();
        let items = body["input"].as_array().unwrap();
        let calls = items
            .iter()
            .filter(|item| item["type"] == "function_call")
            .count();
        let outputs = items
            .iter()
            .filter(|item| item["type"] == "function_call_output")
            .count();
        assert_eq!((calls, outputs), (2, 2), "{body}");
    }
}
