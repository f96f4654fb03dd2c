//! Memory bounds on the real binary. `max_buffered_bytes`: many slow large uploads held open at
//! once cannot take the proxy's memory past the cap; later large uploads get 503 `overloaded`
//! with `retry-after`, small requests are still served, and the resident set stays near the
//! cap. Bodies of millions of refused items, and many distinct tool schemas, stay bounded too.

#![cfg(target_os = "linux")]

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::memory::status_bytes;
use support::raw::{connect, read_head, read_until, send, status_of};
use support::upstream::{Upstream, RESPONSE_JSON};
use tokio::net::TcpStream;

const MIB: usize = 1 << 20;
const CAP: usize = 16 * MIB;
const UPLOAD: usize = 3 * MIB;
const UPLOADS: usize = 16;

/// A line of the child's `/proc/PID/status` (`VmRSS`: its resident set now; `VmHWM`: its peak so
/// far), in bytes.
fn memory(child: &Child, field: &str) -> usize {
    status_bytes(&child.id().to_string(), field).unwrap_or_else(|| panic!("{field} of the child")) as usize
}

/// The child's resident set, in bytes.
fn rss(child: &Child) -> usize {
    memory(child, "VmRSS")
}

/// Starts `replaygate serve` with `config` and returns it with the address it listens on; its
/// output is drained by a thread so it never blocks on a full pipe.
fn serve(config: &std::path::Path) -> (KillOnDrop, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_replaygate"))
        .args(["serve", "--config"])
        .arg(config)
        .env("RUST_LOG", "warn,replaygate=info")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let child = KillOnDrop(child);
    let started = Instant::now();
    let address = loop {
        assert!(started.elapsed() < Duration::from_secs(20), "no listening line");
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "serve exited early");
        if let Some(at) = line.find("address=") {
            break line[at + 8..].split_whitespace().next().unwrap().to_owned();
        }
    };
    std::thread::spawn(move || while stdout.read_line(&mut String::new()).is_ok_and(|n| n > 0) {});
    (child, address)
}

/// Serves with two workers in front of `upstream`, with `more` written after `[server]`'s own
/// lines (its keys, or further tables). The directory holding the configuration lives as long
/// as the returned guard.
fn serve_in_front_of(upstream: &Upstream, more: &str) -> (tempfile::TempDir, KillOnDrop, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("proxy.toml");
    let text = format!(
        "default_provider = \"openai\"\n[server]\nlisten = \"127.0.0.1:0\"\nworkers = 2\n{more}\
         [providers.openai]\nbase_url = \"{}\"\n",
        upstream.base_url()
    );
    std::fs::write(&config, text).unwrap();
    let (child, address) = serve(&config);
    (dir, child, address)
}

/// Kills the child when the test ends, however it ends.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn upload_head(length: usize) -> String {
    format!("POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n")
}

/// Starts an upload of `UPLOAD` bytes: sends its head, and unless the proxy answers at once,
/// all of the body but its last byte. Returns the held connection, or the answer's head and
/// what came with it.
async fn start_upload(address: std::net::SocketAddr) -> Result<TcpStream, (String, Vec<u8>)> {
    let mut client = connect(address).await;
    send(&mut client, upload_head(UPLOAD).as_bytes()).await;
    let mut probe = [0u8; 1];
    let answered = tokio::time::timeout(Duration::from_millis(300), client.peek(&mut probe)).await;
    if answered.is_ok() {
        return Err(read_head(&mut client, Duration::from_secs(5)).await);
    }
    // Refused while the body arrives (the bodies before it were still arriving when it began),
    // the proxy answers and stops reading: the rest of the body may not be taken.
    let body = vec![b' '; UPLOAD - 1];
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncWriteExt::write_all(&mut client, &body),
    )
    .await;
    let answered = tokio::time::timeout(Duration::from_millis(500), client.peek(&mut probe)).await;
    if answered.is_ok() {
        return Err(read_head(&mut client, Duration::from_secs(5)).await);
    }
    Ok(client)
}

