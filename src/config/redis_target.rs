//! `[state]` keys that say where the `redis` backend finds its server: one `url`, the
//! `sentinels` that know the master called `master_name`, or the `cluster_nodes` of a Redis
//! Cluster. Exactly one of the three is set.

use std::fmt;

use reqwest::Url;
use toml::Spanned;

use super::error::Invalid;

/// Where the `redis` backend's server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RedisTarget {
    /// `url`: one server, `redis://` or `rediss://` (TLS), with a host; never a password (that
    /// comes from `password_env`).
    Url(String),
    /// `sentinels` and `master_name`: the Redis Sentinel processes asked for the current master
    /// of that name, again after every failure, so a failover is followed.
    Sentinel {
        /// `sentinels`: where the Sentinel processes listen, tried in this order.
        sentinels: Vec<NodeAddr>,
        /// `master_name`: the name the sentinels monitor the master under.
        master_name: String,
        /// `sentinel_password_env`: the variable holding the sentinels' own password, if any.
        password_env: Option<String>,
        /// `tls`: the sentinels and the master are reached over TLS.
        tls: bool,
    },
    /// `cluster_nodes`: some nodes of a Redis Cluster; the others are learnt from them.
    Cluster {
        /// `cluster_nodes`: the nodes asked for the cluster's layout.
        nodes: Vec<NodeAddr>,
        /// `tls`: every node is reached over TLS.
        tls: bool,
    },
}

/// A `host:port` entry of `sentinels` or `cluster_nodes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeAddr {
    /// A host name or an IP address (an IPv6 address without its brackets).
    pub(crate) host: String,
    /// The TCP port.
    pub(crate) port: u16,
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl RedisTarget {
    /// Whether connections use TLS: a `rediss://` url, or `tls = true`.
    pub(crate) fn tls(&self) -> bool {
        match self {
            RedisTarget::Url(url) => url.starts_with("rediss://"),
            RedisTarget::Sentinel { tls, .. } | RedisTarget::Cluster { tls, .. } => *tls,
        }
    }

    /// For people: `at HOST:PORT`, `via sentinels A, B (master NAME)` or `cluster at A, B`.
    pub(super) fn summary(&self) -> String {
        let list = |nodes: &[NodeAddr]| {
            nodes
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            RedisTarget::Url(url) => match Url::parse(url) {
                Ok(url) => format!(
                    "at {}:{}",
                    url.host_str().unwrap_or("?"),
                    url.port().unwrap_or(6379)
                ),
                Err(_) => "at ?".to_owned(),
            },
            RedisTarget::Sentinel {
                sentinels,
                master_name,
                ..
            } => format!("via sentinels {} (master {master_name})", list(sentinels)),
            RedisTarget::Cluster { nodes, .. } => format!("cluster at {}", list(nodes)),
        }
    }
}

/// The target keys of `[state]` as written, each with its span.
pub(super) struct TargetEntry<'a> {
    pub(super) backend_span: std::ops::Range<usize>,
    pub(super) url: Option<&'a Spanned<String>>,
    pub(super) sentinels: Option<&'a Spanned<Vec<Spanned<String>>>>,
    pub(super) master_name: Option<&'a Spanned<String>>,
    pub(super) sentinel_password_env: Option<&'a Spanned<String>>,
    pub(super) cluster_nodes: Option<&'a Spanned<Vec<Spanned<String>>>>,
    pub(super) tls: Option<&'a Spanned<bool>>,
}

/// What the target says about the login keys: whether TLS is on, and whether the url names a
/// user already.
pub(super) struct TargetLogin {
    pub(super) tls: bool,
    pub(super) url_user: bool,
}

impl TargetEntry<'_> {
    /// Checks that exactly one way to reach Redis is written, with the keys it needs and none
    /// of another's.
    pub(super) fn validate(self) -> Result<(RedisTarget, TargetLogin), Invalid> {
        let mut written: Vec<(&str, std::ops::Range<usize>)> = Vec::new();
        if let Some(url) = self.url {
            written.push(("url", url.span()));
        }
        if let Some(sentinels) = self.sentinels {
            written.push(("sentinels", sentinels.span()));
        }
        if let Some(nodes) = self.cluster_nodes {
            written.push(("cluster_nodes", nodes.span()));
        }
        written.sort_by_key(|(_, span)| span.start);
        if let [(first, _), (second, span), ..] = written.as_slice() {
            return Err(Invalid::new(
                span.clone(),
                format!(
                    "[state] {second} and {first} are both set; write exactly one of url (one server), \
                     sentinels (with master_name) and cluster_nodes"
                ),
            ));
        }
        if self.sentinels.is_none() {
            for (key, written) in [
                ("master_name", self.master_name.map(Spanned::span)),
                (
                    "sentinel_password_env",
                    self.sentinel_password_env.map(Spanned::span),
                ),
            ] {
                if let Some(span) = written {
                    return Err(Invalid::new(
                        span,
                        format!(
                            "[state] {key} applies with sentinels only, and this [state] has no sentinels"
                        ),
                    ));
                }
            }
        }
        if let (Some(url), Some(tls)) = (self.url, self.tls) {
            let scheme = if url.get_ref().starts_with("rediss://") {
                "rediss://"
            } else {
                "redis://"
            };
            return Err(Invalid::new(
                tls.span(),
                format!(
                    "[state] tls applies to sentinels and cluster_nodes; the url says it with its scheme \
                     (rediss:// for TLS), and this one starts with {scheme}"
                ),
            ));
        }
        let tls = self.tls.is_some_and(|tls| *tls.get_ref());
        if let Some(url) = self.url {
            super::validate::check_redis_url(url.get_ref())
                .map_err(|message| Invalid::new(url.span(), message))?;
            let url_user = check_url_login(url)?;
            let target = RedisTarget::Url(url.get_ref().clone());
            let tls = target.tls();
            return Ok((target, TargetLogin { tls, url_user }));
        }
        let login = TargetLogin { tls, url_user: false };
        if let Some(sentinels) = self.sentinels {
            let Some(master_name) = self.master_name else {
                return Err(Invalid::new(
                    sentinels.span(),
                    "[state] sentinels needs master_name: the name the sentinels monitor the master under \
                     (their `sentinel monitor NAME ...` line)",
                ));
            };
            let name = master_name.get_ref();
            if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(Invalid::new(
                    master_name.span(),
                    format!("[state] master_name {name:?} must be non-empty, without spaces or control characters"),
                ));
            }
            let password_env = self
                .sentinel_password_env
                .map(|written| check_variable(written, "sentinel_password_env"))
                .transpose()?;
            let target = RedisTarget::Sentinel {
                sentinels: node_list(sentinels, "sentinels", 26379)?,
                master_name: name.clone(),
                password_env,
                tls,
            };
            return Ok((target, login));
        }
        if let Some(nodes) = self.cluster_nodes {
            let target = RedisTarget::Cluster {
                nodes: node_list(nodes, "cluster_nodes", 7000)?,
                tls,
            };
            return Ok((target, login));
        }
        Err(Invalid::new(
            self.backend_span,
            "backend = \"redis\" needs the server's address: add url = \"redis://HOST:6379\" (or rediss:// \
             for TLS), sentinels = [\"HOST:26379\"] with master_name, or cluster_nodes = [\"HOST:7000\"] to [state]",
        ))
    }
}

