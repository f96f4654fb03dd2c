//! Property tests of the proxy's entry points (the gate's own are in `gate_props.rs`):
//!
//! - the body reader returns exactly the bytes sent whatever the chunking, or refuses a body
//!   over the cap, or reports a read error, whichever comes first;
//! - `lifecycle::handle` answers every request the way the gate judges its body, in the
//!   OpenAI error envelope, and never panics.
//!
//! The same entry points are fuzzed under `fuzz/` (`scripts/fuzz`).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Request};
use http_body_util::{BodyExt, Full, StreamBody};
use proptest::prelude::*;
use replaygate::config::Config;
use replaygate::gate::{Action, Gate, ProviderProfile, Target};
use replaygate::proxy::body::{read_body, BodyLimits};
use replaygate::proxy::buffer_budget::BufferBudget;
use replaygate::proxy::lifecycle::handle;
use replaygate::proxy::ProxyState;
use serde_json::{json, Value};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// How a body is sent: its bytes cut into frames, an optional read error after some frame,
/// and what its `Content-Length` says.
#[derive(Debug, Clone)]
struct Sent {
    bytes: Vec<u8>,
    cuts: Vec<usize>,
    error_after: Option<usize>,
    declared: Declared,
    max: usize,
}

#[derive(Debug, Clone)]
enum Declared {
    Absent,
    Exact,
    Value(u64),
    Garbage,
}

fn sent() -> impl Strategy<Value = Sent> {
    (
        prop::collection::vec(any::<u8>(), 0..600),
        prop::collection::vec(0usize..600, 0..8),
        prop::option::of(0usize..8),
        prop_oneof![
            Just(Declared::Absent),
            Just(Declared::Exact),
            any::<u64>().prop_map(Declared::Value),
            Just(Declared::Garbage),
        ],
        0usize..700,
    )
        .prop_map(|(bytes, mut cuts, error_after, declared, max)| {
            cuts.retain(|&c| c <= bytes.len());
            cuts.sort_unstable();
            Sent {
                bytes,
                cuts,
                error_after,
                declared,
                max,
            }
        })
}

impl Sent {
    fn frames(&self) -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        let mut start = 0;
        for &cut in self.cuts.iter().chain(std::iter::once(&self.bytes.len())) {
            frames.push(self.bytes[start..cut].to_vec());
            start = cut;
        }
        frames
    }

    fn declared_length(&self) -> Option<u64> {
        match self.declared {
            Declared::Absent | Declared::Garbage => None,
            Declared::Exact => Some(self.bytes.len() as u64),
            Declared::Value(length) => Some(length),
        }
    }

    /// The error code `read_body` must give, or `None` for the bytes themselves.
    fn expected_error(&self) -> Option<&'static str> {
        if self
            .declared_length()
            .is_some_and(|length| length > self.max as u64)
        {
            return Some("body_too_large");
        }
        let mut read = 0;
        for (index, frame) in self.frames().iter().enumerate() {
            read += frame.len();
            if read > self.max {
                return Some("body_too_large");
            }
            if self.error_after == Some(index) {
                return Some("body_unreadable");
            }
        }
        None
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_body_reader_returns_the_bytes_or_the_first_reason_to_stop(sent in sent()) {
        let mut headers = HeaderMap::new();
        match sent.declared {
            Declared::Absent => {}
            Declared::Garbage => {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("12abc"));
            }
            _ => {
                let length = sent.declared_length().unwrap().to_string();
                headers.insert(header::CONTENT_LENGTH, HeaderValue::try_from(length).unwrap());
            }
        }
        let mut frames: Vec<Result<http_body::Frame<Bytes>, std::io::Error>> = Vec::new();
        for (index, frame) in sent.frames().into_iter().enumerate() {
            frames.push(Ok(http_body::Frame::data(Bytes::from(frame))));
            if sent.error_after == Some(index) {
                frames.push(Err(std::io::Error::other("connection reset")));
            }
        }
        let body = StreamBody::new(futures_util::stream::iter(frames));
        let limits = BodyLimits { max_bytes: sent.max, read_timeout: Duration::from_secs(60) };
        let budget = BufferBudget::new(usize::MAX);
        let got = runtime().block_on(read_body(body, &headers, limits, &budget));
        match sent.expected_error() {
            None => prop_assert_eq!(got.unwrap().bytes.to_vec(), sent.bytes),
            Some(code) => {
                let error = got.unwrap_err();
                prop_assert_eq!(error.code(), code);
            }
        }
    }
}

const CONFIG: &str = r#"
default_provider = "openai"
[server]
max_body_bytes = 65536
[providers.openai]
base_url = "http://127.0.0.1:9/v1"
auth = { bearer_env = "PROPS_UNSET_KEY" }
[providers.bedrock]
base_url = "http://127.0.0.1:9/v1"
auth = { bearer_env = "PROPS_UNSET_KEY" }
[[routes]]
model = "openai.*"
provider = "bedrock"
"#;

/// One proxy state for every case: building its HTTP clients is the slow part.
fn state() -> Arc<ProxyState> {
    static STATE: OnceLock<Arc<ProxyState>> = OnceLock::new();
    STATE
        .get_or_init(|| {
            let config = Config::from_toml(CONFIG).unwrap();
            Arc::new(ProxyState::new(&config, &|_| None).unwrap())
        })
        .clone()
}

/// Mostly well-typed values, so the rules run; now and then one of the wrong type.
fn pick(good: Vec<Value>, odd: Value) -> impl Strategy<Value = Value> {
    prop_oneof![19 => prop::sample::select(good), 1 => Just(odd)]
}

