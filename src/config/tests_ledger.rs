//! `[state]`, `[ledger]` and `encrypted_content_scope`.

use super::redis_access::ClientCertFiles;
use super::tests::{assert_invalid_at, assert_parse_error_at};
use super::*;
use crate::gate::{Action, Reason};
use crate::test_pki as pki;

/// One provider, written after the table under test so that its lines count from 1.
const PROVIDER: &str = "\n[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\n";

fn config(table: &str) -> Config {
    Config::from_toml(&format!("{table}{PROVIDER}")).unwrap()
}

fn redis(url: &str) -> String {
    format!("[state]\nbackend = \"redis\"\nurl = \"{url}\"\n")
}

#[test]
fn defaults() {
    // Text not read from a file keeps its state in memory: no file, no directory for it.
    assert_eq!(config("").state, StateConfig::Memory);
    let defaults = Config::from_toml_in(PROVIDER, std::path::Path::new(".")).unwrap();
    let cwd = std::path::absolute(".").unwrap();
    assert_eq!(
        defaults.state,
        StateConfig::Embedded {
            path: cwd.join("replaygate-state"),
            max_disk_bytes: 1 << 30,
            max_memory_bytes: 16 << 20,
        }
    );
    assert_eq!(defaults.state.backend(), "embedded");
    assert_eq!(defaults.ledger, LedgerConfig::default());
    assert!(defaults.ledger.enabled);
    assert!(!defaults.ledger.store_items);
    assert!(!defaults.ledger.carry_sessions);
    assert_eq!(defaults.ledger.retention_hours, 720);
    assert_eq!(defaults.ledger.retention(), Duration::from_secs(720 * 3600));
    assert_eq!(defaults.ledger.on_unavailable, OnUnavailable::Refuse);
    assert_eq!(defaults.ledger.max_chain, 64);
    assert_eq!(
        defaults.providers["openai"].encrypted_content_scope,
        EncryptedContentScope::Provider
    );
    // Empty tables are the defaults too.
    let empty = config("[state]\n[ledger]\n");
    assert_eq!((empty.state, empty.ledger), (defaults.state, defaults.ledger));
}

#[test]
fn redis_defaults() {
    let config = config(&redis("redis://127.0.0.1:6379"));
    assert_eq!(
        config.state,
        StateConfig::Redis {
            target: RedisTarget::Url("redis://127.0.0.1:6379".into()),
            key_prefix: "replaygate".into(),
            timeout: Duration::from_millis(500),
            access: RedisAccess::default(),
        }
    );
    assert_eq!(config.state.backend(), "redis");
}

#[test]
fn every_key_is_read() {
    let read = config(
        "[state]\nbackend = \"redis\"\nurl = \"rediss://cache.internal:6380/2\"\nkey_prefix = \"rg:prod\"\n\
         timeout = \"1s 250ms\"\nusername = \"replaygate\"\npassword_env = \"REDIS_PASSWORD\"\n\
         [ledger]\nenabled = true\nstore_items = true\ncarry_sessions = true\nretention_hours = 48\n\
         on_unavailable = \"allow\"\nmax_chain = 8\nunknown_owner = \"allow\"\n",
    );
    assert_eq!(
        read.state,
        StateConfig::Redis {
            target: RedisTarget::Url("rediss://cache.internal:6380/2".into()),
            key_prefix: "rg:prod".into(),
            timeout: Duration::from_millis(1250),
            access: RedisAccess {
                username: Some("replaygate".into()),
                password_env: Some("REDIS_PASSWORD".into()),
                tls_ca_file: None,
                tls_client: None,
            },
        }
    );
    assert_eq!(
        read.ledger,
        LedgerConfig {
            enabled: true,
            store_items: true,
            carry_sessions: true,
            retention_hours: 48,
            on_unavailable: OnUnavailable::Allow,
            max_chain: 8,
            unknown_owner: UnknownOwner::Allow,
        }
    );
    assert_eq!(read.ledger.retention(), Duration::from_secs(48 * 3600));

    assert_eq!(
        config("[state]\nbackend = \"memory\"\n").state,
        StateConfig::Memory
    );
    assert!(!config("[ledger]\nenabled = false\n").ledger.enabled);
    let scoped = Config::from_toml(&format!("{PROVIDER}encrypted_content_scope = \"model\"\n")).unwrap();
    assert_eq!(
        scoped.providers["openai"].encrypted_content_scope,
        EncryptedContentScope::Model
    );
}

