//! Three `replaygate serve` processes sharing one Redis (a master, its replica and a Sentinel)
//! behind a round-robin balancer, as a deployment with replicas runs: a session moving between
//! two providers is carried from the shared ledger whichever replica each turn lands on, a
//! team's rate limit is reached across replicas, and the session goes on through the SIGKILL of
//! a replica and of the Redis master. A turn is answered 200 with the provider's answer, the
//! provider having received exactly the body the session's history calls for, or 503
//! `ledger_unavailable` with nothing forwarded; never anything else.

#![cfg(unix)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};

use super::teams::key_entry;
use crate::support::balancer::Balancer;
use crate::support::minting_provider;
use crate::support::redis_ha::{poll, query, SentinelSet};
use crate::support::serve::Serve;
use crate::support::upstream::Upstream;

const ALPHA: &str = "rg-replicas-alpha-key";
const BETA: &str = "rg-replicas-beta-key";
const METERED: &str = "rg-replicas-metered-key";
/// `requests_per_minute` of the team `metered`.
const METERED_LIMIT: usize = 4;
/// How long one turn may keep getting 503 before the test gives up (a failover takes a few
/// seconds; a loaded machine, more).
const TURN_LIMIT: Duration = Duration::from_secs(40);

/// A provider of the deployment and the model that routes to it.
#[derive(Clone, Copy)]
struct Provider {
    name: &'static str,
    model: &'static str,
}

const OPENAI: Provider = Provider {
    name: "openai",
    model: "gpt-5",
};
const BEDROCK: Provider = Provider {
    name: "bedrock",
    model: "gpt-oss-120b",
};

fn tools() -> Value {
    json!([{"type": "function", "name": "lookup", "parameters": {"type": "object"}}])
}

/// One replica's `proxy.toml`: Redis through the Sentinel, the ledger storing items and carrying
/// sessions, three teams with rate limits, `gpt-oss-*` routed to `bedrock`, the rest to `openai`.
fn config(set: &SentinelSet, openai: &Upstream, bedrock: &Upstream) -> String {
    format!(
        r#"default_provider = "openai"
[server]
workers = 1
[state]
backend = "redis"
sentinels = ["{sentinel}"]
master_name = "{master}"
timeout = "500ms"
[ledger]
store_items = true
carry_sessions = true
[providers.openai]
base_url = "{openai}"
auth = "none"
[providers.bedrock]
base_url = "{bedrock}"
auth = "none"
[[routes]]
model = "gpt-oss-*"
provider = "bedrock"
[teams.alpha]
keys = ["{alpha}"]
requests_per_minute = 600
[teams.beta]
keys = ["{beta}"]
requests_per_minute = 600
[teams.metered]
keys = ["{metered}"]
requests_per_minute = {METERED_LIMIT}
"#,
        sentinel = set.sentinel_addr(),
        master = set.name,
        openai = openai.base_url(),
        bedrock = bedrock.base_url(),
        alpha = key_entry(ALPHA),
        beta = key_entry(BETA),
        metered = key_entry(METERED),
    )
}

/// Redis, the two providers, the three replicas and the balancer in front of them.
struct Deployment {
    redis: SentinelSet,
    openai: Upstream,
    bedrock: Upstream,
    /// The replicas, by their index in the balancer; `None` once killed.
    replicas: Vec<Option<Serve>>,
    balancer: Balancer,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

/// An answer as the client got it, and the replica that gave it.
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Value,
    replica: usize,
}

impl Deployment {
    async fn start() -> Deployment {
        // The replica takes writes of its own, so the test can make it lack a record the master
        // acknowledged (what Redis's asynchronous replication may lose in a failover).
        let redis = SentinelSet::start_with_replica("rg-replicas", &["--replica-read-only", "no"]);
        let openai = minting_provider::start(OPENAI.name).await;
        let bedrock = minting_provider::start(BEDROCK.name).await;
        let dir = tempfile::tempdir().unwrap();
        let mut replicas = Vec::new();
        for index in 0..3 {
            let path = dir.path().join(format!("replica-{index}.toml"));
            std::fs::write(&path, config(&redis, &openai, &bedrock)).unwrap();
            replicas.push(Some(Serve::start(Serve::command(&path)).await));
        }
        let addrs: Vec<SocketAddr> = replicas
            .iter()
            .map(|serve| serve.as_ref().unwrap().address.parse().unwrap())
            .collect();
        let balancer = Balancer::start(addrs).await;
        // A connection per request, so each request goes through the balancer's turn.
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap();
        Deployment {
            redis,
            openai,
            bedrock,
            replicas,
            balancer,
            client,
            _dir: dir,
        }
    }

