//! `[teams.NAME]`, `[audit]`, `watch_config` and pinned tools files.

use std::collections::HashMap;
use std::num::NonZeroU32;

use serde_json::json;

use super::*;
use crate::gate::{Action, Reason};
use crate::keys;

/// Two providers with their own credentials, so teams may be configured.
const PROVIDERS: &str = r#"
[providers.openai]
base_url = "https://api.openai.com/v1"
auth = { bearer_env = "OPENAI_API_KEY" }

[providers.bedrock]
base_url = "https://bedrock-mantle.us-east-1.api.aws/v1"
auth = { bearer_env = "AWS_BEARER_TOKEN_BEDROCK" }
"#;

/// Lines in [`PROVIDERS`], so positions below it can be written as in the appended text.
const PROVIDERS_LINES: usize = 8;

/// SHA-256("test") and SHA-256("rg-other").
const DIGEST_A: &str = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn digest_b() -> String {
    keys::format_digest(&keys::digest("rg-other"))
}

/// A directory holding `proxy.toml` with `text` and the files in `files`.
fn config_dir(text: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    for (name, content) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let config = dir.path().join("proxy.toml");
    std::fs::write(&config, text).unwrap();
    (dir, config)
}

/// Asserts that `text` after [`PROVIDERS`] fails with `needle` at `line` (counted in `text`)
/// and `column`.
fn assert_team_error_at(text: &str, line: usize, column: usize, needle: &str) {
    let whole = format!("{PROVIDERS}{text}");
    let line = line + PROVIDERS_LINES;
    match Config::from_toml(&whole) {
        Err(ConfigError::Parse { .. }) => super::tests::assert_parse_error_at(&whole, line, column, needle),
        _ => super::tests::assert_invalid_at(&whole, line, column, needle),
    }
}

const PINNED: &str = r#"[
  {
    "type": "function",
    "name": "get_report",
    "description": "A report.",
    "parameters": {"type": "object", "properties": {"region": {"enum": ["apac", "emea"]}}, "required": ["region"]}
  },
  {"name": "refund_order", "parameters": {"type":"object"}, "strict": true},
  {"type": "function", "name": "ping"}
]"#;