#[test]
fn relative_state_paths_are_taken_from_the_directory_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let load = |table: &str| {
        let file = dir.path().join("proxy.toml");
        std::fs::write(&file, format!("{table}{PROVIDER}")).unwrap();
        Config::load(&file).unwrap().state
    };
    let base = std::path::absolute(dir.path()).unwrap();
    let embedded = |path: PathBuf| StateConfig::Embedded {
        path,
        max_disk_bytes: 1 << 30,
        max_memory_bytes: 16 << 20,
    };
    assert_eq!(load(""), embedded(base.join("replaygate-state")));
    assert_eq!(
        load("[state]\npath = \"data/state\"\n"),
        embedded(base.join("data/state"))
    );
    assert_eq!(
        load("[state]\nbackend = \"embedded\"\npath = \"/srv/rg/state\"\n"),
        embedded(PathBuf::from("/srv/rg/state"))
    );
    // Without a file: the directory given, made absolute.
    let text = format!("[state]\npath = \"s\"\n{PROVIDER}");
    let config = Config::from_toml_in(&text, dir.path()).unwrap();
    assert_eq!(config.state, embedded(base.join("s")));
}

#[test]
fn unknown_backends_and_keys_are_rejected_with_their_position() {
    assert_parse_error_at(
        "[state]\nbackend = \"sqlite\"\n",
        2,
        11,
        "unknown variant `sqlite`",
    );
    assert_parse_error_at("[state]\ndir = \"x\"\n", 2, 1, "unknown field `dir`");
    assert_parse_error_at("[ledger]\nretention = 5\n", 2, 1, "unknown field `retention`");
    assert_parse_error_at(
        "[ledger]\non_unavailable = \"ignore\"\n",
        2,
        18,
        "unknown variant `ignore`",
    );
    assert_parse_error_at(
        &format!("{PROVIDER}encrypted_content_scope = \"account\"\n"),
        4,
        27,
        "unknown variant `account`",
    );
}

#[test]
fn redis_needs_a_url() {
    assert_invalid_at(
        &format!("[state]\nbackend = \"redis\"\n{PROVIDER}"),
        2,
        11,
        "needs the server's address",
    );
}

#[test]
fn keys_of_another_backend_are_rejected() {
    let check = |table: &str, line, column, needle| {
        assert_invalid_at(&format!("{table}{PROVIDER}"), line, column, needle);
    };
    check(
        "[state]\nurl = \"redis://h\"\n",
        2,
        7,
        "[state] url applies to backend = \"redis\" only, and this [state] has backend = \"embedded\" (the default)",
    );
    check(
        "[state]\nbackend = \"embedded\"\nkey_prefix = \"x\"\n",
        3,
        14,
        "key_prefix applies to backend = \"redis\" only, and this [state] has backend = \"embedded\"",
    );
    check(
        "[state]\nbackend = \"memory\"\ntimeout = \"1s\"\npath = \"x\"\n",
        3,
        11,
        "timeout applies to backend = \"redis\" only",
    );
    check(
        "[state]\nbackend = \"memory\"\npath = \"x\"\n",
        3,
        8,
        "path applies to backend = \"embedded\" only, and this [state] has backend = \"memory\"",
    );
    check(
        &format!("{}path = \"x\"\n", redis("redis://h")),
        4,
        8,
        "path applies to backend = \"embedded\" only",
    );
    check(
        "[state]\nbackend = \"memory\"\nmax_disk_bytes = \"1GiB\"\n",
        3,
        18,
        "max_disk_bytes applies to backend = \"embedded\" only, and this [state] has backend = \"memory\"",
    );
    check(
        &format!("{}max_memory_bytes = \"64MiB\"\n", redis("redis://h")),
        4,
        20,
        "max_memory_bytes applies to backend = \"embedded\" only",
    );
}

