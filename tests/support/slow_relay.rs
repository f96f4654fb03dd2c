//! A TCP relay on a free loopback port in front of a server (a `redis-server`), passing
//! what the client sends at once and holding each chunk the server sends back for a delay
//! the test sets (and may change while it runs). Chunks are held side by side, not one after
//! another: replies the server sends together arrive together, one delay later, as a slow
//! network would deliver them. Its tasks end when it is dropped.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;

/// A running relay.
pub struct SlowRelay {
    port: u16,
    delay_ms: Arc<AtomicU64>,
    tasks: Arc<Mutex<Vec<AbortHandle>>>,
}

impl SlowRelay {
    /// Starts one forwarding to the loopback `to` port, holding the server's chunks `delay`.
    pub async fn start(to: u16, delay: Duration) -> SlowRelay {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let delay_ms = Arc::new(AtomicU64::new(millis(delay)));
        let tasks: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (held, shared) = (delay_ms.clone(), tasks.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let connection = tokio::spawn(relay(client, to, held.clone()));
                shared.lock().unwrap().push(connection.abort_handle());
            }
        });
        tasks.lock().unwrap().push(accept.abort_handle());
        SlowRelay {
            port,
            delay_ms,
            tasks,
        }
    }

    /// `redis://127.0.0.1:PORT/`: the server, through the relay.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Holds the chunks the server sends from now on `delay` (those already held keep theirs).
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms.store(millis(delay), Ordering::Relaxed);
    }
}

impl Drop for SlowRelay {
    fn drop(&mut self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

fn millis(delay: Duration) -> u64 {
    u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)
}

/// Relays one client's connection until either side closes it.
async fn relay(client: TcpStream, to: u16, delay_ms: Arc<AtomicU64>) {
    let Ok(server) = TcpStream::connect(SocketAddr::from((Ipv4Addr::LOCALHOST, to))).await else {
        return;
    };
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let upward = async move {
        let _ = tokio::io::copy(&mut from_client, &mut to_server).await;
        let _ = to_server.shutdown().await;
    };
    // Each chunk is stamped with the time it is due when it arrives, so chunks in flight
    // together are each held the delay, not the sum of theirs.
    let (chunks, mut due) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut buffer = vec![0; 16 * 1024];
        while let Ok(read @ 1..) = from_server.read(&mut buffer).await {
            let at = Instant::now() + Duration::from_millis(delay_ms.load(Ordering::Relaxed));
            if chunks.send((at, buffer[..read].to_vec())).is_err() {
                break;
            }
        }
    };
    let write = async move {
        while let Some((at, chunk)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if to_client.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to_client.shutdown().await;
    };
    tokio::join!(upward, read, write);
}
