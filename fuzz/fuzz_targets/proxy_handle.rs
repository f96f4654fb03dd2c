//! The proxy's entry point, `lifecycle::handle`, on arbitrary requests: route, read, gate and
//! answer. The providers have no key, so nothing is ever sent anywhere, and every answer is one
//! of the proxy's own, in the OpenAI error envelope.
//!
//! Input layout (so seeds can be written by hand): one byte choosing the method, the path, a
//! newline, `name: value` header lines, a blank line, then the body.

#![no_main]

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use libfuzzer_sys::fuzz_target;
use replaygate::config::Config;
use replaygate::proxy::lifecycle::handle;
use replaygate::proxy::ProxyState;

const CONFIG: &str = r#"
default_provider = "openai"
[server]
max_body_bytes = 65536
[providers.openai]
base_url = "http://127.0.0.1:9/v1"
auth = { bearer_env = "FUZZ_UNSET_KEY" }
[providers.bedrock]
base_url = "http://127.0.0.1:9/v1"
auth = { bearer_env = "FUZZ_UNSET_KEY" }
[[routes]]
model = "openai.*"
provider = "bedrock"
"#;

fn state() -> Arc<ProxyState> {
    static STATE: OnceLock<Arc<ProxyState>> = OnceLock::new();
    STATE
        .get_or_init(|| {
            let config = Config::from_toml(CONFIG).unwrap();
            Arc::new(ProxyState::new(&config, &|_| None).unwrap())
        })
        .clone()
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    })
}

/// Builds the request the input describes, if it is a valid one.
fn request(data: &[u8]) -> Option<Request<Full<Bytes>>> {
    let (&method, rest) = data.split_first()?;
    let method = ["POST", "GET", "PUT", "DELETE", "PATCH", "OPTIONS"][usize::from(method) % 6];
    let split = rest.windows(2).position(|w| w == b"\n\n").unwrap_or(rest.len());
    let head = std::str::from_utf8(&rest[..split]).ok()?;
    let body = rest.get(split + 2..).unwrap_or_default();
    let mut lines = head.split('\n');
    let mut request = Request::builder().method(method).uri(lines.next()?);
    for line in lines {
        let (name, value) = line.split_once(':')?;
        request = request.header(name.trim(), value.trim());
    }
    request.body(Full::new(Bytes::copy_from_slice(body))).ok()
}

fuzz_target!(|data: &[u8]| {
    let Some(request) = request(data) else { return };
    let target = request.uri().to_string();
    let response = runtime().block_on(handle(state(), request));
    let status = response.status().as_u16();
    assert!(
        [400, 404, 405, 413, 415, 422, 503].contains(&status),
        "status {status} for {target}"
    );
    assert!(response.headers().contains_key("x-replaygate-request-id"));
    let body = runtime()
        .block_on(response.into_body().collect())
        .unwrap()
        .to_bytes();
    let envelope: serde_json::Value = serde_json::from_slice(&body).expect("the envelope is JSON");
    assert!(envelope["error"]["code"].is_string(), "{envelope}");
    assert!(envelope["error"]["type"].is_string(), "{envelope}");
});
