//! A fake WebSocket provider on 127.0.0.1:0 (tokio-tungstenite): it records each upgrade's
//! path and headers and every message it receives, and answers each `response.create` with a
//! turn of events whose function call has a fresh `call_id`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

/// What the provider does with a socket.
#[derive(Debug, Clone, Copy)]
pub enum Behaviour {
    /// Answers every `response.create` with a turn.
    Turns,
    /// Answers every `response.create` with a turn whose call follows a reasoning item.
    Reasoned,
    /// Refuses every upgrade with this status.
    Refuse(u16),
    /// Answers the first message with `count` text messages of `bytes` bytes each.
    Flood { count: usize, bytes: usize },
    /// Answers every `response.create` with a turn whose `response.completed` carries the
    /// usage of [`turn_usage`].
    Usage,
    /// Answers every `response.create` with its `response.created` alone (its response saying
    /// `store: false`), and nothing more.
    Stall,
    /// Answers every `response.create` with a turn of [`unstored_turn_events`]: its response
    /// says `store: false`.
    Unstored,
}

/// The message that makes the provider close its socket (1001, "provider says bye").
pub const CLOSE_ME: &str = r#"{"type":"test.close_me"}"#;

/// What the provider saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Each upgrade's path and headers.
    pub upgrades: Vec<(String, http::HeaderMap)>,
    /// Every message received, in order, on any socket.
    pub messages: Vec<Message>,
}

