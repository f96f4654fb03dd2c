//! A `redis-server` of a test's own, on a free loopback port, killed when dropped. Used by
//! the redis backend's unit tests and by the integration tests.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `redis-server`.
pub struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    /// Starts one on a free loopback port. Panics when `redis-server` is not installed.
    pub fn start() -> RedisServer {
        let mut last_error = String::new();
        // A port found free may be taken before the server binds it: try a few.
        for _ in 0..5 {
            match RedisServer::start_on(free_port()) {
                Ok(server) => return server,
                Err(err) => last_error = err,
            }
        }
        panic!("could not start redis-server: {last_error}");
    }

    /// Starts one on `port`, and waits until it answers PING (5 s at most).
    pub fn start_on(port: u16) -> Result<RedisServer, String> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
            .arg("--dir")
            .arg(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server is not installed: the redis backend's tests need it \
                 (.ci/run installs Debian's redis-server package)"
            ),
            Err(err) => panic!("could not run redis-server: {err}"),
        };
        let mut server = RedisServer { child, port };
        for _ in 0..100 {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("redis-server on port {port} exited: {status}"));
            }
            if answers_ping(port) {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("redis-server on port {port} did not answer PING in 5 s"))
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback port, for a server to listen on (for a port that must stay closed, see
/// `closed_port`).
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
}

fn answers_ping(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let mut answer = [0; 7];
    stream.write_all(b"PING\r\n").is_ok() && stream.read_exact(&mut answer).is_ok() && &answer == b"+PONG\r\n"
}
