//! Tests of reading and checking `proxy.toml`: every key, its default and its config errors.

use std::io::Write;

use super::*;
use crate::gate::{Action, Reason};

const MINIMAL: &str = r#"
[providers.openai]
base_url = "https://api.openai.com/v1"
"#;

fn parse_error(text: &str) -> String {
    Config::from_toml(text).unwrap_err().to_string()
}

/// Asserts that `text` fails with `needle` in the message at `line`/`column`.
pub(super) fn assert_invalid_at(text: &str, line: usize, column: usize, needle: &str) {
    match Config::from_toml(text) {
        Err(ConfigError::Invalid {
            line: l,
            column: c,
            message,
            ..
        }) => {
            assert_eq!((l, c), (line, column), "{message}");
            assert!(message.contains(needle), "{message:?} lacks {needle:?}");
        }
        other => panic!("expected a semantic error, got {other:?}"),
    }
}

/// Asserts that `text` fails to parse with `needle` in the message at `line`/`column`.
pub(super) fn assert_parse_error_at(text: &str, line: usize, column: usize, needle: &str) {
    match Config::from_toml(text) {
        Err(error @ ConfigError::Parse { .. }) => {
            let message = error.to_string();
            let position = format!("line {line}, column {column}");
            assert!(message.contains(&position), "{message}\nlacks {position}");
            assert!(message.contains(needle), "{message}\nlacks {needle:?}");
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn minimal_config_gets_defaults() {
    let config = Config::from_toml(MINIMAL).unwrap();
    assert_eq!(config.default_provider, None);
    assert_eq!(config.server, ServerConfig::default());
    assert_eq!(config.server.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(config.server.max_body_bytes, 33_554_432);
    assert_eq!(config.server.max_buffered_bytes, 536_870_912);
    assert_eq!(config.server.header_read_timeout, Duration::from_secs(30));
    assert_eq!(config.server.body_read_timeout, Duration::from_secs(60));
    assert_eq!(config.server.max_concurrent_requests, 1024);
    assert_eq!(config.server.shutdown_grace, Duration::from_secs(30));
    assert_eq!(config.server.workers, 0);
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    assert_eq!(config.server.worker_threads(), cpus, "0 means one worker per CPU");
    assert_eq!(config.log.format, LogFormat::Text);
    assert_eq!(config.log.level, "info");
    assert_eq!(config.gate.schema_cache_bytes, 67_108_864);
    assert_eq!(config.gate.max_schema_bytes, 1_048_576);
    assert!(config.routes.is_empty());

    let openai = &config.providers["openai"];
    assert_eq!(openai.base_url, "https://api.openai.com/v1");
    assert_eq!(openai.auth, Auth::Passthrough);
    assert_eq!(openai.namespaces(), ["openai"]);
    assert_eq!(openai.connect_timeout, Duration::from_secs(10));
    assert_eq!(openai.read_timeout, Duration::from_secs(600));
}

#[test]
fn every_key_is_read() {
    let config = Config::from_toml(
        r#"
default_provider = "local"

[server]
listen = "[::1]:9000"
max_body_bytes = 1000
max_buffered_bytes = 5000
header_read_timeout_ms = 1
body_read_timeout_ms = 2
max_concurrent_requests = 3
shutdown_grace_ms = 0
workers = 2

[log]
format = "json"
level = "warn,replaygate=debug"

[gate]
schema_cache_bytes = 10
max_schema_bytes = 20

[providers.local]
base_url = "http://127.0.0.1:11434/v1/"
auth = "none"
namespaces = ["ollama", "openai"]
connect_timeout_ms = 4
read_timeout_ms = 5

[[routes]]
model = "llama*"
provider = "local"
"#,
    )
    .unwrap();
    assert_eq!(config.default_provider.as_deref(), Some("local"));
    assert_eq!(config.server.listen.to_string(), "[::1]:9000");
    assert_eq!(config.server.max_body_bytes, 1000);
    assert_eq!(config.server.max_buffered_bytes, 5000);
    assert_eq!(config.server.header_read_timeout, Duration::from_millis(1));
    assert_eq!(config.server.body_read_timeout, Duration::from_millis(2));
    assert_eq!(config.server.max_concurrent_requests, 3);
    assert_eq!(config.server.shutdown_grace, Duration::ZERO);
    assert_eq!(config.server.workers, 2);
    assert_eq!(config.server.worker_threads(), 2);
    assert_eq!(config.log.format, LogFormat::Json);
    assert_eq!(config.log.level, "warn,replaygate=debug");
    assert_eq!(config.gate.schema_cache_bytes, 10);
    assert_eq!(config.gate.max_schema_bytes, 20);
    let local = &config.providers["local"];
    assert_eq!(local.base_url, "http://127.0.0.1:11434/v1");
    assert_eq!(local.auth, Auth::None);
    assert_eq!(local.namespaces(), ["ollama", "openai"]);
    assert_eq!(local.connect_timeout, Duration::from_millis(4));
    assert_eq!(local.read_timeout, Duration::from_millis(5));
    assert_eq!(config.routes.len(), 1);
    assert_eq!(config.routes[0].model.glob(), "llama*");
    assert_eq!(config.routes[0].provider, "local");
}

#[test]
fn routes_keep_file_order() {
    let config = Config::from_toml(&format!(
        "{MINIMAL}
[[routes]]
model = \"b*\"
provider = \"openai\"
[[routes]]
model = \"a*\"
provider = \"openai\"
"
    ))
    .unwrap();
    let globs: Vec<&str> = config.routes.iter().map(|r| r.model.glob()).collect();
    assert_eq!(globs, ["b*", "a*"]);
}

#[test]
fn empty_namespaces_list_is_kept_empty() {
    let config = Config::from_toml(&format!("{MINIMAL}namespaces = []\n")).unwrap();
    assert!(config.providers["openai"].namespaces().is_empty());
}

#[test]
fn unknown_keys_are_rejected_with_their_position() {
    assert_parse_error_at("colour = 1\n", 1, 1, "unknown field `colour`");
    assert_parse_error_at(
        "[server]\nlisten_addr = \"127.0.0.1:1\"\n",
        2,
        1,
        "unknown field `listen_addr`",
    );
    assert_parse_error_at("[log]\ncolor = true\n", 2, 1, "unknown field `color`");
    assert_parse_error_at("[gate]\ncache = 1\n", 2, 1, "unknown field `cache`");
    assert_parse_error_at(
        &format!("{MINIMAL}api_key = \"x\"\n"),
        4,
        1,
        "unknown field `api_key`",
    );
    assert_parse_error_at(
        &format!("{MINIMAL}[[routes]]\nmodel = \"x\"\nprovider = \"openai\"\nweight = 2\n"),
        7,
        1,
        "unknown field `weight`",
    );
}

#[test]
fn missing_required_keys_are_rejected() {
    assert!(parse_error("").contains("missing field `providers`"));
    assert!(parse_error("[providers.a]\n").contains("missing field `base_url`"));
    assert!(
        parse_error(&format!("{MINIMAL}[[routes]]\nmodel = \"x\"\n")).contains("missing field `provider`")
    );
}

#[test]
fn values_of_the_wrong_shape_are_rejected_with_their_position() {
    assert_parse_error_at("[server]\nlisten = \"localhost:80\"\n", 2, 10, "socket address");
    assert_parse_error_at("[server]\nmax_body_bytes = -1\n", 2, 18, "invalid value");
    assert_parse_error_at("[server]\nheader_read_timeout_ms = 0\n", 2, 26, "at least 1");
    assert_parse_error_at("[server]\nmax_concurrent_requests = 0\n", 2, 27, "at least 1");
    assert_parse_error_at("[log]\nformat = \"xml\"\n", 2, 10, "unknown variant `xml`");
    assert_parse_error_at("[log]\nlevel = \"info,=,\"\n", 2, 9, "invalid log level");
    assert_parse_error_at(&format!("{MINIMAL}read_timeout_ms = 0\n"), 4, 19, "at least 1");
}

#[test]
fn buffered_bytes_must_hold_the_largest_body() {
    // Written below the body cap, or zero: the error points at max_buffered_bytes.
    assert_invalid_at(
        &format!("[server]\nmax_body_bytes = 1000\nmax_buffered_bytes = 999\n{MINIMAL}"),
        3,
        22,
        "must be at least max_body_bytes (1000)",
    );
    assert_invalid_at(
        &format!("[server]\nmax_buffered_bytes = 0\n{MINIMAL}"),
        2,
        22,
        "max_buffered_bytes (0)",
    );
    // A body cap over the default buffer cap: the error points at the key that was written.
    assert_invalid_at(
        &format!("[server]\nmax_body_bytes = 536870913\n{MINIMAL}"),
        2,
        18,
        "max_buffered_bytes (536870912) must be at least max_body_bytes (536870913)",
    );
    assert_parse_error_at("[server]\nmax_buffered_bytes = -5\n", 2, 22, "invalid value");
    let equal = Config::from_toml(&format!(
        "[server]\nmax_body_bytes = 1000\nmax_buffered_bytes = 1000\n{MINIMAL}"
    ))
    .unwrap();
    assert_eq!(equal.server.max_buffered_bytes, 1000);
}

/// The example of the external contract, verbatim: its `default_provider`
/// line follows `[server]`, so TOML puts it in that table.
#[test]
fn default_provider_may_be_written_in_the_server_table() {
    let config = Config::from_toml(
        r#"[server]
listen = "127.0.0.1:8080"
max_body_bytes = 33554432        # 413 above this

default_provider = "openai"

[providers.openai]
base_url = "https://api.openai.com/v1"
auth = { bearer_env = "OPENAI_API_KEY" }   # or auth = "passthrough" (forward the client's Authorization)
namespaces = ["openai"]                     # extension slugs this provider accepts; default [NAME]

[providers.bedrock]
base_url = "https://bedrock-mantle.us-east-1.api.aws/v1"
auth = { bearer_env = "AWS_BEARER_TOKEN_BEDROCK" }

[[routes]]
model = "gpt-*"                 # glob on the request's `model`; first match wins
provider = "openai"
"#,
    )
    .unwrap();
    assert_eq!(config.default_provider.as_deref(), Some("openai"));
    assert_eq!(config.server, ServerConfig::default());
    assert_eq!(config.providers["bedrock"].namespaces(), ["bedrock"]);
    assert_invalid_at(
        &format!("[server]\ndefault_provider = \"nope\"\n{MINIMAL}"),
        2,
        20,
        "default_provider \"nope\" is not a defined provider",
    );
}

#[test]
fn default_provider_may_not_be_set_twice() {
    assert_invalid_at(
        &format!("default_provider = \"openai\"\n[server]\ndefault_provider = \"openai\"\n{MINIMAL}"),
        3,
        20,
        "both at the top level and in [server]",
    );
}

#[test]
fn at_least_one_provider_is_required() {
    assert_invalid_at("default_provider = \"x\"\n[providers]\n", 2, 1, "no provider");
}

#[test]
fn provider_names_must_be_path_segments() {
    let with_name = |name: &str| format!("[providers.{name}]\nbase_url = \"https://example.com/v1\"\n");
    assert_invalid_at(&with_name("\"open ai\""), 1, 12, "may contain only");
    assert_invalid_at(&with_name("\"a/b\""), 1, 12, "may contain only");
    assert_invalid_at(&with_name("\"\""), 1, 12, "may contain only");
    assert_invalid_at(&with_name("\"..\""), 1, 12, "not usable");
    assert_invalid_at(&with_name("v1"), 1, 12, "reserved");
    assert_invalid_at(&with_name("responses"), 1, 12, "reserved");
    for good in [
        "openai",
        "bedrock-openai",
        "local_1",
        "\"my.provider\"",
        "\"A-Z_0.9\"",
    ] {
        Config::from_toml(&with_name(good)).unwrap();
    }
}

#[test]
fn base_url_is_normalized() {
    let base_url = |url: &str| {
        let config = Config::from_toml(&format!("[providers.p]\nbase_url = \"{url}\"\n")).unwrap();
        config.providers["p"].base_url.clone()
    };
    assert_eq!(base_url("https://api.openai.com/v1"), "https://api.openai.com/v1");
    assert_eq!(
        base_url("https://api.openai.com/v1/"),
        "https://api.openai.com/v1"
    );
    assert_eq!(base_url("https://api.openai.com"), "https://api.openai.com");
    assert_eq!(base_url("https://api.openai.com/"), "https://api.openai.com");
    assert_eq!(
        base_url("HTTP://Example.COM:8080/a/b"),
        "http://example.com:8080/a/b"
    );
    assert_eq!(base_url("https://example.com/v1//"), "https://example.com/v1/");
}

#[test]
fn unusable_base_urls_are_rejected_with_their_position() {
    let with_url = |url: &str| format!("[providers.p]\nbase_url = \"{url}\"\n");
    assert_invalid_at(&with_url("api.openai.com/v1"), 2, 12, "is not a URL");
    assert_invalid_at(&with_url("ftp://example.com/v1"), 2, 12, "http or https");
    assert_invalid_at(
        &with_url("https://example.com/v1?x=1"),
        2,
        12,
        "query or a fragment",
    );
    assert_invalid_at(&with_url("https://example.com/v1?"), 2, 12, "query or a fragment");
    assert_invalid_at(
        &with_url("https://example.com/v1#top"),
        2,
        12,
        "query or a fragment",
    );
    assert_invalid_at(&with_url("https://user:pw@example.com/v1"), 2, 12, "credentials");
}

#[test]
fn namespaces_must_be_slugs() {
    assert_invalid_at(
        &format!("{MINIMAL}namespaces = [\"ok\", \"\"]\n"),
        4,
        21,
        "namespace",
    );
    assert_invalid_at(&format!("{MINIMAL}namespaces = [\"a:b\"]\n"), 4, 15, "no `:`");
}

#[test]
fn default_provider_must_be_defined() {
    assert_invalid_at(
        &format!("default_provider = \"opnai\"\n{MINIMAL}"),
        1,
        20,
        "default_provider \"opnai\" is not a defined provider (defined: openai)",
    );
}

#[test]
fn route_provider_must_be_defined() {
    assert_invalid_at(
        &format!("{MINIMAL}\n[[routes]]\nmodel = \"gpt-*\"\nprovider = \"bedrock\"\n"),
        7,
        12,
        "provider \"bedrock\" is not a defined provider",
    );
}

#[test]
fn route_globs_must_compile() {
    assert_invalid_at(
        &format!("{MINIMAL}\n[[routes]]\nmodel = \"gpt-[\"\nprovider = \"openai\"\n"),
        6,
        9,
        "invalid model glob",
    );
}

#[test]
fn the_first_invalid_provider_in_the_file_is_reported() {
    assert_invalid_at(
        "[providers.zeta]\nbase_url = \"ftp://z\"\n[providers.alpha]\nbase_url = \"ftp://a\"\n",
        2,
        12,
        "\"ftp://z\"",
    );
}

#[test]
fn load_names_the_file() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    write!(file, "{MINIMAL}").unwrap();
    assert!(Config::load(file.path()).is_ok());

    let mut bad = tempfile::NamedTempFile::new().unwrap();
    writeln!(bad, "{MINIMAL}surprise = 1").unwrap();
    let message = Config::load(bad.path()).unwrap_err().to_string();
    assert!(
        message.starts_with(&format!("{}: ", bad.path().display())),
        "{message}"
    );
    assert!(message.contains("line 4, column 1"), "{message}");

    let mut invalid = tempfile::NamedTempFile::new().unwrap();
    write!(invalid, "default_provider = \"nope\"\n{MINIMAL}").unwrap();
    let message = Config::load(invalid.path()).unwrap_err().to_string();
    assert!(
        message.starts_with(&format!("{}: ", invalid.path().display())),
        "{message}"
    );
    assert!(message.contains("line 1, column 20"), "{message}");

    let missing = bad.path().with_extension("missing");
    let error = Config::load(&missing).unwrap_err();
    assert!(matches!(error, ConfigError::Read { .. }));
    assert!(error.to_string().contains(&missing.display().to_string()));
}

#[test]
fn embedded_default_parses() {
    let config = Config::embedded_default().unwrap();
    assert_eq!(config.default_provider.as_deref(), Some("openai"));
    // The file documents the defaults, so it must agree with them.
    assert_eq!(config.server, ServerConfig::default());
    assert_eq!(config.admin.listen, Some("127.0.0.1:9090".parse().unwrap()));
    assert_eq!(config.log, LogConfig::default());
    assert_eq!(config.gate, GateConfig::default());
    assert_eq!(config.ledger, LedgerConfig::default());
    let state_dir = std::path::absolute("replaygate-state").unwrap();
    assert_eq!(
        config.state,
        StateConfig::Embedded {
            path: state_dir,
            max_disk_bytes: 1 << 30,
            max_memory_bytes: 16 << 20,
        }
    );

    let openai = &config.providers["openai"];
    assert_eq!(openai.base_url, "https://api.openai.com/v1");
    assert_eq!(openai.auth, Auth::BearerEnv("OPENAI_API_KEY".into()));
    assert_eq!(openai.namespaces(), ["openai"]);
    let bedrock = &config.providers["bedrock"];
    assert_eq!(bedrock.base_url, "https://bedrock-mantle.us-east-1.api.aws/v1");
    assert_eq!(bedrock.auth, Auth::BearerEnv("AWS_BEARER_TOKEN_BEDROCK".into()));
    assert_eq!(bedrock.namespaces(), ["bedrock"]);
    let bedrock_openai = &config.providers["bedrock-openai"];
    assert_eq!(
        bedrock_openai.base_url,
        "https://bedrock-mantle.us-east-1.api.aws/openai/v1"
    );
    assert_eq!(bedrock_openai.auth, bedrock.auth);
    assert_eq!(bedrock_openai.namespaces(), ["bedrock"]);
    // Bedrock binds reasoning to the account and the model.
    assert_eq!(openai.encrypted_content_scope, EncryptedContentScope::Provider);
    assert_eq!(bedrock.encrypted_content_scope, EncryptedContentScope::Model);
    assert_eq!(
        bedrock_openai.encrypted_content_scope,
        EncryptedContentScope::Model
    );

    let routes: Vec<(&str, &str)> = config
        .routes
        .iter()
        .map(|r| (r.model.glob(), r.provider.as_str()))
        .collect();
    assert_eq!(
        routes,
        [
            ("gpt-*", "openai"),
            ("o1*", "openai"),
            ("o3*", "openai"),
            ("o4*", "openai"),
            ("openai.gpt-5*", "bedrock-openai"),
            ("openai.gpt-oss-*", "bedrock"),
            ("anthropic.*", "bedrock"),
            ("google.*", "bedrock"),
            ("meta.*", "bedrock"),
            ("mistral.*", "bedrock"),
            ("qwen.*", "bedrock"),
            ("deepseek.*", "bedrock"),
            ("amazon.*", "bedrock"),
        ]
    );
}

#[test]
fn gate_rules_set_actions_per_reason() {
    let text = format!(
        "{MINIMAL}\n[gate]\nrequire_status = true\nmax_violations_listed = 7\nwork_budget = 99\n\n[gate.rules]\nunknown_tool = \"reject\"\nnamespaced = \"monitor\"\n"
    );
    let config = Config::from_toml(&text).unwrap();
    let policy = config.gate.policy();
    assert!(policy.require_status);
    assert_eq!((policy.max_listed, policy.work_budget), (7, 99));
    assert_eq!(policy.action(Reason::UnknownTool), Action::Reject);
    assert_eq!(policy.action(Reason::Namespaced), Action::Monitor);
    assert_eq!(policy.action(Reason::Status), Action::Reject);
}

#[test]
fn gate_rules_name_known_reasons_and_actions() {
    let unknown_reason = format!("{MINIMAL}\n[gate.rules]\nunknwn_tool = \"reject\"\n");
    assert_parse_error_at(&unknown_reason, 6, 1, "unknown reason `unknwn_tool`");
    let unknown_action = format!("{MINIMAL}\n[gate.rules]\nunknown_tool = \"ignore\"\n");
    assert_parse_error_at(&unknown_action, 6, 16, "unknown variant `ignore`");
    let none_listed = format!("{MINIMAL}\n[gate]\nmax_violations_listed = 0\n");
    assert_parse_error_at(&none_listed, 6, 25, "at least 1");
}

#[test]
fn the_admin_listener_is_off_unless_set_and_never_on_the_proxy_s_port() {
    assert_eq!(Config::from_toml(MINIMAL).unwrap().admin.listen, None);
    let with = |server: &str, admin: &str| {
        format!("[server]\nlisten = \"{server}\"\n[admin]\nlisten = \"{admin}\"\n{MINIMAL}")
    };
    let config = Config::from_toml(&with("127.0.0.1:8080", "127.0.0.1:9090")).unwrap();
    assert_eq!(config.admin.listen, Some("127.0.0.1:9090".parse().unwrap()));
    assert!(
        config.summary().ends_with(", admin on 127.0.0.1:9090"),
        "{}",
        config.summary()
    );
    for (server, admin) in [
        ("127.0.0.1:8080", "127.0.0.1:8080"),
        ("127.0.0.1:8080", "0.0.0.0:8080"),
        ("0.0.0.0:8080", "127.0.0.1:8080"),
        ("[::1]:8080", "[::]:8080"),
    ] {
        assert_invalid_at(&with(server, admin), 4, 10, "takes the proxy's port");
    }
    for (server, admin) in [
        ("127.0.0.1:8080", "127.0.0.2:8080"),
        ("127.0.0.1:8080", "0.0.0.0:9090"),
        ("127.0.0.1:0", "127.0.0.1:0"),
    ] {
        assert!(
            Config::from_toml(&with(server, admin)).is_ok(),
            "{server} {admin}"
        );
    }
    // `--listen` is checked again when serving.
    let admin = AdminConfig {
        listen: Some("0.0.0.0:9090".parse().unwrap()),
        tls: None,
    };
    assert!(admin.collides_with("127.0.0.1:9090".parse().unwrap()));
    assert!(!admin.collides_with("127.0.0.1:8080".parse().unwrap()));
    assert!(!AdminConfig::default().collides_with("127.0.0.1:9090".parse().unwrap()));
}