#[test]
fn the_embedded_memory_budget_is_a_size_of_at_least_8_mib() {
    let budget = |value: &str| match config(&format!(
        "[state]\nbackend = \"embedded\"\nmax_memory_bytes = {value}\n"
    ))
    .state
    {
        StateConfig::Embedded { max_memory_bytes, .. } => max_memory_bytes,
        other => panic!("{other:?}"),
    };
    assert_eq!(budget("\"64MiB\""), 64 << 20);
    assert_eq!(budget("8388608"), 8 << 20);
    let check = |value: &str, needle: &str| {
        let text = format!("[state]\nbackend = \"embedded\"\nmax_memory_bytes = {value}\n{PROVIDER}");
        assert_invalid_at(&text, 3, 20, needle);
    };
    check("0", "must be at least 8MiB");
    check("\"4MiB\"", "must be at least 8MiB");
    check("\"lots\"", "is not a size such as \"32MiB\" or 33554432");
    check("-5", "is negative");
}

#[test]
fn the_embedded_disk_budget_is_a_size_above_zero() {
    let budget = |value: &str| match config(&format!(
        "[state]\nbackend = \"embedded\"\nmax_disk_bytes = {value}\n"
    ))
    .state
    {
        StateConfig::Embedded { max_disk_bytes, .. } => max_disk_bytes,
        other => panic!("{other:?}"),
    };
    assert_eq!(budget("\"512MiB\""), 512 << 20);
    assert_eq!(budget("\"2 GB\""), 2_000_000_000);
    assert_eq!(budget("134217728"), 128 << 20);
    let check = |value: &str, needle: &str| {
        let text = format!("[state]\nbackend = \"embedded\"\nmax_disk_bytes = {value}\n{PROVIDER}");
        assert_invalid_at(&text, 3, 18, needle);
    };
    check("0", "must be more than 0");
    check("\"0GiB\"", "must be more than 0");
    check("\"lots\"", "is not a size such as \"1GiB\" or 1073741824");
    check("\"1.5GiB\"", "is not a size");
    check("\"10 parsecs\"", "has the unit \"parsecs\"");
    check("-5", "is negative");
    check("\"64MiB\"", "must be at least 128MiB");
}

#[test]
fn unusable_redis_urls_are_rejected_without_repeating_them() {
    let check = |url: &str, needle: &str| {
        let text = format!("{}{PROVIDER}", redis(url));
        assert_invalid_at(&text, 3, 7, needle);
        let message = Config::from_toml(&text).unwrap_err().to_string();
        assert!(!message.contains("secret"), "{message}");
    };
    check(
        "http://:secret@h:6379",
        "must start with redis:// (or rediss:// for TLS), not http://",
    );
    check("localhost:6379", "must start with redis://");
    check("redis//:secret@h", "is not a URL");
    check("redis://:secret@", "is not a URL (empty host)");
    check("redis:/0", "names no host");
    check("redis://:secret@h:6379/zero", "a database number");
    Config::from_toml(&format!("{}{PROVIDER}", redis("redis://[::1]/15"))).unwrap();
}

#[test]
fn redis_prefix_and_timeout_must_be_usable() {
    let check = |line: &str, column, needle| {
        let text = format!("{}{line}\n{PROVIDER}", redis("redis://h"));
        assert_invalid_at(&text, 4, column, needle);
    };
    check("key_prefix = \"\"", 14, "must be non-empty");
    check("key_prefix = \"rg prod\"", 14, "without spaces");
    check("timeout = \"fast\"", 11, "not a duration such as \"500ms\"");
    check("timeout = \"500\"", 11, "not a duration");
    check("timeout = \"0s\"", 11, "must be more than 0");
    assert_parse_error_at(
        &format!("{}timeout = 500\n", redis("redis://h")),
        4,
        11,
        "invalid type",
    );
}

