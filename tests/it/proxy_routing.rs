//! Routing (docs/routing.md#routing): model globs, provider prefixes, the default, compact, other
//! paths.

use crate::support;

use support::proxy::{raw_request, Proxy};
use support::upstream::{Upstream, RESPONSE_JSON};

struct Two {
    openai: Upstream,
    bedrock: Upstream,
    proxy: Proxy,
}

/// Two providers: `openai` (the default, `gpt-*`) and `bedrock` (`openai.gpt-oss-*`).
async fn two_providers() -> Two {
    let openai = Upstream::json(200, RESPONSE_JSON).await;
    let bedrock = Upstream::json(200, RESPONSE_JSON).await;
    let config = format!(
        r#"default_provider = "openai"

[providers.openai]
base_url = "{}"

[providers.bedrock]
base_url = "{}"

[[routes]]
model = "openai.gpt-oss-*"
provider = "bedrock"

[[routes]]
model = "gpt-*"
provider = "openai"
"#,
        openai.base_url(),
        bedrock.base_url().replace("/v1", "/openai/v1")
    );
    let proxy = Proxy::start(&config, &[]).await;
    Two {
        openai,
        bedrock,
        proxy,
    }
}

async fn send(proxy: &Proxy, method: &str, path: &str, body: &str) -> u16 {
    reqwest::Client::new()
        .request(method.parse().unwrap(), proxy.url(path))
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

fn targets(upstream: &Upstream) -> Vec<String> {
    upstream.received().into_iter().map(|r| r.target).collect()
}

#[tokio::test]
async fn the_model_chooses_the_provider_first_match_wins() {
    let t = two_providers().await;
    assert_eq!(
        send(
            &t.proxy,
            "POST",
            "/v1/responses",
            r#"{"model":"openai.gpt-oss-120b","input":"hi"}"#
        )
        .await,
        200
    );
    assert_eq!(
        send(
            &t.proxy,
            "POST",
            "/v1/responses",
            r#"{"model":"gpt-5","input":"hi"}"#
        )
        .await,
        200
    );
    assert_eq!(targets(&t.bedrock), ["/openai/v1/responses"]);
    assert_eq!(targets(&t.openai), ["/v1/responses"]);
}

#[tokio::test]
async fn an_unmatched_model_goes_to_the_default_provider() {
    let t = two_providers().await;
    assert_eq!(
        send(
            &t.proxy,
            "POST",
            "/v1/responses",
            r#"{"model":"some-local-model","input":"hi"}"#
        )
        .await,
        200
    );
    assert_eq!(
        send(&t.proxy, "POST", "/v1/responses", r#"{"input":"no model"}"#).await,
        200
    );
    assert_eq!(targets(&t.openai).len(), 2);
    assert!(t.bedrock.received().is_empty());
}

#[tokio::test]
async fn a_provider_prefix_takes_a_model_that_no_route_matches() {
    let t = two_providers().await;
    assert_eq!(
        send(
            &t.proxy,
            "POST",
            "/bedrock/v1/responses",
            r#"{"model":"local-model","input":"hi"}"#
        )
        .await,
        200
    );
    assert_eq!(targets(&t.bedrock), ["/openai/v1/responses"]);
    assert!(t.openai.received().is_empty());
}

#[tokio::test]
async fn a_provider_prefix_that_the_models_routes_do_not_name_is_refused() {
    let t = two_providers().await;
    assert_eq!(
        send(
            &t.proxy,
            "POST",
            "/bedrock/v1/responses",
            r#"{"model":"gpt-5","input":"hi"}"#
        )
        .await,
        400
    );
    let (_, body) = t
        .proxy
        .post_json("/bedrock/v1/responses", r#"{"model":"gpt-5","input":"hi"}"#)
        .await;
    assert_eq!(body["error"]["code"], "route_conflict");
    assert!(t.openai.received().is_empty() && t.bedrock.received().is_empty());
}

#[tokio::test]
async fn the_path_without_v1_is_served_too() {
    let t = two_providers().await;
    assert_eq!(
        send(
            &t.proxy,
            "POST",
            "/responses",
            r#"{"model":"gpt-5","input":"hi"}"#
        )
        .await,
        200
    );
    assert_eq!(targets(&t.openai), ["/v1/responses"]);
}

#[tokio::test]
async fn compact_is_gated_like_responses() {
    let t = two_providers().await;
    let foreign =
        r#"{"model":"openai.gpt-oss-120b","input":[{"type":"openai:web_search_call","id":"ws_1"}]}"#;
    assert_eq!(
        send(&t.proxy, "POST", "/v1/responses/compact", foreign).await,
        422
    );
    let fine = r#"{"model":"gpt-5","input":[{"type":"openai:web_search_call","id":"ws_1"}]}"#;
    assert_eq!(send(&t.proxy, "POST", "/v1/responses/compact", fine).await, 200);
    assert_eq!(targets(&t.openai), ["/v1/responses/compact"]);
    assert!(t.bedrock.received().is_empty());
}

/// A body whose only item is OpenAI's, so `bedrock` must refuse it: in `input` or in `items`.
const FOREIGN_INPUT: &str =
    r#"{"model":"openai.gpt-oss-120b","input":[{"type":"openai:web_search_call","id":"ws_1"}]}"#;
const FOREIGN_ITEMS: &str = r#"{"items":[{"type":"openai:web_search_call","id":"ws_1"}]}"#;

#[tokio::test]
async fn input_tokens_is_gated_like_responses() {
    let t = two_providers().await;
    for path in ["/v1/responses/input_tokens", "/bedrock/v1/responses/input_tokens"] {
        assert_eq!(send(&t.proxy, "POST", path, FOREIGN_INPUT).await, 422, "{path}");
    }
    assert!(t.bedrock.received().is_empty());
    let fine = r#"{"model":"openai.gpt-oss-120b","input":[{"role":"user","content":"hi"}]}"#;
    assert_eq!(
        send(&t.proxy, "POST", "/v1/responses/input_tokens", fine).await,
        200
    );
    assert_eq!(targets(&t.bedrock), ["/openai/v1/responses/input_tokens"]);
}

#[tokio::test]
async fn conversation_items_are_gated_for_the_provider() {
    let t = two_providers().await;
    for path in [
        "/bedrock/v1/conversations",
        "/bedrock/v1/conversations/conv_1/items",
    ] {
        assert_eq!(send(&t.proxy, "POST", path, FOREIGN_ITEMS).await, 422, "{path}");
    }
    assert!(t.bedrock.received().is_empty());
    // OpenAI's own items go to OpenAI (the default) as they are.
    assert_eq!(
        send(&t.proxy, "POST", "/v1/conversations/conv_1/items", FOREIGN_ITEMS).await,
        200
    );
    let fine = r#"{"items":[{"type":"message","role":"user","content":"hi"}],"metadata":{"k":"v"}}"#;
    assert_eq!(
        send(&t.proxy, "POST", "/bedrock/v1/conversations", fine).await,
        200
    );
    assert_eq!(targets(&t.openai), ["/v1/conversations/conv_1/items"]);
    assert_eq!(targets(&t.bedrock), ["/openai/v1/conversations"]);
    assert_eq!(&t.bedrock.received()[0].body[..], fine.as_bytes());
}

#[tokio::test]
async fn items_added_to_a_stored_conversation_may_answer_its_calls() {
    let t = two_providers().await;
    // The tool loop of the Conversations API: the call lives in conv_1, the output is added.
    let output = r#"{"items":[{"type":"function_call_output","call_id":"call_1","output":"42"}]}"#;
    assert_eq!(
        send(&t.proxy, "POST", "/v1/conversations/conv_1/items", output).await,
        200
    );
    assert_eq!(&t.openai.received()[0].body[..], output.as_bytes());
    // A new conversation holds no calls: the same output answers nobody, and the violation
    // names the member the items are in.
    let (status, body) = t.proxy.post_json("/v1/conversations", output).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("call_id_mismatch"))
    );
    assert_eq!(body["error"]["param"], "items[0].call_id");
    assert_eq!(targets(&t.openai), ["/v1/conversations/conv_1/items"]);
}

#[tokio::test]
async fn other_paths_are_forwarded_ungated() {
    let t = two_providers().await;
    assert_eq!(send(&t.proxy, "GET", "/v1/models", "").await, 200);
    assert_eq!(send(&t.proxy, "GET", "/bedrock/v1/models?limit=2", "").await, 200);
    // Not JSON, not gated: forwarded as is.
    assert_eq!(
        send(&t.proxy, "POST", "/v1/chat/completions", "not json at all").await,
        200
    );
    assert_eq!(targets(&t.openai), ["/v1/models", "/v1/chat/completions"]);
    assert_eq!(targets(&t.bedrock), ["/openai/v1/models?limit=2"]);
    assert_eq!(&t.openai.received()[1].body[..], b"not json at all");
}

#[tokio::test]
async fn the_verdict_depends_on_the_routed_provider() {
    let t = two_providers().await;
    let body = |model: &str| {
        format!(
            r#"{{"model":"{model}","input":[{{"type":"web_search_call","id":"ws_1","status":"completed"}}]}}"#
        )
    };
    assert_eq!(send(&t.proxy, "POST", "/v1/responses", &body("gpt-5")).await, 200);
    assert_eq!(
        send(&t.proxy, "POST", "/v1/responses", &body("openai.gpt-oss-20b")).await,
        422
    );
}

#[tokio::test]
async fn path_tricks_never_reach_an_upstream() {
    let t = two_providers().await;
    let body = r#"{"model":"gpt-5","input":"hi"}"#;
    for path in [
        "/bedrock/../openai/v1/responses",
        "/v1/./responses",
        "/v1/%2e%2e/responses",
        "/bedrock%2fv1/responses",
        "/v1//responses",
        "/v1/respons%65s",
        "/nope/v1/models",
    ] {
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let answer = raw_request(t.proxy.addr, request.as_bytes()).await;
        let status: u16 = answer[9..12].parse().unwrap();
        assert!((400..500).contains(&status), "{path}: {answer}");
    }
    assert!(t.openai.received().is_empty() && t.bedrock.received().is_empty());
}

#[tokio::test]
async fn an_absolute_form_target_goes_to_the_configured_provider_only() {
    let t = two_providers().await;
    let body = r#"{"model":"gpt-5","input":"hi"}"#;
    let request = format!(
        "POST http://evil.example/v1/responses HTTP/1.1\r\nhost: evil.example\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = raw_request(t.proxy.addr, request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let received = t.openai.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].target, "/v1/responses");
    assert_ne!(received[0].headers["host"], "evil.example");
}

/// OpenAI (`openai`, the default, `gpt-*`) and Bedrock Mantle at one fake host with its two
/// paths, as the repo's proxy.toml has them: `bedrock` at `/v1` (`openai.gpt-oss-*`) and
/// `bedrock-openai` at `/openai/v1` (`openai.gpt-5*`); `extra` is appended (teams).
struct Mantle {
    openai: Upstream,
    mantle: Upstream,
    proxy: Proxy,
}

async fn mantle(extra: &str) -> Mantle {
    let openai = Upstream::json(200, RESPONSE_JSON).await;
    let mantle = Upstream::json(200, RESPONSE_JSON).await;
    let config = format!(
        r#"default_provider = "openai"

[providers.openai]
base_url = "{}"
auth = "none"

[providers.bedrock]
base_url = "{}"
auth = "none"

[providers.bedrock-openai]
base_url = "{}"
auth = "none"

[[routes]]
model = "gpt-*"
provider = "openai"

[[routes]]
model = "openai.gpt-5*"
provider = "bedrock-openai"

[[routes]]
model = "openai.gpt-oss-*"
provider = "bedrock"
{extra}"#,
        openai.base_url(),
        mantle.base_url(),
        mantle.base_url().replace("/v1", "/openai/v1"),
    );
    let proxy = Proxy::start(&config, &[]).await;
    Mantle {
        openai,
        mantle,
        proxy,
    }
}

/// A Responses body for `model`, spaced as no re-serialisation would write it.
fn spaced(model: &str) -> String {
    format!(r#"{{ "model" : "{model}",  "input":[{{"role":"user","content":"hi"}}] }}"#)
}

#[tokio::test]
async fn mantles_own_path_reaches_the_models_provider_at_that_path() {
    let m = mantle("").await;
    // What pydantic-ai's Bedrock Mantle provider sends for a GPT-5 model, given only a host.
    let body = spaced("openai.gpt-5.4");
    for path in ["/openai/v1/responses", "/openai/v1/responses/compact"] {
        assert_eq!(send(&m.proxy, "POST", path, &body).await, 200, "{path}");
    }
    assert_eq!(
        targets(&m.mantle),
        ["/openai/v1/responses", "/openai/v1/responses/compact"]
    );
    for received in m.mantle.received() {
        assert_eq!(&received.body[..], body.as_bytes(), "{}", received.target);
    }
    assert!(m.openai.received().is_empty(), "a Bedrock model reached OpenAI");
}

#[tokio::test]
async fn mantles_own_path_with_a_model_routed_elsewhere_is_a_conflict_with_advice_that_works() {
    let m = mantle("").await;
    // gpt-oss is served at Mantle's `/v1`: the `/openai` prefix is no provider of its.
    let body = spaced("openai.gpt-oss-120b");
    let (status, answer) = m.proxy.post_json("/openai/v1/responses", body.clone()).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("route_conflict"))
    );
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("routed to `bedrock`")
            && message.contains("send it without a prefix, or with `/bedrock`")
            && !message.contains("add a route"),
        "{message}"
    );
    assert!(m.openai.received().is_empty() && m.mantle.received().is_empty());
    // Both ways the message names reach the model's provider.
    for path in ["/v1/responses", "/bedrock/v1/responses"] {
        assert_eq!(send(&m.proxy, "POST", path, &body).await, 200, "{path}");
    }
    assert_eq!(targets(&m.mantle), ["/v1/responses", "/v1/responses"]);
    assert!(m.openai.received().is_empty());
}

