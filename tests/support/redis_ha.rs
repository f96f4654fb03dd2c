//! Redis as production runs it for high availability, started by a test on free loopback ports
//! and killed when dropped: a master with a replica and one Sentinel watching them, or a
//! three-node Redis Cluster (made with `redis-cli --cluster create`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::redis_server::{free_port, RedisServer};

/// A master, its replica and a Sentinel monitoring the master under `name` (quorum 1, down after
/// 1 s, failover timeout 2 s).
pub struct SentinelSet {
    /// The master; `None` once killed.
    pub master: Option<RedisServer>,
    /// The replica (`--replicaof` the master), promoted by the Sentinel when the master dies.
    pub replica: RedisServer,
    /// The Sentinel.
    pub sentinel: RedisServer,
    /// The master's name, as the Sentinel knows it.
    pub name: String,
    _dir: tempfile::TempDir,
}

impl SentinelSet {
    /// Starts the three, and waits (20 s at most) until the Sentinel knows the replica, so a
    /// failover has somewhere to go.
    pub fn start(name: &str) -> SentinelSet {
        Self::start_with_replica(name, &[])
    }

    /// [`SentinelSet::start`], the replica started with `replica_args` too (e.g.
    /// `--replica-read-only no`, so a test can take a record off the replica alone, as an
    /// asynchronous copy that had not caught up would lack it).
    pub fn start_with_replica(name: &str, replica_args: &[&str]) -> SentinelSet {
        let dir = tempfile::tempdir().unwrap();
        let master = RedisServer::start();
        let master_port = master.port().to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", &master_port];
        args.extend_from_slice(replica_args);
        let replica = RedisServer::start_with(&args, None);
        let sentinel = start_sentinel(dir.path(), name, master.port());
        let set = SentinelSet {
            master: Some(master),
            replica,
            sentinel,
            name: name.to_owned(),
            _dir: dir,
        };
        let replica_port = set.replica.port().to_string();
        poll(Duration::from_secs(20), "the sentinel to see the replica", || {
            let replicas: Vec<Vec<String>> = query(
                set.sentinel.port(),
                ::redis::cmd("SENTINEL").arg("REPLICAS").arg(name),
            )
            .ok()?;
            replicas
                .iter()
                .any(|fields| {
                    field(fields, "port") == Some(replica_port.as_str())
                        && field(fields, "master-link-status") == Some("ok")
                        && !field(fields, "flags").unwrap_or("").contains("down")
                })
                .then_some(())
        });
        set
    }

    /// The Sentinel's address, as `[state] sentinels` lists it.
    pub fn sentinel_addr(&self) -> String {
        format!("127.0.0.1:{}", self.sentinel.port())
    }

    /// Kills the master.
    pub fn kill_master(&mut self) {
        self.master = None;
    }

    /// The port of the master the Sentinel names now.
    pub fn named_master_port(&self) -> Option<u16> {
        let addr: Vec<String> = query(
            self.sentinel.port(),
            ::redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.name),
        )
        .ok()?;
        addr.get(1)?.parse().ok()
    }
}

/// A Sentinel alone, monitoring a master `name` at the loopback `master_port` (which may
/// have nothing, or something that never answers, behind it).
pub fn start_sentinel(dir: &Path, name: &str, master_port: u16) -> RedisServer {
    let mut last_error = String::new();
    for attempt in 0..5 {
        let port = free_port();
        // Sentinel rewrites its file, so each gets one of its own.
        let conf = dir.join(format!("sentinel-{port}-{attempt}.conf"));
        std::fs::write(
            &conf,
            format!(
                "sentinel monitor {name} 127.0.0.1 {master_port} 1\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 2000\n"
            ),
        )
        .unwrap();
        let mut command = Command::new("redis-server");
        command
            .arg(&conf)
            .arg("--sentinel")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--loglevel", "warning", "--dir"])
            .arg(dir);
        match RedisServer::launch(command, port, false) {
            Ok(server) => return server,
            Err(err) => last_error = err,
        }
    }
    panic!("could not start a sentinel: {last_error}");
}

/// Three cluster nodes holding every slot between them, no replicas.
pub struct Cluster {
    /// The nodes, in the order they were created.
    pub nodes: Vec<RedisServer>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts three nodes, joins them with `redis-cli --cluster create`, and waits (30 s at
    /// most) until every node says the cluster is ok.
    pub fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<RedisServer> = (0..3).map(|_| start_node(dir.path())).collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = match create.spawn() {
            Ok(child) => child,
            Err(err) => panic!("could not run redis-cli (Debian's redis-tools): {err}"),
        };
        let status = poll(Duration::from_secs(30), "redis-cli --cluster create", || {
            child.try_wait().ok().flatten()
        });
        assert!(status.success(), "redis-cli --cluster create failed: {status}");
        let cluster = Cluster { nodes, _dir: dir };
        for node in &cluster.nodes {
            poll(Duration::from_secs(30), "the cluster to be ok", || {
                let info: String = query(node.port(), ::redis::cmd("CLUSTER").arg("INFO")).ok()?;
                info.contains("cluster_state:ok").then_some(())
            });
        }
        cluster
    }

    /// The nodes' addresses, as `[state] cluster_nodes` lists them.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect()
    }
}

/// One cluster node with its bus on a port of its own (the default, port + 10000, may be past
/// 65535 for a port the OS gave).
fn start_node(dir: &Path) -> RedisServer {
    let mut last_error = String::new();
    for _ in 0..5 {
        let port = free_port();
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
            .args(["--cluster-port", &free_port().to_string()])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--loglevel",
                "warning",
                "--dir",
            ])
            .arg(dir);
        match RedisServer::launch(command, port, false) {
            Ok(server) => return server,
            Err(err) => last_error = err,
        }
    }
    panic!("could not start a cluster node: {last_error}");
}

/// Runs `cmd` on the loopback `port` (1 s to connect, 2 s to answer).
pub fn query<T: ::redis::FromRedisValue>(port: u16, cmd: &::redis::Cmd) -> ::redis::RedisResult<T> {
    let client = ::redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let mut conn = client.get_connection_with_timeout(Duration::from_secs(1))?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    cmd.query(&mut conn)
}

/// The value after `name` in a flat list of names and values (as Sentinel answers).
fn field<'a>(fields: &'a [String], name: &str) -> Option<&'a str> {
    fields
        .chunks(2)
        .find(|pair| pair[0] == name)
        .and_then(|pair| pair.get(1))
        .map(String::as_str)
}

/// Calls `check` every 50 ms until it answers, for `limit` at most (then panics, naming
/// what was awaited).
pub fn poll<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting for {what} after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