#[test]
fn an_empty_state_path_is_rejected() {
    assert_invalid_at(
        &format!("[state]\npath = \"\"\n{PROVIDER}"),
        2,
        8,
        "[state] path must name a directory, not be empty",
    );
}

#[test]
fn carrying_sessions_needs_stored_items_and_the_ledger() {
    assert_invalid_at(
        &format!("[ledger]\ncarry_sessions = true\n{PROVIDER}"),
        2,
        18,
        "carry_sessions = true needs store_items = true",
    );
    assert_invalid_at(
        &format!("[ledger]\nenabled = false\nstore_items = true\ncarry_sessions = true\n{PROVIDER}"),
        4,
        18,
        "needs the ledger, which enabled = false turns off",
    );
    // Storing items alone, or a disabled ledger with other settings kept, is fine.
    assert!(config("[ledger]\nstore_items = true\n").ledger.store_items);
    config("[ledger]\nenabled = false\nretention_hours = 1\n");
}

#[test]
fn ledger_counts_must_be_positive() {
    assert_parse_error_at("[ledger]\nretention_hours = 0\n", 2, 19, "at least 1 hour");
    assert_parse_error_at("[ledger]\nretention_hours = -1\n", 2, 19, "invalid value");
    assert_parse_error_at("[ledger]\nmax_chain = 0\n", 2, 13, "at least 1");
    assert_parse_error_at("[ledger]\nenabled = \"yes\"\n", 2, 11, "invalid type");
}

#[test]
fn the_summary_names_the_state_backend_and_the_ledger() {
    let summary = |table: &str| config(table).summary();
    let cwd = std::path::absolute(".").unwrap();
    assert_eq!(
        Config::from_toml_in(PROVIDER, std::path::Path::new("."))
            .unwrap()
            .summary(),
        format!(
            "1 provider, 0 routes, no teams, no audit log, state embedded in {}, ledger on",
            cwd.join("replaygate-state").display()
        )
    );
    assert!(
        summary("[state]\nbackend = \"memory\"\n[ledger]\nenabled = false\n")
            .ends_with(", state in memory, ledger off")
    );
    assert!(summary(&format!(
        "{}[ledger]\nstore_items = true\n",
        redis("redis://cache:6380/1")
    ))
    .ends_with(", state in redis at cache:6380, ledger on, storing items"));
    // TLS and the user are named; the password's variable is not.
    assert!(summary(&format!(
        "{}username = \"replaygate\"\npassword_env = \"RG_REDIS_PASSWORD\"\n",
        redis("rediss://cache:6380")
    ))
    .ends_with(", state in redis at cache:6380 over TLS as replaygate, ledger on"));
    assert!(summary(&format!(
        "{}[ledger]\nstore_items = true\ncarry_sessions = true\n",
        redis("rediss://cache")
    ))
    .ends_with(", state in redis at cache:6379 over TLS, ledger on, carrying sessions"));
}

/// Rules are read through [`Reason`]'s own names, so every reason it knows (the ledger's
/// included) is accepted in `[gate.rules]` and a team's `rules`.
#[test]
fn rules_accept_every_reason() {
    for reason in Reason::ALL {
        let code = reason.as_str();
        let text = format!(
            "[gate.rules]\n{code} = \"monitor\"\n\
             [providers.openai]\nbase_url = \"https://api.openai.com/v1\"\nauth = \"none\"\n\
             [teams.t]\nkeys = [\"sha256:{}\"]\nrules = {{ {code} = \"strip\" }}\n",
            "ab".repeat(32)
        );
        let config = Config::from_toml(&text).unwrap();
        assert_eq!(config.gate.rules[&reason], Action::Monitor, "{code}");
        assert_eq!(config.teams["t"].rules[&reason], Action::Strip, "{code}");
    }
}

