//! Item profiles offline (docs/item-profiles.md): `replaygate check --item-profile` gives every
//! expected verdict on the twelve refusal vectors and the corpus, `--repaired` prints the bodies as
//! they would be
//! forwarded, and a provider naming an unknown profile is a configuration error at its line.

use std::process::Command;

use serde_json::Value;

use crate::support::cli::replaygate;

use super::item_profiles::vectors;

fn lines(text: &[u8]) -> Vec<Value> {
    String::from_utf8(text.to_vec())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn check_gives_each_vector_its_profile_verdict_and_counts_ten_or_more_stopped() {
    let cases = vectors();
    let jsonl: String = cases
        .iter()
        .map(|case| format!("{}\n", serde_json::to_string(&case["body"]).unwrap()))
        .collect();
    let with = replaygate(
        &[
            "check",
            "--provider",
            "openai",
            "--item-profile",
            "openai",
            "--jsonl",
        ],
        &jsonl,
    );
    assert_eq!(
        with.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&with.stderr)
    );
    let without = replaygate(&["check", "--provider", "openai", "--jsonl"], &jsonl);
    let (with, without) = (lines(&with.stdout), lines(&without.stdout));
    let mut stopped = (0, 0);
    for ((case, with), without) in cases.iter().zip(&with).zip(&without) {
        let name = case["name"].as_str().unwrap();
        let expected = &case["profile"];
        let first = with["violations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["action"] != "monitor")
            .unwrap_or_else(|| panic!("{name}: {with}"));
        for key in ["reason", "action", "param"] {
            assert_eq!(first[key], expected[key], "{name}: {with}");
        }
        assert_eq!(with["allowed"], expected["action"] != "reject", "{name}");
        stopped.0 += 1;
        let refused_without = without["allowed"] == false;
        assert_eq!(refused_without, !case["v2"].is_null(), "{name}: {without}");
        stopped.1 += usize::from(refused_without);
    }
    assert_eq!(stopped, (12, 5), "(with the profile, version 2 alone)");
    eprintln!(
        "refusal vectors stopped: {} of 12 with item profile openai, {} without",
        stopped.0, stopped.1
    );
}

#[test]
fn repaired_prints_the_forwarded_bodies_and_sends_refused_verdicts_to_stderr() {
    let node = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/corpus/openai-node-stream-full-history.jsonl"
    ))
    .unwrap();
    let bodies: Vec<String> = node
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["path"].as_str().unwrap().ends_with("responses"))
        .map(|r| serde_json::to_string(&r["body"]).unwrap())
        .collect();
    let refused = r#"{"model":"m","input":[{"type":"function_call_output","output":{"a":1},"call_id":"c"}]}"#;
    let input = format!("{}\n{refused}\n", bodies.join("\n"));
    let out = replaygate(
        &[
            "check",
            "--provider",
            "openai",
            "--item-profile",
            "openai",
            "--repaired",
            "--jsonl",
            "-",
        ],
        &input,
    );
    assert_eq!(out.status.code(), Some(1));
    let printed = String::from_utf8(out.stdout).unwrap();
    let printed: Vec<&str> = printed.lines().collect();
    assert_eq!(printed.len(), bodies.len(), "one forwarded body per allowed body");
    for (sent, forwarded) in bodies.iter().zip(&printed) {
        assert!(!forwarded.contains("parsed_arguments"), "{forwarded}");
        if !sent.contains("parsed_arguments") {
            assert_eq!(forwarded, sent);
        }
        // Still a body the profile allows with no repair left.
        let again = replaygate(
            &["check", "--provider", "openai", "--item-profile", "openai", "-"],
            forwarded,
        );
        let verdict = &lines(&again.stdout)[0];
        assert!(
            verdict["violations"]
                .as_array()
                .unwrap()
                .iter()
                .all(|v| v["action"] == "monitor"),
            "{verdict}"
        );
    }
    let errors = lines(&out.stderr);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["violations"][0]["reason"], "call_id_mismatch");
}

