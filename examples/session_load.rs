//! The load benchmark's growing-session load generator (`bench/load/run`, the "-session"
//! targets): where oha sends one fixed body, this sends what an agent sends, each turn after
//! the answer to the one before.
//!
//! ```sh
//! # CONNECTIONS keep-alive HTTP/1.1 connections for SECONDS; each runs sessions one after another
//! cargo run --release --example session_load -- URL START_BODY GOAL_BYTES CONNECTIONS SECONDS
//! # one session, each turn's body printed as a JSON line (for `replaygate check --jsonl`)
//! cargo run --release --example session_load -- --dump URL START_BODY GOAL_BYTES
//! ```
//!
//! A session's first turn is START_BODY (a request body of `bench/load/bodies.py`, its ids
//! tagged anew for each session so no two sessions share one); each next turn is the turn's
//! `input` plus the answer's output items as the answer sent them (its new ids each time) plus a
//! `function_call_output` for each function call among them. The turn whose body passes
//! GOAL_BYTES is the session's last; the connection then starts a new one. Answers are parsed
//! only as far as the next turn needs: the `output` array's items kept as raw text, and each
//! item's `type` and `call_id`.
//!
//! It prints one JSON object: requests answered 200, requests/s, latency p50/p99 (ms, from the
//! request sent to the answer's last byte), answers other than 200, failed requests, the mean
//! body size, sessions completed and their turns, and the generator's own CPU seconds (the run
//! is only a measure of the server while that stays well under SECONDS). A request the deadline
//! cuts is not counted. Any answer other than 200 is a bug in the generator (every turn must
//! be allowed): it then prints the first few to standard error and exits 1. Loopback only; it
//! stops by itself after SECONDS.

#[path = "session_load/session.rs"]
mod session;
#[path = "session_load/tally.rs"]
mod tally;

use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST};
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant};

use session::{Session, Start};
use tally::Tally;

const USAGE: &str = "usage: session_load URL START_BODY GOAL_BYTES CONNECTIONS SECONDS\n       \
                     session_load --dump URL START_BODY GOAL_BYTES";

/// Where the requests go.
struct Target {
    addr: SocketAddr,
    authority: String,
    path: String,
}

/// What every connection shares.
struct Shared {
    target: Target,
    start: Start,
    goal: usize,
    /// The `function_call_output` text, as a JSON string.
    tool_output: String,
    /// Session tags: a random start, then one more for each session.
    tags: AtomicU64,
}