#[test]
fn redis_login_and_tls_files_are_read_relative_to_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let ca = pki::TestCa::new("replaygate test CA");
    ca.write(&certs, "ca");
    ca.issue(&["replaygate"], &certs, "client");
    let file = dir.path().join("proxy.toml");
    std::fs::write(
        &file,
        format!(
            "{}username = \"replaygate\"\npassword_env = \"RG_REDIS_PASSWORD\"\ntls_ca_file = \"certs/ca.pem\"\n\
             tls_cert_file = \"certs/client.pem\"\ntls_key_file = \"certs/client.key\"\n{PROVIDER}",
            redis("rediss://redis.internal:6380/1")
        ),
    )
    .unwrap();
    let base = std::path::absolute(dir.path()).unwrap();
    let StateConfig::Redis { target, access, .. } = Config::load(&file).unwrap().state else {
        panic!("not redis");
    };
    assert_eq!(target, RedisTarget::Url("rediss://redis.internal:6380/1".into()));
    assert_eq!(
        access,
        RedisAccess {
            username: Some("replaygate".into()),
            password_env: Some("RG_REDIS_PASSWORD".into()),
            tls_ca_file: Some(base.join("certs/ca.pem")),
            tls_client: Some(ClientCertFiles {
                cert_file: base.join("certs/client.pem"),
                key_file: base.join("certs/client.key"),
            }),
        }
    );
    // A password alone logs in as the default user; TLS with the system's roots needs no file.
    let text = format!(
        "{}password_env = \"RG_REDIS_PASSWORD\"\n",
        redis("rediss://cache")
    );
    let StateConfig::Redis { access, .. } = config(&text).state else {
        panic!("not redis");
    };
    assert_eq!(access.password_env.as_deref(), Some("RG_REDIS_PASSWORD"));
    assert_eq!(
        (access.username, access.tls_ca_file, access.tls_client),
        (None, None, None)
    );
}

#[test]
fn a_password_in_the_url_is_an_error_that_points_to_password_env() {
    for url in [
        "redis://:s3cret-pass@cache:6379",
        "rediss://alice:s3cret-pass@cache/0",
    ] {
        let text = format!("{}{PROVIDER}", redis(url));
        assert_invalid_at(
            &text,
            3,
            7,
            "carries a password; put the password in an environment variable and name it with password_env",
        );
        let message = Config::from_toml(&text).unwrap_err().to_string();
        assert!(!message.contains("s3cret"), "{message}");
    }
    // A user in the URL (with the password from password_env) is fine; in both places is not.
    config(&format!("{}password_env = \"P\"\n", redis("redis://alice@cache")));
    assert_invalid_at(
        &format!(
            "{}username = \"bob\"\npassword_env = \"P\"\n{PROVIDER}",
            redis("redis://alice@cache")
        ),
        4,
        12,
        "the url names a user too",
    );
    // #insecure would turn the certificate check off.
    assert_invalid_at(
        &format!("{}{PROVIDER}", redis("rediss://cache#insecure")),
        3,
        7,
        "may not end in a #fragment",
    );
}

#[test]
fn a_username_needs_password_env_and_both_must_be_usable() {
    let check = |lines: &str, line, column, needle| {
        assert_invalid_at(
            &format!("{}{lines}{PROVIDER}", redis("redis://cache")),
            line,
            column,
            needle,
        );
    };
    check(
        "username = \"replaygate\"\n",
        4,
        12,
        "username needs password_env",
    );
    check(
        "username = \"\"\npassword_env = \"P\"\n",
        4,
        12,
        "must be non-empty",
    );
    check(
        "username = \"a b\"\npassword_env = \"P\"\n",
        4,
        12,
        "without spaces",
    );
    check(
        "password_env = \"\"\n",
        4,
        16,
        "must name an environment variable",
    );
    check(
        "password_env = \"A=B\"\n",
        4,
        16,
        "must name an environment variable",
    );
    assert_parse_error_at(
        &format!("{}password_env = 5\n", redis("redis://cache")),
        4,
        16,
        "invalid type",
    );
}