pub struct FakeProvider {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Seen>>,
    /// Messages sent so far in `Flood` mode.
    pub flooded: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeProvider {
    // The handshake callback's error type is tungstenite's own.
    #[allow(clippy::result_large_err)]
    pub async fn start(behaviour: Behaviour) -> FakeProvider {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let flooded = Arc::new(AtomicUsize::new(0));
        let (seen_in, flooded_in) = (seen.clone(), flooded.clone());
        let task = tokio::spawn(async move {
            let turns = Arc::new(AtomicUsize::new(0));
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (seen, flooded, turns) = (seen_in.clone(), flooded_in.clone(), turns.clone());
                tokio::spawn(async move {
                    let record = seen.clone();
                    let callback = move |request: &Request, response: Response| {
                        record
                            .lock()
                            .unwrap()
                            .upgrades
                            .push((request.uri().to_string(), request.headers().clone()));
                        match behaviour {
                            Behaviour::Refuse(status) => {
                                let mut refusal = ErrorResponse::new(Some(
                                    r#"{"error":{"message":"no such key"}}"#.to_owned(),
                                ));
                                *refusal.status_mut() = http::StatusCode::from_u16(status).unwrap();
                                Err(refusal)
                            }
                            _ => Ok(response),
                        }
                    };
                    let Ok(mut socket) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
                        return;
                    };
                    while let Some(Ok(message)) = socket.next().await {
                        seen.lock().unwrap().messages.push(message.clone());
                        let text = match &message {
                            Message::Text(text) => text.to_string(),
                            Message::Close(_) => break,
                            _ => continue,
                        };
                        if text == CLOSE_ME {
                            let frame = CloseFrame {
                                code: CloseCode::Away,
                                reason: "provider says bye".into(),
                            };
                            let _ = socket.send(Message::Close(Some(frame))).await;
                            continue;
                        }
                        if let Behaviour::Flood { count, bytes } = behaviour {
                            let filler = format!(
                                r#"{{"type":"response.output_text.delta","delta":"{}"}}"#,
                                "x".repeat(bytes)
                            );
                            for _ in 0..count {
                                if socket.send(Message::text(filler.clone())).await.is_err() {
                                    return;
                                }
                                flooded.fetch_add(1, Ordering::SeqCst);
                            }
                            continue;
                        }
                        let n = turns.fetch_add(1, Ordering::SeqCst) + 1;
                        let events = match behaviour {
                            Behaviour::Reasoned => reasoned_turn_events(n),
                            Behaviour::Usage => usage_turn_events(n),
                            Behaviour::Stall => unstored_turn_events(n)[..1].to_vec(),
                            Behaviour::Unstored => unstored_turn_events(n),
                            _ => turn_events(n),
                        };
                        for event in events {
                            if socket.send(Message::text(event)).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        FakeProvider {
            addr,
            seen,
            flooded,
            task,
        }
    }

    /// `base_url` for the provider: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The text messages received so far.
    pub fn texts(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .messages
            .iter()
            .filter_map(|message| match message {
                Message::Text(text) => Some(text.to_string()),
                _ => None,
            })
            .collect()
    }
}

/// The events of turn `n`: response `resp_n`, one function call `call_n`.
pub fn turn_events(n: usize) -> Vec<String> {
    let call = format!(
        r#"{{"type":"function_call","id":"fc_{n}","call_id":"call_{n}","name":"get_weather","arguments":"{{\"city\":\"Paris\"}}","status":"completed"}}"#
    );
    response_events(n, &[call])
}

/// The events of turn `n` as [`turn_events`], its response saying `store: false` (kept only in
/// the socket's memory).
pub fn unstored_turn_events(n: usize) -> Vec<String> {
    turn_events(n)
        .into_iter()
        .map(|event| event.replace(r#""model":"gpt-5","#, r#""model":"gpt-5","store":false,"#))
        .collect()
}

/// The events of response `resp_n` producing `items`: created, one `output_item.done` for
/// each, completed.
fn response_events(n: usize, items: &[String]) -> Vec<String> {
    let mut events = vec![format!(
        r#"{{"type":"response.created","sequence_number":0,"response":{{"id":"resp_{n}","model":"gpt-5","status":"in_progress","output":[]}}}}"#
    )];
    for (index, item) in items.iter().enumerate() {
        events.push(format!(
            r#"{{"type":"response.output_item.done","sequence_number":{},"output_index":{index},"item":{item}}}"#,
            index + 1
        ));
    }
    events.push(format!(
        r#"{{"type":"response.completed","sequence_number":{},"response":{{"id":"resp_{n}","model":"gpt-5","status":"completed","output":[{}]}}}}"#,
        items.len() + 1,
        items.join(",")
    ));
    events
}

/// The reasoning item of a `Reasoned` turn `n`, as the provider sends it (ids long enough for
/// the ledger to index, as OpenAI's are).
pub fn reasoning_item(n: usize) -> String {
    format!(
        r#"{{"type":"reasoning","id":"rs_68c1a2b3c4d5e6f7{n:04}","summary":[],"encrypted_content":"gAAAAB-{n}"}}"#
    )
}

/// The call of a `Reasoned` turn `n`, as the provider sends it.
pub fn reasoned_call(n: usize) -> String {
    format!(
        r#"{{"type":"function_call","id":"fc_68c1a2b3c4d5e6f7{n:04}","call_id":"call_{n}","name":"get_weather","arguments":"{{\"city\":\"Paris\"}}","status":"completed"}}"#
    )
}

/// The events of a `Reasoned` turn `n`: response `resp_n`, its reasoning item, then call `call_n`.
pub fn reasoned_turn_events(n: usize) -> Vec<String> {
    response_events(n, &[reasoning_item(n), reasoned_call(n)])
}

/// The usage of a `Usage` turn `n`: input, cached input, output and reasoning output tokens.
pub fn turn_usage(n: usize) -> [usize; 4] {
    [1000 * n + 11, 7 * n, 100 * n + 3, 5 * n]
}

/// The events of a `Usage` turn `n`: those of [`turn_events`], the last with its usage.
pub fn usage_turn_events(n: usize) -> Vec<String> {
    let [input, cached, output, reasoning] = turn_usage(n);
    let usage = format!(
        r#""usage":{{"input_tokens":{input},"input_tokens_details":{{"cached_tokens":{cached}}},"output_tokens":{output},"output_tokens_details":{{"reasoning_tokens":{reasoning}}},"total_tokens":{}}},"#,
        input + output
    );
    let mut events = turn_events(n);
    let last = events.pop().expect("a turn ends");
    events.push(last.replacen(
        r#""status":"completed""#,
        &format!(r#"{usage}"status":"completed""#),
        1,
    ));
    events
}
