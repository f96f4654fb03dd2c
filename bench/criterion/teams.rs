//! The cost teams add to a request: finding the client key's team (SHA-256 of the key, a
//! lookup by digest, a constant-time comparison), the provider and model checks and the rate
//! check. The goal is under 2 µs per request. A key with an expiry adds one reading of the
//! clock (`teams/authenticate_expiring_key`).
//!
//! `cargo bench --bench teams -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use http::{HeaderMap, HeaderValue};
use replaygate::config::Config;
use replaygate::gate::Policy;
use replaygate::keys;
use replaygate::proxy::teams::Teams;
use replaygate::state::LocalRateLimiter;

/// 50 teams of 4 keys each, with provider, model and tool rules; the keys of every other team
/// are tables with an id and an expiry.
fn teams() -> Teams {
    let mut text = String::from("[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\nauth = \"none\"\n[providers.bedrock]\nbase_url = \"https://bedrock.example/v1\"\nauth = \"none\"\n");
    for team in 0..50 {
        let keys: Vec<String> = (0..4)
            .map(|k| {
                let digest = keys::format_digest(&keys::digest(&key(team, k)));
                match team % 2 {
                    0 => format!("{{ id = \"t{team}-k{k}\", digest = \"{digest}\", expires = \"2099-01-01T00:00:00Z\" }}"),
                    _ => format!("\"{digest}\""),
                }
            })
            .collect();
        text.push_str(&format!(
            "[teams.t{team}]\nkeys = [{}]\nproviders = [\"openai\"]\nmodels = [\"gpt-5*\", \"o3*\", \"gpt-4.1*\"]\ntools = [\"get_*\", \"refund_*\"]\nrequests_per_minute = 4000000000\nrules = {{ namespaced = \"strip\" }}\n",
            keys.join(", ")
        ));
    }
    let config = Config::from_toml(&text).unwrap();
    Teams::new(&config.teams, &Policy::default()).unwrap()
}

fn key(team: usize, k: usize) -> String {
    format!("rg-{team:04}-{k:04}-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
}

fn bench(c: &mut Criterion) {
    let teams = teams();
    let limiter = LocalRateLimiter::default();
    let authorization = HeaderValue::try_from(format!("Bearer {}", key(37, 2))).unwrap();
    c.bench_function("teams/authenticate_authorize_rate", |b| {
        b.iter(|| {
            let mut headers = HeaderMap::new();
            headers.insert("authorization", authorization.clone());
            headers.insert("content-type", HeaderValue::from_static("application/json"));
            let team = teams.authenticate(black_box(&mut headers)).unwrap().unwrap().team;
            team.authorize_provider(black_box("openai")).unwrap();
            team.authorize_model(black_box(Some("gpt-5-mini"))).unwrap();
            limiter.check(&team.name, team.per_minute.unwrap()).unwrap();
            black_box(&team.policy);
        })
    });
    let expiring = HeaderValue::try_from(format!("Bearer {}", key(36, 2))).unwrap();
    c.bench_function("teams/authenticate_expiring_key", |b| {
        b.iter(|| {
            let mut headers = HeaderMap::new();
            headers.insert("authorization", expiring.clone());
            let caller = teams.authenticate(black_box(&mut headers)).unwrap().unwrap();
            black_box(caller.key_id);
        })
    });
    c.bench_function("teams/unknown_key", |b| {
        let unknown = HeaderValue::from_static("Bearer rg-not-a-key-of-any-team");
        b.iter(|| {
            let mut headers = HeaderMap::new();
            headers.insert("authorization", unknown.clone());
            black_box(teams.authenticate(black_box(&mut headers)).is_err())
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
