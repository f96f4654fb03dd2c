//! Trust, round 2, through the proxy with two teams behind one provider key: a repeated or
//! re-cased member never hides another team's id, no id goes unjudged past one store call's
//! keys, and state the ledger holds no record of is refused for a team (`unknown_state`) over
//! JSON and event-stream answers, unless `[ledger] unknown_owner = "allow"`.

use serde_json::{json, Value};

use super::team_state::{
    config, conversation, first_turn, provider, refusal, setup, turn, Answer, Setup, ALPHA, BETA,
};
use crate::support::proxy::Proxy;

/// `(reason, param)` of each violation of a 422.
fn violations(answer: &Answer) -> Vec<(String, String)> {
    answer.body["error"]["violations"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|v| {
            (
                v["reason"].as_str().unwrap_or("").to_owned(),
                v["param"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// The body's text with a `conversation` member written as `member` (raw JSON).
fn with_conversation(member: &str) -> String {
    format!(r#"{{"model":"m1","conversation":{member},"input":"hi"}}"#)
}

async fn post_raw(proxy: &Proxy, key: &str, body: String) -> (u16, Value, http::HeaderMap) {
    let response = reqwest::Client::new()
        .post(proxy.url("/openai/v1/responses"))
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    (status, body, headers)
}

#[tokio::test]
async fn a_repeated_or_re_cased_id_never_hides_another_teams_conversation() {
    let setup = setup(["", "", ""], "").await;
    let proxy = &setup.proxy;
    let alphas = conversation(proxy, ALPHA).await;
    let betas = conversation(proxy, BETA).await;
    let before = setup.forwarded();
    for member in [
        format!(r#"{{"id":"{betas}","id":"{alphas}"}}"#),
        format!(r#"{{"id":"{betas}","ID":"{alphas}"}}"#),
        format!(r#"{{"Id":"{alphas}","id":"{betas}"}}"#),
        format!(r#"{{"id":"{betas}","\u0069d":"{alphas}"}}"#),
        format!(r#"{{"id":"{betas}","id":"{betas}","id":"{alphas}"}}"#),
        format!(r#"{{"id":"{betas}","id":null}}"#),
    ] {
        let (status, body, _) = post_raw(proxy, BETA, with_conversation(&member)).await;
        assert_eq!(status, 400, "{member}: {body}");
        assert_eq!(body["error"]["code"], "invalid_input", "{member}");
        assert_eq!(body["error"]["param"], "conversation.id", "{member}");
    }
    // Every place an id is read refuses a second one the same way.
    for (body, param) in [
        (
            r#"{"model":"m1","previous_response_id":"resp_b","Previous_Response_Id":"resp_a","input":"hi"}"#.to_owned(),
            "previous_response_id",
        ),
        (
            r#"{"model":"m1","input":[{"type":"item_reference","id":"msg_b_0123456789ab","id":"msg_a_0123456789ab"}]}"#.to_owned(),
            "input[0].id",
        ),
        (
            r#"{"model":"m1","input":[{"type":"reasoning","summary":[],"encrypted_content":"b","ENCRYPTED_CONTENT":"a"}]}"#.to_owned(),
            "input[0].encrypted_content",
        ),
    ] {
        let (status, answer, _) = post_raw(proxy, BETA, body.clone()).await;
        assert_eq!((status, answer["error"]["param"].as_str()), (400, Some(param)), "{body}");
    }
    assert_eq!(setup.forwarded(), before, "nothing refused was forwarded");
    // Written once, each team reaches its own conversation only.
    let (status, _, _) = post_raw(proxy, BETA, with_conversation(&format!(r#"{{"id":"{betas}"}}"#))).await;
    assert_eq!(status, 200);
    let (status, body, _) =
        post_raw(proxy, BETA, with_conversation(&format!(r#"{{"id":"{alphas}"}}"#))).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("cross_team_state"))
    );
}

#[tokio::test]
async fn another_teams_blob_behind_more_ids_than_one_store_call_asks_is_still_refused() {
    // Unknown state allowed, so that only the cross-team check can stop the body.
    let setup = setup(["", "", ""], "unknown_owner = \"allow\"").await;
    let proxy = &setup.proxy;
    let first = turn(proxy, ALPHA, "openai", first_turn(false)).await;
    let alphas_blob = first.body["output"][0]["encrypted_content"].clone();
    let alphas_message = first.body["output"][2]["id"].clone();
    let mut input: Vec<Value> = (0..4_100)
        .map(|i| json!({"type": "reasoning", "summary": [], "encrypted_content": format!("beta-own-{i}")}))
        .chain((0..4_100).map(|i| json!({"type": "item_reference", "id": format!("msg_beta_own_{i:08}")})))
        .collect();
    input.push(json!({"type": "reasoning", "summary": [], "encrypted_content": alphas_blob}));
    input.push(json!({"type": "item_reference", "id": alphas_message}));
    input.push(json!({"role": "user", "content": "go on"}));
    let before = setup.forwarded();
    let refused = turn(proxy, BETA, "openai", json!({"model": "m1", "input": input})).await;
    assert_eq!(
        violations(&refused),
        [
            (
                "cross_team_state".to_owned(),
                "input[8200].encrypted_content".to_owned()
            ),
            ("cross_team_state".to_owned(), "input[8201]".to_owned()),
        ]
    );
    assert_eq!(setup.forwarded(), before);
}

#[tokio::test]
async fn state_the_ledger_does_not_know_is_refused_for_a_team_over_json_and_events() {
    for stream in [false, true] {
        let setup = setup(["", "", ""], "").await;
        let proxy = &setup.proxy;
        // A team's own state made through the proxy is known: each kind of it goes on.
        let first = turn(proxy, ALPHA, "openai", first_turn(stream)).await;
        assert_eq!(first.status, 200, "{}", first.body);
        let output = first.body["output"].as_array().unwrap().clone();
        let id = first.body["id"].as_str().unwrap().to_owned();
        let own = json!({"model": "m1", "stream": stream, "input": [
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "summary": [], "encrypted_content": output[0]["encrypted_content"]},
            {"type": "reasoning", "id": output[0]["id"], "summary": []},
            {"type": "item_reference", "id": output[2]["id"]},
            {"role": "user", "content": "again"}]});
        let allowed = turn(proxy, ALPHA, "openai", own).await;
        assert_eq!(allowed.status, 200, "{}", allowed.body);
        let next = json!({"model": "m1", "stream": stream, "previous_response_id": id, "input": "and?"});
        assert_eq!(turn(proxy, ALPHA, "openai", next).await.status, 200);

        // The same kinds, never recorded: refused for any team, nothing forwarded.
        let before = setup.forwarded();
        let unknown = json!({"model": "m1", "stream": stream, "input": [
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA-never-seen"},
            {"type": "reasoning", "id": "rs_never_seen_0123456789", "summary": []},
            {"type": "item_reference", "id": "msg_never_seen_0123456789"},
            {"id": "msg_never_seen_typeless_01"},
            {"type": "compaction", "encrypted_content": "cAAAA-never-seen"},
            {"role": "user", "content": "again"}]});
        for key in [ALPHA, BETA] {
            let refused = turn(proxy, key, "openai", unknown.clone()).await;
            assert_eq!(refused.status, 422, "{}", refused.body);
            assert_eq!(
                violations(&refused),
                [
                    (
                        "unknown_state".to_owned(),
                        "input[1].encrypted_content".to_owned()
                    ),
                    ("unknown_state".to_owned(), "input[2].id".to_owned()),
                    ("unknown_state".to_owned(), "input[3].id".to_owned()),
                    ("unknown_state".to_owned(), "input[4].id".to_owned()),
                    (
                        "unknown_state".to_owned(),
                        "input[5].encrypted_content".to_owned()
                    ),
                ]
            );
            let text = refused.body.to_string();
            assert!(text.contains("unknown_owner"), "{text}");
            assert!(!text.contains("alpha") && !text.contains("beta"), "{text}");
        }
        let long = format!("resp_{}", "x".repeat(10_000));
        for body in [
            json!({"model": "m1", "stream": stream, "previous_response_id": "resp_never_seen", "input": "hi"}),
            json!({"model": "m1", "stream": stream, "previous_response_id": long, "input": "hi"}),
        ] {
            assert_eq!(
                refusal(&turn(proxy, BETA, "openai", body).await),
                (422, "unknown_state".into(), "previous_response_id".into())
            );
        }
        for conversation in [json!("conv_never_seen"), json!({"id": "conv_never_seen"})] {
            let body = json!({"model": "m1", "stream": stream, "conversation": conversation, "input": "hi"});
            assert_eq!(
                refusal(&turn(proxy, BETA, "openai", body).await),
                (422, "unknown_state".into(), "conversation".into())
            );
        }
        assert_eq!(setup.forwarded(), before, "nothing unknown was forwarded");
    }
}

#[tokio::test]
async fn a_hundred_thousand_unknown_references_are_refused_whole() {
    let setup = setup(["", "", ""], "").await;
    let input: Vec<Value> = (0..100_000)
        .map(|i| json!({"type": "item_reference", "id": format!("msg_{i:020}")}))
        .collect();
    let refused = turn(
        &setup.proxy,
        BETA,
        "openai",
        json!({"model": "m1", "input": input}),
    )
    .await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert_eq!(refused.body["error"]["violations"].as_array().unwrap().len(), 100);
    assert_eq!(refused.body["error"]["violations_truncated"], 99_900);
    assert_eq!(setup.forwarded(), 0);
}

#[tokio::test]
async fn unknown_owner_allow_and_monitor_let_unknown_state_through_and_without_teams_nothing_changes() {
    let body = r#"{"model":"m1","previous_response_id":"resp_never_seen","input":[{"type":"item_reference","id":"msg_never_seen_0123456789"}]}"#;
    // Allowed: forwarded as received.
    let setup = setup(["", "", ""], "unknown_owner = \"allow\"").await;
    let (status, _, _) = post_raw(&setup.proxy, BETA, body.to_owned()).await;
    assert_eq!(status, 200);
    assert_eq!(setup.openai.received().last().unwrap().body, body.as_bytes());
    // Monitored: forwarded, and named in the header.
    let setup = setup_with(["", "rules = { unknown_state = \"monitor\" }", ""], "").await;
    let (status, _, headers) = post_raw(&setup.proxy, BETA, body.to_owned()).await;
    assert_eq!(status, 200);
    assert_eq!(
        headers["x-replaygate-monitored"],
        "unknown_state@previous_response_id,unknown_state@input[0]"
    );
    // Without teams, the ledger's unknowns are never refused.
    let openai = provider("openai").await;
    let text = format!(
        "default_provider = \"openai\"\n[state]\nbackend = \"memory\"\n[ledger]\n[providers.openai]\nbase_url = \"{}\"\nauth = \"none\"\n",
        openai.base_url()
    );
    let proxy = Proxy::start(&text, &[]).await;
    let response = reqwest::Client::new()
        .post(proxy.url("/v1/responses"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

async fn setup_with(grants: [&str; 3], extra: &str) -> Setup {
    let openai = provider("openai").await;
    let bedrock = provider("bedrock").await;
    let proxy = Proxy::start(&config(&openai, &bedrock, grants, extra), &[]).await;
    Setup {
        openai,
        bedrock,
        proxy,
    }
}

#[tokio::test]
async fn while_the_store_is_down_a_teams_request_naming_state_is_never_judged_without_it() {
    let openai = provider("openai").await;
    let port = crate::support::closed_port::closed_port();
    let text = |unknown_owner: &str| {
        format!(
            "default_provider = \"openai\"\n[state]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:{port}\"\ntimeout = \"200ms\"\n\
             [ledger]\non_unavailable = \"allow\"\nunknown_owner = \"{unknown_owner}\"\n\
             [providers.openai]\nbase_url = \"{}\"\nauth = \"none\"\n[teams.alpha]\nkeys = [\"{}\"]\n",
            openai.base_url(),
            super::teams::key_entry(ALPHA),
        )
    };
    let named = json!({"model": "m1", "previous_response_id": "resp_openai_1", "input": "next"});
    // Everything it names would pass for unknown: 503, whatever on_unavailable says.
    let proxy = Proxy::start(&text("deny"), &[]).await;
    assert_eq!(turn(&proxy, ALPHA, "openai", first_turn(false)).await.status, 200);
    assert_eq!(
        refusal(&turn(&proxy, ALPHA, "openai", named.clone()).await),
        (503, "ledger_unavailable".into(), String::new())
    );
    assert_eq!(
        openai.received().len(),
        1,
        "the refused continuation was not forwarded"
    );
    // With unknown state allowed, on_unavailable = "allow" lets it through as before.
    let proxy = Proxy::start(&text("allow"), &[]).await;
    assert_eq!(turn(&proxy, ALPHA, "openai", named).await.status, 200);
}
