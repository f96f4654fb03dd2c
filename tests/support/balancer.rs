//! A round-robin TCP balancer on 127.0.0.1:0, as a load balancer in front of replicas: each
//! connection it accepts goes to the next backend in turn, a backend that refuses the
//! connection is skipped for the one after it, and it remembers which backend took each
//! connection. A test may steer the next connection away from one backend (so a session's
//! next turn is sure to land on another replica).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// How long the balancer waits for one backend to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A running balancer; dropping it stops accepting (connections already made run on).
pub struct Balancer {
    /// Where clients connect.
    pub addr: SocketAddr,
    served: Arc<Mutex<Vec<usize>>>,
    avoid: Arc<Mutex<Option<usize>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Balancer {
    /// Starts a balancer over `backends`.
    pub async fn start(backends: Vec<SocketAddr>) -> Balancer {
        assert!(!backends.is_empty(), "a balancer needs a backend");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let served = Arc::new(Mutex::new(Vec::new()));
        let log = served.clone();
        let backends = Arc::new(backends);
        let cursor = Arc::new(AtomicUsize::new(0));
        let avoid = Arc::new(Mutex::new(None));
        let avoided = avoid.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let backends = backends.clone();
                let cursor = cursor.clone();
                let log = log.clone();
                let avoid = avoided.lock().unwrap().take();
                tokio::spawn(async move {
                    if let Some((index, backend)) = connect_next(&backends, &cursor, avoid).await {
                        log.lock().unwrap().push(index);
                        relay(client, backend).await;
                    }
                    // No backend accepted: dropping the client's connection closes it.
                });
            }
        });
        Balancer {
            addr,
            served,
            avoid,
            task,
        }
    }

    /// The backend (its index in the list given to `start`) that took each connection, in
    /// the order they were made.
    pub fn served(&self) -> Vec<usize> {
        self.served.lock().unwrap().clone()
    }

    /// Makes the next connection skip backend `index` (its turn passes to the one after it).
    pub fn avoid_next(&self, index: usize) {
        *self.avoid.lock().unwrap() = Some(index);
    }

    /// The backend that took the latest connection.
    pub fn last_served(&self) -> Option<usize> {
        self.served.lock().unwrap().last().copied()
    }
}

/// Connects to the next backend in turn, moving the shared cursor past each one that refuses,
/// so the connection after a skipped backend goes on in the same order; tries each at most once,
/// and `avoid` not at all.
async fn connect_next(
    backends: &[SocketAddr],
    cursor: &AtomicUsize,
    avoid: Option<usize>,
) -> Option<(usize, TcpStream)> {
    for _ in 0..backends.len() {
        let index = cursor.fetch_add(1, Ordering::Relaxed) % backends.len();
        if Some(index) == avoid {
            continue;
        }
        let attempt = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(backends[index])).await;
        if let Ok(Ok(stream)) = attempt {
            return Some((index, stream));
        }
    }
    None
}

/// Copies bytes both ways until either side closes.
async fn relay(mut client: TcpStream, mut backend: TcpStream) {
    let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
}