    fn upstream(&self, provider: Provider) -> &Upstream {
        match provider.name {
            "openai" => &self.openai,
            _ => &self.bedrock,
        }
    }

    /// How many requests each provider received: (openai, bedrock).
    fn forwarded(&self) -> (usize, usize) {
        (self.openai.received().len(), self.bedrock.received().len())
    }

    /// POSTs `body` to `/v1/responses` through the balancer with the client key `key`.
    async fn post(&self, key: &str, body: &Value) -> Answer {
        let response = self
            .client
            .post(format!("http://{}/v1/responses", self.balancer.addr))
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap_or_else(|err| panic!("no answer through the balancer: {err}"));
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{status}: {text}"));
        let replica = self
            .balancer
            .last_served()
            .expect("a replica took the connection");
        Answer {
            status,
            headers,
            body,
            replica,
        }
    }

    /// SIGKILLs replica `index` and waits for it to be gone.
    fn kill_replica(&mut self, index: usize) {
        let mut serve = self.replicas[index].take().expect("a live replica");
        serve.child.kill().unwrap();
        serve.child.wait().unwrap();
    }

    /// Panics unless every replica not killed is still running.
    fn replicas_alive(&mut self) {
        for (index, serve) in self.replicas.iter_mut().enumerate() {
            if let Some(serve) = serve {
                let status = serve.child.try_wait().unwrap();
                assert!(status.is_none(), "replica {index} exited: {status:?}");
            }
        }
    }
}

/// The latest answered turn of a session.
struct Last {
    id: String,
    provider: &'static str,
    call_id: String,
    replica: usize,
}

/// A client session continued by `previous_response_id`, with the history a provider must be
/// sent when the session is carried to it: every turn's input and output, item ids removed.
struct Session {
    team: &'static str,
    key: &'static str,
    history: Vec<Value>,
    last: Option<Last>,
    turns: usize,
}

impl Session {
    fn new(team: &'static str, key: &'static str) -> Session {
        Session {
            team,
            key,
            history: Vec::new(),
            last: None,
            turns: 0,
        }
    }

    /// The next turn's own items: the output of the latest call, and a user message.
    fn next_input(&self) -> Vec<Value> {
        let turn = self.turns + 1;
        let mut input = Vec::new();
        if let Some(last) = &self.last {
            input.push(json!({"type": "function_call_output", "call_id": last.call_id,
                              "output": format!("{} result {turn}", self.team)}));
        }
        input.push(
            json!({"type": "message", "role": "user", "content": format!("{} turn {turn}", self.team)}),
        );
        input
    }