#[test]
fn every_row_of_the_profile_table_reads_offline() {
    let rows = [
        (
            r#"{"input":[{"type":"reasoning","id":"rs_1","summary":[],"status":"completed"},{"role":"assistant","content":"ok"}]}"#,
            "item_field",
            "repair",
            "input[0].status",
            true,
        ),
        (
            r#"{"input":[{"role":"assistant","content":[{"type":"output_text","text":"x","parsed":null}]}]}"#,
            "item_unknown_field",
            "monitor",
            "input[0].content[0].parsed",
            true,
        ),
        (
            r#"{"input":[{"type":"function_call_output","call_id":"c","output":7}]}"#,
            "call_id_mismatch",
            "reject",
            "input[0].call_id",
            false,
        ),
        (
            r#"{"previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"c","output":7}]}"#,
            "item_value",
            "reject",
            "input[0].output",
            false,
        ),
        (
            r#"{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"role":"user","content":"next"}]}"#,
            "call_without_output",
            "reject",
            "input[0].call_id",
            false,
        ),
        (
            r#"{"input":[{"role":"user","content":"hi"},{"type":"reasoning","id":"rs_1","summary":[]},{"role":"user","content":"again"}]}"#,
            "reasoning_orphaned",
            "repair",
            "input[1]",
            true,
        ),
        (
            r#"{"input":[{"type":"message","id":"msg_0123456789abcdef","role":"assistant","content":"a"},{"type":"message","id":"msg_0123456789abcdef","role":"assistant","content":"a"}]}"#,
            "duplicate_item_id",
            "repair",
            "input[1]",
            true,
        ),
        (
            r#"{"input":[{"type":"message","id":"msg_0123456789abcdef","role":"assistant","content":"a"},{"type":"message","id":"msg_0123456789abcdef","role":"assistant","content":"b"}]}"#,
            "duplicate_item_id",
            "reject",
            "input[1]",
            false,
        ),
    ];
    for (body, reason, action, param, allowed) in rows {
        let out = replaygate(
            &["check", "--provider", "openai", "--item-profile", "openai"],
            body,
        );
        let verdict = &lines(&out.stdout)[0];
        let found = verdict["violations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["reason"] != "unknown_tool")
            .unwrap_or_else(|| panic!("{body}: {verdict}"));
        assert_eq!(
            (&found["reason"], &found["action"], &found["param"]),
            (&Value::from(reason), &Value::from(action), &Value::from(param)),
            "{body}"
        );
        assert_eq!(verdict["allowed"], allowed, "{body}");
        assert_eq!(out.status.code(), Some(if allowed { 0 } else { 1 }), "{body}");
        // Without the flag (and without a config), no profile applies.
        let plain = replaygate(&["check", "--provider", "openai"], body);
        let plain = &lines(&plain.stdout)[0];
        assert!(
            plain["violations"]
                .as_array()
                .unwrap()
                .iter()
                .all(|v| !v["reason"].as_str().unwrap().starts_with("item_")
                    && !["call_without_output", "reasoning_orphaned", "duplicate_item_id"]
                        .contains(&v["reason"].as_str().unwrap())),
            "{plain}"
        );
    }
}

#[test]
fn repaired_prints_bodies_without_orphaned_reasoning_or_repeated_items() {
    let user = r#"{"role":"user","content":"hi"}"#;
    let reasoning =
        r#"{"type":"reasoning","id":"rs_0123456789abcdef","summary":[],"encrypted_content":"gA"}"#;
    let message = r#"{"type":"message","id":"msg_0123456789abcdef","role":"assistant","content":"ok"}"#;
    let body = |items: &[&str]| format!(r#"{{"model":"m","input":[{}]}}"#, items.join(", "));
    let cases = [
        (body(&[user, reasoning, user]), body(&[user, user])),
        (body(&[user, reasoning]), body(&[user])),
        (
            body(&[user, message, user, message]),
            body(&[user, message, user]),
        ),
        // The valid shape is printed as it came.
        (
            body(&[user, reasoning, message, user]),
            body(&[user, reasoning, message, user]),
        ),
    ];
    for (sent, expected) in cases {
        let out = replaygate(
            &[
                "check",
                "--provider",
                "openai",
                "--item-profile",
                "openai",
                "--repaired",
                "-",
            ],
            &sent,
        );
        assert_eq!(out.status.code(), Some(0), "{sent}");
        assert_eq!(
            String::from_utf8(out.stdout).unwrap().trim_end(),
            expected,
            "{sent}"
        );
    }
}

/// `state_not_stored` offline (docs/reasons.md#state_not_stored): a body that says `store:
/// false` and sends a reasoning item by id alone is a finding from the body alone; repaired, the
/// item is cut. The same item with its content, or in a body that does not say `store: false`,
/// is no finding (whether its response was stored needs the ledger).
#[test]
fn check_finds_a_reasoning_item_by_id_alone_in_a_store_false_body() {
    let user = r#"{"role":"user","content":"hi"}"#;
    let by_id = r#"{"type":"reasoning","id":"rs_0123456789abcdef","summary":[]}"#;
    let with_blob =
        r#"{"type":"reasoning","id":"rs_0123456789abcdef","summary":[],"encrypted_content":"gA"}"#;
    let message = r#"{"type":"message","id":"msg_0123456789abcdef","role":"assistant","content":"ok"}"#;
    let body =
        |store: &str, items: &[&str]| format!(r#"{{"model":"gpt-5"{store},"input":[{}]}}"#, items.join(","));
    let check = |sent: &str, extra: &[&str]| {
        let mut args = vec!["check", "--provider", "openai", "--item-profile", "openai"];
        args.extend_from_slice(extra);
        args.push("-");
        replaygate(&args, sent)
    };
    let unstored = body(r#","store":false"#, &[user, by_id, message, user]);
    let out = check(&unstored, &[]);
    assert_eq!(out.status.code(), Some(0), "repair is not a refusal");
    let verdict = &lines(&out.stdout)[0];
    assert_eq!(
        verdict["violations"][0]["reason"], "state_not_stored",
        "{verdict}"
    );
    assert_eq!(verdict["violations"][0]["index"], 1, "{verdict}");
    assert_eq!(verdict["violations"][0]["action"], "repair", "{verdict}");
    let message_text = verdict["violations"][0]["message"].as_str().unwrap();
    assert!(message_text.contains("`store: true`"), "{message_text}");
    let out = check(&unstored, &["--repaired"]);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim_end(),
        body(r#","store":false"#, &[user, message, user])
    );
    for passes in [
        body(r#","store":false"#, &[user, with_blob, message, user]),
        body(r#","store":true"#, &[user, by_id, message, user]),
        body("", &[user, by_id, message, user]),
    ] {
        let out = check(&passes, &[]);
        assert_eq!(out.status.code(), Some(0), "{passes}");
        let verdict = &lines(&out.stdout)[0];
        assert_eq!(verdict["violations"], serde_json::json!([]), "{passes}");
    }
    // Without the profile the rule is off.
    let out = replaygate(&["check", "--provider", "openai", "-"], &unstored);
    assert_eq!(lines(&out.stdout)[0]["violations"], serde_json::json!([]));
}

#[test]
fn an_unknown_profile_is_a_clear_error() {
    let out = replaygate(&["check", "--provider", "openai", "--item-profile", "nope"], "{}");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown item profile `nope`"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    std::fs::write(
        &path,
        "[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\nitem_profile = \"opnai\"\n",
    )
    .unwrap();
    let out = replaygate(&["config", "check", "--config", path.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(2));
    let errors = String::from_utf8_lossy(&out.stderr);
    assert!(
        errors.contains("line 3, column 16") && errors.contains("unknown item profile `opnai`"),
        "{errors}"
    );
}

#[test]
fn the_committed_profile_is_what_the_generator_makes() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/gen-item-profile");
    let out = Command::new("python3")
        .arg(script)
        .arg("--check")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn profile_show_prints_the_built_in_and_profile_check_validates_a_file() {
    let shown = replaygate(&["profile", "show", "openai"], "");
    assert_eq!(shown.status.code(), Some(0));
    let text = String::from_utf8(shown.stdout).unwrap();
    let built_in = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crates/replaygate-core/profiles/openai.json"
    ))
    .unwrap();
    assert_eq!(text, built_in);
    let unknown = replaygate(&["profile", "show", "anthropic"], "");
    assert_eq!(unknown.status.code(), Some(2));
    let err = String::from_utf8(unknown.stderr).unwrap();
    assert!(err.contains("\"anthropic\"") && err.contains("openai"), "{err}");

    // What `show` prints is a profile `check` takes: an operator's starting point.
    let dir = tempfile::tempdir().unwrap();
    let own = dir.path().join("own.json");
    std::fs::write(&own, &text).unwrap();
    let own = own.to_str().unwrap();
    let checked = replaygate(&["profile", "check", own], "");
    assert_eq!(
        checked.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    let out = String::from_utf8(checked.stdout).unwrap();
    assert!(
        out.starts_with(&format!("profile ok: {own}: item profile `openai`: item types "))
            && out.contains("function_call")
            && out.contains("output_text"),
        "{out}"
    );
    for (content, says) in [
        (
            text.replacen("\"items\": {", "\"items\": {,", 1),
            "line 3 column 12",
        ),
        (text.replace("\"string\"", "\"text\""), "unknown type `text`"),
        (
            text.replace("^[a-zA-Z0-9_-]+$", "(a)\\\\1"),
            "linear-time regex engine",
        ),
    ] {
        std::fs::write(dir.path().join("own.json"), content).unwrap();
        let checked = replaygate(&["profile", "check", own], "");
        assert_eq!(checked.status.code(), Some(2));
        let err = String::from_utf8(checked.stderr).unwrap();
        assert!(
            err.starts_with(&format!(
                "replaygate profile check: item profile file {own} is not a valid item profile: "
            )) && err.contains(says),
            "{says}: {err}"
        );
        assert!(checked.stdout.is_empty());
    }
    let missing = replaygate(&["profile", "check", "no-such-profile.json"], "");
    assert_eq!(missing.status.code(), Some(2));
    let err = String::from_utf8(missing.stderr).unwrap();
    assert!(
        err.contains("cannot read item profile file no-such-profile.json"),
        "{err}"
    );
}