#[tokio::test]
async fn slow_large_uploads_cannot_take_memory_past_max_buffered_bytes() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let server = format!("max_body_bytes = {}\nmax_buffered_bytes = {CAP}\n", 4 * MIB);
    let (_dir, child, address) = serve_in_front_of(&upstream, &server);
    let address: std::net::SocketAddr = address.parse().unwrap();
    let small = r#"{"model":"gpt-5","input":"hi"}"#;
    let small_request = || async move {
        let mut client = connect(address).await;
        let request = format!("{}{small}", upload_head(small.len()));
        send(&mut client, request.as_bytes()).await;
        let (head, rest) = read_head(&mut client, Duration::from_secs(10)).await;
        read_until(
            &mut client,
            rest,
            RESPONSE_JSON.as_bytes(),
            Duration::from_secs(5),
        )
        .await;
        status_of(&head)
    };
    assert_eq!(small_request().await, 200);
    let baseline = rss(&child.0);

    // Every upload holds back its last byte, so each keeps its body in the proxy.
    let mut held = Vec::new();
    let mut refused = Vec::new();
    let mut peak = baseline;
    for _ in 0..UPLOADS {
        match start_upload(address).await {
            Ok(client) => held.push(client),
            Err(answer) => refused.push(answer),
        }
        peak = peak.max(rss(&child.0));
    }
    // (a) The cap holds five 3 MiB bodies; the others were turned away at once.
    assert_eq!(held.len(), CAP / UPLOAD, "uploads held at once");
    assert_eq!(refused.len(), UPLOADS - CAP / UPLOAD);
    for (head, rest) in refused {
        assert_eq!(status_of(&head), 503, "{head}");
        assert!(head.to_ascii_lowercase().contains("\r\nretry-after: "), "{head}");
        let rest = String::from_utf8_lossy(&rest);
        assert!(rest.contains(r#""code":"overloaded""#), "{rest}");
        assert!(rest.contains(r#""type":"server_error""#), "{rest}");
    }
    // (b) Small requests are still served while the large ones are held.
    for _ in 0..5 {
        assert_eq!(small_request().await, 200);
    }
    // (c) The proxy holds the cap, not every upload: RSS grew by about the cap (plus
    // connection buffers and allocator slack; about 21 MiB when measured), far from the
    // 48 MiB the uploads tried to make it hold.
    peak = peak.max(rss(&child.0));
    let grown = peak.saturating_sub(baseline);
    assert!(
        grown < 2 * CAP,
        "RSS grew by {} MiB with a cap of {} MiB",
        grown / MIB,
        CAP / MIB
    );

    // Once the held uploads go away, their bytes are free for the next one.
    drop(held);
    let started = Instant::now();
    loop {
        match start_upload(address).await {
            Ok(mut client) => {
                send(&mut client, b" ").await;
                let (head, _) = read_head(&mut client, Duration::from_secs(10)).await;
                // Blank JSON is not a request the gate can read: 400, from the proxy.
                assert_eq!(status_of(&head), 400, "{head}");
                break;
            }
            Err((head, _)) => {
                assert_eq!(status_of(&head), 503, "{head}");
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "the budget was never given back"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(child);
}

/// The child's peak resident set so far, in bytes.
fn peak_rss(child: &Child) -> usize {
    memory(child, "VmHWM")
}

#[tokio::test]
async fn bodies_of_millions_of_tiny_refused_items_stay_within_a_few_hundred_mib() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let (_dir, child, address) = serve_in_front_of(&upstream, "");
    let url = format!("http://{address}/v1/responses");
    let max_body = 32 * MIB;
    let input = |items: Vec<String>| format!(r#"{{"model":"gpt-5","input":[{}]}}"#, items.join(","));
    // 1.8 million items, far past what the gate reads; 100,000 refused items, each with a
    // long id to echo back; 100,000 outputs answering nobody.
    let bodies = [
        input(vec![r#"{"type":"acme:x"}"#.to_owned(); 1_800_000]),
        input(
            (0..100_000)
                .map(|i| format!(r#"{{"type":"acme:x","id":"{i:0>250}"}}"#))
                .collect(),
        ),
        input(
            (0..100_000)
                .map(|i| format!(r#"{{"type":"function_call_output","call_id":"{i:0>240}","output":"x"}}"#))
                .collect(),
        ),
    ];
    for body in &bodies {
        assert!(body.len() < max_body, "{} bytes", body.len());
    }
    let client = reqwest::Client::new();
    for _round in 0..2 {
        let answers = futures_util::future::join_all(bodies.iter().map(|body| {
            let (client, url) = (client.clone(), url.clone());
            async move {
                let response = client.post(url).body(body.clone()).send().await.unwrap();
                let status = response.status().as_u16();
                (status, response.bytes().await.unwrap())
            }
        }))
        .await;
        let statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
        assert_eq!(statuses, [400, 422, 422]);
        for (_, answer) in &answers {
            assert!(answer.len() < 128 * 1024, "an answer of {} bytes", answer.len());
        }
    }
    let peak = peak_rss(&child.0);
    eprintln!("peak RSS after the amplification bodies: {} MiB", peak / MIB);
    assert!(peak < 300 * MIB, "peak RSS {} MiB", peak / MIB);
    assert!(upstream.received().is_empty());
}

#[tokio::test]
async fn many_distinct_tool_schemas_stay_within_the_schema_cache() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let cache = 8 * MIB;
    let (_dir, child, address) =
        serve_in_front_of(&upstream, &format!("[gate]\nschema_cache_bytes = {cache}\n"));
    let url = format!("http://{address}/v1/responses");
    // Each request declares its own schema of 2,000 empty branches: 6 KB of source that
    // compiles to about 480 KB. Weighed by source length, 300 of them would all fit the
    // cache and hold about 140 MiB.
    let branches = vec!["{}"; 2_000].join(",");
    let body = |salt: usize| {
        format!(
            r#"{{"model":"gpt-5","tools":[{{"type":"function","name":"wide","parameters":{{"title":"{salt}","anyOf":[{branches}]}}}}],
            "input":[{{"type":"function_call","call_id":"c","name":"wide","arguments":"{{}}"}},
            {{"type":"function_call_output","call_id":"c","output":"ok"}}]}}"#
        )
    };
    let client = reqwest::Client::new();
    let mut baseline = 0;
    for salt in 0..300 {
        let response = client.post(&url).body(body(salt)).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        response.bytes().await.unwrap();
        if salt == 20 {
            baseline = rss(&child.0);
        }
    }
    let grown = rss(&child.0).saturating_sub(baseline);
    eprintln!("RSS grew by {} MiB over 280 distinct schemas", grown / MIB);
    assert!(grown < 4 * cache, "RSS grew by {} MiB", grown / MIB);
}
