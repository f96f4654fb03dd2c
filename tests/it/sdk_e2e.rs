//! The official OpenAI SDKs (Python and Node) against replaygate and in-process scripted fake
//! providers: `responses.create` plain and streaming, gated requests raising the SDK's 422 error
//! with the right `code`, `param` and violations, and tool loops as the SDKs document them (full
//! history, `previous_response_id`, and a Bedrock Mantle-style provider whose call ids restart at
//! `call_0` in every response), and a turn whose replayed call names a tool no longer declared
//! (monitored, named in `x-replaygate-monitored`).
//!
//! Each script writes the requests it sent; the test checks that every request the proxy
//! allowed reached its provider byte for byte, and that the refused ones reached no one.
//!
//! Needs `python3` with the packages in `tests/e2e/requirements.txt`, and `node` (>= 18) with
//! `npm ci` run in `tests/e2e/node` (`scripts/test` installs both).

use crate::support;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use support::proxy::Proxy;
use support::scripted_provider::{self, CallIds};
use support::upstream::Upstream;

const E2E_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e");

/// An OpenAI-style provider (`openai`, the default) and a Mantle-style one (`bedrock`), and a
/// proxy in front of both.
struct Setup {
    openai: Upstream,
    bedrock: Upstream,
    proxy: Proxy,
}

impl Setup {
    async fn start() -> Setup {
        let openai = scripted_provider::start(CallIds::Fresh).await;
        let bedrock = scripted_provider::start(CallIds::PerResponse).await;
        let config = format!(
            "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\n[providers.bedrock]\nbase_url = \"{}\"\n",
            openai.base_url(),
            bedrock.base_url()
        );
        let proxy = Proxy::start(&config, &[]).await;
        Setup {
            openai,
            bedrock,
            proxy,
        }
    }

    /// Runs `program` with `script`, the proxy's base URL and a file for the requests it sent,
    /// for at most 90 s; its output and the requests it sent.
    async fn run(&self, program: &str, script: &str, missing: &str) -> (Output, Vec<Sent>) {
        let sent_log = tempfile::NamedTempFile::new().unwrap();
        let child = tokio::process::Command::new(program)
            .arg(script)
            .arg(self.proxy.url("/v1"))
            .arg(sent_log.path())
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(Duration::from_secs(90), child)
            .await
            .unwrap_or_else(|_| panic!("{script} did not finish within 90 s"))
            .unwrap_or_else(|e| panic!("cannot run `{program}` ({e}): {missing}"));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{script} failed ({}):\n{}\n{stdout}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        (output, read_sent(sent_log.path()))
    }

    /// Every request the SDK sent that was not refused reached its provider (by path prefix)
    /// byte for byte and in order; the refused ones (422) reached no one.
    fn assert_forwarded_as_sent(&self, sent: &[Sent]) {
        for (prefix, provider) in [("/bedrock/v1/", &self.bedrock), ("/v1/", &self.openai)] {
            let expected: Vec<(String, &str)> = sent
                .iter()
                .filter(|s| s.status != 422 && s.path.starts_with(prefix))
                .map(|s| (s.path.replacen(prefix, "/v1/", 1), s.body.as_str()))
                .collect();
            let received = provider.received();
            let received: Vec<(String, &str)> = received
                .iter()
                .map(|r| (r.target.clone(), std::str::from_utf8(&r.body).unwrap()))
                .collect();
            assert_eq!(received, expected, "what {prefix}... received");
        }
    }
}

/// One request an SDK script sent through the proxy.
#[derive(Debug)]
struct Sent {
    path: String,
    status: u16,
    body: String,
}

fn read_sent(path: &Path) -> Vec<Sent> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|line| {
            let entry: Value = serde_json::from_str(line).unwrap();
            Sent {
                path: entry["path"].as_str().unwrap().to_owned(),
                status: entry["status"].as_u64().unwrap() as u16,
                body: entry["body"].as_str().unwrap().to_owned(),
            }
        })
        .collect()
}

/// The `function_call` items in the `input` of a request body.
fn calls_in(body: &[u8]) -> Vec<Value> {
    let body: Value = serde_json::from_slice(body).unwrap();
    body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["type"] == "function_call")
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_works_through_the_proxy() {
    let setup = Setup::start().await;
    let script = format!("{E2E_DIR}/openai_sdk.py");
    let (output, sent) = setup
        .run(
            "python3",
            &script,
            "install python3 and tests/e2e/requirements.txt (scripts/test does)",
        )
        .await;
    assert!(String::from_utf8_lossy(&output.stdout).contains("openai sdk e2e: ok"));

    let statuses: Vec<u16> = sent.iter().map(|s| s.status).collect();
    // plain, streamed, 2 refused, previous_response_id loop (2), Mantle full history (2 x 2).
    assert_eq!(statuses, [200, 200, 422, 422, 200, 200, 200, 200, 200, 200]);
    setup.assert_forwarded_as_sent(&sent);

    // The previous_response_id turn reached OpenAI with only the output in `input`.
    let openai = setup.openai.received();
    let continued: Value = serde_json::from_slice(&openai[3].body).unwrap();
    assert!(continued["previous_response_id"]
        .as_str()
        .unwrap()
        .starts_with("resp_"));
    assert_eq!(continued["input"].as_array().unwrap().len(), 1);
    assert_eq!(continued["input"][0]["type"], "function_call_output");

    // The last Mantle turn replays `call_0` twice, each time after it was answered.
    let bedrock = setup.bedrock.received();
    assert_eq!(bedrock.len(), 4);
    let calls = calls_in(&bedrock[3].body);
    let ids: Vec<&Value> = calls.iter().map(|c| &c["call_id"]).collect();
    assert_eq!(ids, ["call_0", "call_0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_node_sdk_works_through_the_proxy() {
    let node_dir = format!("{E2E_DIR}/node");
    assert!(
        Path::new(&node_dir).join("node_modules/openai").is_dir(),
        "the OpenAI Node SDK is not installed: run `npm ci` in tests/e2e/node (scripts/test does)"
    );
    let setup = Setup::start().await;
    let script = format!("{node_dir}/openai_sdk.mjs");
    let (output, sent) = setup
        .run(
            "node",
            &script,
            "install Node.js >= 18 and npm, then run scripts/test (it runs `npm ci` in tests/e2e/node)",
        )
        .await;
    assert!(String::from_utf8_lossy(&output.stdout).contains("openai node sdk e2e: ok"));

    let statuses: Vec<u16> = sent.iter().map(|s| s.status).collect();
    // plain, streamed, refused, full-history loop (2 and a turn without tools),
    // previous_response_id loop (2).
    assert_eq!(statuses, [200, 200, 422, 200, 200, 200, 200, 200]);
    setup.assert_forwarded_as_sent(&sent);
    assert!(setup.bedrock.received().is_empty());

    // The full-history turn 2 replays the provider's call as the SDK returned it.
    let openai = setup.openai.received();
    let calls = calls_in(&openai[3].body);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["status"], "completed");
    assert_eq!(calls[0]["arguments"], r#"{"city":"Paris"}"#);
}
