//! The ledger judged incrementally through the proxy (docs/incremental-judging.md#the-ledger):
//! a team's agent loop, each turn re-sending the history with the provider's answer (recorded
//! by the ledger) and the tool's output, asks the store only about the new items' keys once a
//! turn is read after the one before, and gets what a whole check gives: every turn forwarded,
//! and another team's state among the new items refused.

use serde_json::{json, Value};

use super::team_state::{refusal, setup, turn, ALPHA, BETA};
use crate::support::metrics::counter;

/// The next body of a loop: `history` with the answer's output items and an output for its
/// call.
fn next_turn(history: &mut Vec<Value>, answer: &Value) -> Value {
    for item in answer["output"].as_array().unwrap() {
        history.push(item.clone());
        if item["type"] == "function_call" {
            history
                .push(json!({"type": "function_call_output", "call_id": item["call_id"], "output": "18C"}));
        }
    }
    json!({"model": "m1", "input": history,
           "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]})
}

#[tokio::test]
async fn a_teams_agent_loop_asks_the_ledger_only_about_each_turns_new_items() {
    let mut setup = setup(["", "", ""], "").await;
    let admin = setup.proxy.admin().await;
    let proxy = &setup.proxy;
    let mut history = vec![
        json!({"role": "developer", "content": "Answer with the weather."}),
        json!({"role": "user", "content": "Weather in Paris?"}),
    ];
    let mut body = json!({"model": "m1", "input": history,
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]});
    let mut asked = Vec::new();
    for n in 0..8 {
        let before = counter(admin, "replaygate_ledger_keys_asked_total").await;
        let answer = turn(proxy, ALPHA, "openai", body.clone()).await;
        assert_eq!(answer.status, 200, "turn {n}: {}", answer.body);
        asked.push(counter(admin, "replaygate_ledger_keys_asked_total").await - before);
        body = next_turn(&mut history, &answer.body);
    }
    // Each answer adds three items with ids (a reasoning item with its blob, a call, a message):
    // four keys. Turn 1 is judged whole (its lead seen at turn 0) and kept; from turn 2 on each
    // is read after the one before and asks only about the last answer's four, not the 4 n the
    // whole history has.
    assert_eq!(asked, [0, 4, 4, 4, 4, 4, 4, 4], "{asked:?}");
    assert!(counter(admin, "replaygate_gate_items_judged_before_total").await > 0);
    assert_eq!(setup.openai.received().len(), 8, "every turn forwarded");

    // Another team's answer among the new items of a turn read after the one before: refused
    // as the whole check refuses it.
    let theirs = turn(proxy, BETA, "openai", json!({"model": "m1", "input": "hi"})).await;
    assert_eq!(theirs.status, 200);
    let mut stolen = history.clone();
    let mut body = next_turn(&mut stolen, &theirs.body);
    body["input"] = json!(stolen);
    let refused = turn(proxy, ALPHA, "openai", body).await;
    assert_eq!(refusal(&refused).0, 422, "{}", refused.body);
    assert_eq!(refusal(&refused).1, "cross_team_state", "{}", refused.body);
    assert_eq!(
        setup.openai.received().len(),
        9,
        "the refused body reached no one"
    );
}