    /// Sends the next turn to `provider` on a replica other than the latest turn's, again
    /// after each 503 (bounded), and checks what the provider received and what the client
    /// got. Returns how many times it was answered 503.
    async fn turn(&mut self, deployment: &Deployment, provider: Provider) -> usize {
        let input = self.next_input();
        let mut body = json!({"model": provider.model, "tools": tools(), "input": input});
        if let Some(last) = &self.last {
            body["previous_response_id"] = json!(last.id);
        }
        let what = format!("{} turn {} to {}", self.team, self.turns + 1, provider.name);
        let started = Instant::now();
        let mut refused = 0;
        let answer = loop {
            if let Some(last) = &self.last {
                deployment.balancer.avoid_next(last.replica);
            }
            let before = deployment.forwarded();
            let answer = deployment.post(self.key, &body).await;
            if answer.status != 503 {
                break answer;
            }
            assert_eq!(
                answer.body["error"]["code"], "ledger_unavailable",
                "{what}: {}",
                answer.body
            );
            assert_eq!(
                deployment.forwarded(),
                before,
                "{what}: forwarded, then answered 503"
            );
            refused += 1;
            assert!(
                started.elapsed() < TURN_LIMIT,
                "{what}: still 503 after {TURN_LIMIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(answer.status, 200, "{what}: {}", answer.body);
        if let Some(last) = &self.last {
            assert_ne!(
                answer.replica, last.replica,
                "{what}: on the replica of the turn before"
            );
        }
        self.check_forwarded(deployment, provider, &body, &answer, &what);

        self.history.extend(input);
        for item in answer.body["output"].as_array().unwrap() {
            let mut item = item.clone();
            item.as_object_mut().unwrap().remove("id");
            self.history.push(item);
        }
        self.last = Some(Last {
            id: answer.body["id"].as_str().unwrap().to_owned(),
            provider: provider.name,
            call_id: answer.body["output"][1]["call_id"].as_str().unwrap().to_owned(),
            replica: answer.replica,
        });
        self.turns += 1;
        refused
    }

    /// The provider received one request for this turn (and the other none): the body as sent
    /// when it holds the previous response, else the body carried (no `previous_response_id`,
    /// the whole history before the turn's own items); the client got the provider's answer.
    fn check_forwarded(
        &self,
        deployment: &Deployment,
        provider: Provider,
        sent: &Value,
        answer: &Answer,
        what: &str,
    ) {
        let received = deployment.upstream(provider).received();
        let got = received.last().expect("the provider received the turn");
        let n = received.len() as u64;
        assert_eq!(got.target, "/v1/responses", "{what}");
        let carried_from = self.last.as_ref().filter(|last| last.provider != provider.name);
        match carried_from {
            None => {
                assert_eq!(
                    got.body,
                    Bytes::from(sent.to_string()),
                    "{what}: not forwarded as sent"
                );
                assert!(answer.headers.get("x-replaygate-carried").is_none(), "{what}");
            }
            Some(last) => {
                let forwarded: Value = serde_json::from_slice(&got.body).unwrap();
                assert!(
                    forwarded.get("previous_response_id").is_none(),
                    "{what}: {forwarded}"
                );
                let mut expected = self.history.clone();
                expected.extend(sent["input"].as_array().unwrap().iter().cloned());
                assert_eq!(
                    forwarded["input"],
                    Value::Array(expected),
                    "{what}: history not carried whole"
                );
                assert_eq!(forwarded["model"], provider.model, "{what}");
                assert_eq!(forwarded["tools"], tools(), "{what}");
                assert_eq!(answer.headers["x-replaygate-carried"], last.id.as_str(), "{what}");
            }
        }
        let answered = minting_provider::answer(provider.name, n, &json!(provider.model));
        assert_eq!(answer.body, answered, "{what}: not the provider's answer");
    }
}

/// `metered` sends its limit's worth and then three more: the first get 200 and the rest 429
/// whichever replica answers, the 429s from every replica, none of them forwarded.
async fn the_team_limit_is_shared(deployment: &Deployment) {
    let before = deployment.forwarded();
    let mut refused_by = BTreeSet::new();
    for request in 0..METERED_LIMIT + 3 {
        let body = json!({"model": OPENAI.model, "input": format!("metered {request}")});
        let answer = deployment.post(METERED, &body).await;
        if request < METERED_LIMIT {
            assert_eq!(answer.status, 200, "request {request}: {}", answer.body);
        } else {
            assert_eq!(answer.status, 429, "request {request}: {}", answer.body);
            assert!(answer.headers.contains_key("retry-after"));
            refused_by.insert(answer.replica);
        }
    }
    assert_eq!(refused_by.len(), 3, "the 429s came from replicas {refused_by:?}");
    let after = deployment.forwarded();
    assert_eq!((after.0 - before.0, after.1 - before.1), (METERED_LIMIT, 0));
}

/// Team `beta` naming `alpha`'s response is refused on every replica, nothing forwarded.
async fn another_team_cannot_continue(deployment: &Deployment, alpha: &Session) {
    let before = deployment.forwarded();
    let alpha_id = &alpha.last.as_ref().unwrap().id;
    let mut refused_by = BTreeSet::new();
    for _ in 0..2 {
        let body = json!({"model": OPENAI.model, "previous_response_id": alpha_id, "input": "peek"});
        let answer = deployment.post(BETA, &body).await;
        assert_eq!(answer.status, 422, "{}", answer.body);
        assert_eq!(
            answer.body["error"]["code"], "cross_team_state",
            "{}",
            answer.body
        );
        refused_by.insert(answer.replica);
    }
    assert_eq!(refused_by.len(), 2);
    assert_eq!(deployment.forwarded(), before);
}

/// Waits until the Redis replica holds the record of each session's latest response, so the
/// failover loses none of them.
fn replica_holds(deployment: &Deployment, sessions: &[&Session]) {
    let port = deployment.redis.replica.port();
    for session in sessions {
        let key = format!("replaygate:v1:resp:{}", session.last.as_ref().unwrap().id);
        poll(
            Duration::from_secs(10),
            "the redis replica to copy the records",
            || {
                query::<bool>(port, ::redis::cmd("EXISTS").arg(&key))
                    .ok()
                    .filter(|exists| *exists)
            },
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_carry_one_session_through_a_replica_kill_and_a_failover() {
    let mut deployment = Deployment::start().await;
    the_team_limit_is_shared(&deployment).await;

    let mut alpha = Session::new("alpha", ALPHA);
    let mut beta = Session::new("beta", BETA);
    assert_eq!(alpha.turn(&deployment, OPENAI).await, 0);
    assert_eq!(beta.turn(&deployment, BEDROCK).await, 0);
    assert_eq!(alpha.turn(&deployment, BEDROCK).await, 0);

    // The replica that wrote alpha's latest record dies; the balancer moves on.
    let killed = alpha.last.as_ref().unwrap().replica;
    deployment.kill_replica(killed);
    let connections_before_kill = deployment.balancer.served().len();
    assert_eq!(alpha.turn(&deployment, BEDROCK).await, 0);
    assert_eq!(beta.turn(&deployment, OPENAI).await, 0);
    assert_eq!(alpha.turn(&deployment, OPENAI).await, 0);
    another_team_cannot_continue(&deployment, &alpha).await;

    // A record acknowledged before the master dies that the replica never got: alpha's turn is
    // answered (its record written to the master), and the replica is made to lack it.
    let mut lost = Session::new("alpha", ALPHA);
    assert_eq!(lost.turn(&deployment, OPENAI).await, 0);

    // The Redis master dies: turns get 503 until the Sentinel has promoted the replica.
    replica_holds(&deployment, &[&alpha, &beta, &lost]);
    let lost_id = lost.last.as_ref().unwrap().id.clone();
    let removed: u64 = query(
        deployment.redis.replica.port(),
        ::redis::cmd("DEL").arg(format!("replaygate:v1:resp:{lost_id}")),
    )
    .unwrap();
    assert_eq!(removed, 1, "the replica held the record before it was taken off");
    deployment.redis.kill_master();
    let killed_at = Instant::now();
    let refused = alpha.turn(&deployment, BEDROCK).await;
    let failover = killed_at.elapsed();
    assert!(refused > 0, "a turn was answered while no master answered");
    eprintln!("replicas: turn answered {failover:?} after the master was killed, {refused} 503s before");
    // Once a replica was answered by the new master, the others are too, at their first call
    // (their connections to the dead master are replaced within the call, not refused).
    assert_eq!(beta.turn(&deployment, BEDROCK).await, 0);
    assert_eq!(alpha.turn(&deployment, OPENAI).await, 0);
    assert_eq!(
        deployment.redis.named_master_port(),
        Some(deployment.redis.replica.port()),
        "the sentinel names the promoted replica"
    );
    the_lost_record_is_unknown_state(&deployment, &lost_id).await;

    assert_eq!(alpha.turns, 6);
    let served = deployment.balancer.served();
    assert!(
        !served[connections_before_kill..].contains(&killed),
        "a connection went to the killed replica: {served:?}"
    );
    deployment.replicas_alive();
    no_body_mixes_the_teams(&deployment);
}

/// Continuing the response whose record the failover lost is refused for its own team too
/// (`unknown_state`): whose it is cannot be told any more, so it is never forwarded.
async fn the_lost_record_is_unknown_state(deployment: &Deployment, lost_id: &str) {
    let before = deployment.forwarded();
    for key in [ALPHA, BETA] {
        let body = json!({"model": OPENAI.model, "previous_response_id": lost_id, "input": "go on"});
        let answer = deployment.post(key, &body).await;
        assert_eq!(answer.status, 422, "{}", answer.body);
        assert_eq!(answer.body["error"]["code"], "unknown_state", "{}", answer.body);
        assert_eq!(answer.body["error"]["param"], "previous_response_id");
    }
    assert_eq!(
        deployment.forwarded(),
        before,
        "a lost record's continuation was forwarded"
    );
}

/// No provider ever received a body holding both teams' turns.
fn no_body_mixes_the_teams(deployment: &Deployment) {
    let openai = deployment.openai.received();
    let bedrock = deployment.bedrock.received();
    for received in openai.iter().chain(&bedrock) {
        let body = String::from_utf8_lossy(&received.body);
        assert!(
            !(body.contains("alpha turn") && body.contains("beta turn")),
            "a body mixes the teams' sessions: {body}"
        );
    }
}
