//! `replaygate serve` as an operator runs it: config from `$REPLAYGATE_CONFIG`, `--listen`,
//! a startup report of unconfigured providers, and a clean exit on SIGTERM.

#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn serve_starts_gates_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        r#"default_provider = "bedrock"
[server]
listen = "127.0.0.1:1"
[providers.bedrock]
base_url = "http://127.0.0.1:9/v1"
auth = { bearer_env = "REPLAYGATE_TEST_UNSET_KEY" }
"#,
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_replaygate"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("REPLAYGATE_CONFIG", &config)
        .env_remove("REPLAYGATE_TEST_UNSET_KEY")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());

    // Read the startup lines until the listening address appears (bounded).
    let started = Instant::now();
    let mut seen = String::new();
    let address = loop {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no listening line:\n{seen}"
        );
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap() == 0 {
            panic!("serve exited early:\n{seen}");
        }
        seen.push_str(&line);
        if let Some(at) = line.find("address=") {
            break line[at + 8..].split_whitespace().next().unwrap().to_owned();
        }
    };
    assert!(
        seen.contains("REPLAYGATE_TEST_UNSET_KEY"),
        "the unset key was not reported:\n{seen}"
    );
    assert!(
        address.starts_with("127.0.0.1:") && !address.ends_with(":1"),
        "--listen was ignored: {address}"
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let url = format!("http://{address}/v1/responses");
        let refused = client
            .post(&url)
            .body(r#"{"model":"m","input":[{"type":"openai:web_search_call","id":"ws_1"}]}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 422);
        let unconfigured = client
            .post(&url)
            .body(r#"{"model":"m","input":"hi"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(unconfigured.status(), 503);
    });

    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "serve did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "serve exited with {status}");
}

/// The binary's allocator gives freed pages back within 200 ms from its background thread
/// (docs/operations.md, "The allocator"): the defaults built into it from `.cargo/config.toml`
/// and the `background_threads` feature, which the default configuration's memory relies on.
#[test]
fn the_allocator_gives_freed_memory_back_soon() {
    let output = Command::new(env!("CARGO_BIN_EXE_replaygate"))
        .arg("--version")
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .output()
        .unwrap();
    assert!(output.status.success());
    let stats =
        String::from_utf8_lossy(&output.stderr).into_owned() + &String::from_utf8_lossy(&output.stdout);
    for setting in [
        "opt.background_thread: true",
        "opt.dirty_decay_ms: 200",
        "opt.muzzy_decay_ms: 0",
    ] {
        assert!(
            stats.contains(setting),
            "{setting} not in the allocator's settings:\n{stats}"
        );
    }
}
