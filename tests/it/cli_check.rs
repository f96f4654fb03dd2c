//! `replaygate check` as a user runs it: files and stdin, JSON Lines, configs, exit codes.

use crate::support;

use std::io::Write;
use std::process::{Command, Output};

use serde_json::Value;

use support::cli::replaygate;

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

// `replaygate config check` and `replaygate keys new`.

/// A digest of a key no test uses (SHA-256 of "test").
const SOME_DIGEST: &str = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn team_config(dir: &std::path::Path, team_keys: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("policy")).unwrap();
    std::fs::write(
        dir.join("policy/tools.json"),
        r#"[{"type": "function", "name": "get_report", "parameters": {"type": "object"}}]"#,
    )
    .unwrap();
    let path = dir.join("proxy.toml");
    std::fs::write(
        &path,
        format!(
            "[providers.openai]\nbase_url = \"http://127.0.0.1:9/v1\"\nauth = {{ bearer_env = \"K\" }}\n\
             [providers.bedrock]\nbase_url = \"http://127.0.0.1:9/v1\"\nauth = \"none\"\n\
             [[routes]]\nmodel = \"gpt-*\"\nprovider = \"openai\"\n\
             [audit]\npath = \"audit.jsonl\"\n\
             [teams.payments]\nkeys = [{team_keys}]\npinned_tools = \"policy/tools.json\"\n\
             [teams.research]\nkeys = [\"sha256:{}\"]\n",
            "ab".repeat(32)
        ),
    )
    .unwrap();
    path
}

#[test]
fn config_check_prints_a_summary_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let path = team_config(
        dir.path(),
        &format!("\"{SOME_DIGEST}\", \"sha256:{}\"", "cd".repeat(32)),
    );
    let out = replaygate(&["config", "check", "--config", path.to_str().unwrap()], "");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let audit = std::path::absolute(dir.path().join("audit.jsonl")).unwrap();
    assert_eq!(
        stdout,
        format!(
            "config ok: {}: 2 providers, 1 route, 2 teams (3 keys), audit to {}, state embedded in {}, ledger on\n",
            path.display(),
            audit.display(),
            audit.with_file_name("replaygate-state").display()
        )
    );

    // $REPLAYGATE_CONFIG names the file when --config does not.
    let out = Command::new(env!("CARGO_BIN_EXE_replaygate"))
        .args(["config", "check"])
        .env("REPLAYGATE_CONFIG", &path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("2 teams (3 keys)"));
}

#[test]
fn config_check_without_a_file_checks_the_built_in_default() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_replaygate"))
        .args(["config", "check"])
        .env_remove("REPLAYGATE_CONFIG")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.starts_with("config ok: built-in default: "), "{stdout}");
    assert!(stdout.contains("no teams"), "{stdout}");
}

