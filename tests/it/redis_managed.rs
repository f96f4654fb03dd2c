//! `replaygate serve` on a Redis as production runs it: TLS with a private CA and a client
//! certificate, an ACL user whose password comes from the environment. What a failed login or
//! an untrusted certificate looks like in the log, `/readyz` and `config check`: clear, and
//! never the password.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use replaygate::state::{RedisLogin, RedisStore, StateStore};
use serde_json::{json, Value};

use crate::support::cli::replaygate;
use crate::support::pki::TestCa;
use crate::support::redis_server::{RedisServer, ServerTls};
use crate::support::serve::Serve;
use crate::support::upstream::Upstream;

const PASSWORD: &str = "tls-acl-pass-7f3e9b21";
const PASSWORD_ENV: &str = "RG_TEST_REDIS_PASSWORD";
const ANSWER: &str = r#"{"id":"resp_managed_1","object":"response","status":"completed","output":[{"type":"function_call","id":"fc_managed_1","call_id":"call_1","name":"lookup","arguments":"{}","status":"completed"}]}"#;

/// The ACL user docs/operations.md#state-backends tells operators to make.
fn acl_user(password: &str) -> Vec<String> {
    let rules = "~replaygate:* +get +mget +set +ping +evalsha +eval +script|load +multi +exec +time +info";
    let mut args: Vec<String> = ["--user", "replaygate", "on"].map(String::from).to_vec();
    args.push(format!(">{password}"));
    args.extend(rules.split(' ').map(String::from));
    args
}

/// A TLS-only Redis asking for client certificates, with the ACL user; its CA and a client
/// certificate written to `dir` as `ca.pem`, `client.pem` and `client.key`.
fn managed_redis(dir: &Path) -> RedisServer {
    let ca = TestCa::new("replaygate test redis CA");
    let server = ca.issue(&["127.0.0.1"], dir, "server");
    let ca_file = ca.write(dir, "ca");
    ca.issue(&["replaygate"], dir, "client");
    let args = acl_user(PASSWORD);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    RedisServer::start_with(
        &args,
        Some(&ServerTls {
            cert: &server.cert,
            key: &server.key,
            ca: &ca_file,
            auth_clients: true,
        }),
    )
}

/// `dir/proxy.toml`: one provider at `upstream`, the admin listener, and `[state]` on the
/// Redis at `url` with the files of `dir` named relative to the file.
fn write_config(dir: &Path, upstream: &Upstream, url: &str) -> std::path::PathBuf {
    let path = dir.join("proxy.toml");
    std::fs::write(
        &path,
        format!(
            "default_provider = \"openai\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
             [state]\nbackend = \"redis\"\nurl = \"{url}\"\ntimeout = \"1s\"\n\
             tls_ca_file = \"ca.pem\"\ntls_cert_file = \"client.pem\"\ntls_key_file = \"client.key\"\n\
             username = \"replaygate\"\npassword_env = \"{PASSWORD_ENV}\"\n\
             [providers.openai]\nbase_url = \"{}\"\nauth = \"none\"\n",
            upstream.base_url()
        ),
    )
    .unwrap();
    path
}

/// `serve` with the password variable set to `password`: it, its admin address, and its
/// start line about the state backend (logged before the admin listener starts).
async fn serve(config: &Path, password: &str) -> (Serve, SocketAddr, String) {
    let mut command = Serve::command(config);
    command.env(PASSWORD_ENV, password);
    let mut serve = Serve::start(command).await;
    let state = serve.until_logged("state backend").await;
    let line = serve.until_logged("admin listening").await;
    let at = line.find("address=").expect("the admin address is logged") + 8;
    let admin = line[at..].split_whitespace().next().unwrap().parse().unwrap();
    (serve, admin, state)
}

async fn readyz(admin: SocketAddr) -> (u16, Value) {
    let response = reqwest::Client::new()
        .get(format!("http://{admin}/readyz"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    assert_eq!(response.headers()["content-type"], "application/json");
    (
        status,
        serde_json::from_slice(&response.bytes().await.unwrap()).unwrap(),
    )
}

async fn post(serve: &Serve, body: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("http://{}/v1/responses", serve.address))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// Every log line `serve` writes within `limit` from now.
async fn lines_for(serve: &mut Serve, limit: Duration) -> Vec<String> {
    let until = tokio::time::Instant::now() + limit;
    let mut lines = Vec::new();
    while let Some(left) = until.checked_duration_since(tokio::time::Instant::now()) {
        match serve.next_line(left).await {
            Some(line) => lines.push(line),
            None => break,
        }
    }
    lines
}

#[tokio::test]
async fn serve_records_in_a_redis_over_mutual_tls_as_an_acl_user() {
    let dir = tempfile::tempdir().unwrap();
    let redis = managed_redis(dir.path());
    let upstream = Upstream::json(200, ANSWER).await;
    let config = write_config(dir.path(), &upstream, &redis.url());
    let (serve, admin, state) = serve(&config, PASSWORD).await;
    assert!(state.contains("state backend answers"), "{state}");
    let (status, body) = readyz(admin).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"ready": true, "draining": false, "state": {"backend": "redis", "ok": true,
            "on_unavailable": "refuse", "maxmemory_policy": "noeviction", "may_evict": false}})
    );

    let (status, text) = post(&serve, r#"{"model":"gpt-5","input":"hi"}"#).await;
    assert_eq!(status, 200, "{text}");
    // The record is in that Redis, under the default prefix, for any replica to read.
    let login = RedisLogin {
        username: Some("replaygate".into()),
        password: Some(PASSWORD.into()),
        ca_pem: Some(std::fs::read(dir.path().join("ca.pem")).unwrap()),
        client_pem: Some((
            std::fs::read(dir.path().join("client.pem")).unwrap(),
            std::fs::read(dir.path().join("client.key")).unwrap(),
        )),
        sentinel_password: None,
    };
    let store = StateStore::Redis(
        RedisStore::connect_with(&redis.url(), &login, "replaygate", Duration::from_secs(2)).unwrap(),
    );
    let mut recorded = None;
    for _ in 0..50 {
        recorded = store.response("resp_managed_1").await.unwrap();
        if recorded.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        recorded.expect("the answer was recorded").owner.provider,
        "openai"
    );
    // A continuation that names it is looked up there and forwarded.
    let next = r#"{"model":"gpt-5","previous_response_id":"resp_managed_1","input":[{"type":"function_call_output","call_id":"call_1","output":"42"}]}"#;
    let (status, text) = post(&serve, next).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(upstream.received().len(), 2);
}

