//! Raw TCP peers, for faults an HTTP library will not produce: a client that stalls, disconnects
//! or never reads, and an upstream that resets or closes in the middle of its answer.

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Opens a connection to `addr`.
pub async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).await.unwrap()
}

/// Writes `bytes` to `stream`.
pub async fn send(stream: &mut TcpStream, bytes: &[u8]) {
    stream.write_all(bytes).await.unwrap();
}

/// Reads an HTTP message head (up to the blank line) within `limit`. Returns the head as text
/// and whatever bytes of the body came with it.
pub async fn read_head(stream: &mut TcpStream, limit: Duration) -> (String, Vec<u8>) {
    let mut buffer = Vec::new();
    let deadline = Instant::now() + limit;
    loop {
        if let Some(end) = find(&buffer, b"\r\n\r\n") {
            let rest = buffer.split_off(end + 4);
            return (String::from_utf8_lossy(&buffer).into_owned(), rest);
        }
        let mut chunk = [0u8; 4096];
        let read = tokio::time::timeout_at(deadline.into(), stream.read(&mut chunk))
            .await
            .expect("no message head in time")
            .unwrap();
        assert!(
            read > 0,
            "closed before the head: {:?}",
            String::from_utf8_lossy(&buffer)
        );
        buffer.extend_from_slice(&chunk[..read]);
    }
}

/// Reads until `needle` has been seen (in `already` or on the wire) within `limit`; returns
/// everything read.
pub async fn read_until(stream: &mut TcpStream, already: Vec<u8>, needle: &[u8], limit: Duration) -> Vec<u8> {
    let mut buffer = already;
    let deadline = Instant::now() + limit;
    while find(&buffer, needle).is_none() {
        let mut chunk = [0u8; 4096];
        let read = tokio::time::timeout_at(deadline.into(), stream.read(&mut chunk))
            .await
            .expect("the expected bytes did not arrive in time")
            .unwrap();
        assert!(
            read > 0,
            "closed before {:?} arrived",
            String::from_utf8_lossy(needle)
        );
        buffer.extend_from_slice(&chunk[..read]);
    }
    buffer
}

/// Reads and discards until the peer closes (EOF or reset), within `limit`. Returns the bytes
/// read, or `None` if the connection was still open at the deadline.
pub async fn read_to_close(stream: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut buffer = Vec::new();
    let deadline = Instant::now() + limit;
    loop {
        let mut chunk = [0u8; 16384];
        match tokio::time::timeout_at(deadline.into(), stream.read(&mut chunk)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(buffer),
            Ok(Ok(read)) => buffer.extend_from_slice(&chunk[..read]),
        }
    }
}

/// The status code of a response head.
pub fn status_of(head: &str) -> u16 {
    head.get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a response head: {head:?}"))
}

/// The first position of `needle` in `haystack`.
pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A fake provider on 127.0.0.1:0 speaking raw HTTP/1.1: it reads each request's head and
/// `Content-Length` body, then hands the connection to `script`, which writes what it likes.
pub struct RawUpstream {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RawUpstream {
    /// Starts the upstream; `script` runs once per connection, after its first request.
    pub async fn start<F, Fut>(script: F) -> RawUpstream
    where
        F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let script = std::sync::Arc::new(script);
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let script = script.clone();
                tokio::spawn(async move {
                    let (head, body) = read_head(&mut stream, Duration::from_secs(10)).await;
                    let length = content_length(&head);
                    let mut body = body;
                    while body.len() < length {
                        let mut chunk = vec![0u8; length - body.len()];
                        let read = stream.read(&mut chunk).await.unwrap();
                        assert!(read > 0, "the request body was cut");
                        body.extend_from_slice(&chunk[..read]);
                    }
                    script(stream).await;
                });
            }
        });
        RawUpstream { addr, task }
    }

    /// The base URL to put in `proxy.toml`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

fn content_length(head: &str) -> usize {
    head.lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, value)| value.trim().parse().unwrap())
}

/// The head of a chunked `text/event-stream` answer.
pub const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

/// `data` framed as one HTTP/1.1 chunk.
pub fn chunk(data: &[u8]) -> Vec<u8> {
    let mut framed = format!("{:x}\r\n", data.len()).into_bytes();
    framed.extend_from_slice(data);
    framed.extend_from_slice(b"\r\n");
    framed
}
