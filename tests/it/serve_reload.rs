//! `replaygate serve` reloading its configuration: on SIGHUP, and on a change of the file with
//! `[server] watch_config = true`; a bad file changes nothing and is logged with its line.

#![cfg(unix)]

use std::path::Path;
use std::time::{Duration, Instant};

use super::teams::{key_entry, PAY_KEY, SEARCH_KEY};
use crate::support::serve::Serve;
use crate::support::upstream::Upstream;

/// Starts serve with `config` and the provider key its configurations name.
async fn serve(config: &Path) -> Serve {
    let mut command = Serve::command(config);
    command.env("UP_KEY", "sk-up");
    Serve::start(command).await
}

/// The status a request with client key `key` gets from `serve`.
async fn status_with(serve: &Serve, key: &str) -> u16 {
    reqwest::Client::new()
        .post(format!("http://{}/v1/responses", serve.address))
        .header("authorization", format!("Bearer {key}"))
        .body(r#"{"model":"gpt-5","input":"hi"}"#)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Waits (boundedly) until requests with `key` get `want`, several times over so every worker
/// has been asked.
async fn until_status(serve: &Serve, key: &str, want: u16) {
    let started = Instant::now();
    let mut in_a_row = 0;
    while in_a_row < 8 {
        if status_with(serve, key).await == want {
            in_a_row += 1;
        } else {
            in_a_row = 0;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{key} never got {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn config(upstream: &Upstream, keys: &[&str], watch: bool) -> String {
    let keys: Vec<String> = keys.iter().map(|k| format!("\"{}\"", key_entry(k))).collect();
    format!(
        "default_provider = \"openai\"\n[server]\nworkers = 2\nwatch_config = {watch}\n[providers.openai]\nbase_url = \"{}\"\nauth = {{ bearer_env = \"UP_KEY\" }}\n[teams.all]\nkeys = [{}]\n",
        upstream.base_url(),
        keys.join(", ")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_every_worker_and_a_bad_file_changes_nothing() {
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, config(&upstream, &[PAY_KEY], false)).unwrap();
    let mut serve = serve(&path).await;
    assert_eq!(status_with(&serve, SEARCH_KEY).await, 401);

    std::fs::write(&path, config(&upstream, &[PAY_KEY, SEARCH_KEY], false)).unwrap();
    serve.signal("-HUP");
    serve.until_logged("configuration reloaded").await;
    until_status(&serve, SEARCH_KEY, 200).await;

    std::fs::write(&path, "[providers.openai]\nbase_url = 7\n").unwrap();
    serve.signal("-HUP");
    let line = serve.until_logged("configuration not reloaded").await;
    assert!(line.contains("line 2"), "{line}");
    until_status(&serve, SEARCH_KEY, 200).await;
    assert!(
        serve.child.try_wait().unwrap().is_none(),
        "SIGHUP must not end the process"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_watch_config_a_changed_file_is_reloaded_without_a_signal() {
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, config(&upstream, &[PAY_KEY], true)).unwrap();
    let mut serve = serve(&path).await;
    assert_eq!(status_with(&serve, PAY_KEY).await, 200);
    // Replaced by a rename, as editors and config maps do.
    let next = dir.path().join("proxy.toml.new");
    std::fs::write(&next, config(&upstream, &[SEARCH_KEY], true)).unwrap();
    std::fs::rename(&next, &path).unwrap();
    serve.until_logged("configuration reloaded").await;
    until_status(&serve, PAY_KEY, 401).await;
    until_status(&serve, SEARCH_KEY, 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_follows_logrotate_and_is_whole_when_serve_exits() {
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    let text = format!(
        "{}[audit]\npath = \"audit.jsonl\"\n",
        config(&upstream, &[PAY_KEY], false)
    );
    std::fs::write(&path, text).unwrap();
    let mut serve = serve(&path).await;
    let (audit, rotated) = (dir.path().join("audit.jsonl"), dir.path().join("audit.jsonl.1"));
    assert_eq!(status_with(&serve, PAY_KEY).await, 200);
    // Written within a few ticks of the writer thread.
    let started = Instant::now();
    while std::fs::read_to_string(&audit)
        .unwrap_or_default()
        .lines()
        .count()
        < 1
    {
        assert!(started.elapsed() < Duration::from_secs(10), "no audit line");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // logrotate: move the file, then SIGHUP.
    std::fs::rename(&audit, &rotated).unwrap();
    serve.signal("-HUP");
    serve.until_logged("configuration reloaded").await;
    for _ in 0..3 {
        assert_eq!(status_with(&serve, PAY_KEY).await, 200);
    }
    serve.signal("-TERM");
    let exited = serve.exited_within(Duration::from_secs(10)).await;
    assert!(exited.is_some(), "serve did not exit");
    // Each request's line, then its answer's usage line (docs/usage.md#the-audit-log), which
    // the first request may write on either side of the rotation.
    let lines = |path: &Path, usage: bool| {
        let text = std::fs::read_to_string(path).unwrap();
        text.lines()
            .filter(|line| line.contains(r#""kind":"usage""#) == usage)
            .count()
    };
    assert_eq!(lines(&rotated, false), 1);
    assert_eq!(
        lines(&audit, false),
        3,
        "every line is written before serve exits"
    );
    assert_eq!(
        lines(&rotated, true) + lines(&audit, true),
        4,
        "one usage line per answer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_watch_config_a_config_map_update_is_reloaded() {
    use std::os::unix::fs::symlink;
    // A Kubernetes config map volume: proxy.toml -> ..data/proxy.toml, ..data -> ..v1; an
    // update writes ..v2, swaps ..data by a rename and removes ..v1.
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let dir = tempfile::tempdir().unwrap();
    let version = |name: &str, keys: &[&str]| {
        let at = dir.path().join(name);
        std::fs::create_dir(&at).unwrap();
        std::fs::write(at.join("proxy.toml"), config(&upstream, keys, true)).unwrap();
    };
    version("..v1", &[PAY_KEY]);
    symlink("..v1", dir.path().join("..data")).unwrap();
    symlink("..data/proxy.toml", dir.path().join("proxy.toml")).unwrap();
    let mut serve = serve(&dir.path().join("proxy.toml")).await;
    assert_eq!(status_with(&serve, PAY_KEY).await, 200);

    version("..v2", &[SEARCH_KEY]);
    symlink("..v2", dir.path().join("..data_tmp")).unwrap();
    std::fs::rename(dir.path().join("..data_tmp"), dir.path().join("..data")).unwrap();
    std::fs::remove_dir_all(dir.path().join("..v1")).unwrap();
    serve.until_logged("configuration reloaded").await;
    until_status(&serve, SEARCH_KEY, 200).await;
    until_status(&serve, PAY_KEY, 401).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_watch_config_a_changed_item_profile_file_is_reloaded() {
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("local.json");
    let local = include_str!("../fixtures/profiles/local.json");
    std::fs::write(&profile, local).unwrap();
    let path = dir.path().join("proxy.toml");
    std::fs::write(
        &path,
        format!(
            "default_provider = \"local\"\n[server]\nworkers = 2\nwatch_config = true\n[providers.local]\n\
             base_url = \"{}\"\nauth = \"none\"\nitem_profile = {{ file = \"local.json\" }}\n",
            upstream.base_url()
        ),
    )
    .unwrap();
    let mut serve = serve(&path).await;
    let body = r#"{"model":"m","input":[{"type":"function_call","call_id":"c1","name":"get-weather","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"}]}"#;
    let address = serve.address.to_string();
    let status = || {
        let url = format!("http://{address}/v1/responses");
        async move {
            let sent = reqwest::Client::new().post(url).body(body).send().await;
            sent.unwrap().status().as_u16()
        }
    };
    assert_eq!(status().await, 422, "the profile's pattern refuses the dash");
    // Only the profile file changes, by a rename as editors do.
    let next = dir.path().join("local.json.new");
    std::fs::write(&next, local.replace("^[a-zA-Z0-9_]+$", "^[a-zA-Z0-9_-]+$")).unwrap();
    std::fs::rename(&next, &profile).unwrap();
    serve.until_logged("configuration reloaded").await;
    let started = Instant::now();
    let mut in_a_row = 0;
    while in_a_row < 8 {
        in_a_row = if status().await == 200 { in_a_row + 1 } else { 0 };
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the new profile never applied"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
