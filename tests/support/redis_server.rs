//! A `redis-server` of a test's own, on a free loopback port, killed when dropped. Used by
//! the redis backend's unit tests and by the integration tests.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `redis-server`.
pub struct RedisServer {
    child: Child,
    port: u16,
    tls: bool,
}

/// The TLS files of a `redis-server` that serves TLS only (`--tls-port`, no plain port).
pub struct ServerTls<'a> {
    /// Its certificate (PEM).
    pub cert: &'a Path,
    /// Its key (PEM).
    pub key: &'a Path,
    /// The CA its clients' certificates must chain to (PEM).
    pub ca: &'a Path,
    /// Whether a client must show a certificate (`--tls-auth-clients yes`).
    pub auth_clients: bool,
}

impl RedisServer {
    /// Starts one on a free loopback port. Panics when `redis-server` is not installed.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[], None)
    }

    /// Starts one on a free loopback port with `extra` arguments (config directives such as
    /// `--user NAME on >PASSWORD ~* +@all`), serving TLS only when `tls` is given.
    pub fn start_with(extra: &[&str], tls: Option<&ServerTls<'_>>) -> RedisServer {
        let mut last_error = String::new();
        // A port found free may be taken before the server binds it: try a few.
        for _ in 0..5 {
            match RedisServer::spawn(free_port(), extra, tls) {
                Ok(server) => return server,
                Err(err) => last_error = err,
            }
        }
        panic!("could not start redis-server: {last_error}");
    }

    /// Starts one on `port`, and waits until it answers PING (5 s at most).
    pub fn start_on(port: u16) -> Result<RedisServer, String> {
        RedisServer::spawn(port, &[], None)
    }

    /// Starts one on `port` and waits until it answers PING (with TLS: until it accepts a
    /// connection), 5 s at most.
    fn spawn(port: u16, extra: &[&str], tls: Option<&ServerTls<'_>>) -> Result<RedisServer, String> {
        let mut command = Command::new("redis-server");
        match tls {
            None => command.args(["--port", &port.to_string()]),
            Some(tls) => command
                .args(["--port", "0", "--tls-port", &port.to_string()])
                .arg("--tls-cert-file")
                .arg(tls.cert)
                .arg("--tls-key-file")
                .arg(tls.key)
                .arg("--tls-ca-cert-file")
                .arg(tls.ca)
                .args(["--tls-auth-clients", if tls.auth_clients { "yes" } else { "no" }]),
        };
        command
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
            .args(extra)
            .arg("--dir")
            .arg(std::env::temp_dir());
        RedisServer::launch(command, port, tls.is_some())
    }

    /// Runs `command` (a `redis-server` told to listen on the loopback `port`, with TLS when
    /// `tls`) and waits until it answers PING (with TLS: until it accepts a connection), 5 s
    /// at most.
    pub fn launch(mut command: Command, port: u16, tls: bool) -> Result<RedisServer, String> {
        let child = command
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
        let mut server = RedisServer { child, port, tls };
        for _ in 0..100 {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("redis-server on port {port} exited: {status}"));
            }
            let up = if tls { accepts(port) } else { answers_ping(port) };
            if up {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("redis-server on port {port} did not answer PING in 5 s"))
    }

    /// Its loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL: `redis://127.0.0.1:PORT/`, or `rediss://` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}/", self.port)
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

/// Whether something accepts a TCP connection on the loopback `port`.
fn accepts(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
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
