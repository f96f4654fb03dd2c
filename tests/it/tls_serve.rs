//! Real TLS clients against the listener's TLS (docs/operations.md#tls): the OpenAI Python SDK
//! with its own CA bundle over HTTP/1.1 and HTTP/2, the Node SDK with `NODE_EXTRA_CA_CERTS`, and curl over HTTP/2 with a
//! client certificate against `replaygate serve`; handshake failures logged once per reason and
//! peer; SIGHUP and `watch_config` reloading the certificate; `replaygate config check` reading
//! the files.
//!
//! Needs `python3` with `tests/e2e/requirements.txt`, `node` with `npm ci` run in
//! `tests/e2e/node` (`scripts/test` installs both), and `curl` built with HTTP/2.

#![cfg(unix)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::tls_listener::Pki;
use crate::support::pki::Issued;
use crate::support::proxy::Proxy;
use crate::support::scripted_provider::{self, CallIds};
use crate::support::serve::Serve;
use crate::support::upstream::Upstream;

const E2E_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e");

/// A configuration in front of `upstream` with the `[server]` table `server`.
fn config(upstream: &Upstream, server: &str) -> String {
    format!(
        "{server}\ndefault_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\nauth = \"passthrough\"\n",
        upstream.base_url()
    )
}

/// Runs `program` with `args` (and `env`) for at most 90 s and asserts it succeeded and
/// printed `ok`.
async fn run_client(program: &str, args: &[&str], env: &[(&str, &Path)], ok: &str, missing: &str) {
    let mut command = tokio::process::Command::new(program);
    command.args(args).kill_on_drop(true);
    for (name, value) in env {
        command.env(name, value);
    }
    let output = tokio::time::timeout(Duration::from_secs(90), command.output())
        .await
        .unwrap_or_else(|_| panic!("{args:?} did not finish within 90 s"))
        .unwrap_or_else(|e| panic!("cannot run `{program}` ({e}): {missing}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains(ok),
        "{args:?} failed ({}):\n{}\n{stdout}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_trusts_the_proxy_by_its_own_ca_bundle() {
    let pki = Pki::new();
    let upstream = scripted_provider::start(CallIds::Fresh).await;
    let proxy = Proxy::start(&config(&upstream, &pki.server_keys("")), &[]).await;
    let base_url = format!("https://localhost:{}/v1", proxy.addr.port());
    let script = format!("{E2E_DIR}/openai_sdk_tls.py");
    let ca = pki.ca_file.display().to_string();
    run_client(
        "python3",
        &[&script, &base_url, &ca],
        &[],
        "openai sdk tls: ok",
        "install python3 and tests/e2e/requirements.txt (scripts/test does)",
    )
    .await;
    // Plain and streamed went on, over HTTP/1.1 and HTTP/2; the gated ones and the untrusting
    // client's did not.
    assert_eq!(upstream.received().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_node_sdk_trusts_the_proxy_by_node_extra_ca_certs() {
    let node_dir = format!("{E2E_DIR}/node");
    assert!(
        Path::new(&node_dir).join("node_modules/openai").is_dir(),
        "the OpenAI Node SDK is not installed: run `npm ci` in tests/e2e/node (scripts/test does)"
    );
    let pki = Pki::new();
    let upstream = scripted_provider::start(CallIds::Fresh).await;
    let proxy = Proxy::start(&config(&upstream, &pki.server_keys("")), &[]).await;
    let base_url = format!("https://localhost:{}/v1", proxy.addr.port());
    let sent = tempfile::NamedTempFile::new().unwrap();
    let script = format!("{node_dir}/openai_sdk_tls.mjs");
    let sent_path = sent.path().display().to_string();
    run_client(
        "node",
        &[&script, &base_url, &sent_path],
        &[("NODE_EXTRA_CA_CERTS", &pki.ca_file)],
        "openai node sdk tls: ok",
        "install Node.js >= 18 and run `npm ci` in tests/e2e/node (scripts/test does)",
    )
    .await;
    assert_eq!(upstream.received().len(), 2);
}

/// `curl --http2` to `url` trusting `ca`, with `client` as its certificate if given, posting
/// `body`; curl's exit status, and its output with the HTTP version and status written last.
fn curl(url: &str, ca: &Path, client: Option<&Issued>, body: &str) -> (i32, String) {
    let mut command = Command::new("curl");
    command
        .args([
            "--silent",
            "--show-error",
            "--http2",
            "--max-time",
            "20",
            "--cacert",
        ])
        .arg(ca)
        .args([
            "--noproxy",
            "*",
            "-H",
            "content-type: application/json",
            "--data",
            body,
        ])
        .args(["--write-out", "\n%{http_version} %{http_code}"]);
    if let Some(client) = client {
        command
            .arg("--cert")
            .arg(&client.cert)
            .arg("--key")
            .arg(&client.key);
    }
    let output = command.arg(url).output().expect("curl is installed");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// Waits (boundedly) until `check` holds, polling.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{what} never happened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_over_tls_with_curl_client_certificates_failures_logged_once_and_sighup() {
    let pki = Pki::new();
    let upstream = scripted_provider::start(CallIds::Fresh).await;
    let server = pki.server_keys(&format!("workers = 2\n{}", pki.client_ca_keys("optional")));
    let config_file = pki.dir.path().join("proxy.toml");
    std::fs::write(&config_file, config(&upstream, &server)).unwrap();
    let mut serve = Serve::start(Serve::command(&config_file)).await;
    assert!(serve.listening.contains("tls=true"), "{}", serve.listening);
    let port = serve.address.rsplit(':').next().unwrap().to_owned();
    let url = format!("https://127.0.0.1:{port}/v1/responses");

    // HTTP/2 with and without a client certificate, streamed and not.
    let plain = r#"{"model":"gpt-5","input":"Say hello."}"#;
    let streamed = r#"{"model":"gpt-5","input":"Say hello.","stream":true}"#;
    for client in [None, Some(&pki.client)] {
        let (code, out) = curl(&url, &pki.ca_file, client, plain);
        assert_eq!(code, 0, "{out}");
        assert!(out.ends_with("\n2 200"), "{out}");
        let (code, out) = curl(&url, &pki.ca_file, client, streamed);
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("event: response.completed"), "{out}");
        assert!(out.ends_with("\n2 200"), "{out}");
    }

    // An expired certificate fails the handshake, twice; the log says why once.
    let expired = pki
        .client_ca
        .issue_expired(&["client.example"], pki.dir.path(), "expired");
    for _ in 0..2 {
        let (code, out) = curl(&url, &pki.ca_file, Some(&expired), plain);
        assert_ne!(code, 0, "served with an expired certificate: {out}");
    }
    let line = serve.until_logged("client certificate expired").await;
    assert!(line.contains("127.0.0.1"), "{line}");

    // A rotated certificate, read on SIGHUP: new handshakes get it.
    let rotated_ca = crate::support::pki::TestCa::new("rotated CA");
    let rotated_ca_file = rotated_ca.write(pki.dir.path(), "rotated-ca");
    let rotated = rotated_ca.issue(&["localhost", "127.0.0.1"], pki.dir.path(), "rotated");
    std::fs::copy(&rotated.cert, &pki.server.cert).unwrap();
    std::fs::copy(&rotated.key, &pki.server.key).unwrap();
    serve.signal("-HUP");
    let reloaded = serve.until_logged("configuration reloaded").await;
    assert!(!reloaded.contains("client certificate expired"));
    let (code, out) = curl(&url, &rotated_ca_file, None, plain);
    assert_eq!(code, 0, "the rotated certificate is not served: {out}");

    // A key file that does not load: logged with its name, the rotated certificate stays.
    std::fs::write(
        &pki.server.key,
        b"-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    serve.signal("-HUP");
    let failed = serve.until_logged("configuration not reloaded").await;
    assert!(failed.contains(&pki.server.key.display().to_string()), "{failed}");
    assert!(!failed.contains("not a key"), "{failed}");
    let (code, out) = curl(&url, &rotated_ca_file, None, plain);
    assert_eq!(code, 0, "{out}");

    // Only one line for the expired certificate, though it failed twice.
    let mut expired_lines = 1;
    while let Some(line) = serve.next_line(Duration::from_millis(200)).await {
        expired_lines += usize::from(line.contains("client certificate expired"));
    }
    assert_eq!(expired_lines, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_watch_config_a_rotated_certificate_is_served_without_a_signal() {
    let pki = Pki::new();
    let upstream = Upstream::json(200, crate::support::upstream::RESPONSE_JSON).await;
    let config_file = pki.dir.path().join("proxy.toml");
    std::fs::write(
        &config_file,
        config(&upstream, &pki.server_keys("watch_config = true")),
    )
    .unwrap();
    let mut serve = Serve::start(Serve::command(&config_file)).await;
    let port = serve.address.rsplit(':').next().unwrap().to_owned();
    let url = format!("https://127.0.0.1:{port}/v1/responses");
    let body = r#"{"model":"gpt-5","input":"hi"}"#;
    assert_eq!(curl(&url, &pki.ca_file, None, body).0, 0);

    let rotated_ca = crate::support::pki::TestCa::new("rotated CA");
    let rotated_ca_file = rotated_ca.write(pki.dir.path(), "rotated-ca");
    // Issued beside the served files, then moved over them as a rotation tool would.
    let rotated = rotated_ca.issue(&["127.0.0.1"], pki.dir.path(), "rotated");
    std::fs::rename(&rotated.key, &pki.server.key).unwrap();
    std::fs::rename(&rotated.cert, &pki.server.cert).unwrap();
    serve.until_logged("configuration reloaded").await;
    until("the rotated certificate served", || {
        curl(&url, &rotated_ca_file, None, body).0 == 0
    })
    .await;
}

#[test]
fn config_check_reads_the_tls_files_and_prints_the_expiry() {
    let pki = Pki::new();
    let check = |server: String| {
        let file = pki.dir.path().join("check.toml");
        std::fs::write(
            &file,
            format!("{server}\n[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\n"),
        )
        .unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_replaygate"))
            .args(["config", "check", "--config"])
            .arg(&file)
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, out, err) = check(pki.server_keys(&pki.client_ca_keys("required")));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("expires "), "{out}");
    assert!(out.contains("client certificates required"), "{out}");

    let swap = |cert: &Path, key: &Path| {
        format!(
            "[server]\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
            cert.display(),
            key.display()
        )
    };
    // A key that is not the certificate's.
    let (code, _, err) = check(swap(&pki.server.cert, &pki.client.key));
    assert_eq!(code, Some(2));
    assert!(
        err.contains("does not match") && err.contains(&*pki.client.key.to_string_lossy()),
        "{err}"
    );
    // A certificate in the key file: a file of another type.
    let (code, _, err) = check(swap(&pki.server.cert, &pki.server.cert));
    assert_eq!(code, Some(2));
    assert!(err.contains("no usable PEM private key"), "{err}");
    // An expired certificate, with its date.
    let expired = pki
        .ca
        .issue_expired(&["localhost"], pki.dir.path(), "expired-server");
    let (code, _, err) = check(swap(&expired.cert, &expired.key));
    assert_eq!(code, Some(2));
    assert!(err.contains("expired at 2020-01-01"), "{err}");
    // A key file others may read: served, with a warning.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pki.server.key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, out, _) = check(pki.server_keys(""));
    assert_eq!(code, Some(0));
    assert!(out.contains("readable by every user"), "{out}");
    // A key file that cannot be read.
    let (code, _, err) = check(swap(&pki.server.cert, &pki.dir.path().join("absent.key")));
    assert_eq!(code, Some(2));
    assert!(err.contains("absent.key: cannot be read"), "{err}");
}

/// This process's soft limit of open files, from `/proc/self/limits`.
fn open_files_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|line| line.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_stalled_handshakes_hold_bounded_memory_and_end_at_the_header_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Ten thousand, or as many as the open-files limit leaves room for beside the other tests
    // (this process holds one end of each, the proxy the other).
    let stalled_max = open_files_limit().map_or(10_000, |limit| limit.saturating_sub(4096));
    let wanted: usize = 10_000.min(stalled_max).max(500);
    let pki = Pki::new();
    let upstream = Upstream::json(200, crate::support::upstream::RESPONSE_JSON).await;
    let config_file = pki.dir.path().join("proxy.toml");
    let server = pki.server_keys("header_read_timeout_ms = 3000\nworkers = 2");
    std::fs::write(&config_file, config(&upstream, &server)).unwrap();
    let serve = Serve::start(Serve::command(&config_file)).await;
    let pid = serve.child.id().to_string();
    let url = format!("https://{}/v1/models", serve.address);
    let client = || {
        reqwest::Client::builder()
            .no_proxy()
            .tls_certs_only([reqwest::Certificate::from_pem(&std::fs::read(&pki.ca_file).unwrap()).unwrap()])
            .build()
            .unwrap()
    };
    assert_eq!(client().get(&url).send().await.unwrap().status(), 200);
    let before = crate::support::memory::status_bytes(&pid, "VmRSS");

    // Each sends the header of a ClientHello record and nothing more.
    let started = Instant::now();
    let mut stalled = Vec::with_capacity(wanted);
    for _ in 0..wanted {
        let Ok(mut stream) = tokio::net::TcpStream::connect(&serve.address).await else {
            break;
        };
        if stream.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]).await.is_ok() {
            stalled.push(stream);
        }
    }
    assert!(
        stalled.len() >= wanted * 9 / 10,
        "only {} connected",
        stalled.len()
    );
    let opened = started.elapsed();
    let during = crate::support::memory::status_bytes(&pid, "VmRSS");

    // All of them are closed, at the header timeout (counted from each one's accept).
    for mut stream in stalled {
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut rest))
            .await
            .expect("a stalled handshake was not closed")
            .ok();
    }
    let closed = started.elapsed();
    assert!(
        closed < opened + Duration::from_secs(10),
        "closed after {closed:?} (opened in {opened:?})"
    );
    // And the proxy serves as before.
    assert_eq!(client().get(&url).send().await.unwrap().status(), 200);
    if let (Some(before), Some(during)) = (before, during) {
        let grown = during.saturating_sub(before);
        eprintln!(
            "resident memory with {wanted} stalled handshakes: +{} MiB",
            grown >> 20
        );
        assert!(grown < 128 << 20, "grew by {} MiB", grown >> 20);
    }
}
