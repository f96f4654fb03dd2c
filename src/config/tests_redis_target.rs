//! `[state]` with `sentinels` or `cluster_nodes`: exactly one way to reach Redis, the keys each
//! needs, `host:port` entries, and what `config check` prints.

use super::tests::assert_invalid_at;
use super::*;
use crate::test_pki as pki;

const PROVIDER: &str = "\n[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\n";

fn state(keys: &str) -> String {
    format!("[state]\nbackend = \"redis\"\n{keys}{PROVIDER}")
}

fn node(host: &str, port: u16) -> NodeAddr {
    NodeAddr {
        host: host.into(),
        port,
    }
}

#[test]
fn sentinels_with_their_master_name() {
    let config = Config::from_toml(&state(
        "sentinels = [\"10.0.0.1:26379\", \"sentinel-2.internal:26380\"]\nmaster_name = \"ledger\"\n\
         sentinel_password_env = \"RG_SENTINEL_PASSWORD\"\nusername = \"replaygate\"\npassword_env = \"RG_PW\"\n",
    ))
    .unwrap();
    let StateConfig::Redis { target, access, .. } = &config.state else {
        panic!("not redis");
    };
    assert_eq!(
        *target,
        RedisTarget::Sentinel {
            sentinels: vec![node("10.0.0.1", 26379), node("sentinel-2.internal", 26380)],
            master_name: "ledger".into(),
            password_env: Some("RG_SENTINEL_PASSWORD".into()),
            tls: false,
        }
    );
    assert_eq!(access.username.as_deref(), Some("replaygate"));
    assert!(
        config.summary().contains(
            "state in redis via sentinels 10.0.0.1:26379, sentinel-2.internal:26380 (master ledger) as replaygate"
        ),
        "{}",
        config.summary()
    );
}

#[test]
fn cluster_nodes_over_tls_with_files() {
    let dir = tempfile::tempdir().unwrap();
    let ca = pki::TestCa::new("replaygate test CA");
    ca.write(dir.path(), "ca");
    let file = dir.path().join("proxy.toml");
    std::fs::write(
        &file,
        state(
            "cluster_nodes = [\"redis-0:7000\", \"[fd00::7]:7001\"]\ntls = true\ntls_ca_file = \"ca.pem\"\n",
        ),
    )
    .unwrap();
    let config = Config::load(&file).unwrap();
    let StateConfig::Redis { target, access, .. } = &config.state else {
        panic!("not redis");
    };
    assert_eq!(
        *target,
        RedisTarget::Cluster {
            nodes: vec![node("redis-0", 7000), node("fd00::7", 7001)],
            tls: true,
        }
    );
    assert!(access.tls_ca_file.is_some());
    assert!(
        config
            .summary()
            .contains("state in redis cluster at redis-0:7000, [fd00::7]:7001 over TLS"),
        "{}",
        config.summary()
    );
}

#[test]
fn exactly_one_way_to_reach_redis() {
    assert_invalid_at(
        &state("url = \"redis://h:6379\"\ncluster_nodes = [\"h:7000\"]\n"),
        4,
        17,
        "[state] cluster_nodes and url are both set; write exactly one of url (one server), sentinels (with master_name) and cluster_nodes",
    );
    assert_invalid_at(
        &state("sentinels = [\"h:26379\"]\nmaster_name = \"m\"\ncluster_nodes = [\"h:7000\"]\n"),
        5,
        17,
        "cluster_nodes and sentinels are both set",
    );
    assert_invalid_at(
        &state("cluster_nodes = [\"h:7000\"]\nurl = \"redis://h\"\n"),
        4,
        7,
        "url and cluster_nodes are both set",
    );
    assert_invalid_at(
        &state(""),
        2,
        11,
        "sentinels = [\"HOST:26379\"] with master_name, or cluster_nodes",
    );
}

#[test]
fn master_name_goes_with_sentinels_only() {
    assert_invalid_at(
        &state("sentinels = [\"h:26379\"]\n"),
        3,
        13,
        "[state] sentinels needs master_name",
    );
    assert_invalid_at(
        &state("cluster_nodes = [\"h:7000\"]\nmaster_name = \"m\"\n"),
        4,
        15,
        "[state] master_name applies with sentinels only",
    );
    assert_invalid_at(
        &state("url = \"redis://h\"\nsentinel_password_env = \"X\"\n"),
        4,
        25,
        "[state] sentinel_password_env applies with sentinels only",
    );
    assert_invalid_at(
        &state("sentinels = [\"h:26379\"]\nmaster_name = \"my master\"\n"),
        4,
        15,
        "master_name \"my master\" must be non-empty",
    );
    assert_invalid_at(
        &state("sentinels = [\"h:26379\"]\nmaster_name = \"m\"\nsentinel_password_env = \"A=B\"\n"),
        5,
        25,
        "sentinel_password_env \"A=B\" must name an environment variable",
    );
}

#[test]
fn entries_are_host_and_port() {
    assert_invalid_at(
        &state("cluster_nodes = [\"h:7000\", \"redis://h:7001\"]\n"),
        3,
        28,
        "[state] cluster_nodes entry \"redis://h:7001\" is not HOST:PORT",
    );
    assert_invalid_at(
        &state("sentinels = [\"h\"]\nmaster_name = \"m\"\n"),
        3,
        14,
        "[state] sentinels entry \"h\" is not HOST:PORT",
    );
    assert_invalid_at(
        &state("cluster_nodes = []\n"),
        3,
        17,
        "[state] cluster_nodes is empty",
    );
}

#[test]
fn tls_goes_with_sentinels_or_cluster_nodes_and_files_need_it() {
    assert_invalid_at(
        &state("url = \"rediss://h\"\ntls = true\n"),
        4,
        7,
        "[state] tls applies to sentinels and cluster_nodes; the url says it with its scheme",
    );
    assert_invalid_at(
        &state("cluster_nodes = [\"h:7000\"]\ntls_ca_file = \"ca.pem\"\n"),
        4,
        15,
        "or set tls = true with sentinels or cluster_nodes",
    );
    assert_invalid_at(
        "[state]\nbackend = \"memory\"\ntls = true\n\n[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\n",
        3,
        7,
        "[state] tls applies to backend = \"redis\" only",
    );
    assert_invalid_at(
        "[state]\ncluster_nodes = [\"h:7000\"]\n\n[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\n",
        2,
        17,
        "[state] cluster_nodes applies to backend = \"redis\" only",
    );
}

#[test]
fn a_cluster_prefix_may_not_carry_a_hash_tag() {
    assert_invalid_at(
        &state("cluster_nodes = [\"h:7000\"]\nkey_prefix = \"{rg}\"\n"),
        4,
        14,
        "may not hold { or } with cluster_nodes",
    );
    // One server has no slots: the prefix may be anything it was.
    Config::from_toml(&state("url = \"redis://h\"\nkey_prefix = \"{rg}\"\n")).unwrap();
}
