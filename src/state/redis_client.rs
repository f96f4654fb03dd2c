//! The `redis` backend's client: the target of `[state]` (a url, sentinels, cluster nodes) with
//! the login and TLS material read at start (the passwords from the variables `password_env`
//! and `sentinel_password_env` name, the PEM files the `tls_*_file` keys name).
//!
//! TLS is rustls with the process's crypto provider (aws-lc-rs): the server's certificate is
//! checked against `tls_ca_file` when set, else against the system's trust store, and its name
//! against the host connected to. TLS never falls back to plain TCP.

use std::fmt;
use std::time::Duration;

use ::redis::cluster::ClusterClientBuilder;
use ::redis::sentinel::{SentinelClientBuilder, SentinelServerType};
use ::redis::{Client, ClientTlsConfig, ConnectionAddr, IntoConnectionInfo, TlsCertificates, TlsMode};

use super::redis_conn::Connector;
use super::StoreError;
use crate::config::{NodeAddr, RedisAccess, RedisTarget};

/// What connecting needs beyond the URL. Its `Debug` shows which parts are set, never the
/// password or a key.
#[derive(Clone, Default)]
pub struct RedisLogin {
    /// The ACL user; `None` logs in as the default user (when there is a password).
    pub username: Option<String>,
    /// The password, sent with `AUTH`.
    pub password: Option<String>,
    /// CA certificates (PEM) trusted in place of the system's trust store.
    pub ca_pem: Option<Vec<u8>>,
    /// The client certificate chain and its private key (PEM), for mutual TLS.
    pub client_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// The sentinels' password (`sentinel_password_env`), sent to them with `AUTH`.
    pub sentinel_password: Option<String>,
}