#[test]
fn a_worked_configuration_with_two_teams() {
    let text = format!(
        r#"
[server]
watch_config = true
{PROVIDERS}
[audit]
path = "logs/audit.jsonl"

[teams.payments]
keys = ["{DIGEST_A}"]
providers = ["openai", "bedrock"]
models = ["gpt-5*", "openai.gpt-oss-*"]
tools = ["get_report", "refund_*"]
pinned_tools = "policy/payments-tools.json"
requests_per_minute = 600
rules = {{ namespaced = "strip", unknown_tool = "reject" }}
mode = "enforce"

[teams.research]
keys = ["{}", "{}"]
mode = "monitor"
"#,
        digest_b(),
        keys::format_digest(&keys::digest("rg-third"))
            .to_uppercase()
            .replace("SHA256:", "sha256:"),
    );
    let (dir, path) = config_dir(&text, &[("policy/payments-tools.json", PINNED)]);
    let config = Config::load(&path).unwrap();
    let base = std::path::absolute(dir.path()).unwrap();

    assert!(config.server.watch_config);
    assert_eq!(
        config.audit,
        Some(AuditConfig {
            path: base.join("logs/audit.jsonl")
        })
    );
    assert_eq!(config.teams.keys().collect::<Vec<_>>(), ["payments", "research"]);

    let payments = &config.teams["payments"];
    assert_eq!(payments.keys, [ClientKey::of_digest(keys::digest("test"))]);
    assert_eq!(
        payments.providers.as_deref(),
        Some(&["openai".to_owned(), "bedrock".to_owned()][..])
    );
    let globs = |globs: &Option<Vec<globset::Glob>>| -> Vec<String> {
        globs.iter().flatten().map(|g| g.glob().to_owned()).collect()
    };
    assert_eq!(globs(&payments.models), ["gpt-5*", "openai.gpt-oss-*"]);
    assert_eq!(globs(&payments.tools), ["get_report", "refund_*"]);
    // The globs of `[[routes]]`: `*` crosses `/` and `.`.
    let models = payments.models.as_ref().unwrap();
    assert!(models[1].compile_matcher().is_match("openai.gpt-oss-120b/x"));
    assert!(!models[0].compile_matcher().is_match("GPT-5"));
    assert_eq!(payments.requests_per_minute, NonZeroU32::new(600));
    assert_eq!(
        payments.rules,
        HashMap::from([
            (Reason::Namespaced, Action::Strip),
            (Reason::UnknownTool, Action::Reject)
        ])
    );
    assert_eq!(payments.mode, TeamMode::Enforce);

    let pinned = payments.pinned_tools.as_ref().unwrap();
    assert_eq!(pinned.path, base.join("policy/payments-tools.json"));
    let names: Vec<&str> = pinned.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["get_report", "refund_order", "ping"]);
    let report = pinned.get("get_report").unwrap();
    assert_eq!(
        report.parameters_text.as_deref(),
        Some(
            r#"{"type": "object", "properties": {"region": {"enum": ["apac", "emea"]}}, "required": ["region"]}"#
        ),
        "the schema text exactly as in the file"
    );
    assert_eq!(
        report.parameters,
        Some(
            json!({"required": ["region"], "type": "object", "properties": {"region": {"enum": ["apac", "emea"]}}})
        )
    );
    assert_eq!(
        pinned.get("refund_order").unwrap().parameters_text.as_deref(),
        Some(r#"{"type":"object"}"#)
    );
    let ping = pinned.get("ping").unwrap();
    assert_eq!((&ping.parameters, &ping.parameters_text), (&None, &None));
    assert!(pinned.get("refund").is_none());

    let research = &config.teams["research"];
    assert_eq!(
        research.keys,
        [
            ClientKey::of_digest(keys::digest("rg-other")),
            ClientKey::of_digest(keys::digest("rg-third"))
        ],
        "upper-case hex reads the same"
    );
    assert_eq!(research.providers, None);
    assert_eq!(research.models, None);
    assert_eq!(research.tools, None);
    assert_eq!(research.pinned_tools, None);
    assert_eq!(research.requests_per_minute, None);
    assert!(research.rules.is_empty());
    assert_eq!(research.mode, TeamMode::Monitor);

    let summary = config.summary();
    assert_eq!(
        summary,
        format!(
            "2 providers, 0 routes, 2 teams (3 keys), audit to {}, state embedded in {}, ledger on",
            base.join("logs/audit.jsonl").display(),
            base.join("replaygate-state").display()
        )
    );
}

#[test]
fn without_teams_or_audit_nothing_changes() {
    let config = Config::from_toml(PROVIDERS).unwrap();
    assert!(config.teams.is_empty());
    assert_eq!(config.audit, None);
    assert!(!config.server.watch_config);
    assert!(config
        .summary()
        .starts_with("2 providers, 0 routes, no teams, no audit log, state in memory, ledger on"));
    // Passthrough is fine without teams.
    Config::from_toml("[providers.p]\nbase_url = \"https://example.com/v1\"\nauth = \"passthrough\"\n")
        .unwrap();
}

#[test]
fn relative_paths_without_a_file_are_taken_from_the_given_or_current_directory() {
    let text = format!("{PROVIDERS}[audit]\npath = \"a/audit.jsonl\"\n");
    let config = Config::from_toml(&text).unwrap();
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(config.audit.unwrap().path, cwd.join("a/audit.jsonl"));

    let config = Config::from_toml_in(&text, Path::new("/srv/rg")).unwrap();
    assert_eq!(config.audit.unwrap().path, Path::new("/srv/rg/a/audit.jsonl"));
    let absolute = format!("{PROVIDERS}[audit]\npath = \"/var/log/rg.jsonl\"\n");
    let config = Config::from_toml_in(&absolute, Path::new("/srv/rg")).unwrap();
    assert_eq!(config.audit.unwrap().path, Path::new("/var/log/rg.jsonl"));
    let dotted = format!("{PROVIDERS}[audit]\npath = \"./audit.jsonl\"\n");
    let config = Config::from_toml_in(&dotted, Path::new("/srv/rg")).unwrap();
    assert_eq!(config.audit.unwrap().path, Path::new("/srv/rg/audit.jsonl"));
}

#[test]
fn audit_needs_a_path_and_nothing_else() {
    assert_team_error_at("[audit]\npath = \"\"\n", 2, 8, "must name a file");
    assert_team_error_at(
        "[audit]\npath = \"a\"\nrotate = true\n",
        3,
        1,
        "unknown field `rotate`",
    );
    assert!(Config::from_toml(&format!("{PROVIDERS}[audit]\n"))
        .unwrap_err()
        .to_string()
        .contains("missing field `path`"));
}

