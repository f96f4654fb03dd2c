//! `replaygate serve` (three workers) and Ctrl-C (SIGINT) with a stream in flight: the listener closes, the
//! stream finishes within the grace period, and the process exits 0.
//!
//! (SIGTERM with nothing in flight is in `serve_binary.rs`; the grace deadline is tested
//! through `run()` in `graceful_shutdown.rs`.)

#![cfg(unix)]

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use support::upstream::Upstream;

/// The serve process, killed if the test fails before it exits.
struct Serve(std::process::Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_lets_an_in_flight_stream_finish_then_exits_0() {
    let (upstream, mut feeds) = Upstream::sse_feed().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            "default_provider = \"openai\"\n[server]\nshutdown_grace_ms = 10000\nworkers = 3\n[providers.openai]\nbase_url = \"{}\"\nauth = \"none\"\n",
            upstream.base_url()
        ),
    )
    .unwrap();
    let mut serve = Serve(
        Command::new(env!("CARGO_BIN_EXE_replaygate"))
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let child = &mut serve.0;

    // Read the log on a thread of its own until the process closes it.
    let stdout = child.stdout.take().unwrap();
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let address = loop {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.recv())
            .await
            .expect("no listening line")
            .expect("serve exited early");
        if let Some(at) = line.find("address=") {
            assert!(line.contains("workers=3"), "{line}");
            break line[at + 8..].split_whitespace().next().unwrap().to_owned();
        }
    };

    let url = format!("http://{address}/v1/responses");
    let response = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .body(r#"{"model":"gpt-5","stream":true,"input":"hi"}"#)
            .send()
            .await
            .unwrap()
    });
    let feed = tokio::time::timeout(Duration::from_secs(10), feeds.recv())
        .await
        .unwrap()
        .unwrap();
    feed.send(Bytes::from_static(b"data: first\n\n")).await.unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), response)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(&first[..], b"data: first\n\n");

    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());

    // The listener closes at once; the stream goes on.
    let started = Instant::now();
    loop {
        if tokio::net::TcpStream::connect(&address).await.is_err() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "still accepting after Ctrl-C"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "serve exited with a stream in flight"
    );
    feed.send(Bytes::from_static(b"data: [DONE]\n\n")).await.unwrap();
    drop(feed);
    let mut rest = Vec::new();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .unwrap()
    {
        rest.extend_from_slice(&chunk.expect("the stream was cut"));
    }
    assert_eq!(rest, b"data: [DONE]\n\n");

    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "serve did not exit after the stream ended"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "serve exited with {status}");
}
