//! Reloading teams and policy while serving (docs/teams.md#teams-and-policy): a new configuration
//! is in force for new requests, a bad one changes nothing, and requests already started finish
//! under the
//! configuration they started with.

use std::time::Duration;

use bytes::Bytes;
use replaygate::config::Config;
use replaygate::proxy::state::Reloader;
use replaygate::reload::ConfigReload;

use super::teams::{bearer, config, key_entry, post, two_teams, PAY_KEY, SEARCH_KEY};
use crate::support::proxy::Proxy;
use crate::support::upstream::{sse_response, Upstream};

const HELLO: &str = r#"{"model":"gpt-5","input":"hi"}"#;

fn env(name: &str) -> Option<String> {
    (name == "UP_KEY").then(|| "sk-up".to_owned())
}

fn reload(reloader: &Reloader, text: &str) {
    let config = Config::from_toml(text).unwrap();
    reloader.reload(&config, &env).unwrap();
}

#[tokio::test]
async fn a_reload_puts_new_teams_in_force_for_new_requests() {
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let only_payments = format!("[teams.payments]\nkeys = [\"{}\"]\n", key_entry(PAY_KEY));
    let proxy = Proxy::start(&config(&upstream, &only_payments), &[("UP_KEY", "sk-up")]).await;
    let search = bearer(SEARCH_KEY);
    let (status, _, _) = post(&proxy, "/v1/responses", &[("authorization", &search)], HELLO).await;
    assert_eq!(status, 401);

    reload(
        &proxy.reloader,
        &config(&upstream, &two_teams("models = [\"o3\"]")),
    );
    let (status, _, _) = post(&proxy, "/v1/responses", &[("authorization", &search)], HELLO).await;
    assert_eq!(status, 200);
    let pay = bearer(PAY_KEY);
    let (status, _, answer) = post(&proxy, "/v1/responses", &[("authorization", &pay)], HELLO).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (403, Some("model_not_allowed"))
    );
}

#[tokio::test]
async fn a_file_that_does_not_load_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let path = dir.path().join("proxy.toml");
    let good = config(&upstream, &two_teams(""));
    std::fs::write(&path, &good).unwrap();
    let loaded = Config::load(&path).unwrap();
    let proxy = Proxy::start_with(&loaded, &[("UP_KEY", "sk-up")]).await;
    let mut reloads = ConfigReload::new(Some(path.clone()), proxy.reloader.clone(), loaded);
    let pay = bearer(PAY_KEY);

    // A TOML error, a team naming an unknown provider, a pinned file that is missing.
    for bad in [
        format!("{good}\n[teams.payments\n"),
        good.replace("[teams.search]", "[teams.search]\nproviders = [\"nope\"]"),
        good.replace(
            "[teams.search]",
            "[teams.search]\npinned_tools = \"missing.json\"",
        ),
    ] {
        std::fs::write(&path, &bad).unwrap();
        assert!(!reloads.reload("test"), "{bad}");
        let (status, _, _) = post(&proxy, "/v1/responses", &[("authorization", &pay)], HELLO).await;
        assert_eq!(status, 200, "the old teams are still in force after {bad}");
    }
    std::fs::write(&path, config(&upstream, "")).unwrap();
    assert!(reloads.reload("test"));
    let (status, _, _) = post(&proxy, "/v1/responses", &[], HELLO).await;
    assert_eq!(status, 200, "without teams no key is needed");
}

#[tokio::test]
async fn a_stream_started_before_a_reload_finishes_though_its_team_and_provider_are_replaced() {
    let (feeds_tx, mut feeds) = tokio::sync::mpsc::channel(4);
    let upstream = Upstream::start(move |_| {
        let feeds_tx = feeds_tx.clone();
        async move {
            let (feed, response) = sse_response();
            feeds_tx.send(feed).await.unwrap();
            response
        }
    })
    .await;
    let proxy = Proxy::start(&config(&upstream, &two_teams("")), &[("UP_KEY", "sk-up")]).await;
    let response = reqwest::Client::new()
        .post(proxy.url("/v1/responses"))
        .header("authorization", bearer(PAY_KEY))
        .body(r#"{"model":"gpt-5","input":"hi","stream":true}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let feed = tokio::time::timeout(Duration::from_secs(5), feeds.recv())
        .await
        .unwrap()
        .unwrap();

    // The team is removed while its stream is open.
    let only_search = format!("[teams.search]\nkeys = [\"{}\"]\n", key_entry(SEARCH_KEY));
    // The provider's settings change too, so it is built anew and the stream's old client
    // (and pool) is dropped while the stream runs.
    let changed_provider = config(&upstream, &only_search).replacen(
        "auth = { bearer_env = \"UP_KEY\" }",
        "auth = { bearer_env = \"UP_KEY\" }\nconnect_timeout_ms = 4321",
        1,
    );
    assert_ne!(changed_provider, config(&upstream, &only_search));
    reload(&proxy.reloader, &changed_provider);
    let (status, _, _) = post(
        &proxy,
        "/v1/responses",
        &[("authorization", &bearer(PAY_KEY))],
        HELLO,
    )
    .await;
    assert_eq!(status, 401, "new requests meet the new teams");

    feed.send(Bytes::from_static(b"data: one\n\n")).await.unwrap();
    feed.send(Bytes::from_static(b"data: two\n\n")).await.unwrap();
    drop(feed);
    let text = tokio::time::timeout(Duration::from_secs(5), response.text())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(text, "data: one\n\ndata: two\n\n");
}

#[tokio::test]
async fn a_request_whose_body_arrives_across_a_reload_is_judged_under_the_configuration_it_started_with() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let proxy = Proxy::start(&config(&upstream, &two_teams("")), &[("UP_KEY", "sk-up")]).await;
    let body = r#"{"model":"gpt-5","input":"hi"}"#;
    let head = format!(
        "POST /v1/responses HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {PAY_KEY}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body.as_bytes()[..10]).await.unwrap();
    // Let the proxy take the head and start reading the body.
    tokio::time::sleep(Duration::from_millis(100)).await;

    // The team may no longer use the model.
    reload(
        &proxy.reloader,
        &config(&upstream, &two_teams("models = [\"o3\"]")),
    );
    stream.write_all(&body.as_bytes()[10..]).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(upstream.received().len(), 1);
    // The next request meets the new configuration.
    let (status, _, _) = post(
        &proxy,
        "/v1/responses",
        &[("authorization", &bearer(PAY_KEY))],
        HELLO,
    )
    .await;
    assert_eq!(status, 403);
}