#[test]
fn team_keys_must_be_digests() {
    let team = |keys: &str| format!("[teams.t]\nkeys = [{keys}]\n");
    assert_team_error_at(&team("\"sha256:abc\""), 2, 9, "not a key digest");
    assert_team_error_at(
        &team(&format!("\"{}\"", &DIGEST_A[7..])),
        2,
        9,
        "\"sha256:\" and the 64 hex",
    );
    assert_team_error_at(&team(&format!("\"{DIGEST_A}0\"")), 2, 9, "not a key digest");
    assert_team_error_at(
        &team(&format!("\"{}x\"", &DIGEST_A[..DIGEST_A.len() - 1])),
        2,
        9,
        "not a key digest",
    );
    assert_team_error_at(&team(&format!("\"{DIGEST_A}\", 7")), 2, 84, "invalid type");
    assert_team_error_at(&team(""), 2, 8, "team \"t\" has no keys");
    // A team with neither keys nor client certificates is refused at its name.
    assert_team_error_at("[teams.t]\nmode = \"monitor\"\n", 1, 8, "team \"t\" has no keys");
    assert_team_error_at("[teams.t]\nclient_certs = []\n", 1, 8, "or `client_certs`");
}

#[test]
fn a_team_may_be_known_by_client_certificate_names_alone() {
    let config = Config::from_toml(&format!(
        r#"{PROVIDERS}
[teams.payments]
client_certs = ["spiffe://example.org/ns/payments/*", "dns:Payments-Bot.internal", "cn:payments-ci"]

[teams.search]
keys = ["{DIGEST_A}"]
client_certs = ["spiffe://example.org/ns/search/*"]
"#
    ))
    .unwrap();
    let payments = &config.teams["payments"];
    assert!(payments.keys.is_empty());
    let written: Vec<_> = payments
        .client_certs
        .iter()
        .map(ClientCertGlob::written)
        .collect();
    assert_eq!(
        written,
        [
            "spiffe://example.org/ns/payments/*",
            "dns:payments-bot.internal",
            "cn:payments-ci"
        ]
    );
    assert_eq!(
        payments
            .client_certs
            .iter()
            .map(|glob| glob.kind)
            .collect::<Vec<_>>(),
        [CertNameKind::Uri, CertNameKind::Dns, CertNameKind::Cn]
    );
    assert_eq!(config.teams["search"].keys.len(), 1);
}

#[test]
fn client_certs_entries_name_their_kind() {
    let team = |entry: &str| format!("[teams.t]\nclient_certs = [{entry:?}]\n");
    assert_team_error_at(&team("payments-ci"), 2, 17, "must be a URI glob");
    assert_team_error_at(&team("cn:"), 2, 17, "names nothing after its prefix");
    assert_team_error_at(&team("dns:[ab].internal"), 2, 17, "`[` is not allowed");
    assert_team_error_at("[teams.t]\nclient_certs = \"cn:x\"\n", 2, 16, "invalid type");
}

#[test]
fn two_teams_client_certs_may_not_share_a_name() {
    let two = |first: &str, second: &str| {
        format!("[teams.a]\nclient_certs = [{first:?}]\n[teams.b]\nclient_certs = [\"cn:b\", {second:?}]\n")
    };
    // The later team's entry is the one at fault, and both entries and teams are named.
    assert_team_error_at(
        &two("spiffe://example.org/ns/payments/*", "spiffe://example.org/ns/*"),
        4,
        25,
        "\"spiffe://example.org/ns/*\" of team \"b\" and \"spiffe://example.org/ns/payments/*\" of team \"a\" can both match",
    );
    assert_team_error_at(
        &two("cn:ci-*", "cn:*-bot"),
        4,
        25,
        "can both match one certificate name",
    );
    assert_team_error_at(
        &two("dns:*.Internal", "dns:bot.internal"),
        4,
        25,
        "can both match",
    );
    // Globs of different kinds, or that no name matches both, go together; so do one team's own.
    for (first, second) in [
        ("cn:payments", "dns:payments"),
        (
            "spiffe://example.org/ns/payments/*",
            "spiffe://example.org/ns/search/*",
        ),
        ("cn:ci-*", "cn:bot-*"),
    ] {
        Config::from_toml(&format!("{PROVIDERS}{}", two(first, second)))
            .unwrap_or_else(|e| panic!("{first} and {second}: {e}"));
    }
    Config::from_toml(&format!(
        "{PROVIDERS}[teams.a]\nclient_certs = [\"cn:ci-*\", \"cn:*\"]\n"
    ))
    .unwrap();
}