#[test]
fn config_check_of_a_bad_config_exits_2_with_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = team_config(dir.path(), "\"sha256:1234\"");
    let out = replaygate(&["config", "check", "--config", path.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(&path.display().to_string())
            && stderr.contains("line 13, column 9")
            && stderr.contains("not a key digest"),
        "{stderr}"
    );

    // A broken pinned tools file: named, with the place in it.
    let path = team_config(dir.path(), &format!("\"{SOME_DIGEST}\""));
    std::fs::write(
        dir.path().join("policy/tools.json"),
        "[\n  {\"name\": \"a\"},\n  {\"name\": \"a\"}\n]",
    )
    .unwrap();
    let out = replaygate(&["config", "check", "--config", path.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("tools.json, line 3, column 3: tool \"a\" is pinned twice"),
        "{stderr}"
    );

    let out = replaygate(&["config", "check", "--config", "/no/such/proxy.toml"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/proxy.toml"));
}

/// Runs `keys new --team payments`; returns the key and the `keys` line.
fn new_key() -> (String, String) {
    let out = replaygate(&["keys", "new", "--team", "payments"], "");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    (lines[0].to_owned(), lines[1].to_owned())
}

#[test]
fn keys_new_prints_a_key_and_its_digest_line() {
    use sha2::{Digest, Sha256};

    let (key, line) = new_key();
    assert!(key.starts_with("rg-") && key.len() >= 3 + 43, "{key}");
    let digest = hex::encode(Sha256::digest(key.as_bytes()));
    assert_eq!(
        line,
        format!("keys = [\"sha256:{digest}\"]   # add to [teams.payments]")
    );
    let (other, _) = new_key();
    assert_ne!(key, other);

    // The printed line is valid in a team table.
    let dir = tempfile::tempdir().unwrap();
    let path = team_config(dir.path(), &format!("\"sha256:{digest}\""));
    let config = replaygate::config::Config::load(&path).unwrap();
    assert_eq!(
        config.teams["payments"].keys,
        [replaygate::config::ClientKey::of_digest(
            replaygate::keys::digest(&key)
        )]
    );
}

#[test]
fn keys_new_needs_a_usable_team_name() {
    for bad in ["a b", "-x", "", "a.b"] {
        let out = replaygate(&["keys", "new", "--team", bad], "");
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(out.stdout.is_empty());
    }
    assert_eq!(replaygate(&["keys", "new"], "").status.code(), Some(2));
}

#[test]
fn a_team_judges_with_its_own_rules_and_mode() {
    let dir = tempfile::tempdir().unwrap();
    let digest = |n: u8| format!("sha256:{}", format!("{n:02x}").repeat(32));
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            "[providers.bedrock]\nbase_url = \"https://bedrock.example/v1\"\nauth = \"none\"\n\
             [teams.shadow]\nkeys = [\"{}\"]\nmode = \"monitor\"\n\
             [teams.stripper]\nkeys = [\"{}\"]\nrules = {{ namespaced = \"strip\" }}\n",
            digest(1),
            digest(2)
        ),
    )
    .unwrap();
    let path = config.to_str().unwrap();
    let run = |team: &[&str]| {
        let mut args = vec!["check", "--config", path, "--provider", "bedrock"];
        args.extend_from_slice(team);
        let out = replaygate(&args, FOREIGN);
        let line = lines(&out).remove(0);
        (
            out.status.code(),
            line["violations"][0]["action"].as_str().map(str::to_owned),
        )
    };
    assert_eq!(run(&[]), (Some(1), Some("reject".to_owned())));
    assert_eq!(run(&["--team", "shadow"]), (Some(0), Some("monitor".to_owned())));
    assert_eq!(run(&["--team", "stripper"]), (Some(0), Some("strip".to_owned())));
    assert_eq!(
        replaygate(
            &[
                "check",
                "--config",
                path,
                "--provider",
                "bedrock",
                "--team",
                "nope"
            ],
            FOREIGN
        )
        .status
        .code(),
        Some(2)
    );
    assert_eq!(
        replaygate(&["check", "--provider", "bedrock", "--team", "shadow"], FOREIGN)
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn keys_new_with_an_id_or_an_expiry_prints_the_table_form() {
    use sha2::{Digest, Sha256};

    let out = replaygate(
        &[
            "keys",
            "new",
            "--team",
            "payments",
            "--id",
            "ci-2026-12",
            "--expires",
            "2099-03-01T01:00:00+01:00",
        ],
        "",
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    let key = lines[0];
    let digest = hex::encode(Sha256::digest(key.as_bytes()));
    assert_eq!(
        lines[1],
        format!(
            "keys = [{{ id = \"ci-2026-12\", digest = \"sha256:{digest}\", expires = \"2099-03-01T00:00:00Z\" }}]   # add to [teams.payments]"
        )
    );
    // The printed entry is valid in a team table.
    let entry = lines[1]["keys = [".len()..lines[1].find("]   #").unwrap()].to_owned();
    let dir = tempfile::tempdir().unwrap();
    let config = replaygate::config::Config::load(&team_config(dir.path(), &entry)).unwrap();
    let keys = &config.teams["payments"].keys;
    assert_eq!(keys[0].digest, replaygate::keys::digest(key));
    assert_eq!(keys[0].id.as_deref(), Some("ci-2026-12"));
    assert_eq!(
        keys[0].expires,
        replaygate::keys::parse_expiry("2099-03-01T00:00:00Z")
    );

    // Either flag alone gives the table with that field only.
    let out = replaygate(&["keys", "new", "--team", "payments", "--id", "laptop.1"], "");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let line = stdout.lines().nth(1).unwrap();
    assert!(
        line.starts_with("keys = [{ id = \"laptop.1\", digest = \"sha256:"),
        "{line}"
    );
    assert!(!line.contains("expires"), "{line}");
}

#[test]
fn keys_new_refuses_an_unusable_id_or_expiry() {
    for flags in [
        &["--id", "a b"][..],
        &["--id", ""],
        &["--expires", "2099-03-01"],
        &["--expires", "2099-03-01T00:00:00"],
        &["--expires", "2020-01-01T00:00:00Z"],
    ] {
        let mut args = vec!["keys", "new", "--team", "payments"];
        args.extend(flags);
        let out = replaygate(&args, "");
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        assert!(out.stdout.is_empty(), "no key is printed for {flags:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("replaygate keys new: "), "{stderr}");
    }
}
