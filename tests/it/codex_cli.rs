//! Codex CLI, OpenAI's own coding agent (npm `@openai/codex`, installed by `npm ci` in
//! tests/e2e/node), driven through replaygate under the repository's own `proxy.toml` (the
//! `openai` item profile on, the ledger on; its state in memory) as a custom model provider,
//! against a scripted provider that makes it run one command per turn. `codex exec` takes two
//! requests (the call, then its output), and `codex exec resume --last` replays the whole
//! session, reasoning items with `"content": null` among it, in two more. Every request must
//! reach the provider: a refusal of what OpenAI's own agent sends is a refusal of valid traffic.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};

use crate::support::proxy::{with_state_in_memory, Proxy};
use crate::support::upstream::{sse_response, Received, UpBody, Upstream};

const NODE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/node");

/// The text the provider ends each tool loop with.
const DONE: &str = "All done: the command printed hello.";

/// A provider answering as OpenAI does in a Codex loop: a request whose last item is a user
/// message gets a reasoning item and an `exec_command` call; one whose last item is the call's
/// output gets a reasoning item and a message. Always streamed, with fresh ids.
async fn codex_provider() -> Upstream {
    let counter = Arc::new(AtomicU64::new(0));
    Upstream::start(move |request: Received| {
        let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
        async move { answer(n, &request.body) }
    })
    .await
}

fn answer(n: u64, body: &[u8]) -> http::Response<UpBody> {
    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let last = request["input"]
        .as_array()
        .and_then(|items| items.last())
        .cloned();
    let answered = last.is_some_and(|item| item["type"] == "function_call_output");
    let reasoning = json!({"type": "reasoning", "id": format!("rs_{n:016x}"), "summary": [],
                           "encrypted_content": format!("gAAAA-codex-{n}")});
    let last_item = match answered {
        true => {
            json!({"type": "message", "id": format!("msg_{n:016x}"), "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": DONE, "annotations": []}]})
        }
        false => {
            json!({"type": "function_call", "id": format!("fc_{n:016x}"), "call_id": format!("call_{n:016x}"),
                        "name": "exec_command", "arguments": "{\"cmd\":\"echo hello\"}", "status": "completed"})
        }
    };
    let output = vec![reasoning, last_item];
    let response = json!({
        "id": format!("resp_{n:016x}"), "object": "response", "created_at": 1_765_000_000, "model": request["model"],
        "status": "completed", "output": output,
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                  "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 1}}
    });
    let mut events = vec![json!({"type": "response.created", "response": {
        "id": response["id"], "object": "response", "created_at": 1_765_000_000, "model": request["model"],
        "status": "in_progress", "output": []}})];
    for (index, item) in output.iter().enumerate() {
        events.push(json!({"type": "response.output_item.added", "output_index": index, "item": item}));
        events.push(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
    }
    events.push(json!({"type": "response.completed", "response": response}));
    let (sender, answer) = sse_response();
    tokio::spawn(async move {
        for (sequence, mut event) in events.into_iter().enumerate() {
            event["sequence_number"] = json!(sequence);
            let text = format!("event: {}\ndata: {event}\n\n", event["type"].as_str().unwrap());
            if sender.send(Bytes::from(text)).await.is_err() {
                return;
            }
        }
    });
    answer
}

/// The repository's `proxy.toml`, its `openai` provider at `upstream`.
async fn repo_proxy(upstream: &Upstream) -> Proxy {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/proxy.toml")).unwrap();
    let text = with_state_in_memory(&text).replace("https://api.openai.com/v1", &upstream.base_url());
    assert!(
        text.contains(&upstream.base_url()),
        "proxy.toml names OpenAI's base URL"
    );
    Proxy::start(&text, &[("OPENAI_API_KEY", "sk-test-provider-key")]).await
}

/// Runs `codex exec` with `args` in `work`, its home `home`, bounded.
async fn codex(home: &Path, work: &Path, args: &[&str]) -> Output {
    let binary = PathBuf::from(NODE_DIR).join("node_modules/.bin/codex");
    assert!(
        binary.exists(),
        "Codex CLI is not installed: run `npm ci` in tests/e2e/node (scripts/test does)"
    );
    let mut command = tokio::process::Command::new(binary);
    command
        .arg("exec")
        .args(args)
        .current_dir(work)
        .env("CODEX_HOME", home)
        .env("REPLAYGATE_TEST_KEY", "not-a-real-key")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("codex did not finish in 120 s")
        .unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_and_exec_resume_pass_through_the_repos_proxy_toml() {
    let upstream = codex_provider().await;
    let proxy = repo_proxy(&upstream).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "model = \"gpt-5\"\nmodel_provider = \"replaygate\"\n\
             [model_providers.replaygate]\nname = \"replaygate\"\nbase_url = \"http://{}/v1\"\n\
             wire_api = \"responses\"\nenv_key = \"REPLAYGATE_TEST_KEY\"\n",
            proxy.addr
        ),
    )
    .unwrap();
    let flags = [
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
    ];

    let first = codex(
        home.path(),
        work.path(),
        &[&flags[..], &["Say hello from the shell."]].concat(),
    )
    .await;
    assert!(first.status.success(), "{}", text(&first));
    assert!(
        String::from_utf8_lossy(&first.stdout).contains(DONE),
        "{}",
        text(&first)
    );
    let received = upstream.received();
    assert_eq!(received.len(), 2, "{}", text(&first));

    let resumed = codex(
        home.path(),
        work.path(),
        &[&["resume", "--last"][..], &flags[..], &["Once more, please."]].concat(),
    )
    .await;
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert!(
        String::from_utf8_lossy(&resumed.stdout).contains(DONE),
        "{}",
        text(&resumed)
    );
    let received = upstream.received();
    assert_eq!(
        received.len(),
        4,
        "every turn reached the provider: {}",
        text(&resumed)
    );

    // The resumed session replays the first one's reasoning items as Codex keeps them, with
    // `"content": null`, and they reached the provider.
    let replayed: Value = serde_json::from_slice(&received[2].body).unwrap();
    let reasoning: Vec<&Value> = replayed["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "reasoning")
        .collect();
    assert!(reasoning.len() >= 2, "{replayed}");
    assert!(
        reasoning
            .iter()
            .any(|item| item.get("content") == Some(&Value::Null)),
        "{replayed}"
    );
}