#[tokio::test]
async fn the_openai_prefix_still_names_openai_for_its_models_unrouted_ones_and_ungated_paths() {
    let m = mantle("").await;
    assert_eq!(
        send(&m.proxy, "POST", "/openai/v1/responses", &spaced("gpt-5")).await,
        200
    );
    assert_eq!(
        send(&m.proxy, "POST", "/openai/v1/responses", &spaced("my-fine-tune")).await,
        200
    );
    // No model to tell the two readings apart: the provider the prefix names.
    assert_eq!(send(&m.proxy, "GET", "/openai/v1/models", "").await, 200);
    assert_eq!(
        targets(&m.openai),
        ["/v1/responses", "/v1/responses", "/v1/models"]
    );
    assert!(m.mantle.received().is_empty());
}

#[tokio::test]
async fn a_team_limited_to_bedrock_reaches_mantle_through_its_own_path() {
    let key = "rg-mantle-team-key";
    let teams = format!(
        "\n[teams.mantle]\nkeys = [\"{}\"]\nproviders = [\"bedrock\", \"bedrock-openai\"]\n",
        crate::teams::key_entry(key)
    );
    let m = mantle(&teams).await;
    let bearer = crate::teams::bearer(key);
    let with_key = [("authorization", bearer.as_str())];
    let post = |model: &str| {
        let body = spaced(model);
        let with_key = &with_key;
        let proxy = &m.proxy;
        async move { crate::teams::post(proxy, "/openai/v1/responses", with_key, &body).await }
    };
    let (status, _, answer) = post("openai.gpt-5.4").await;
    assert_eq!(status, 200, "{answer}");
    // A model that goes to OpenAI is refused for the provider it goes to.
    let (status, _, answer) = post("gpt-5").await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (403, Some("provider_not_allowed"))
    );
    // An ungated path with the prefix would go to OpenAI: refused too.
    let models = reqwest::Client::new()
        .get(m.proxy.url("/openai/v1/models"))
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(models.status().as_u16(), 403);
    assert_eq!(targets(&m.mantle), ["/openai/v1/responses"]);
    assert!(m.openai.received().is_empty());
    // The client key went no further.
    assert!(!m.mantle.received()[0].headers.contains_key("authorization"));
}

