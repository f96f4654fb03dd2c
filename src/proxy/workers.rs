//! Thread per core: several single-threaded runtimes serve one listening socket.
//!
//! Each worker thread runs [`run`] on a current-thread runtime of its own, with its own handle
//! on the listening socket and its own [`ProxyState`] (so its own upstream connection pools).
//! A connection stays on the thread that accepted it until it closes, so the request path has
//! no work stealing and no wakeups across threads. Every worker waits on the same socket and
//! the first free one takes a new connection, so a busy worker takes fewer. The workers share
//! the gate (one schema cache), the in-flight limit and the body budget through their states.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::runtime::Runtime;
use tokio::sync::watch;

use super::server::{run, ServerSettings};
use super::state::ProxyState;

/// The runtime of one worker: single-threaded, with I/O, timers and signals.
pub fn worker_runtime() -> io::Result<Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()
}

/// Serves `listener` on `runtime` (the calling thread) and on one more thread per extra state,
/// until `shutdown` completes; then every worker drains as [`run`] does, and this returns once
/// all of them have stopped.
///
/// `listener` must be non-blocking (as [`TcpListener::into_std`] leaves it). The first state
/// serves on the calling thread, which also polls `shutdown`.
pub fn run_workers(
    runtime: &Runtime,
    listener: std::net::TcpListener,
    states: Vec<ProxyState>,
    settings: ServerSettings,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let mut states = states.into_iter();
    let first = states
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "at least one worker is needed"))?;
    let (stop, stopped) = watch::channel(false);
    let mut threads = Vec::new();
    let mut started = Ok(());
    for (index, state) in states.enumerate() {
        match spawn_worker(index + 1, &listener, state, settings, stopped.clone()) {
            Ok(thread) => threads.push(thread),
            Err(error) => {
                started = Err(error);
                break;
            }
        }
    }
    if started.is_ok() {
        started = register(runtime, listener).map(|listener| {
            runtime.block_on(serve(listener, first, settings, async {
                shutdown.await;
                let _ = stop.send(true);
            }))
        });
    }
    // Whatever happened above, no worker may outlive this call.
    let _ = stop.send(true);
    for thread in threads {
        if thread.join().is_err() {
            tracing::error!("a worker thread panicked");
        }
    }
    started
}

/// One worker's life on its runtime: the tick, then [`run`] until `shutdown`.
async fn serve(
    listener: TcpListener,
    state: ProxyState,
    settings: ServerSettings,
    shutdown: impl Future<Output = ()>,
) {
    tokio::spawn(timer_tick());
    run(listener, Arc::new(state), settings, shutdown).await;
}

/// Registers a handle on the listening socket with `runtime`'s reactor.
fn register(runtime: &Runtime, listener: std::net::TcpListener) -> io::Result<TcpListener> {
    let _entered = runtime.enter();
    TcpListener::from_std(listener)
}

/// Keeps a timer due within a second on the worker's runtime, for as long as it runs.
///
/// tokio wakes a sleeping driver (an eventfd write and one more poll) whenever a new timer is
/// due before the earliest deadline the driver went to sleep with. Each request arms timers of
/// tens of seconds (the next request head's, the body's) and drops them soon after, and with
/// none armed the driver sleeps until the upstream pool's idle check, 90 s away; so nearly every
/// request would pay that wake-up. With a tick always under a second away, they never come
/// first. The cost is one wake-up a second per worker.
async fn timer_tick() {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
    }
}

/// Starts worker `index` on a thread and runtime of its own. Everything that can fail (the
/// runtime, the socket handle, the thread) fails here, before the worker serves.
fn spawn_worker(
    index: usize,
    listener: &std::net::TcpListener,
    state: ProxyState,
    settings: ServerSettings,
    mut stopped: watch::Receiver<bool>,
) -> io::Result<JoinHandle<()>> {
    let runtime = worker_runtime()?;
    let listener = register(&runtime, listener.try_clone()?)?;
    std::thread::Builder::new()
        .name(format!("replaygate-worker-{index}"))
        .spawn(move || {
            runtime.block_on(serve(listener, state, settings, async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            }));
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::io::{Read, Write};
    use std::time::Instant;

    fn settings() -> ServerSettings {
        ServerSettings {
            header_read_timeout: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(5),
        }
    }

    fn status_line(address: std::net::SocketAddr) -> io::Result<String> {
        let mut stream = std::net::TcpStream::connect(address)?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer.lines().next().unwrap_or_default().to_owned())
    }

    #[test]
    fn workers_answer_on_one_socket_and_all_stop_on_shutdown() {
        let config = Config::embedded_default().unwrap();
        // No keys: every provider is unconfigured, so each request is answered at once.
        assert_eq!(ProxyState::for_workers(&config, &|_| None, 0).unwrap().len(), 1);
        let states = ProxyState::for_workers(&config, &|_| None, 2).unwrap();
        assert_eq!(states.len(), 2);
        assert!(Arc::ptr_eq(&states[0].gate, &states[1].gate));
        assert!(Arc::ptr_eq(&states[0].in_flight, &states[1].in_flight));
        assert!(Arc::ptr_eq(&states[0].buffered, &states[1].buffered));

        let runtime = worker_runtime().unwrap();
        let listener = runtime
            .block_on(async { TcpListener::bind("127.0.0.1:0").await?.into_std() })
            .unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = std::thread::spawn(move || {
            run_workers(&runtime, listener, states, settings(), async {
                let _ = stopped.await;
            })
        });

        for _ in 0..8 {
            assert_eq!(status_line(address).unwrap(), "HTTP/1.1 503 Service Unavailable");
        }
        stop.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !server.is_finished() {
            assert!(Instant::now() < deadline, "the workers did not stop");
            std::thread::sleep(Duration::from_millis(10));
        }
        server.join().unwrap().unwrap();
        assert!(
            status_line(address).is_err(),
            "the socket is closed once every worker stopped"
        );
    }

    #[test]
    fn no_state_means_no_workers() {
        let runtime = worker_runtime().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let error = run_workers(&runtime, listener, Vec::new(), settings(), async {}).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }
}
