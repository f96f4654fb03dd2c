//! The load benchmark's "default" target runs the repository's own `proxy.toml` with only the
//! bench's addresses rewritten (`bench/load/default_config.py`, see docs/development.md): the
//! result is a configuration replaygate accepts, and everything users run by default is as the
//! repository's file has it.

use crate::support;

use std::path::Path;
use std::process::Command;

use support::cli::replaygate;

const REPO_TOML: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/proxy.toml");
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/load/default_config.py");

/// The script's output for `source`, with ports 18080 (proxy), 19090 (admin), 18081 (upstream).
fn derive(source: &Path, state: &Path) -> String {
    let out = Command::new("python3")
        .args([SCRIPT, source.to_str().unwrap(), "18080", "19090", "18081"])
        .arg(state)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn parse(text: &str) -> toml::Table {
    text.parse().unwrap()
}

fn at<'a>(table: &'a toml::Table, path: &[&str]) -> Option<&'a toml::Value> {
    let (last, parents) = path.split_last().unwrap();
    let mut node = table;
    for part in parents {
        node = node.get(*part)?.as_table()?;
    }
    node.get(*last)
}

#[test]
fn the_default_target_runs_the_repos_proxy_toml_with_only_its_addresses_changed() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let text = derive(Path::new(REPO_TOML), &state);
    let config = dir.path().join("default.toml");
    std::fs::write(&config, &text).unwrap();

    let out = replaygate(&["config", "check", "--config", config.to_str().unwrap()], "");
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("admin on 127.0.0.1:19090"), "{said}");

    let (repo, bench) = (parse(&std::fs::read_to_string(REPO_TOML).unwrap()), parse(&text));
    let changed = |path: &[&str], value: &str| {
        assert_eq!(at(&bench, path), Some(&toml::Value::from(value)), "{path:?}");
    };
    changed(&["server", "listen"], "127.0.0.1:18080");
    changed(&["admin", "listen"], "127.0.0.1:19090");
    changed(&["providers", "openai", "base_url"], "http://127.0.0.1:18081/v1");
    changed(&["providers", "openai", "auth"], "none");
    changed(&["state", "path"], state.to_str().unwrap());
    // What users run, as the repository's file has it (a key it leaves out stays left out).
    for path in [
        &["gate"][..],
        &["log"],
        &["ledger"],
        &["state", "backend"],
        &["providers", "openai", "item_profile"],
        &["server", "workers"],
        &["routes"],
    ] {
        assert_eq!(at(&bench, path), at(&repo, path), "{path:?}");
    }
}

#[test]
fn keys_the_file_leaves_out_are_added_under_their_table() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("proxy.toml");
    std::fs::write(
        &source,
        "[server]\n\n[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\n\n[state]\nbackend = \"embedded\"\n",
    )
    .unwrap();
    let state = dir.path().join("state");
    let bench = parse(&derive(&source, &state));
    assert_eq!(at(&bench, &["server", "listen"]), Some(&"127.0.0.1:18080".into()));
    assert_eq!(at(&bench, &["admin", "listen"]), Some(&"127.0.0.1:19090".into()));
    assert_eq!(at(&bench, &["providers", "openai", "auth"]), Some(&"none".into()));
    assert_eq!(
        at(&bench, &["state", "path"]),
        Some(&state.to_str().unwrap().into())
    );
    assert_eq!(at(&bench, &["state", "backend"]), Some(&"embedded".into()));
}
