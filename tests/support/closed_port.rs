//! A loopback port that refuses connections and stays taken while the tests run.
//!
//! Binding a listener and dropping it frees the port, and the next listener bound to port 0 (a
//! test's own proxy, or one of a test running beside it) may get it: a request meant for "a port
//! nothing listens on" then reaches a live server (a proxy forwarding to itself answers 503, not
//! the 502 the test expects). A socket that is bound but never listens keeps the port out of
//! every other bind, in this process and in the servers it starts, and every connection to it is
//! refused.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::OnceLock;

use tokio::net::TcpSocket;

/// A loopback port nothing listens on, the same one for the whole test binary, held closed for
/// as long as it runs.
pub fn closed_port() -> u16 {
    static CLOSED: OnceLock<TcpSocket> = OnceLock::new();
    let socket = CLOSED.get_or_init(|| {
        let socket = TcpSocket::new_v4().expect("a TCP socket");
        socket
            .bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .expect("a free loopback port");
        socket
    });
    socket.local_addr().expect("a bound socket").port()
}
