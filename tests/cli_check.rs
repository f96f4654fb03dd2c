//! `replaygate check` as a user runs it: files and stdin, JSON Lines, configs, exit codes.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn replaygate(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_replaygate"))
        .args(args)
        .env_remove("REPLAYGATE_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Err(error) = child.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        // A run that fails before reading its input (a bad config, a file argument) may have
        // closed the pipe already.
        assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe, "{error}");
    }
    child.wait_with_output().unwrap()
}

fn lines(output: &Output) -> Vec<Value> {
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

const ALLOWED: &str = r#"{"model":"m","input":[{"role":"user","content":"hi"}]}"#;
const FOREIGN: &str = r#"{"model":"m","input":[{"role":"user","content":"hi"},{"type":"openai:web_search_call","id":"ws_1","status":"completed"}]}"#;

#[test]
fn an_allowed_body_prints_its_verdict_and_exits_0() {
    let out = replaygate(&["check", "--provider", "bedrock", "-"], ALLOWED);
    assert_eq!(out.status.code(), Some(0));
    let printed = lines(&out);
    assert_eq!(printed.len(), 1);
    assert_eq!(
        printed[0],
        serde_json::json!({"allowed": true, "provider": "bedrock", "violations": []})
    );
}

#[test]
fn a_violation_prints_every_field_and_exits_1() {
    let out = replaygate(&["check", "--provider", "bedrock"], FOREIGN);
    assert_eq!(out.status.code(), Some(1));
    let v = &lines(&out)[0];
    assert_eq!(v["allowed"], false);
    assert_eq!(v["violations"][0]["index"], 1);
    assert_eq!(v["violations"][0]["reason"], "namespaced");
    assert_eq!(v["violations"][0]["param"], "input[1].type");
    assert_eq!(v["violations"][0]["id"], "ws_1");
}

#[test]
fn the_provider_slug_accepts_its_own_namespace() {
    let out = replaygate(&["check", "--provider", "openai"], FOREIGN);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_file_argument_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("body.json");
    std::fs::write(&path, FOREIGN).unwrap();
    let out = replaygate(&["check", "--provider", "bedrock", path.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(1));
    let missing = replaygate(&["check", "--provider", "bedrock", "/no/such/file.json"], "");
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn jsonl_prints_one_verdict_per_line() {
    let input = format!("{ALLOWED}\n\n{FOREIGN}\n{ALLOWED}\n");
    let out = replaygate(&["check", "--provider", "bedrock", "--jsonl"], &input);
    assert_eq!(out.status.code(), Some(1));
    let allowed: Vec<bool> = lines(&out)
        .iter()
        .map(|v| v["allowed"].as_bool().unwrap())
        .collect();
    assert_eq!(allowed, [true, false, true]);
}

#[test]
fn invalid_json_exits_2_and_says_where() {
    let out = replaygate(
        &["check", "--provider", "bedrock", "--jsonl"],
        &format!("{ALLOWED}\n{{nope\n"),
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(lines(&out).len(), 1);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("line 2") && stderr.contains("invalid_json"),
        "{stderr}"
    );
}

#[test]
fn a_config_gives_the_providers_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    std::fs::write(
        &path,
        "[providers.gateway]\nbase_url = \"http://127.0.0.1:9/v1\"\nnamespaces = [\"openai\", \"acme\"]\n",
    )
    .unwrap();
    let config = path.to_str().unwrap();
    let out = replaygate(&["check", "--config", config, "--provider", "gateway"], FOREIGN);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let unknown = replaygate(&["check", "--config", config, "--provider", "bedrock"], FOREIGN);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("gateway"));
}

#[test]
fn a_bad_config_exits_2_with_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    std::fs::write(
        &path,
        "[providers.openai]\nbase_url = \"http://127.0.0.1:9/v1\"\nbase_ulr = 1\n",
    )
    .unwrap();
    let out = replaygate(
        &[
            "check",
            "--config",
            path.to_str().unwrap(),
            "--provider",
            "openai",
        ],
        ALLOWED,
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("line 3") && stderr.contains("base_ulr"),
        "{stderr}"
    );
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(replaygate(&["check"], "").status.code(), Some(2));
    assert_eq!(replaygate(&["check", "--provider"], "").status.code(), Some(2));
    assert_eq!(replaygate(&["frobnicate"], "").status.code(), Some(2));
}

const HANDOFF: &str = r#"{"model":"m","tools":[],"input":[{"type":"function_call","call_id":"c1","name":"transfer","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"}]}"#;

#[test]
fn monitored_violations_are_printed_with_their_action_and_allow_the_body() {
    let out = replaygate(&["check", "--provider", "openai"], HANDOFF);
    assert_eq!(out.status.code(), Some(0));
    let v = &lines(&out)[0];
    assert_eq!(v["allowed"], true);
    assert_eq!(v["violations"][0]["reason"], "unknown_tool");
    assert_eq!(v["violations"][0]["action"], "monitor");
}

#[test]
fn a_config_can_make_a_monitored_reason_reject() {
    let mut config = tempfile::NamedTempFile::new().unwrap();
    writeln!(
        config,
        "[providers.openai]\nbase_url = \"http://127.0.0.1:9/v1\"\n[gate.rules]\nunknown_tool = \"reject\""
    )
    .unwrap();
    let path = config.path().to_str().unwrap();
    let out = replaygate(&["check", "--config", path, "--provider", "openai"], HANDOFF);
    assert_eq!(out.status.code(), Some(1));
    let v = &lines(&out)[0];
    assert_eq!(
        (&v["allowed"], &v["violations"][0]["action"]),
        (&Value::Bool(false), &Value::from("reject"))
    );
}

#[test]
fn every_violation_is_printed_offline_however_many() {
    let items = vec![r#"{"type":"acme:x"}"#; 150];
    let body = format!(r#"{{"model":"m","input":[{}]}}"#, items.join(","));
    let out = replaygate(&["check", "--provider", "openai"], &body);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(lines(&out)[0]["violations"].as_array().unwrap().len(), 150);
}