/// A url's login part: a password is refused (it belongs in `password_env`), and so is a
/// fragment. Whether it names a user.
fn check_url_login(url: &Spanned<String>) -> Result<bool, Invalid> {
    let parsed =
        Url::parse(url.get_ref()).map_err(|_| Invalid::new(url.span(), "[state] url is not a URL"))?;
    if parsed.password().is_some() {
        return Err(Invalid::new(
            url.span(),
            "[state] url carries a password; put the password in an environment variable and name \
             it with password_env (and the user, if any, with username), so it is never in the file",
        ));
    }
    if parsed.fragment().is_some() {
        return Err(Invalid::new(
            url.span(),
            "[state] url may not end in a #fragment (#insecure would turn the certificate check off)",
        ));
    }
    Ok(!parsed.username().is_empty())
}

/// `password_env` or `sentinel_password_env`: a usable environment variable name.
pub(super) fn check_variable(written: &Spanned<String>, key: &str) -> Result<String, Invalid> {
    let name = written.get_ref();
    if name.is_empty() || name.contains(['=', '\0']) {
        return Err(Invalid::new(
            written.span(),
            format!("[state] {key} {name:?} must name an environment variable (not empty, no `=` or NUL)"),
        ));
    }
    Ok(name.clone())
}

/// `sentinels` or `cluster_nodes`: at least one entry, each `host:port`.
fn node_list(
    written: &Spanned<Vec<Spanned<String>>>,
    key: &str,
    example_port: u16,
) -> Result<Vec<NodeAddr>, Invalid> {
    if written.get_ref().is_empty() {
        return Err(Invalid::new(
            written.span(),
            format!("[state] {key} is empty; list at least one \"HOST:{example_port}\""),
        ));
    }
    written
        .get_ref()
        .iter()
        .map(|entry| {
            parse_node(entry.get_ref()).ok_or_else(|| {
                Invalid::new(
                    entry.span(),
                    format!(
                        "[state] {key} entry {:?} is not HOST:PORT (like \"10.0.0.5:{example_port}\", \
                         \"redis-0.internal:{example_port}\" or \"[fd00::5]:{example_port}\"; no scheme, \
                         no user, a port from 1 to 65535)",
                        entry.get_ref()
                    ),
                )
            })
        })
        .collect()
}

/// `host:port`, `[v6]:port`; `None` for anything else (a scheme, a user, a path, no port).
fn parse_node(text: &str) -> Option<NodeAddr> {
    let (host, port) = match text.strip_prefix('[') {
        Some(rest) => {
            let (host, port) = rest.split_once("]:")?;
            host.parse::<std::net::Ipv6Addr>().ok()?;
            (host, port)
        }
        None => {
            let (host, port) = text.rsplit_once(':')?;
            let usable = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
            if !host.chars().all(usable) {
                return None;
            }
            (host, port)
        }
    };
    if host.is_empty() || port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let port = port.parse::<u16>().ok().filter(|port| *port != 0)?;
    Some(NodeAddr {
        host: host.to_owned(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_host_and_port() {
        let node = |host: &str, port| {
            Some(NodeAddr {
                host: host.into(),
                port,
            })
        };
        assert_eq!(parse_node("10.0.0.5:26379"), node("10.0.0.5", 26379));
        assert_eq!(
            parse_node("redis-0.redis.svc:7000"),
            node("redis-0.redis.svc", 7000)
        );
        assert_eq!(parse_node("[fd00::5]:7000"), node("fd00::5", 7000));
        assert_eq!(node("fd00::5", 7000).unwrap().to_string(), "[fd00::5]:7000");
        for bad in [
            "",
            "cache",
            "cache:",
            ":7000",
            "cache:0",
            "cache:65536",
            "cache:+7",
            "redis://cache:7000",
            "user@cache:7000",
            "cache:7000/0",
            "fd00::5:7000",
            "[fd00::5]7000",
            "[not-v6]:7000",
            "ca che:7000",
        ] {
            assert_eq!(parse_node(bad), None, "{bad:?}");
        }
    }
}
