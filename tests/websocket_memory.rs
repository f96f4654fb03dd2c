//! WebSocket messages are held in `max_buffered_bytes`: 24 sockets each sending most of a
//! 6 MiB message at once, under a 64 MiB budget, leave the process under 120 MiB at its peak,
//! and the sockets past the budget are refused (`overloaded`, close 1013).
//!
//! A binary of its own, so the process's peak memory is this test's alone (Linux only: the peak
//! is read from `/proc/self/status`).

mod support;

use std::time::Duration;

use support::memory::status_bytes;
use support::proxy::Proxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SOCKETS: usize = 24;
const MESSAGE: usize = 6 << 20;
/// What each socket sends of its message: most of it, never the end, so every message that
/// was taken is still held when the peak is read.
const SENT: usize = MESSAGE - (256 << 10);
const LIMIT: Duration = Duration::from_secs(30);

/// Opens a socket through the proxy, with raw bytes so that nothing buffers the message.
async fn upgrade(proxy: &Proxy) -> TcpStream {
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let head = format!(
        "GET /v1/responses HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        proxy.addr
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    while !answer.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        assert_eq!(
            stream.read(&mut byte).await.unwrap(),
            1,
            "closed during the handshake"
        );
        answer.push(byte[0]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 101"));
    stream
}

/// Sends the head of a 6 MiB text frame (masked with a zero key, so the payload is sent as is)
/// and most of its payload from one small buffer; errors are the proxy refusing it.
async fn send_most(stream: &mut TcpStream) {
    let mut head = vec![0x81, 0x80 | 127];
    head.extend_from_slice(&(MESSAGE as u64).to_be_bytes());
    head.extend_from_slice(&[0, 0, 0, 0]);
    head.extend_from_slice(br#"{"type":"response.create","model":"gpt-5","input":""#);
    if stream.write_all(&head).await.is_err() {
        return;
    }
    let chunk = vec![b'x'; 64 << 10];
    let mut sent = head.len() - 14;
    while sent < SENT {
        let take = chunk.len().min(SENT - sent);
        if stream.write_all(&chunk[..take]).await.is_err() {
            return;
        }
        sent += take;
    }
}

/// Reads the proxy's first frames on a socket for a while: whether it refused the message
/// with an `overloaded` error event and then close 1013.
async fn refused_overloaded(stream: &mut TcpStream) -> bool {
    let mut seen = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(2), async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
            if seen.windows(2).any(|w| w == [0x03, 0xF5]) && seen.contains(&0x88) {
                break;
            }
        }
    });
    let _ = read.await;
    let text = String::from_utf8_lossy(&seen);
    let overloaded = text.contains(r#""code":"overloaded""#) && text.contains(r#""status":503"#);
    // The close frame after the event: 0x88, its length, then 1013.
    let closed = seen
        .windows(4)
        .any(|w| w[0] == 0x88 && w[2] == 0x03 && w[3] == 0xF5);
    overloaded && closed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_sending_large_messages_at_once_stay_within_the_buffer_budget() {
    let config = "[server]\nmax_buffered_bytes = 67108864\ndefault_provider = \"openai\"\n[providers.openai]\nbase_url = \"http://127.0.0.1:9/v1\"\n";
    let proxy = Proxy::start(config, &[]).await;
    let mut streams = Vec::new();
    for _ in 0..SOCKETS {
        streams.push(upgrade(&proxy).await);
    }
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let before = status_bytes("self", "VmRSS");
    let sends = streams.into_iter().map(|mut stream| {
        tokio::spawn(async move {
            send_most(&mut stream).await;
            stream
        })
    });
    let mut streams = Vec::new();
    for send in sends {
        streams.push(
            tokio::time::timeout(LIMIT, send)
                .await
                .expect("a send hung")
                .unwrap(),
        );
    }
    // Let the proxy read what the sockets sent.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let peak = status_bytes("self", "VmHWM");
    let reads = streams.iter_mut().map(refused_overloaded);
    let refused = futures_util::future::join_all(reads)
        .await
        .into_iter()
        .filter(|refused| *refused)
        .count();
    eprintln!(
        "{SOCKETS} sockets x {} MiB under a 64 MiB budget: {refused} refused; resident before {:?} MiB, peak {:?} MiB",
        MESSAGE >> 20,
        before.map(|b| b >> 20),
        peak.map(|p| p >> 20),
    );
    assert!(refused >= 1, "no socket was refused");
    assert!(refused < SOCKETS, "every socket was refused");
    if let (true, Some(peak)) = (reset, peak) {
        assert!(
            peak < 120 << 20,
            "the process peaked at {} MiB (24 messages of 6 MiB would be 144 MiB)",
            peak >> 20
        );
    }
}
