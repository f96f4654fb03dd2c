//! pydantic-ai's Amazon Bedrock Mantle provider (its real library) against replaygate run with
//! the repository's own `proxy.toml`, each provider pointed at an in-process scripted provider:
//! one for OpenAI, one for Mantle with its two paths, `/v1` (`bedrock`) and `/openai/v1`
//! (`bedrock-openai`). Given only the proxy's origin, the library builds Mantle's own paths
//! itself; `/openai/v1/responses` must reach Mantle at that path, not the provider named `openai`.
//!
//! Needs `python3` with the packages in `tests/e2e/requirements.txt` (`scripts/test` installs
//! them).

use std::time::Duration;

use serde_json::Value;

use crate::support::proxy::{with_state_in_memory, Proxy};
use crate::support::scripted_provider::{self, CallIds};
use crate::support::upstream::Upstream;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/pydantic_ai_mantle.py");

/// The repository's proxy.toml with its state in memory, `openai` at `openai` and both Bedrock
/// providers at `mantle` (each at its own path there), none of them holding a key.
fn repo_config(openai: &Upstream, mantle: &Upstream) -> String {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/proxy.toml")).unwrap();
    let text = text
        .replace(
            "\"https://api.openai.com/v1\"",
            &format!("\"{}\"", openai.base_url()),
        )
        .replace(
            "\"https://bedrock-mantle.us-east-1.api.aws/v1\"",
            &format!("\"{}\"", mantle.base_url()),
        )
        .replace(
            "\"https://bedrock-mantle.us-east-1.api.aws/openai/v1\"",
            &format!("\"{}\"", mantle.base_url().replace("/v1", "/openai/v1")),
        );
    let text: String = text
        .lines()
        .map(|line| match line.starts_with("auth = { bearer_env") {
            true => "auth = \"none\"\n".to_owned(),
            false => format!("{line}\n"),
        })
        .collect();
    assert!(
        !text
            .lines()
            .any(|line| !line.trim_start().starts_with('#') && line.contains("https://")),
        "a provider of proxy.toml was not pointed at a fake upstream"
    );
    with_state_in_memory(&text)
}

/// One request the script sent through the proxy.
#[derive(Debug)]
struct Sent {
    path: String,
    status: u16,
    body: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pydantic_ai_bedrock_mantle_tool_loops_pass_through_the_repo_config() {
    let openai = scripted_provider::start(CallIds::Fresh).await;
    let mantle = scripted_provider::start(CallIds::PerResponse).await;
    let proxy = Proxy::start(&repo_config(&openai, &mantle), &[]).await;

    let sent_log = tempfile::NamedTempFile::new().unwrap();
    let child = tokio::process::Command::new("python3")
        .arg(SCRIPT)
        .arg(proxy.url(""))
        .arg(sent_log.path())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(90), child)
        .await
        .expect("the pydantic-ai script did not finish within 90 s")
        .expect("cannot run python3: install it and tests/e2e/requirements.txt (scripts/test does)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("pydantic-ai mantle e2e: ok"),
        "the script failed ({}):\n{}\n{stdout}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let sent: Vec<Sent> = std::fs::read_to_string(sent_log.path())
        .unwrap()
        .lines()
        .map(|line| {
            let entry: Value = serde_json::from_str(line).unwrap();
            Sent {
                path: entry["path"].as_str().unwrap().to_owned(),
                status: entry["status"].as_u64().unwrap() as u16,
                body: entry["body"].as_str().unwrap().to_owned(),
            }
        })
        .collect();

    // Two user turns of a tool loop (a call, then the answer) for each model: every one passed,
    // GPT-5 at Mantle's own `/openai/v1`, gpt-oss at its `/v1`.
    let paths: Vec<(&str, u16)> = sent.iter().map(|s| (s.path.as_str(), s.status)).collect();
    let mut expected = vec![("/openai/v1/responses", 200); 4];
    expected.extend([("/v1/responses", 200); 4]);
    assert_eq!(paths, expected);

    // Each reached Mantle at the path it was sent to, byte for byte, in order; OpenAI got nothing.
    let received = mantle.received();
    let received: Vec<(&str, &str)> = received
        .iter()
        .map(|r| (r.target.as_str(), std::str::from_utf8(&r.body).unwrap()))
        .collect();
    let sent_pairs: Vec<(&str, &str)> = sent.iter().map(|s| (s.path.as_str(), s.body.as_str())).collect();
    assert_eq!(received, sent_pairs);
    assert!(openai.received().is_empty(), "a Bedrock request reached OpenAI");

    // The last GPT-5 turn replays both turns' calls, each answered, under the ids Mantle gave
    // them: `call_0` in each response.
    let last: Value = serde_json::from_str(&sent[3].body).unwrap();
    assert_eq!(last["model"], "openai.gpt-5.4");
    let calls: Vec<(&str, &str)> = last["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|item| Some((item["type"].as_str()?, item["call_id"].as_str()?)))
        .collect();
    assert_eq!(
        calls,
        [
            ("function_call", "call_0"),
            ("function_call_output", "call_0"),
            ("function_call", "call_0"),
            ("function_call_output", "call_0")
        ]
    );
}