#[test]
fn a_pasted_key_is_refused_without_being_repeated() {
    let key = keys::new_key().unwrap();
    let error = Config::from_toml(&format!("{PROVIDERS}[teams.t]\nkeys = [\"{key}\"]\n"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("looks like a client key itself"), "{error}");
    assert!(!error.contains(&key[3..]), "the key must not be echoed: {error}");
}

#[test]
fn a_key_digest_belongs_to_one_team_once() {
    let twice = format!("[teams.a]\nkeys = [\"{DIGEST_A}\", \"{DIGEST_A}\"]\n");
    assert_team_error_at(&twice, 2, 84, "this team already lists it");
    let shared = format!("[teams.a]\nkeys = [\"{DIGEST_A}\"]\n[teams.b]\nkeys = [\"{DIGEST_A}\"]\n");
    assert_team_error_at(&shared, 4, 9, "team \"a\" already lists it");
    // The same digest in another case is the same key.
    let upper = format!(
        "[teams.a]\nkeys = [\"{DIGEST_A}\"]\n[teams.b]\nkeys = [\"sha256:{}\"]\n",
        DIGEST_A[7..].to_uppercase()
    );
    assert_team_error_at(&upper, 4, 9, "team \"a\" already lists it");
}

#[test]
fn team_names_are_plain_words() {
    let key = format!("keys = [\"{DIGEST_A}\"]\n");
    assert_team_error_at(
        &format!("[teams.\"a b\"]\n{key}"),
        1,
        8,
        "team name \"a b\" may contain only",
    );
    assert_team_error_at(&format!("[teams.-x]\n{key}"), 1, 8, "may not start with `-`");
    assert_team_error_at(&format!("[teams.\"a.b\"]\n{key}"), 1, 8, "team name");
}

#[test]
fn team_providers_must_be_defined() {
    let text = format!("[teams.t]\nkeys = [\"{DIGEST_A}\"]\nproviders = [\"openai\", \"azure\"]\n");
    assert_team_error_at(
        &text,
        3,
        24,
        "provider \"azure\" is not a defined provider (defined: bedrock, openai)",
    );
}

#[test]
fn team_globs_must_compile() {
    let text = format!("[teams.t]\nkeys = [\"{DIGEST_A}\"]\nmodels = [\"gpt-[\"]\n");
    assert_team_error_at(&text, 3, 11, "invalid model glob");
    let text = format!("[teams.t]\nkeys = [\"{DIGEST_A}\"]\ntools = [\"ok\", \"{{a\"]\n");
    assert_team_error_at(&text, 3, 16, "invalid tool glob");
}

#[test]
fn team_rules_name_known_reasons_and_actions() {
    let rules = |rules: &str| format!("[teams.t]\nkeys = [\"{DIGEST_A}\"]\nrules = {{ {rules} }}\n");
    assert_team_error_at(
        &rules("namespacd = \"strip\""),
        3,
        11,
        "unknown reason `namespacd`",
    );
    assert_team_error_at(&rules("namespaced = \"drop\""), 3, 24, "unknown variant `drop`");
    let table = format!(
        "[teams.t]\nkeys = [\"{DIGEST_A}\"]\n[teams.t.rules]\nstatus = \"monitor\"\nfoo = \"reject\"\n"
    );
    assert_team_error_at(&table, 5, 1, "unknown reason `foo`");
}

#[test]
fn team_mode_is_enforce_or_monitor() {
    let text = format!("[teams.t]\nkeys = [\"{DIGEST_A}\"]\nmode = \"audit\"\n");
    assert_team_error_at(
        &text,
        3,
        8,
        "unknown variant `audit`, expected `enforce` or `monitor`",
    );
}

#[test]
fn team_rate_is_at_least_one() {
    let text = format!("[teams.t]\nkeys = [\"{DIGEST_A}\"]\nrequests_per_minute = 0\n");
    assert_team_error_at(&text, 3, 23, "requests_per_minute must be at least 1");
    let text = format!("[teams.t]\nkeys = [\"{DIGEST_A}\"]\nrequests_per_minute = -1\n");
    assert_team_error_at(&text, 3, 23, "invalid value");
    let text = format!("[teams.t]\nkeys = [\"{DIGEST_A}\"]\nrequests_per_minute = 4294967296\n");
    assert_team_error_at(&text, 3, 23, "invalid value");
}

#[test]
fn team_unknown_keys_are_rejected() {
    let text = format!("[teams.t]\nkeys = [\"{DIGEST_A}\"]\nmodel = [\"gpt-*\"]\n");
    assert_team_error_at(&text, 3, 1, "unknown field `model`");
}

#[test]
fn passthrough_providers_and_teams_do_not_go_together() {
    let team = format!("\n[teams.t]\nkeys = [\"{DIGEST_A}\"]\n");
    let written =
        format!("[providers.p]\nbase_url = \"https://example.com/v1\"\nauth = \"passthrough\"\n{team}");
    match Config::from_toml(&written) {
        Err(ConfigError::Invalid {
            line,
            column,
            message,
            ..
        }) => {
            assert_eq!((line, column), (3, 8), "{message}");
            for needle in [
                "provider \"p\"",
                "never forwarded",
                "bearer_env",
                "auth = \"none\"",
            ] {
                assert!(message.contains(needle), "{message} lacks {needle}");
            }
        }
        other => panic!("{other:?}"),
    }
    // Left out, auth is passthrough: the error points at the provider's name.
    let default = format!("[providers.ok]\nbase_url = \"https://example.com/v1\"\nauth = \"none\"\n[providers.p]\nbase_url = \"https://example.com/v1\"\n{team}");
    match Config::from_toml(&default) {
        Err(ConfigError::Invalid {
            line,
            column,
            message,
            ..
        }) => {
            assert_eq!((line, column), (4, 12), "{message}");
            assert!(
                message.contains("the default when `auth` is left out"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// Loads a configuration whose team pins `content`; returns the error message.
fn pinned_error(content: &str) -> String {
    let text = format!("{PROVIDERS}[teams.t]\nkeys = [\"{DIGEST_A}\"]\npinned_tools = \"tools.json\"\n");
    let (dir, path) = config_dir(&text, &[("tools.json", content)]);
    let message = Config::load(&path).unwrap_err().to_string();
    let file = std::path::absolute(dir.path()).unwrap().join("tools.json");
    let config_place = format!(
        "{}: invalid configuration at line 11, column 16: ",
        path.display()
    );
    assert!(message.starts_with(&config_place), "{message}");
    assert!(
        message.contains(&file.display().to_string()),
        "{message} does not name the file"
    );
    message
}

#[test]
fn pinned_files_must_be_readable_json_arrays() {
    let text = format!("{PROVIDERS}[teams.t]\nkeys = [\"{DIGEST_A}\"]\npinned_tools = \"missing.json\"\n");
    let (_dir, path) = config_dir(&text, &[]);
    let message = Config::load(&path).unwrap_err().to_string();
    assert!(message.contains("cannot read pinned tools file"), "{message}");
    assert!(message.contains("missing.json"), "{message}");

    let message = pinned_error("[{\"name\": \"a\"},\n  {\"name\": }]");
    assert!(
        message.contains("is not valid JSON") && message.contains("line 2 column"),
        "{message}"
    );
    let message = pinned_error("{\"name\": \"a\"}");
    assert!(message.contains("must hold a JSON array"), "{message}");
    let message = pinned_error("");
    assert!(message.contains("is not valid JSON"), "{message}");
}

#[test]
fn pinned_entries_are_named_function_tools() {
    let message = pinned_error("[\n  {\"name\": \"a\"},\n  \"b\"\n]");
    assert!(
        message.contains("line 3, column 3: entry [1] is not a tool definition"),
        "{message}"
    );
    let message = pinned_error("[{\"name\": \"a\"}, {\"parameters\": {}}]");
    assert!(
        message.contains("line 1, column 17: entry [1] has no \"name\""),
        "{message}"
    );
    let message = pinned_error("[{\"name\": 3}]");
    assert!(message.contains("entry [0] has no \"name\""), "{message}");
    let message = pinned_error("[{\"name\": \"\"}]");
    assert!(message.contains("entry [0] has no \"name\""), "{message}");
    let message = pinned_error("[{\"type\": \"function\", \"function\": {\"name\": \"a\"}}]");
    assert!(message.contains("Chat Completions"), "{message}");
    let message = pinned_error("[{\"type\": \"web_search\", \"name\": \"a\"}]");
    assert!(
        message.contains("\"type\": \"web_search\"; only function tools"),
        "{message}"
    );
    let message = pinned_error("[{\"type\": null, \"name\": \"a\"}]");
    assert!(message.contains("only function tools"), "{message}");
}

#[test]
fn a_tool_is_pinned_once() {
    let message = pinned_error(
        "[\n {\"name\": \"a\"},\n {\"name\": \"b\"},\n {\"name\": \"a\", \"parameters\": {}}\n]",
    );
    assert!(
        message.contains("line 4, column 2: tool \"a\" is pinned twice (first at line 2, column 2)"),
        "{message}"
    );
}

#[test]
fn pinned_parameters_must_be_usable_schemas() {
    let message = pinned_error("[{\"name\": \"a\", \"parameters\": {\"type\": \"no-such-type\"}}]");
    assert!(
        message.contains("entry [0] (tool \"a\"): \"parameters\" is not a usable JSON Schema"),
        "{message}"
    );
    let message =
        pinned_error("[{\"name\": \"a\", \"parameters\": {\"$ref\": \"https://example.com/s.json\"}}]");
    assert!(message.contains("not a usable JSON Schema"), "{message}");
    let message = pinned_error("[{\"name\": \"a\", \"parameters\": \"object\"}]");
    assert!(message.contains("object or a boolean"), "{message}");
}

#[test]
fn pinned_schemas_keep_to_the_gate_limits() {
    let text = format!(
        "[gate]\nmax_schema_bytes = 20\n{PROVIDERS}[teams.t]\nkeys = [\"{DIGEST_A}\"]\npinned_tools = \"t.json\"\n"
    );
    let tools =
        r#"[{"name": "a", "parameters": {"type": "object", "description": "longer than twenty bytes"}}]"#;
    let (_dir, path) = config_dir(&text, &[("t.json", tools)]);
    let message = Config::load(&path).unwrap_err().to_string();
    assert!(message.contains("over the limit of 20 bytes"), "{message}");
}

#[test]
fn an_empty_pinned_file_pins_nothing() {
    let text = format!("{PROVIDERS}[teams.t]\nkeys = [\"{DIGEST_A}\"]\npinned_tools = \"sub/t.json\"\n");
    let (_dir, path) = config_dir(&text, &[("sub/t.json", " [ ] ")]);
    let config = Config::load(&path).unwrap();
    assert!(config.teams["t"].pinned_tools.as_ref().unwrap().tools.is_empty());
}

#[test]
fn load_takes_relative_paths_from_the_files_directory() {
    // A relative config path: its directory, not the current one, is the base.
    let text = format!("{PROVIDERS}[audit]\npath = \"audit.jsonl\"\n");
    let (dir, path) = config_dir(&text, &[]);
    let config = Config::load(&path).unwrap();
    let base = std::path::absolute(dir.path()).unwrap();
    assert_eq!(config.audit.unwrap().path, base.join("audit.jsonl"));
}

/// The repository's `proxy.toml` documents teams (their budgets too), `[audit]`, `[usage]`,
/// `[prices]` and `watch_config` in comments: written out, they load.
#[test]
fn the_commented_examples_of_the_embedded_default_load() {
    let mut text = String::new();
    for line in EMBEDDED_DEFAULT.lines() {
        let key = [
            "keys",
            "providers",
            "models",
            "tools",
            "pinned_tools",
            "requests_per_minute",
        ]
        .iter()
        .chain(&["rules", "mode", "path", "watch_config", "budget"])
        .chain(&[
            "default_output_reservation",
            "input_per_million",
            "cached_input_per_million",
            "output_per_million",
        ])
        .any(|key| line.starts_with(&format!("# {key} = ")));
        let example = key
            || line.starts_with("# [teams.")
            || line.starts_with("# [prices.")
            || line == "# [audit]"
            || line == "# [usage]";
        text.push_str(if example { &line[2..] } else { line });
        text.push('\n');
    }
    let (dir, path) = config_dir(&text, &[("policy/payments-tools.json", PINNED)]);
    let config = Config::load(&path).unwrap();
    let base = std::path::absolute(dir.path()).unwrap();
    let payments = &config.teams["payments"];
    assert_eq!(payments.keys[0], ClientKey::of_digest(keys::digest("test")));
    assert_eq!(
        payments.keys[1],
        ClientKey {
            digest: keys::digest("rg-other"),
            id: Some("ci-2026-12".into()),
            expires: keys::parse_expiry("2027-03-01T00:00:00Z"),
            budget: None,
        }
    );
    assert_eq!(payments.pinned_tools.as_ref().unwrap().tools.len(), 3);
    assert_eq!(payments.requests_per_minute, NonZeroU32::new(600));
    assert_eq!(
        payments.budget,
        Some(Budget {
            limit: BudgetLimit::Tokens(2_000_000),
            window: crate::spend::Window::Day
        })
    );
    assert_eq!(config.usage, UsageConfig::default());
    assert_eq!(config.prices[0].model.glob(), "gpt-5*");
    assert_eq!(config.prices[0].cached_input_per_million, 0.125);
    assert_eq!(
        payments.budget,
        Some(Budget {
            limit: BudgetLimit::Tokens(2_000_000),
            window: crate::spend::Window::Day
        })
    );
    assert_eq!(config.usage, UsageConfig::default());
    assert_eq!(config.prices[0].model.glob(), "gpt-5*");
    assert_eq!(config.prices[0].cached_input_per_million, 0.125);
    assert_eq!(config.audit.unwrap().path, base.join("audit.jsonl"));
    assert!(!config.server.watch_config);
}

#[test]
fn share_state_with_names_configured_teams_or_everyone() {
    let two = |alpha: &str, beta: &str| {
        format!(
            "{PROVIDERS}[teams.alpha]\nkeys = [\"{DIGEST_A}\"]\n{alpha}\n[teams.beta]\nkeys = [\"{}\"]\n{beta}\n",
            digest_b()
        )
    };
    let grants = |text: &str| {
        let config = Config::from_toml(text).unwrap();
        (
            config.teams["alpha"].share_state_with.clone(),
            config.teams["beta"].share_state_with.clone(),
        )
    };
    assert_eq!(grants(&two("", "")), (StateGrant::Nobody, StateGrant::Nobody));
    // Grants are one-way, so a pair naming each other is no cycle to refuse.
    assert_eq!(
        grants(&two(
            "share_state_with = [\"beta\"]",
            "share_state_with = [\"alpha\", \"beta\"]"
        )),
        (
            StateGrant::Teams(vec!["beta".into()]),
            StateGrant::Teams(vec!["alpha".into()])
        )
    );
    let (everyone, _) = grants(&two("share_state_with = [\"*\"]", ""));
    assert_eq!(everyone, StateGrant::Everyone);
    assert!(everyone.grants("beta") && !StateGrant::Nobody.grants("beta"));
    assert_team_error_at(
        &format!("[teams.alpha]\nkeys = [\"{DIGEST_A}\"]\nshare_state_with = [\"alpha\", \"gama\"]\n"),
        3,
        30,
        "\"gama\", which is not a configured team",
    );
}

/// `[teams.t]` with `keys = [` and `entries`, one a line (lines 3 on), then `]`.
fn keys_table(entries: &[&str]) -> String {
    format!("[teams.t]\nkeys = [\n{}\n]\n", entries.join(",\n"))
}

/// The 1-based column of `needle` in `line`.
fn column_of(line: &str, needle: &str) -> usize {
    line[..line.find(needle).unwrap()].chars().count() + 1
}

#[test]
fn a_key_may_be_a_table_with_an_id_and_an_expiry() {
    let at = |secs: u64| std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    // 2027-03-01T00:00:00Z.
    let march = at(1_803_859_200);
    let b = digest_b();
    let c = keys::format_digest(&keys::digest("rg-third"));
    let d = keys::format_digest(&keys::digest("rg-fourth"));
    let text = keys_table(&[
        &format!("\"{DIGEST_A}\""),
        &format!("{{ id = \"ci-2026-12\", digest = \"{b}\", expires = \"2027-03-01T00:00:00Z\" }}"),
        &format!("{{ digest = \"{c}\", expires = 2027-03-01T01:00:00+01:00 }}"),
        &format!("{{ id = \"laptop.ana_1\", digest = \"{d}\" }}"),
    ]);
    let config = Config::from_toml(&format!("{PROVIDERS}{text}")).unwrap();
    let keys = &config.teams["t"].keys;
    assert_eq!(
        keys,
        &[
            ClientKey::of_digest(keys::digest("test")),
            ClientKey {
                digest: keys::digest("rg-other"),
                id: Some("ci-2026-12".into()),
                expires: Some(march),
                budget: None,
            },
            ClientKey {
                digest: keys::digest("rg-third"),
                id: None,
                expires: Some(march),
                budget: None,
            },
            ClientKey {
                digest: keys::digest("rg-fourth"),
                id: Some("laptop.ana_1".into()),
                expires: None,
                budget: None,
            },
        ]
    );
    let log_ids: Vec<String> = keys.iter().map(ClientKey::log_id).collect();
    assert_eq!(
        log_ids[0], "9f86d081",
        "a key without an id goes by its digest's start"
    );
    assert_eq!(log_ids[1], "ci-2026-12");
    assert_eq!(log_ids[2], c[7..15]);
    assert!(config.summary().contains("(4 keys)"), "{}", config.summary());
}

#[test]
fn a_malformed_expiry_is_an_error_at_its_line() {
    let b = digest_b();
    for expires in [
        "\"2027-13-01T00:00:00Z\"",
        "\"2027-03-01\"",
        "\"2027-03-01T00:00:00\"",
        "\"next year\"",
        "2027-03-01T00:00:00",
        "2027-03-01",
    ] {
        let entry = format!("  {{ digest = \"{b}\", expires = {expires} }}");
        let text = keys_table(&[&format!("\"{DIGEST_A}\""), &entry]);
        assert_team_error_at(
            &text,
            4,
            column_of(&entry, &expires[..5]),
            "is not an RFC 3339 date and time",
        );
    }
    let entry = format!("{{ digest = \"{b}\", expires = 7 }}");
    assert_team_error_at(&keys_table(&[&entry]), 3, column_of(&entry, "7 }"), "RFC 3339");
}

#[test]
fn a_key_table_needs_a_digest_and_nothing_unknown() {
    let b = digest_b();
    let entry = "{ id = \"ci\" }";
    assert_team_error_at(&keys_table(&[entry]), 3, 1, "missing field `digest`");
    let entry = format!("{{ digest = \"{b}\", expiry = \"2027-03-01T00:00:00Z\" }}");
    assert_team_error_at(
        &keys_table(&[&entry]),
        3,
        column_of(&entry, "expiry"),
        "unknown field `expiry`",
    );
    let entry = "{ id = \"ci\", digest = \"sha256:abc\" }";
    assert_team_error_at(
        &keys_table(&[entry]),
        3,
        column_of(entry, "\"sha256"),
        "not a key digest",
    );
    let entry = format!("{{ digest = \"{DIGEST_A}\" }}");
    let twice = keys_table(&[&format!("\"{DIGEST_A}\""), &entry]);
    assert_team_error_at(
        &twice,
        4,
        column_of(&entry, "\"sha256"),
        "this team already lists it",
    );
    let key = keys::new_key().unwrap();
    let error = Config::from_toml(&format!(
        "{PROVIDERS}{}",
        keys_table(&[&format!("{{ digest = \"{key}\" }}")])
    ))
    .unwrap_err()
    .to_string();
    assert!(error.contains("looks like a client key itself"), "{error}");
    assert!(!error.contains(&key[3..]), "the key must not be echoed: {error}");
}

#[test]
fn key_ids_are_short_printable_and_name_one_key() {
    let b = digest_b();
    for id in ["", "a b", "ci/1", "é", &"x".repeat(65)] {
        let entry = format!("{{ id = \"{id}\", digest = \"{b}\" }}");
        assert_team_error_at(
            &keys_table(&[&entry]),
            3,
            column_of(&entry, "\""),
            "may contain only ASCII letters, digits, `_`, `-` and `.`",
        );
    }
    let first = format!("{{ id = \"ci\", digest = \"{DIGEST_A}\" }}");
    let second = format!("{{ id = \"ci\", digest = \"{b}\" }}");
    assert_team_error_at(
        &keys_table(&[&first, &second]),
        4,
        column_of(&second, "\"ci\""),
        "key id \"ci\" names one key only: this team already lists it",
    );
    let across = format!("{}[teams.u]\nkeys = [{second}]\n", keys_table(&[&first]));
    assert_team_error_at(
        &across,
        6,
        column_of(&format!("keys = [{second}]"), "\"ci\""),
        "team \"t\" already lists it",
    );
}
