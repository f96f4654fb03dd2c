//! The admin listener on a thread and single-threaded runtime of its own, so that whatever
//! its clients do never takes a turn from a worker of the proxy.

use std::io;
use std::net::SocketAddr;
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use super::{serve, AdminState};

/// A running admin listener; [`AdminThread::stop`] closes it.
#[derive(Debug)]
pub struct AdminThread {
    address: SocketAddr,
    stop: oneshot::Sender<()>,
    thread: JoinHandle<()>,
}

impl AdminThread {
    /// Binds `address` and serves `admin` on a new thread until [`AdminThread::stop`].
    pub fn start(address: SocketAddr, admin: AdminState) -> io::Result<AdminThread> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        // Bound here (so a bad address fails the caller), registered with the new runtime.
        let listener = std::net::TcpListener::bind(address)?;
        listener.set_nonblocking(true)?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let address = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("replaygate-admin".into())
            .spawn(move || {
                runtime.block_on(serve(listener, admin, async {
                    let _ = stopped.await;
                }));
            })?;
        Ok(AdminThread {
            address,
            stop,
            thread,
        })
    }

    /// The address it listens on (the port chosen, when asked for port 0).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Closes the listener and its connections, and waits for the thread to end.
    pub fn stop(self) {
        let _ = self.stop.send(());
        if self.thread.join().is_err() {
            tracing::error!("the admin thread panicked");
        }
    }
}