#[tokio::test]
async fn mantles_own_path_without_a_provider_of_that_name_reaches_mantle() {
    let mantle = Upstream::json(200, RESPONSE_JSON).await;
    let config = format!(
        r#"default_provider = "bedrock"

[providers.bedrock]
base_url = "{}"

[providers.bedrock-openai]
base_url = "{}"

[[routes]]
model = "openai.gpt-5*"
provider = "bedrock-openai"
"#,
        mantle.base_url(),
        mantle.base_url().replace("/v1", "/openai/v1"),
    );
    let proxy = Proxy::start(&config, &[]).await;
    let body = spaced("openai.gpt-5.4");
    assert_eq!(send(&proxy, "POST", "/openai/v1/responses", &body).await, 200);
    // gpt-oss is served at `/v1`, the default's path: not through `/openai`.
    let (status, answer) = proxy
        .post_json("/openai/v1/responses", spaced("openai.gpt-oss-120b"))
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (404, Some("unknown_provider"))
    );
    // No model to choose: the one provider at that path.
    assert_eq!(send(&proxy, "GET", "/openai/v1/models", "").await, 200);
    assert_eq!(targets(&mantle), ["/openai/v1/responses", "/openai/v1/models"]);
    assert_eq!(&mantle.received()[0].body[..], body.as_bytes());
}