/// An item built from the values the rules care about.
fn item() -> impl Strategy<Value = Value> {
    let kind = pick(
        vec![
            json!("message"),
            json!("function_call"),
            json!("function_call"),
            json!("function_call_output"),
            json!("openai:web_search_call"),
            json!("web_search_call"),
            json!("bedrock:guardrail"),
            json!("reasoning"),
        ],
        json!(5),
    );
    let call_id = pick(vec![json!("c1"), json!("c2"), json!("c1")], json!(7));
    let arguments = pick(
        vec![
            json!("{\"region\":\"apac\"}"),
            json!("{\"region\":\"mars\"}"),
            json!("{"),
            json!({"region": "apac"}),
        ],
        json!(null),
    );
    let status = pick(
        vec![json!("completed"), json!("completed"), json!("incomplete")],
        json!(null),
    );
    let name = pick(vec![json!("report"), json!("report"), json!("nope")], json!(1));
    let role = pick(
        vec![json!("user"), json!("assistant"), json!("tool")],
        json!(null),
    );
    let present = prop::collection::vec(any::<bool>(), 8);
    (kind, call_id, arguments, status, name, role, present).prop_map(
        |(kind, call_id, arguments, status, name, role, present)| {
            let mut item = serde_json::Map::new();
            let members = [
                ("type", kind),
                ("call_id", call_id),
                ("arguments", arguments),
                ("status", status),
                ("name", name),
                ("role", role),
                ("content", json!("hi")),
                ("tool_calls", json!([])),
            ];
            for ((key, value), keep) in members.into_iter().zip(present) {
                if keep || key == "type" {
                    item.insert(key.to_owned(), value);
                }
            }
            Value::Object(item)
        },
    )
}

/// A request body: usually a Responses body built from gate-relevant parts, sometimes noise.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let tools = pick(
        vec![
            json!(null),
            json!([{"type": "function", "name": "report", "parameters": {"type": "object", "required": ["region"], "properties": {"region": {"enum": ["apac", "emea"]}}}}]),
            json!([{"type": "function", "name": "report", "parameters": {"type": "object", "required": ["region"], "properties": {"region": {"enum": ["apac", "emea"]}}}}]),
            json!([{"type": "function", "name": "report", "parameters": {"$ref": "https://example.com/s.json"}}]),
            json!([{"type": "function", "name": "report"}]),
        ],
        json!("report"),
    );
    let model = prop::sample::select(vec![json!("gpt-5"), json!("openai.gpt-oss-120b"), json!(null)]);
    let input = prop_oneof![
        8 => prop::collection::vec(item(), 0..6).prop_map(Value::Array),
        1 => Just(json!("hi")),
        1 => Just(json!({"role": "user"})),
        1 => Just(json!(null)),
    ];
    let structured = (model, input, tools).prop_map(|(model, input, tools)| {
        let mut body = serde_json::Map::new();
        body.insert("model".into(), model);
        body.insert("input".into(), input);
        if !tools.is_null() {
            body.insert("tools".into(), tools);
        }
        serde_json::to_vec(&Value::Object(body)).unwrap()
    });
    prop_oneof![
        8 => structured,
        1 => prop::collection::vec(any::<u8>(), 0..64),
        1 => "[\\[\\]{}\":,a-z0-9 ]{0,48}".prop_map(String::into_bytes),
    ]
}

/// What the gate alone says of `body`: the answer the proxy must give (no provider has a key,
/// so an allowed body is answered 503 `provider_unconfigured`).
fn judged(body: &[u8]) -> (u16, String, Option<Value>) {
    let gate = Gate::default();
    let model = replaygate::gate::parse(body)
        .ok()
        .and_then(|r| r.model().map(str::to_owned));
    let provider = match model.as_deref() {
        Some(model) if model.starts_with("openai.") => ProviderProfile::own_namespace("bedrock"),
        _ => ProviderProfile::own_namespace("openai"),
    };
    match gate.check(body, &Target::provider(&provider)) {
        Err(error) => (400, error.code().to_owned(), None),
        Ok(verdict) if verdict.is_allowed() => (503, "provider_unconfigured".to_owned(), None),
        Ok(verdict) => {
            // The 422 lists only the `reject` violations; monitored ones would have gone on.
            let rejected: Vec<_> = verdict.with_action(Action::Reject).collect();
            (
                422,
                rejected[0].reason.as_str().to_owned(),
                Some(serde_json::to_value(&rejected).unwrap()),
            )
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_proxy_answers_as_the_gate_judges(body in body(), path in prop::sample::select(vec!["/v1/responses", "/responses", "/v1/responses/compact"])) {
        let request = Request::post(path)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.clone())))
            .unwrap();
        let runtime = runtime();
        let response = runtime.block_on(handle(state(), request));
        prop_assert!(response.headers().contains_key("x-replaygate-request-id"));
        let status = response.status().as_u16();
        let answer = runtime.block_on(response.into_body().collect()).unwrap().to_bytes();
        let envelope: Value = serde_json::from_slice(&answer).unwrap();
        let (want_status, want_code, want_violations) = judged(&body);
        prop_assert_eq!(status, want_status, "{}", envelope);
        prop_assert_eq!(envelope["error"]["code"].as_str(), Some(want_code.as_str()));
        if let Some(violations) = want_violations {
            prop_assert_eq!(&envelope["error"]["violations"], &violations);
        }
    }
}