impl fmt::Debug for RedisLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLogin")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("ca_pem", &self.ca_pem.is_some())
            .field("client_pem", &self.client_pem.is_some())
            .field(
                "sentinel_password",
                &self.sentinel_password.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl RedisLogin {
    /// The login `access` describes: the password read through `env`, the files read now.
    /// An unset (or empty) password variable or an unreadable file is an error that names
    /// the variable or the file, never a value.
    pub(crate) fn read(
        access: &RedisAccess,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<RedisLogin, StoreError> {
        let password = access
            .password_env
            .as_deref()
            .map(|variable| read_secret("password_env", variable, env))
            .transpose()?;
        let read = |key: &str, path: &std::path::Path| {
            std::fs::read(path)
                .map_err(|e| StoreError::Setup(format!("{key} {} cannot be read: {e}", path.display())))
        };
        let ca_pem = access
            .tls_ca_file
            .as_deref()
            .map(|path| read("tls_ca_file", path))
            .transpose()?;
        let client_pem = match &access.tls_client {
            Some(files) => Some((
                read("tls_cert_file", &files.cert_file)?,
                read("tls_key_file", &files.key_file)?,
            )),
            None => None,
        };
        Ok(RedisLogin {
            username: access.username.clone(),
            password,
            ca_pem,
            client_pem,
            sentinel_password: None,
        })
    }

    /// [`RedisLogin::read`], and the sentinels' password when `target` names one.
    pub(crate) fn read_for(
        target: &RedisTarget,
        access: &RedisAccess,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<RedisLogin, StoreError> {
        let mut login = RedisLogin::read(access, env)?;
        if let RedisTarget::Sentinel {
            password_env: Some(variable),
            ..
        } = target
        {
            login.sentinel_password = Some(read_secret("sentinel_password_env", variable, env)?);
        }
        Ok(login)
    }

    /// What makes connections to `target`, each bounded by `timeout`, and where it is, for
    /// people. Nothing is connected here.
    pub(super) fn connector(
        &self,
        target: &RedisTarget,
        timeout: Duration,
    ) -> Result<(Connector, String), StoreError> {
        let setup = |what: &str| {
            let what = what.to_owned();
            move |err: ::redis::RedisError| StoreError::Setup(format!("{what}: {err}"))
        };
        match target {
            RedisTarget::Url(url) => {
                let client = self.client(url)?;
                let server = format!("{:?}", client.get_connection_info().addr());
                Ok((Connector::Direct(client), server))
            }
            RedisTarget::Sentinel {
                sentinels,
                master_name,
                tls,
                ..
            } => {
                let addrs = sentinels.iter().map(|node| node_addr(node, *tls));
                let mut builder = SentinelClientBuilder::new(addrs, master_name, SentinelServerType::Master)
                    .map_err(setup("the sentinel settings are unusable"))?;
                if let Some(password) = &self.sentinel_password {
                    builder = builder.set_client_to_sentinel_password(password);
                }
                if let Some(username) = &self.username {
                    builder = builder.set_client_to_redis_username(username);
                }
                if let Some(password) = &self.password {
                    builder = builder.set_client_to_redis_password(password);
                }
                if *tls {
                    builder = builder
                        .set_client_to_sentinel_certificates(self.certificates())
                        .set_client_to_redis_tls_mode(TlsMode::Secure)
                        .set_client_to_redis_certificates(self.certificates());
                } else {
                    self.no_tls_files("tls = true")?;
                }
                let client = builder
                    .build()
                    .map_err(setup("the sentinel settings are unusable"))?;
                let server = format!("sentinels {} (master {master_name})", list(sentinels));
                Ok((Connector::Sentinel(tokio::sync::Mutex::new(client)), server))
            }
            RedisTarget::Cluster { nodes, tls } => {
                let scheme = if *tls { "rediss" } else { "redis" };
                let urls = nodes.iter().map(|node| format!("{scheme}://{node}"));
                let mut builder = ClusterClientBuilder::new(urls)
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    // A redirection (MOVED, ASK) is a retry: a few, quickly, all within the
                    // timeout above, which also bounds the whole request.
                    .retries(3)
                    .min_retry_wait(10)
                    .max_retry_wait(100);
                if let Some(username) = &self.username {
                    builder = builder.username(username);
                }
                if let Some(password) = &self.password {
                    builder = builder.password(password);
                }
                if *tls {
                    builder = builder.tls(TlsMode::Secure).certs(self.certificates());
                } else {
                    self.no_tls_files("tls = true")?;
                }
                let client = builder
                    .build()
                    .map_err(setup("the cluster settings are unusable"))?;
                Ok((Connector::Cluster(client), format!("cluster {}", list(nodes))))
            }
        }
    }

    /// The CA and client certificate to connect with, as the redis client takes them.
    fn certificates(&self) -> TlsCertificates {
        TlsCertificates {
            client_tls: self.client_pem.as_ref().map(|(cert, key)| ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            root_cert: self.ca_pem.clone(),
        }
    }

    /// An error when TLS files are set for connections without TLS (`what` turns it on).
    fn no_tls_files(&self, what: &str) -> Result<(), StoreError> {
        if self.ca_pem.is_some() || self.client_pem.is_some() {
            return Err(StoreError::Setup(format!(
                "TLS files are set for connections without TLS; set {what}"
            )));
        }
        Ok(())
    }

    /// The client for `url` with this login. A `rediss://` URL gets TLS with the CA and client
    /// certificate given here, if any. Errors never repeat the URL or the password.
    pub(super) fn client(&self, url: &str) -> Result<Client, StoreError> {
        let invalid =
            |err: ::redis::RedisError| StoreError::Setup(format!("the redis url is invalid: {err}"));
        let mut info = url.into_connection_info().map_err(invalid)?;
        let mut settings = info.redis_settings().clone();
        if let Some(username) = &self.username {
            settings = settings.set_username(username);
        }
        if let Some(password) = &self.password {
            settings = settings.set_password(password);
        }
        info = info.set_redis_settings(settings);
        let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        if !tls {
            self.no_tls_files("a rediss:// url")?;
            return Client::open(info).map_err(invalid);
        }
        Client::build_with_tls(info, self.certificates())
            .map_err(|err| StoreError::Setup(format!("the redis TLS settings are unusable: {err}")))
    }
}

/// The value of the variable `key` (`password_env`, `sentinel_password_env`) names; an error
/// naming the variable, never a value, when it is unset or empty.
fn read_secret(
    key: &str,
    variable: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, StoreError> {
    match env(variable) {
        Some(secret) if !secret.is_empty() => Ok(secret),
        _ => Err(StoreError::Setup(format!(
            "{key} names {variable}, which is not set (or empty) in the environment"
        ))),
    }
}

/// A sentinel's address, with TLS or without.
fn node_addr(node: &NodeAddr, tls: bool) -> ConnectionAddr {
    if tls {
        ConnectionAddr::TcpTls {
            host: node.host.clone(),
            port: node.port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(node.host.clone(), node.port)
    }
}

fn list(nodes: &[NodeAddr]) -> String {
    nodes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::state::redis::test_server::{RedisServer, ServerTls};
    use crate::state::test_records::one_reasoning_item;
    use crate::state::{now_unix, RedisStore};
    use crate::test_pki::{Issued, TestCa};

    /// A TLS-only `redis-server` whose certificate, for `names`, `ca` signed.
    fn tls_server(ca: &TestCa, names: &[&str], dir: &Path, auth_clients: bool) -> RedisServer {
        let server = ca.issue(names, dir, "server");
        let ca_file = ca.write(dir, "server-ca");
        RedisServer::start_with(
            &[],
            Some(&ServerTls {
                cert: &server.cert,
                key: &server.key,
                ca: &ca_file,
                auth_clients,
            }),
        )
    }

    fn trusting(ca: &TestCa, dir: &Path) -> RedisLogin {
        RedisLogin {
            ca_pem: Some(std::fs::read(ca.write(dir, "trusted")).unwrap()),
            ..RedisLogin::default()
        }
    }

    fn store(url: &str, login: &RedisLogin) -> RedisStore {
        RedisStore::connect_with(url, login, "rg-test", Duration::from_secs(2)).unwrap()
    }

    /// The error of a store that must not answer.
    async fn refused(store: &RedisStore) -> String {
        match store.ping().await {
            Err(err @ StoreError::Unavailable(_)) => err.to_string(),
            other => panic!("expected an unavailable store, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_record_round_trips_over_tls_with_a_private_ca() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("replaygate test redis CA");
        let server = tls_server(&ca, &["127.0.0.1", "localhost"], dir.path(), false);
        assert!(server.url().starts_with("rediss://"));
        let store = store(&server.url(), &trusting(&ca, dir.path()));
        store.ping().await.unwrap();
        let stored = one_reasoning_item("resp_tls", "rs_tls", now_unix() + 600);
        store.put_response(&stored).await.unwrap();
        assert_eq!(store.response("resp_tls").await.unwrap(), Some(stored));
        let found = store.items_by_digest(&[[7; 32]]).await.unwrap();
        assert_eq!(found[0].as_ref().unwrap().response_id, "resp_tls");
    }

    #[tokio::test]
    async fn an_untrusted_certificate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("replaygate test redis CA");
        let server = tls_server(&ca, &["127.0.0.1"], dir.path(), false);
        // Another CA than the server's; then the system's roots, which do not hold it either.
        let other = TestCa::new("another CA");
        for login in [trusting(&other, dir.path()), RedisLogin::default()] {
            let store = store(&server.url(), &login);
            let err = refused(&store).await;
            assert!(err.contains("invalid peer certificate: UnknownIssuer"), "{err}");
        }
    }

    #[tokio::test]
    async fn a_certificate_for_another_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("replaygate test redis CA");
        let server = tls_server(&ca, &["redis.internal"], dir.path(), false);
        let store = store(&server.url(), &trusting(&ca, dir.path()));
        let err = refused(&store).await;
        assert!(
            err.contains("invalid peer certificate: certificate not valid for name \"127.0.0.1\""),
            "{err}"
        );
    }

    #[tokio::test]
    async fn an_expired_certificate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("replaygate test redis CA");
        let server = ca.issue_expired(&["127.0.0.1"], dir.path(), "server");
        let ca_file = ca.write(dir.path(), "server-ca");
        let server = RedisServer::start_with(
            &[],
            Some(&ServerTls {
                cert: &server.cert,
                key: &server.key,
                ca: &ca_file,
                auth_clients: false,
            }),
        );
        let err = refused(&store(&server.url(), &trusting(&ca, dir.path()))).await;
        assert!(
            err.contains("invalid peer certificate: certificate expired"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn tls_never_falls_back_to_plain_and_plain_never_reaches_a_tls_port() {
        let dir = tempfile::tempdir().unwrap();
        let plain = RedisServer::start();
        let tls_url = plain.url().replacen("redis://", "rediss://", 1);
        let ca = TestCa::new("replaygate test redis CA");
        let err = refused(&store(&tls_url, &trusting(&ca, dir.path()))).await;
        assert!(!err.contains("PONG"), "{err}");

        let server = tls_server(&ca, &["127.0.0.1"], dir.path(), false);
        let plain_url = server.url().replacen("rediss://", "redis://", 1);
        refused(&store(&plain_url, &RedisLogin::default())).await;
        // TLS files with a plain URL are refused when the store is made.
        let err = RedisStore::connect_with(
            &plain_url,
            &trusting(&ca, dir.path()),
            "rg",
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(matches!(err, StoreError::Setup(_)), "{err:?}");
    }

    #[tokio::test]
    async fn mutual_tls_needs_the_client_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("replaygate test redis CA");
        let server = tls_server(&ca, &["127.0.0.1"], dir.path(), true);
        let Issued { cert, key } = ca.issue(&["replaygate"], dir.path(), "client");
        let with_cert = RedisLogin {
            client_pem: Some((std::fs::read(cert).unwrap(), std::fs::read(key).unwrap())),
            ..trusting(&ca, dir.path())
        };
        let store_with = store(&server.url(), &with_cert);
        store_with.ping().await.unwrap();
        assert_eq!(
            store_with
                .hit_rate("payments", std::num::NonZeroU32::new(3).unwrap())
                .await
                .unwrap(),
            Ok(())
        );
        // Without one the server ends the handshake.
        refused(&store(&server.url(), &trusting(&ca, dir.path()))).await;
        // A certificate from a CA the server does not trust is refused too.
        let stranger = TestCa::new("a stranger").issue(&["replaygate"], dir.path(), "stranger");
        let with_stranger = RedisLogin {
            client_pem: Some((
                std::fs::read(stranger.cert).unwrap(),
                std::fs::read(stranger.key).unwrap(),
            )),
            ..trusting(&ca, dir.path())
        };
        refused(&store(&server.url(), &with_stranger)).await;
    }

    /// The ACL user docs/operations.md#state-backends tells operators to make: its keys, and only
    /// the commands the store sends.
    const ACL_USER: [&str; 16] = [
        "--user",
        "replaygate",
        "on",
        ">right-horse-battery",
        "~rg-test:*",
        "+get",
        "+mget",
        "+set",
        "+ping",
        "+evalsha",
        "+eval",
        "+script|load",
        "+multi",
        "+exec",
        "+time",
        "+info",
    ];

    #[tokio::test]
    async fn an_acl_user_logs_in_with_its_password() {
        let server = RedisServer::start_with(&ACL_USER, None);
        let login = |password: &str| RedisLogin {
            username: Some("replaygate".into()),
            password: Some(password.into()),
            ..RedisLogin::default()
        };
        let good = store(&server.url(), &login("right-horse-battery"));
        good.ping().await.unwrap();
        let stored = one_reasoning_item("resp_acl", "rs_acl", now_unix() + 600);
        good.put_response(&stored).await.unwrap();
        assert_eq!(good.response("resp_acl").await.unwrap(), Some(stored));
        let found = good.items_by_digest(&[[7; 32]]).await.unwrap();
        assert_eq!(found[0].as_ref().unwrap().response_id, "resp_acl");
        let per_minute = std::num::NonZeroU32::new(1).unwrap();
        assert_eq!(good.hit_rate("payments", per_minute).await.unwrap(), Ok(()));
        assert!(good.hit_rate("payments", per_minute).await.unwrap().is_err());

        let bad = store(&server.url(), &login("wrong-staple-guess"));
        let err = refused(&bad).await;
        assert!(err.contains("Password authentication failed"), "{err}");
        assert!(
            !err.contains("wrong-staple-guess") && !err.contains("right-horse"),
            "{err}"
        );
        let err = bad
            .put_response(&one_reasoning_item("r", "i", now_unix() + 60))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    }

    #[test]
    fn the_password_comes_from_its_variable_and_is_never_shown() {
        let access = RedisAccess {
            username: Some("replaygate".into()),
            password_env: Some("RG_TEST_REDIS_PASSWORD".into()),
            ..RedisAccess::default()
        };
        let env = |name: &str| (name == "RG_TEST_REDIS_PASSWORD").then(|| "hunter2-secret".to_owned());
        let login = RedisLogin::read(&access, &env).unwrap();
        assert_eq!(login.password.as_deref(), Some("hunter2-secret"));
        assert_eq!(login.username.as_deref(), Some("replaygate"));
        let shown = format!("{login:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("redacted"),
            "{shown}"
        );

        let unset: [fn(&str) -> Option<String>; 2] = [|_| None, |_| Some(String::new())];
        for env in unset {
            let err = RedisLogin::read(&access, &env).unwrap_err();
            assert!(matches!(err, StoreError::Setup(_)), "{err:?}");
            assert!(err.to_string().contains("RG_TEST_REDIS_PASSWORD"), "{err}");
        }
        let missing = RedisAccess {
            tls_ca_file: Some("/nonexistent/replaygate-ca.pem".into()),
            ..RedisAccess::default()
        };
        let err = RedisLogin::read(&missing, &|_| None).unwrap_err();
        assert!(
            err.to_string()
                .contains("tls_ca_file /nonexistent/replaygate-ca.pem"),
            "{err}"
        );
    }
}