impl Shared {
    fn new_session(&self) -> Session {
        let tag = self.tags.fetch_add(1, Ordering::Relaxed);
        self.start.session(&format!("{tag:016x}"))
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dump = args.first().is_some_and(|a| a == "--dump");
    let args = &args[usize::from(dump)..];
    let parsed = match (dump, args) {
        (true, [url, start, goal]) => shared(url, start, goal).map(|s| (s, 1, 0)),
        (false, [url, start, goal, connections, seconds]) => shared(url, start, goal).and_then(|s| {
            let connections = connections.parse().map_err(|_| "CONNECTIONS: a number")?;
            let seconds = seconds.parse().map_err(|_| "SECONDS: a number")?;
            Ok((s, connections, seconds))
        }),
        _ => Err(USAGE.to_owned()),
    };
    let (shared, connections, seconds) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => {
            eprintln!("session_load: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let shared = Arc::new(shared);
    if dump {
        return runtime.block_on(dump_session(shared));
    }
    let tally = runtime.block_on(run(shared, connections, seconds));
    let clean = tally.clean();
    for problem in tally.problems() {
        eprintln!("session_load: {problem}");
    }
    let summary = tally.summary(seconds as f64, cpu_seconds());
    println!(
        "{}",
        serde_json::to_string(&summary).expect("the summary serializes")
    );
    if clean {
        ExitCode::SUCCESS
    } else {
        eprintln!("session_load: requests were refused or failed: a turn the generator made is wrong");
        ExitCode::FAILURE
    }
}

/// Reads the arguments every mode takes.
fn shared(url: &str, start: &str, goal: &str) -> Result<Shared, String> {
    let uri: Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let host = uri.host().unwrap_or_default().trim_matches(['[', ']']);
    let ip: IpAddr = host
        .parse()
        .map_err(|_| format!("{url}: an IP address, please"))?;
    if uri.scheme_str() != Some("http") || !ip.is_loopback() {
        return Err(format!("{url}: http:// on loopback only"));
    }
    let port = uri.port_u16().unwrap_or(80);
    let body = std::fs::read(start).map_err(|e| format!("{start}: {e}"))?;
    let start = Start::parse(&body).map_err(|e| format!("{start}: {e}"))?;
    let mut tags = std::collections::hash_map::RandomState::new().build_hasher();
    tags.write_u64(u64::from(std::process::id()));
    Ok(Shared {
        target: Target {
            addr: SocketAddr::new(ip, port),
            authority: uri.authority().map(ToString::to_string).unwrap_or_default(),
            path: uri.path_and_query().map_or("/", |p| p.as_str()).to_owned(),
        },
        start,
        goal: goal.parse().map_err(|_| "GOAL_BYTES: a number")?,
        tool_output: session::tool_output(),
        tags: AtomicU64::new(tags.finish() >> 8),
    })
}

/// Runs `connections` connections until `seconds` have passed, and merges what they counted.
async fn run(shared: Arc<Shared>, connections: usize, seconds: u64) -> Tally {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..connections)
        .map(|_| tokio::spawn(drive(shared.clone(), deadline)))
        .collect();
    let mut tally = Tally::default();
    for task in tasks {
        tally.merge(task.await.expect("a connection's task does not panic"));
    }
    tally
}

/// One connection: sessions one after another until `deadline`.
async fn drive(shared: Arc<Shared>, deadline: Instant) -> Tally {
    let mut tally = Tally::default();
    let mut sender = None;
    loop {
        let mut session = shared.new_session();
        loop {
            let ready = match timeout_at(deadline, ready(&mut sender, &shared.target)).await {
                Err(_) => return tally,
                Ok(Err(error)) => {
                    tally.failed(format!("connecting: {error}"));
                    return tally;
                }
                Ok(Ok(ready)) => ready,
            };
            let body = Bytes::copy_from_slice(session.body());
            let bytes = body.len();
            let sent = Instant::now();
            let (status, answer) = match timeout_at(deadline, post(ready, &shared.target, body)).await {
                Err(_) => return tally,
                Ok(Err(error)) => {
                    tally.failed(format!("request: {error}"));
                    sender = None;
                    break;
                }
                Ok(Ok(answered)) => answered,
            };
            if status != StatusCode::OK {
                tally.refused(status.as_u16(), &answer);
                break;
            }
            tally.answered(bytes, sent.elapsed());
            if let Err(error) = session.answered(&answer, &shared.tool_output) {
                tally.failed(error.to_string());
                break;
            }
            if bytes > shared.goal {
                tally.session_done(session.turns());
                break;
            }
        }
    }
}

/// The connection in `slot`, ready for a request: the open one, else a new one.
async fn ready<'a>(
    slot: &'a mut Option<SendRequest<Full<Bytes>>>,
    target: &Target,
) -> Result<&'a mut SendRequest<Full<Bytes>>, Box<dyn std::error::Error + Send + Sync>> {
    if let Some(sender) = slot.as_mut() {
        if sender.ready().await.is_err() {
            // Closed by the server between requests: a new connection, not a failure.
            *slot = None;
        }
    }
    if slot.is_none() {
        let stream = TcpStream::connect(target.addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        *slot = Some(sender);
    }
    Ok(slot.as_mut().expect("set above"))
}

/// Posts `body` and reads the whole answer.
async fn post(
    sender: &mut SendRequest<Full<Bytes>>,
    target: &Target,
    body: Bytes,
) -> Result<(StatusCode, Bytes), hyper::Error> {
    let request = Request::post(target.path.as_str())
        .header(HOST, target.authority.as_str())
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(body))
        .expect("a request of valid parts");
    let answer = sender.send_request(request).await?;
    let status = answer.status();
    Ok((status, answer.into_body().collect().await?.to_bytes()))
}

/// `--dump`: one session against the target, each turn's body printed as a JSON line.
async fn dump_session(shared: Arc<Shared>) -> ExitCode {
    let mut session = shared.new_session();
    let mut sender = None;
    // Bounded: a session passes any goal within this many turns (each adds an answer).
    for _ in 0..100_000 {
        let line: Vec<u8> = session
            .body()
            .iter()
            .map(|&b| if b == b'\n' { b' ' } else { b })
            .collect();
        println!("{}", String::from_utf8_lossy(&line));
        let bytes = line.len();
        let answered = match ready(&mut sender, &shared.target).await {
            Ok(ready) => post(ready, &shared.target, Bytes::from(line))
                .await
                .map_err(|e| e.to_string()),
            Err(error) => Err(error.to_string()),
        };
        let problem = match answered {
            Ok((StatusCode::OK, answer)) => match session.answered(&answer, &shared.tool_output) {
                Ok(()) if bytes > shared.goal => return ExitCode::SUCCESS,
                Ok(()) => continue,
                Err(error) => error.to_string(),
            },
            Ok((status, answer)) => format!("{status}: {}", String::from_utf8_lossy(&answer)),
            Err(error) => error,
        };
        eprintln!("session_load: turn {}: {problem}", session.turns() + 1);
        return ExitCode::FAILURE;
    }
    ExitCode::FAILURE
}

/// The CPU time this process has taken, in seconds (user and system; Linux's /proc, which
/// counts in units of 1/100 s).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let (user, system): (u64, u64) = (fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?);
    Some((user + system) as f64 / 100.0)
}
