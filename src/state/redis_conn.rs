//! How the `redis` backend reaches its server (docs/operations.md#redis-for-several-replicas): one
//! server at a url, the master the sentinels name, or a Redis Cluster. [`Connector`] makes a
//! [`Conn`]; the
//! store keeps it until a failure says it should ask again.

use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use ::redis::cluster::ClusterClient;
use ::redis::cluster_async::ClusterConnection;
use ::redis::sentinel::SentinelClient;
use ::redis::{
    AsyncConnectionConfig, Client, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult,
    ServerErrorKind, Value,
};

/// What makes connections, made once when the store is.
pub(super) enum Connector {
    /// One server: a reconnecting manager, made without waiting for the server.
    Direct(Client),
    /// Redis Sentinel: asked for the master on every new connection. Asking needs the client
    /// mutably (it keeps its connections to the sentinels), so one call asks at a time.
    Sentinel(tokio::sync::Mutex<SentinelClient>),
    /// Redis Cluster: the nodes are learnt from the listed ones, and redirections followed.
    Cluster(ClusterClient),
}

/// A connection of one of the three kinds. Cheap to clone: clones share it.
#[derive(Clone)]
pub(super) enum Conn {
    Direct(ConnectionManager),
    Master(MultiplexedConnection),
    Cluster(ClusterConnection),
}

/// How the layout of keys must be, for the server behind a [`Connector`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slots {
    /// One server holds every key: several keys may go in one atomic MULTI.
    One,
    /// Keys spread over a cluster's hash slots: one command per slot.
    Many,
}

impl Connector {
    /// The key layout this server needs.
    pub(super) fn slots(&self) -> Slots {
        match self {
            Connector::Direct(_) | Connector::Sentinel(_) => Slots::One,
            Connector::Cluster(_) => Slots::Many,
        }
    }

    /// A connection that needs no waiting, if this kind has one: the direct manager connects
    /// on its first command.
    pub(super) fn lazy(&self, timeout: Duration) -> Option<RedisResult<Conn>> {
        let Connector::Direct(client) = self else {
            return None;
        };
        // No retries inside the manager: a failed connection attempt fails the call that
        // waited for it, and the next call starts another, so recovery follows the traffic.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(0);
        Some(ConnectionManager::new_lazy_with_config(client.clone(), config).map(Conn::Direct))
    }

    /// A new connection: for Sentinel, to the master the sentinels name now (checked to be a
    /// master with `ROLE`); for a cluster, to the nodes its layout names.
    pub(super) async fn connect(&self, timeout: Duration) -> RedisResult<Conn> {
        match self {
            Connector::Direct(_) => match self.lazy(timeout) {
                Some(conn) => conn,
                None => unreachable!("a direct connector is lazy"),
            },
            Connector::Sentinel(client) => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout));
                let master = client.lock().await.async_get_client().await?;
                let conn = master
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                Ok(Conn::Master(conn))
            }
            Connector::Cluster(client) => client.get_async_connection().await.map(Conn::Cluster),
        }
    }

    /// Whether a connection that failed with `err` should be given up, so the next call makes
    /// a new one. A timeout always does (a peer that vanished without a reset never recovers).
    /// Under Sentinel any failure does: the next call asks the sentinels again, which is how a
    /// failover is followed (a demoted master answers READONLY, a dead one not at all). A
    /// cluster connection that lost every node starts again from the listed ones.
    pub(super) fn gives_up(&self, err: &RedisError) -> bool {
        match self {
            Connector::Sentinel(_) => true,
            Connector::Direct(_) => err.is_timeout(),
            Connector::Cluster(_) => err.is_timeout() || err.kind() == ErrorKind::ClusterConnectionNotFound,
        }
    }
}

impl Connector {
    /// Whether a call that failed with `err` on a connection made before it may be run once
    /// more on a new connection. Under Sentinel, when the connection is gone (reset, closed,
    /// refused) or its server answers `READONLY` (a master demoted in a failover): the
    /// sentinels may already name the new master. Running a command twice is harmless here
    /// (lookups read, records set the same values; a rate count cut off after it counted
    /// counts once more, which only a reset of a live master's connection can do). Not on a
    /// timeout, which has used the call's time. A direct connection reconnects by itself, and
    /// a cluster connection follows its own redirections.
    pub(super) fn renews(&self, err: &RedisError) -> bool {
        match self {
            Connector::Sentinel(_) => {
                !err.is_timeout()
                    && (err.is_connection_dropped()
                        || err.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly))
            }
            Connector::Direct(_) | Connector::Cluster(_) => false,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Direct(conn) => conn.req_packed_command(cmd),
            Conn::Master(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Direct(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Master(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Direct(conn) => conn.get_db(),
            Conn::Master(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}