#[test]
fn tls_files_need_rediss_and_the_client_pair_goes_together() {
    let dir = tempfile::tempdir().unwrap();
    let ca = pki::TestCa::new("replaygate test CA");
    let ca_file = ca.write(dir.path(), "ca");
    let client = ca.issue(&["replaygate"], dir.path(), "client");
    let (ca_file, cert, key) = (ca_file.display(), client.cert.display(), client.key.display());
    let check = |url: &str, lines: &str, line, column, needle| {
        assert_invalid_at(&format!("{}{lines}{PROVIDER}", redis(url)), line, column, needle);
    };
    check(
        "redis://cache",
        &format!("tls_ca_file = \"{ca_file}\"\n"),
        4,
        15,
        "need TLS: write the url with rediss://",
    );
    check(
        "redis://cache",
        &format!("tls_cert_file = \"{cert}\"\ntls_key_file = \"{key}\"\n"),
        4,
        17,
        "need TLS",
    );
    check(
        "rediss://cache",
        &format!("tls_cert_file = \"{cert}\"\n"),
        4,
        17,
        "tls_cert_file and tls_key_file go together",
    );
    check(
        "rediss://cache",
        &format!("tls_ca_file = \"{ca_file}\"\ntls_key_file = \"{key}\"\n"),
        5,
        16,
        "go together",
    );
    check(
        "rediss://cache",
        "tls_ca_file = \"\"\n",
        4,
        15,
        "must name a PEM file",
    );
    // Both files of the pair, with or without a CA of its own, are fine.
    config(&format!(
        "{}tls_cert_file = \"{cert}\"\ntls_key_file = \"{key}\"\n",
        redis("rediss://cache")
    ));
}

#[test]
fn tls_files_must_read_as_pem_and_messages_never_quote_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let ca = pki::TestCa::new("replaygate test CA");
    let client = ca.issue(&["replaygate"], dir.path(), "client");
    let not_pem = dir.path().join("notes.txt");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    let missing = dir.path().join("missing.pem");
    let check = |lines: String, line, column, needles: &[&str]| {
        let text = format!("{}{lines}{PROVIDER}", redis("rediss://cache"));
        for needle in needles {
            assert_invalid_at(&text, line, column, needle);
        }
        Config::from_toml(&text).unwrap_err().to_string()
    };
    check(
        format!("tls_ca_file = \"{}\"\n", missing.display()),
        4,
        15,
        &[
            "[state] tls_ca_file",
            &missing.display().to_string(),
            "cannot be read",
        ],
    );
    check(
        format!("tls_ca_file = \"{}\"\n", not_pem.display()),
        4,
        15,
        &["holds no PEM certificate"],
    );
    check(
        format!(
            "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
            client.key.display(),
            client.key.display()
        ),
        4,
        17,
        &["tls_cert_file", "holds no PEM certificate"],
    );
    // A certificate where the key should be: named, and no line of the file is repeated.
    let message = check(
        format!(
            "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
            client.cert.display(),
            client.cert.display()
        ),
        5,
        16,
        &["tls_key_file", "holds no usable PEM private key"],
    );
    assert!(!message.contains("BEGIN"), "{message}");
    let key_text = std::fs::read_to_string(&client.key).unwrap();
    let body_line = key_text.lines().nth(1).unwrap();
    let broken = dir.path().join("broken.key");
    std::fs::write(&broken, key_text.replace("-----END PRIVATE KEY-----", "")).unwrap();
    let message = check(
        format!(
            "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
            client.cert.display(),
            broken.display()
        ),
        5,
        16,
        &["holds no usable PEM private key"],
    );
    assert!(!message.contains(body_line), "{message}");
}

#[test]
fn login_and_tls_keys_belong_to_the_redis_backend() {
    assert_invalid_at(
        &format!("[state]\nbackend = \"memory\"\nusername = \"x\"\n{PROVIDER}"),
        3,
        12,
        "[state] username applies to backend = \"redis\" only, and this [state] has backend = \"memory\"",
    );
    for key in ["password_env", "tls_ca_file", "tls_cert_file", "tls_key_file"] {
        let text = format!("[state]\n{key} = \"x\"\n{PROVIDER}");
        assert_invalid_at(
            &text,
            2,
            key.len() + 4,
            &format!("[state] {key} applies to backend = \"redis\" only, and this [state] has backend = \"embedded\" (the default)"),
        );
    }
}
