//! A replaygate proxy on 127.0.0.1:0 built from a `proxy.toml` text and a fake environment.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use replaygate::admin::{AdminState, AdminThread};
use replaygate::config::Config;
use replaygate::proxy::state::Reloader;
use replaygate::proxy::{run, ProxyState, ServerSettings, SpendClock};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// A running proxy; dropping it shuts it down.
pub struct Proxy {
    pub addr: SocketAddr,
    /// Swaps another configuration into the running proxy.
    pub reloader: Reloader,
    stop: Option<oneshot::Sender<()>>,
    pub task: Option<tokio::task::JoinHandle<()>>,
    /// What the admin listener reports on; it is started by [`Proxy::admin`].
    pub admin_state: AdminState,
    admin: Option<AdminThread>,
}

impl Proxy {
    /// Starts a proxy from configuration text, with `env` as its only environment.
    pub async fn start(config: &str, env: &[(&str, &str)]) -> Proxy {
        let config = Config::from_toml(config).unwrap_or_else(|e| panic!("test config: {e}"));
        Proxy::start_with(&config, env).await
    }

    /// Starts a proxy from a loaded configuration, with `env` as its only environment.
    pub async fn start_with(config: &Config, env: &[(&str, &str)]) -> Proxy {
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let lookup = move |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let state = ProxyState::new(config, &lookup).unwrap();
        Proxy::start_state(config, state).await
    }

    /// Starts a proxy from configuration text whose budgets read their windows from `clock`.
    pub async fn start_clocked(config: &str, clock: SpendClock) -> Proxy {
        let config = Config::from_toml(config).unwrap_or_else(|e| panic!("test config: {e}"));
        let state = ProxyState::new(&config, &|_| None).unwrap().with_clock(clock);
        Proxy::start_state(&config, state).await
    }

    /// Serves `state` (built from `config`).
    async fn start_state(config: &Config, state: ProxyState) -> Proxy {
        let reloader = state.reloader();
        let admin_state = AdminState::of(&state);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let settings = ServerSettings {
            header_read_timeout: config.server.header_read_timeout,
            shutdown_grace: config.server.shutdown_grace.min(Duration::from_secs(5)),
        };
        let task = tokio::spawn(run(listener, Arc::new(state), settings, async move {
            let _ = stopped.await;
        }));
        Proxy {
            addr,
            reloader,
            stop: Some(stop),
            task: Some(task),
            admin_state,
            admin: None,
        }
    }

    /// The address of the proxy's admin listener, started on 127.0.0.1:0 on first use, on a
    /// thread of its own as `serve` runs it (the configuration's `[admin] listen` is not bound,
    /// so tests never share a port). It stops when the proxy shuts down.
    pub async fn admin(&mut self) -> SocketAddr {
        if let Some(admin) = &self.admin {
            return admin.address();
        }
        let admin = AdminThread::start("127.0.0.1:0".parse().unwrap(), self.admin_state.clone()).unwrap();
        let address = admin.address();
        self.admin = Some(admin);
        address
    }

    /// `http://127.0.0.1:PORT` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// POSTs `body` as JSON to `path` and returns the answer's status and JSON body, asserting
    /// the answer is labelled JSON (replaygate's envelope, or the fake upstream's answer).
    pub async fn post_json(&self, path: &str, body: impl Into<reqwest::Body>) -> (u16, serde_json::Value) {
        let response = reqwest::Client::new()
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        assert_eq!(response.headers()["content-type"], "application/json");
        let body = response.bytes().await.unwrap();
        (status, serde_json::from_slice(&body).unwrap())
    }

    /// Begins graceful shutdown and waits for the server to return.
    pub async fn shutdown(mut self) {
        self.begin_shutdown();
        assert!(
            self.stopped_within(Duration::from_secs(10)).await,
            "run() did not return"
        );
    }

    /// Completes the server's shutdown future, without waiting for `run()` to return.
    pub fn begin_shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(admin) = self.admin.take() {
            admin.stop();
        }
    }

    /// Waits up to `limit` for `run()` to return; whether it did.
    pub async fn stopped_within(&mut self, limit: Duration) -> bool {
        let Some(task) = self.task.as_mut() else {
            return true;
        };
        match tokio::time::timeout(limit, task).await {
            Ok(result) => {
                result.expect("run() panicked");
                self.task = None;
                true
            }
            Err(_) => false,
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.begin_shutdown();
    }
}

/// A config with one provider `openai` at `base_url` and the given auth, plus optional extra text.
pub fn one_provider(base_url: &str, auth: &str, extra: &str) -> String {
    format!(
        r#"default_provider = "openai"
[providers.openai]
base_url = "{base_url}"
auth = {auth}
{extra}
"#
    )
}

/// Sends `request` as raw bytes (so no client library normalizes it) and returns the whole
/// answer as text. The request should carry `Connection: close`.
pub async fn raw_request(addr: SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the proxy answered and closed")
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// The repository's `proxy.toml` text with its state kept in memory, so tests that start it do
/// not share the embedded store in the working directory (or leave one behind).
pub fn with_state_in_memory(text: &str) -> String {
    let embedded = "backend = \"embedded\"\n";
    assert!(text.contains(embedded), "proxy.toml names its state backend");
    text.replace(embedded, "backend = \"memory\"\n")
        .replace("\npath = \"replaygate-state\"\n", "\n")
}
