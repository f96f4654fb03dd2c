//! A fixed-rate load driver for `scripts/soak`: sends a steady mix of allowed, refused and
//! streamed Responses requests to a replaygate on loopback, checks every answer, and prints a
//! summary as one JSON object.
//!
//! ```sh
//! cargo run --release --example soak_load -- http://127.0.0.1:8080 500 600   # URL, requests/s, seconds
//! ```
//!
//! The rate is held open-loop (a request starts every 1/rate s whether or not earlier ones
//! finished), with at most `MAX_IN_FLIGHT` outstanding; a tick that finds them all busy counts
//! as `skipped`, so an overloaded proxy shows up in the numbers instead of slowing the driver.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::{Mutex, Semaphore};

const MAX_IN_FLIGHT: usize = 2000;
const ALLOWED: &str = r#"{"model":"gpt-5","input":[{"role":"user","content":"hi"},{"type":"function_call","call_id":"c1","name":"report","arguments":"{\"region\":\"apac\"}","status":"completed"},{"type":"function_call_output","call_id":"c1","output":"42"}],"tools":[{"type":"function","name":"report","parameters":{"type":"object","required":["region"],"properties":{"region":{"enum":["apac","emea"]}}}}]}"#;
const REFUSED: &str = r#"{"model":"gpt-5","input":[{"role":"user","content":"hi"},{"type":"bedrock:guardrail_trace","id":"g1"},{"type":"function_call_output","call_id":"nope","output":"x"}]}"#;
const STREAMED: &str = r#"{"model":"gpt-5","stream":true,"input":"Say hi."}"#;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Allowed,
    Refused,
    Streamed,
}

impl Kind {
    /// Half allowed, three in ten refused, one in five streamed.
    fn of(n: u64) -> Kind {
        match n % 10 {
            0..=4 => Kind::Allowed,
            5..=7 => Kind::Refused,
            _ => Kind::Streamed,
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static str {
        ["allowed", "refused", "streamed"][self.index()]
    }
}

#[derive(Default)]
struct Tally {
    sent: u64,
    ok: u64,
    wrong_answer: u64,
    transport_error: u64,
    latencies_us: Vec<u64>,
    first_problems: Vec<String>,
}

impl Tally {
    fn problem(&mut self, what: String) {
        if self.first_problems.len() < 5 {
            self.first_problems.push(what);
        }
    }
}

/// Sends one request of `kind` and says whether its answer was the right one.
async fn one(client: &reqwest::Client, url: &str, kind: Kind) -> Result<Result<(), String>, String> {
    let body = match kind {
        Kind::Allowed => ALLOWED,
        Kind::Refused => REFUSED,
        Kind::Streamed => STREAMED,
    };
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let mut bytes = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        bytes.extend_from_slice(&chunk.map_err(|e| e.to_string())?);
    }
    let text = String::from_utf8_lossy(&bytes);
    let right = match kind {
        Kind::Allowed => status == 200 && text.contains("\"resp_soak\""),
        Kind::Refused => status == 422 && text.contains("\"code\":\"namespaced\""),
        Kind::Streamed => status == 200 && text.ends_with("data: [DONE]\n\n"),
    };
    Ok(if right {
        Ok(())
    } else {
        Err(format!(
            "{}: {status} {}",
            kind.name(),
            text.chars().take(200).collect::<String>()
        ))
    })
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[rank] as f64 / 1000.0
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: soak_load URL RATE SECONDS";
    let base = args.next().expect(usage);
    let rate: u64 = args.next().expect(usage).parse().expect(usage);
    let seconds: u64 = args.next().expect(usage).parse().expect(usage);
    assert!(
        base.starts_with("http://127.") || base.starts_with("http://localhost"),
        "loopback only"
    );
    let url = format!("{}/v1/responses", base.trim_end_matches('/'));

    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(MAX_IN_FLIGHT)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let tallies = Arc::new(Mutex::new([Tally::default(), Tally::default(), Tally::default()]));
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut skipped = 0u64;
    let period = Duration::from_nanos(1_000_000_000 / rate.max(1));
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    let total = rate * seconds;
    let mut last_report = Instant::now();
    for n in 0..total {
        ticks.tick().await;
        let Ok(permit) = in_flight.clone().try_acquire_owned() else {
            skipped += 1;
            continue;
        };
        let kind = Kind::of(n);
        let (client, url, tallies) = (client.clone(), url.clone(), tallies.clone());
        tokio::spawn(async move {
            let sent_at = Instant::now();
            let outcome = one(&client, &url, kind).await;
            let elapsed = sent_at.elapsed().as_micros() as u64;
            drop(permit);
            let mut tallies = tallies.lock().await;
            let tally = &mut tallies[kind.index()];
            tally.sent += 1;
            tally.latencies_us.push(elapsed);
            match outcome {
                Ok(Ok(())) => tally.ok += 1,
                Ok(Err(wrong)) => {
                    tally.wrong_answer += 1;
                    tally.problem(wrong);
                }
                Err(error) => {
                    tally.transport_error += 1;
                    tally.problem(format!("{}: {error}", kind.name()));
                }
            }
        });
        if last_report.elapsed() >= Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!("soak_load: {} s, {} started", started.elapsed().as_secs(), n + 1);
        }
    }
    // Let the last requests finish (bounded by the client timeout).
    let _ = tokio::time::timeout(
        Duration::from_secs(35),
        in_flight.acquire_many(MAX_IN_FLIGHT as u32),
    )
    .await;
    let elapsed = started.elapsed().as_secs_f64();

    let mut tallies = tallies.lock().await;
    let mut kinds = serde_json::Map::new();
    let (mut sent, mut errors) = (0, 0);
    for kind in [Kind::Allowed, Kind::Refused, Kind::Streamed] {
        let tally = &mut tallies[kind.index()];
        tally.latencies_us.sort_unstable();
        sent += tally.sent;
        errors += tally.wrong_answer + tally.transport_error;
        kinds.insert(
            kind.name().into(),
            json!({
                "sent": tally.sent,
                "ok": tally.ok,
                "wrong_answer": tally.wrong_answer,
                "transport_error": tally.transport_error,
                "p50_ms": percentile(&tally.latencies_us, 0.50),
                "p99_ms": percentile(&tally.latencies_us, 0.99),
                "max_ms": percentile(&tally.latencies_us, 1.0),
                "first_problems": tally.first_problems,
            }),
        );
    }
    let summary = json!({
        "target_rate": rate,
        "seconds": seconds,
        "elapsed_s": (elapsed * 10.0).round() / 10.0,
        "achieved_rate": ((sent as f64 / elapsed) * 10.0).round() / 10.0,
        "sent": sent,
        "errors": errors,
        "skipped_in_flight_cap": skipped,
        "kinds": kinds,
    });
    println!("{summary}");
}