#[tokio::test]
async fn a_wrong_password_is_unavailable_and_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let redis = managed_redis(dir.path());
    let upstream = Upstream::json(200, ANSWER).await;
    let config = write_config(dir.path(), &upstream, &redis.url());
    let wrong = "wrong-pass-3c1d55aa";
    let (mut serve, admin, state) = serve(&config, wrong).await;
    assert!(state.contains("state backend does not answer"), "{state}");
    let mut lines = vec![state];
    assert!(
        lines[0].contains("Password authentication failed"),
        "{}",
        lines[0]
    );

    let (status, body) = readyz(admin).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["ready"], false);
    assert_eq!(body["state"]["backend"], "redis");
    assert_eq!(body["state"]["ok"], false);
    let error = body["state"]["error"].as_str().unwrap();
    assert!(error.contains("Password authentication failed"), "{error}");

    // A request that needs the ledger is refused as while Redis is down; the lookup is logged.
    let next = r#"{"model":"gpt-5","previous_response_id":"resp_managed_1","input":"next"}"#;
    let (status, text) = post(&serve, next).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("ledger_unavailable"), "{text}");
    lines.extend(lines_for(&mut serve, Duration::from_millis(500)).await);
    assert!(
        lines.iter().any(|line| line.contains("a ledger lookup failed")),
        "{lines:?}"
    );

    let check = Command::new(env!("CARGO_BIN_EXE_replaygate"))
        .args(["config", "check", "--config"])
        .arg(&config)
        .env(PASSWORD_ENV, wrong)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0));
    let printed =
        String::from_utf8_lossy(&check.stdout).into_owned() + &String::from_utf8_lossy(&check.stderr);
    assert!(printed.contains("state in redis at 127.0.0.1"), "{printed}");
    assert!(printed.contains("over TLS as replaygate"), "{printed}");

    for text in lines.iter().chain([&body.to_string(), &text, &printed]) {
        assert!(!text.contains(wrong) && !text.contains(PASSWORD), "{text}");
    }
}

#[tokio::test]
async fn an_untrusted_server_certificate_is_refused_and_logged() {
    let dir = tempfile::tempdir().unwrap();
    let redis = managed_redis(dir.path());
    // The proxy trusts another CA than the one that signed the server's certificate.
    TestCa::new("not the redis CA").write(dir.path(), "ca");
    let upstream = Upstream::json(200, ANSWER).await;
    let config = write_config(dir.path(), &upstream, &redis.url());
    let (serve, admin, line) = serve(&config, PASSWORD).await;
    assert!(line.contains("state backend does not answer"), "{line}");
    assert!(line.contains("invalid peer certificate: UnknownIssuer"), "{line}");
    let (status, body) = readyz(admin).await;
    assert_eq!(status, 503, "{body}");
    let error = body["state"]["error"].as_str().unwrap();
    assert!(
        error.contains("invalid peer certificate: UnknownIssuer"),
        "{error}"
    );
    // No plain connection is tried in its place: the answer that needs no lookup is forwarded,
    // and nothing is recorded.
    let (status, _) = post(&serve, r#"{"model":"gpt-5","input":"hi"}"#).await;
    assert_eq!(status, 200);
}

#[test]
fn a_password_in_the_url_or_a_missing_variable_stops_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    let provider = "[providers.openai]\nbase_url = \"http://127.0.0.1:9/v1\"\nauth = \"none\"\n";
    std::fs::write(
        &path,
        format!(
            "[state]\nbackend = \"redis\"\nurl = \"rediss://replaygate:{PASSWORD}@cache:6380\"\n{provider}"
        ),
    )
    .unwrap();
    let out = replaygate(&["config", "check", "--config", path.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(2));
    let printed = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(printed.contains("line 3, column 7"), "{printed}");
    assert!(printed.contains("password_env"), "{printed}");
    assert!(!printed.contains(PASSWORD), "{printed}");

    // A password variable that is not set: the config is fine, the start is not.
    std::fs::write(
        &path,
        format!(
            "[state]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:9\"\nusername = \"replaygate\"\n\
             password_env = \"{PASSWORD_ENV}\"\n{provider}"
        ),
    )
    .unwrap();
    let out = replaygate(&["config", "check", "--config", path.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_replaygate"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .env_remove(PASSWORD_ENV)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let printed = String::from_utf8_lossy(&out.stderr);
    assert!(
        printed.contains(&format!("password_env names {PASSWORD_ENV}, which is not set")),
        "{printed}"
    );
}
