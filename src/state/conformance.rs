//! The conformance suite of the state backends: what every [`StateStore`] answers alike
//! (docs/architecture.md, "A state backend"), written once against its API and run against
//! each backend, each test under the backend's name (`state::conformance::redis::round_trip`).
//!
//! A backend joins with a [`Backend`] (how to open a fresh store of it for one test), an
//! [`Outage`] when it can be made unavailable, and a line of [`conformance!`]. What only one
//! backend does (its layout, sweeps, eviction, journal, Redis's TTLs, cluster slots, Sentinel
//! failover) stays in that backend's own tests. The cases of the budgets' spend counters are in
//! [`spend`], those of the usage tallies in [`tally`].

use std::future::Future;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::redis::test_server::RedisServer;
use super::{now_unix, EmbeddedStore, MemoryStore, RedisStore, StateStore, StoreError};
use crate::ledger::{
    CallIds, ItemRecord, Owner, ResponseRecord, StoredContent, StoredResponse, MAX_ID_BYTES,
    MIN_ITEM_ID_BYTES,
};
use crate::metrics::{LedgerMeter, Metrics};

/// The budgets' spend counters' cases.
mod spend;
use spend::*;
/// The usage tallies' cases.
mod tally;
use tally::*;

/// A backend under test: a fresh, empty store of its own for each test.
pub(super) trait Backend: Sized {
    /// The backend's name, as `[state] backend` spells it.
    const NAME: &'static str;
    /// Whether the teams' rate counts live in the backend (shared by replicas, lost with it)
    /// rather than in this process.
    const SHARED_RATES: bool;
    /// Opens a fresh, empty store.
    fn open() -> impl Future<Output = Self>;
    /// The store.
    fn store(&self) -> StateStore;
    /// Another store on the same records and rate counts: a second replica's for Redis, the
    /// same directory opened again for `embedded`, a clone for `memory`.
    fn another(&self) -> StateStore;
}

/// A backend that can be made unavailable, and brought back.
pub(super) trait Outage: Backend {
    /// Opens a fresh, empty store that [`Outage::take_down`] can take down.
    fn open_fallible() -> impl Future<Output = Self>;
    /// Makes the store unavailable.
    fn take_down(&mut self) -> impl Future<Output = ()>;
    /// Makes it available again.
    fn bring_back(&mut self) -> impl Future<Output = ()>;
}

/// Instantiates each named test body for one backend, in a module of the backend's name.
macro_rules! conformance {
    ($module:ident: $backend:ident; $($test:ident),+ $(,)?) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test::<super::$backend>().await;
                }
            )+
        }
    };
}

/// Every body that any backend passes.
macro_rules! every_backend {
    ($module:ident: $backend:ident $(; $extra:ident)*) => {
        conformance!($module: $backend;
            round_trip,
            items_are_found_by_id_and_by_digest_in_the_order_asked,
            a_response_not_stored_reads_back_so_with_its_items,
            a_chain_is_walked_response_by_response,
            a_record_written_again_replaces_the_earlier,
            an_item_recorded_again_leads_to_the_later_response,
            expired_records_read_as_absent,
            a_record_is_forgotten_once_its_time_is_up,
            ids_at_the_limits,
            a_large_batch_is_answered_in_the_order_asked,
            a_team_gets_its_minute_at_once_and_then_waits,
            the_allowance_refills_one_request_per_interval,
            replicas_share_a_teams_count,
            a_reservation_fits_up_to_the_limit_and_no_further,
            settling_replaces_a_reservation_by_what_was_used,
            a_windows_counter_expires_after_its_end,
            concurrent_reserves_never_pass_the_limit,
            ten_thousand_reserves_at_the_edge_pass_it_by_nothing,
            usage_adds_sum,
            usage_fields_are_independent,
            usage_expires_after_its_windows_end,
            concurrent_usage_adds_lose_nothing,
            a_record_found_once_is_found_again_or_the_loss_epoch_moves
            $(, $extra)*
        );
    };
}

every_backend!(memory: MemoryBackend);
every_backend!(embedded: EmbeddedBackend;
    an_unavailable_store_answers_errors_never_no_record; an_unavailable_store_refuses_to_count;
    an_unavailable_store_refuses_to_tally);
every_backend!(redis: RedisBackend;
    an_unavailable_store_answers_errors_never_no_record; an_unavailable_store_refuses_to_count;
    an_unavailable_store_refuses_to_tally;
    a_redis_that_may_evict_moves_the_loss_epoch_at_every_lookup);

// ---- the backends -------------------------------------------------------------------------

/// `memory`: a store of its own; it cannot be unavailable.
pub(super) struct MemoryBackend(MemoryStore);

impl Backend for MemoryBackend {
    const NAME: &'static str = "memory";
    const SHARED_RATES: bool = false;

    async fn open() -> Self {
        MemoryBackend(MemoryStore::default())
    }

    fn store(&self) -> StateStore {
        StateStore::Memory(self.0.clone())
    }

    fn another(&self) -> StateStore {
        self.store()
    }
}

/// `embedded`: a store in a temporary directory (two levels down, which the open creates).
pub(super) struct EmbeddedBackend {
    store: EmbeddedStore,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

/// The room the emulated disk of [`EmbeddedBackend::open_fallible`] has left.
static EMULATED_FREE: AtomicU64 = AtomicU64::new(u64::MAX);

fn emulated_free(_: &Path) -> std::io::Result<u64> {
    Ok(EMULATED_FREE.load(Ordering::Relaxed))
}

impl Backend for EmbeddedBackend {
    const NAME: &'static str = "embedded";
    const SHARED_RATES: bool = false;

    async fn open() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b");
        EmbeddedBackend {
            store: EmbeddedStore::open(&path).unwrap(),
            path,
            _dir: dir,
        }
    }

    fn store(&self) -> StateStore {
        StateStore::Embedded(self.store.clone())
    }

    fn another(&self) -> StateStore {
        StateStore::Embedded(EmbeddedStore::open(&self.path).unwrap())
    }
}

/// The embedded store is unavailable when its disk is full: an emulated disk (the store's
/// reading of the room left replaced by a number), as in its own full-disk test.
impl Outage for EmbeddedBackend {
    async fn open_fallible() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        EmbeddedBackend {
            store: EmbeddedStore::open_on_emulated_disk(&path, emulated_free).unwrap(),
            path,
            _dir: dir,
        }
    }

    async fn take_down(&mut self) {
        EMULATED_FREE.store(0, Ordering::Relaxed);
    }

    async fn bring_back(&mut self) {
        EMULATED_FREE.store(u64::MAX, Ordering::Relaxed);
    }
}

/// `redis`: a `redis-server` of the test's own on a loopback port, killed when dropped.
pub(super) struct RedisBackend {
    server: Option<RedisServer>,
    port: u16,
    store: RedisStore,
}

impl RedisBackend {
    fn connect(port: u16) -> RedisStore {
        let url = format!("redis://127.0.0.1:{port}/");
        RedisStore::connect(&url, "rg-test", Duration::from_secs(1)).unwrap()
    }
}

impl Backend for RedisBackend {
    const NAME: &'static str = "redis";
    const SHARED_RATES: bool = true;

    async fn open() -> Self {
        let server = RedisServer::start();
        let port = server.port();
        RedisBackend {
            server: Some(server),
            port,
            store: RedisBackend::connect(port),
        }
    }

    fn store(&self) -> StateStore {
        StateStore::Redis(self.store.clone())
    }

    fn another(&self) -> StateStore {
        StateStore::Redis(RedisBackend::connect(self.port))
    }
}

/// Redis is unavailable when its server is gone: killed, and started again on its port.
impl Outage for RedisBackend {
    async fn open_fallible() -> Self {
        RedisBackend::open().await
    }

    async fn take_down(&mut self) {
        self.server = None;
    }

    async fn bring_back(&mut self) {
        self.server = Some(RedisServer::start_on(self.port).unwrap());
    }
}

// ---- records ------------------------------------------------------------------------------

/// An item of a record: its id, digest and whether it carries `encrypted_content`.
struct Item {
    id: String,
    item_type: &'static str,
    call_id: Option<String>,
    digest: [u8; 32],
    encrypted: bool,
}

impl Item {
    /// A reasoning item with encrypted content.
    fn reasoning(id: &str, digest: [u8; 32]) -> Item {
        Item {
            id: id.to_owned(),
            item_type: "reasoning",
            call_id: None,
            digest,
            encrypted: true,
        }
    }
}

/// Response `id` of `openai` for team `payments`, holding `items`, expiring `expires_in`
/// seconds from now.
fn record(id: &str, items: Vec<Item>, expires_in: i64) -> StoredResponse {
    let items = items
        .into_iter()
        .map(|item| ItemRecord {
            id: Some(item.id),
            item_type: item.item_type.into(),
            call_id: item.call_id,
            digest: item.digest,
            has_encrypted_content: item.encrypted,
            preceded_by: None,
        })
        .collect();
    let record = ResponseRecord {
        id: id.to_owned(),
        model: Some("gpt-5".into()),
        items,
    };
    let owner = Owner {
        provider: "openai".into(),
        model: Some("gpt-5".into()),
    };
    let now = now_unix();
    let mut stored = StoredResponse::new(record, owner, Some("payments".into()), None, now, 600);
    stored.expires_unix = now.saturating_add_signed(expires_in);
    stored
}

/// Response `id` with a function call (`fc_0123456789_{id}`, call `call_{id}`, no encrypted
/// content, digest all ones) and a reasoning item (`rs_0123456789_{id}`, digest all
/// `digest`), expiring `expires_in` seconds from now.
fn response(id: &str, digest: u8, expires_in: i64) -> StoredResponse {
    let call = Item {
        id: format!("fc_0123456789_{id}"),
        item_type: "function_call",
        call_id: Some(format!("call_{id}")),
        digest: [1; 32],
        encrypted: false,
    };
    let reasoning = Item::reasoning(&format!("rs_0123456789_{id}"), [digest; 32]);
    record(id, vec![call, reasoning], expires_in)
}

fn ids(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|id| (*id).to_owned()).collect()
}

/// The response each found item belongs to, in the order asked.
fn owners(found: &[Option<crate::ledger::StoredItem>]) -> Vec<Option<&str>> {
    found
        .iter()
        .map(|item| item.as_ref().map(|item| item.response_id.as_str()))
        .collect()
}

fn per_minute(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

/// Polls `done` every 50 ms until it holds, `within` at most; whether it did.
async fn eventually<F: Future<Output = bool>>(within: Duration, mut done: impl FnMut() -> F) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if done().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---- records and lookups ------------------------------------------------------------------

/// A response reads back whole (its chain link, team, content and input calls included), as
/// written and as the ledger records it; an unknown id reads as none. The store names its
/// backend and answers its ping.
async fn round_trip<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    assert_eq!(store.backend(), B::NAME);
    store.ping().await.unwrap();
    assert_eq!(store.disk_usage().await.is_some(), B::NAME == "embedded");

    let mut stored = response("resp_1", 7, 600);
    stored.previous_response_id = Some("resp_0".into());
    stored.input_call_ids = ["call_a", "call_b"].into_iter().collect::<CallIds>();
    stored.content = Some(StoredContent {
        input: vec![r#"{"role":"user","content":"hi"}"#.into()],
        output: vec![r#"{"type":"reasoning","id":"rs_0123456789_resp_1"}"#.into()],
    });
    store.put_response(&stored).await.unwrap();
    assert_eq!(store.response("resp_1").await.unwrap(), Some(stored));
    assert_eq!(store.response("resp_nope").await.unwrap(), None);

    // As the ledger records an answer: found at once, written or only queued.
    let meter = LedgerMeter::new(&Metrics::new());
    let recorded = response("resp_2", 8, 600);
    store.record_response(recorded.clone(), &meter).await.unwrap();
    assert_eq!(store.response("resp_2").await.unwrap(), Some(recorded));
    let found = store.items_by_digest(&[[8; 32]]).await.unwrap();
    assert_eq!(owners(&found), [Some("resp_2")]);
    store.ping().await.unwrap();
}

/// Items are found by id and, those carrying encrypted content only, by digest, in the order
/// asked, unknown ones as none; the index entry says what the item is and who produced it.
async fn items_are_found_by_id_and_by_digest_in_the_order_asked<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    store.put_response(&response("resp_1", 7, 600)).await.unwrap();
    store.put_response(&response("resp_2", 8, 600)).await.unwrap();

    let found = store
        .items_by_id(&ids(&["rs_0123456789_resp_2", "nope", "fc_0123456789_resp_1"]))
        .await
        .unwrap();
    assert_eq!(found.len(), 3);
    assert_eq!(owners(&found), [Some("resp_2"), None, Some("resp_1")]);
    let call = found[2].as_ref().unwrap();
    assert_eq!(call.record.call_id.as_deref(), Some("call_resp_1"));
    assert_eq!(&*call.record.item_type, "function_call");
    assert_eq!(call.owner.provider, "openai");
    assert_eq!(call.owner.model.as_deref(), Some("gpt-5"));
    assert_eq!(call.team.as_deref(), Some("payments"));

    // Only the items carrying encrypted content are indexed by digest (the calls' is [1; 32]).
    let found = store.items_by_digest(&[[8; 32], [1; 32], [7; 32]]).await.unwrap();
    assert_eq!(owners(&found), [Some("resp_2"), None, Some("resp_1")]);
    let item = found[0].as_ref().unwrap();
    assert_eq!(item.record.id.as_deref(), Some("rs_0123456789_resp_2"));
    assert_eq!(
        (&*item.record.item_type, item.owner.provider.as_str()),
        ("reasoning", "openai")
    );

    assert!(store.items_by_id(&[]).await.unwrap().is_empty());
    assert!(store.items_by_digest(&[]).await.unwrap().is_empty());
}

/// A response the provider did not store (`store: false`) reads back so, and its items, found
/// by id or by digest, say so; the items of one stored say nothing of it.
async fn a_response_not_stored_reads_back_so_with_its_items<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    let mut unstored = response("resp_1", 7, 600);
    unstored.not_stored = true;
    store.put_response(&unstored).await.unwrap();
    store.put_response(&response("resp_2", 8, 600)).await.unwrap();
    assert_eq!(store.response("resp_1").await.unwrap(), Some(unstored));
    let ids = ids(&["rs_0123456789_resp_1", "rs_0123456789_resp_2"]);
    let found = store.items_by_id(&ids).await.unwrap();
    let by_digest = store.items_by_digest(&[[7; 32], [8; 32]]).await.unwrap();
    for found in [found, by_digest] {
        let flags: Vec<Option<bool>> = found
            .iter()
            .map(|item| item.as_ref().map(|item| item.not_stored))
            .collect();
        assert_eq!(flags, [Some(true), Some(false)]);
    }
    // A response recorded by its id alone (its answer stopped before an item) keeps it too.
    let owner = Owner {
        provider: "openai".into(),
        model: None,
    };
    let mut owned = StoredResponse::owner_only("resp_3".into(), owner, None, now_unix(), 600);
    owned.not_stored = true;
    store.put_response(&owned).await.unwrap();
    assert_eq!(store.response("resp_3").await.unwrap(), Some(owned));
}

/// A `previous_response_id` chain is walked one response at a time, each read with its link,
/// and a record of who owns an object (no items, no chain) reads back as such.
async fn a_chain_is_walked_response_by_response<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    let mut previous: Option<String> = None;
    for (n, id) in ["resp_a", "resp_b", "resp_c"].into_iter().enumerate() {
        let mut turn = response(id, 10 + n as u8, 600);
        turn.previous_response_id = previous.replace(id.to_owned());
        store.put_response(&turn).await.unwrap();
    }
    let mut walked = Vec::new();
    let mut next = Some("resp_c".to_owned());
    while let Some(id) = next {
        assert!(walked.len() < 5, "the chain does not end: {walked:?}");
        let turn = store.response(&id).await.unwrap().expect("a turn of the chain");
        next = turn.previous_response_id.clone();
        walked.push(turn.id);
    }
    assert_eq!(walked, ["resp_c", "resp_b", "resp_a"]);

    let owner = Owner {
        provider: "azure".into(),
        model: None,
    };
    let owned = StoredResponse::owner_only("conv_1".into(), owner, None, now_unix(), 600);
    store.put_response(&owned).await.unwrap();
    let read = store.response("conv_1").await.unwrap().unwrap();
    assert!(read.owner_only && read.items.is_empty() && read.previous_response_id.is_none());
    assert_eq!(read, owned);
}

/// A response recorded again under its id replaces the earlier record: it reads as the later
/// one, whose items are found, the digest both hold leading to the later item. Not asserted,
/// as the backends differ: the items of the earlier record that the later one no longer holds
/// are dropped by `memory` and `embedded`, and kept by Redis until their TTL.
async fn a_record_written_again_replaces_the_earlier<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    let first = record(
        "resp_1",
        vec![Item::reasoning("rs_0123456789_first", [7; 32])],
        60,
    );
    let second = record(
        "resp_1",
        vec![Item::reasoning("rs_0123456789_second", [7; 32])],
        120,
    );
    store.put_response(&first).await.unwrap();
    store.put_response(&second).await.unwrap();
    assert_eq!(store.response("resp_1").await.unwrap(), Some(second));
    let found = store.items_by_id(&ids(&["rs_0123456789_second"])).await.unwrap();
    assert_eq!(owners(&found), [Some("resp_1")]);
    let found = store.items_by_digest(&[[7; 32]]).await.unwrap();
    let item = found[0].as_ref().unwrap();
    assert_eq!(item.record.id.as_deref(), Some("rs_0123456789_second"));
}

/// What the ledger found of a key holds while the backend's loss epoch stays
/// (docs/incremental-judging.md#the-ledger): a record lookups found is found again, unless the
/// epoch moved; writing other responses, or a response again with the same items, leaves it.
async fn a_record_found_once_is_found_again_or_the_loss_epoch_moves<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    if let StateStore::Redis(redis) = &store {
        // Known not to evict: otherwise every lookup is a new epoch (tested apart).
        redis.note_memory_policy(Some(false));
    }
    let both = || {
        vec![
            Item::reasoning("rs_0123456789_kept", [1; 32]),
            Item::reasoning("rs_0123456789_dropped", [2; 32]),
        ]
    };
    store.put_response(&record("resp_1", both(), 60)).await.unwrap();
    let dropped = ids(&["rs_0123456789_dropped"]);
    assert!(store.items_by_id(&dropped).await.unwrap()[0].is_some());
    let epoch = store.loss_epoch();
    store
        .put_response(&record(
            "resp_2",
            vec![Item::reasoning("rs_0123456789_other", [3; 32])],
            60,
        ))
        .await
        .unwrap();
    store.put_response(&record("resp_1", both(), 60)).await.unwrap();
    assert_eq!(store.loss_epoch(), epoch, "nothing lost");
    let fewer = record("resp_1", vec![Item::reasoning("rs_0123456789_kept", [1; 32])], 60);
    store.put_response(&fewer).await.unwrap();
    let still_found = store.items_by_id(&dropped).await.unwrap()[0].is_some()
        && store.items_by_digest(&[[2; 32]]).await.unwrap()[0].is_some();
    assert!(
        still_found || store.loss_epoch() != epoch,
        "{}: a record found before is gone and the loss epoch did not move",
        B::NAME
    );
}

/// A Redis whose `maxmemory-policy` may evict, or is not known, may drop any record unseen:
/// every lookup is a new loss epoch, so nothing the ledger said is kept past its turn.
async fn a_redis_that_may_evict_moves_the_loss_epoch_at_every_lookup<B: Backend>() {
    let backend = B::open().await;
    let StateStore::Redis(redis) = backend.store() else {
        return;
    };
    for may_evict in [None, Some(true)] {
        redis.note_memory_policy(may_evict);
        assert_ne!(redis.loss_epoch(), redis.loss_epoch(), "{may_evict:?}");
    }
    redis.note_memory_policy(Some(false));
    assert_eq!(redis.loss_epoch(), redis.loss_epoch());
}

/// The same items (ids and digest) recorded in a later response lead to that response.
async fn an_item_recorded_again_leads_to_the_later_response<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    store.put_response(&response("resp_old", 1, 600)).await.unwrap();
    let mut newer = response("resp_old", 1, 600);
    newer.id = "resp_new".into();
    store.put_response(&newer).await.unwrap();
    let found = store
        .items_by_id(&ids(&["fc_0123456789_resp_old", "rs_0123456789_resp_old"]))
        .await
        .unwrap();
    assert_eq!(owners(&found), [Some("resp_new"), Some("resp_new")]);
    let found = store.items_by_digest(&[[1; 32]]).await.unwrap();
    assert_eq!(owners(&found), [Some("resp_new")]);
    // The older response itself is still there.
    assert!(store.response("resp_old").await.unwrap().is_some());
}

// ---- expiry -------------------------------------------------------------------------------

/// A response recorded past its expiry, and its items, read as absent (never as an error);
/// the live one beside it is found.
async fn expired_records_read_as_absent<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    store.put_response(&response("resp_live", 2, 60)).await.unwrap();
    store.put_response(&response("resp_old", 3, -1)).await.unwrap();
    assert!(store.response("resp_live").await.unwrap().is_some());
    assert_eq!(store.response("resp_old").await.unwrap(), None);
    let found = store
        .items_by_id(&ids(&[
            "rs_0123456789_resp_live",
            "rs_0123456789_resp_old",
            "fc_0123456789_resp_old",
            "nope",
        ]))
        .await
        .unwrap();
    assert_eq!(owners(&found), [Some("resp_live"), None, None, None]);
    let found = store.items_by_digest(&[[3; 32], [2; 32]]).await.unwrap();
    assert_eq!(owners(&found), [None, Some("resp_live")]);
}

/// A response recorded to expire in two seconds is found, then forgotten with its items once
/// its time is up (a bounded wait: six seconds at most).
async fn a_record_is_forgotten_once_its_time_is_up<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    store.put_response(&response("resp_short", 4, 2)).await.unwrap();
    assert!(store.response("resp_short").await.unwrap().is_some());
    let gone = eventually(Duration::from_secs(6), || async {
        store.response("resp_short").await.unwrap().is_none()
    })
    .await;
    assert!(gone, "the response outlived its expiry");
    let found = store
        .items_by_id(&ids(&["rs_0123456789_resp_short"]))
        .await
        .unwrap();
    assert_eq!(found, vec![None]);
    assert_eq!(store.items_by_digest(&[[4; 32]]).await.unwrap(), vec![None]);
}

// ---- limits -------------------------------------------------------------------------------

/// Ids as long as the ledger records round-trip; shorter item ids than the ledger indexes are
/// found by digest only; ids with braces, colons, spaces and non-ASCII letters are keys like
/// any other; a longer id than the ledger records reads as absent.
async fn ids_at_the_limits<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    let longest_response = "r".repeat(MAX_ID_BYTES);
    let longest_item = format!("rs_{}", "x".repeat(MAX_ID_BYTES - 3));
    let shortest_item = format!("rs_{}", "0".repeat(MIN_ITEM_ID_BYTES - 3));
    let odd = ["rs_{a}1_0123456789", "fc:0123456789 a:b", "rs_ünïcødé_0123456789"];
    let mut items = vec![
        Item::reasoning(&longest_item, [1; 32]),
        Item::reasoning("rs_0", [2; 32]),
        Item::reasoning(&shortest_item, [3; 32]),
    ];
    items.extend(
        odd.iter()
            .zip(4u8..)
            .map(|(id, digest)| Item::reasoning(id, [digest; 32])),
    );
    let stored = record(&longest_response, items, 600);
    store.put_response(&stored).await.unwrap();
    assert_eq!(store.response(&longest_response).await.unwrap(), Some(stored));

    let too_long = "r".repeat(MAX_ID_BYTES + 1);
    let mut asked = vec![longest_item.clone(), "rs_0".into(), shortest_item.clone()];
    asked.extend(odd.iter().map(|id| (*id).to_owned()));
    asked.push(format!("rs_{}", "x".repeat(MAX_ID_BYTES - 2)));
    let found = store.items_by_id(&asked).await.unwrap();
    let owner = Some(longest_response.as_str());
    assert_eq!(owners(&found), [owner, None, owner, owner, owner, owner, None]);
    for (id, item) in asked.iter().zip(&found) {
        if let Some(item) = item {
            assert_eq!(item.record.id.as_deref(), Some(id.as_str()));
        }
    }
    // The short id names no single item, but its encrypted content is known by digest.
    let found = store.items_by_digest(&[[2; 32]]).await.unwrap();
    assert_eq!(found[0].as_ref().unwrap().record.id.as_deref(), Some("rs_0"));
    assert_eq!(store.response(&too_long).await.unwrap(), None);
}

/// A lookup of 1,000 ids (or digests), found and unknown interleaved, is answered in full and
/// in the order asked.
async fn a_large_batch_is_answered_in_the_order_asked<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    let digest = |r: u8, i: u8| {
        let mut digest = [0xaa; 32];
        (digest[0], digest[1]) = (r, i);
        digest
    };
    for r in 0..10u8 {
        let items = (0..50u8)
            .map(|i| Item::reasoning(&format!("rs_0123456789_{r}_{i}"), digest(r, i)))
            .collect();
        store
            .put_response(&record(&format!("resp_{r}"), items, 600))
            .await
            .unwrap();
    }
    let mut asked = Vec::new();
    let mut digests = Vec::new();
    let mut expected = Vec::new();
    for r in (0..10u8).rev() {
        for i in 0..50u8 {
            asked.extend([
                format!("rs_0123456789_{r}_{i}"),
                format!("rs_0123456789_{r}_{i}_x"),
            ]);
            digests.extend([digest(r, i), digest(r + 100, i)]);
            expected.extend([Some(format!("resp_{r}")), None]);
        }
    }
    let expected: Vec<Option<&str>> = expected.iter().map(Option::as_deref).collect();
    let found = store.items_by_id(&asked).await.unwrap();
    assert_eq!(found.len(), 1000);
    assert_eq!(owners(&found), expected);
    for (id, item) in asked.iter().zip(&found) {
        if let Some(item) = item {
            assert_eq!(item.record.id.as_deref(), Some(id.as_str()));
        }
    }
    let found = store.items_by_digest(&digests).await.unwrap();
    assert_eq!(owners(&found), expected);
}

// ---- rate counts --------------------------------------------------------------------------

/// A team gets its minute's allowance at once, then waits; a refused request is not counted;
/// another team has its own count; a limit of one a minute counts one.
async fn a_team_gets_its_minute_at_once_and_then_waits<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    for _ in 0..3 {
        assert_eq!(store.hit_rate("payments", per_minute(3)).await.unwrap(), Ok(()));
    }
    let wait = store
        .hit_rate("payments", per_minute(3))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        wait > Duration::from_secs(15) && wait <= Duration::from_secs(20),
        "{wait:?}"
    );
    // A refused request is not counted: the wait only shrinks.
    let again = store
        .hit_rate("payments", per_minute(3))
        .await
        .unwrap()
        .unwrap_err();
    assert!(again <= wait, "{again:?} after {wait:?}");
    assert_eq!(store.hit_rate("search", per_minute(3)).await.unwrap(), Ok(()));
    assert_eq!(store.hit_rate("solo", per_minute(1)).await.unwrap(), Ok(()));
    assert!(store.hit_rate("solo", per_minute(1)).await.unwrap().is_err());
}

/// Hits `key` until a request is refused (`limit` hits at most): how many were counted, and
/// the wait of the refused one.
async fn hits_until_refused(store: &StateStore, key: &str, n: u32, limit: u32) -> (u32, Duration) {
    for counted in 0..limit {
        if let Err(wait) = store.hit_rate(key, per_minute(n)).await.unwrap() {
            return (counted, wait);
        }
    }
    panic!("{limit} requests counted at {n} a minute");
}

/// At 600 a minute a team gets 600 at once (and one more per 100 ms spent), then one per
/// 100 ms.
async fn the_allowance_refills_one_request_per_interval<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    let started = Instant::now();
    let (counted, wait) = hits_until_refused(&store, "t", 600, 1000).await;
    let refilled = u32::try_from(started.elapsed().as_millis() / 100).unwrap();
    assert!((600..=601 + refilled).contains(&counted), "{counted}");
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_millis(100),
        "{wait:?}"
    );
    // After the wait, requests are counted again, one per interval.
    tokio::time::sleep(wait + Duration::from_millis(5)).await;
    let started = Instant::now();
    let (counted, wait) = hits_until_refused(&store, "t", 600, 10).await;
    let refilled = u32::try_from(started.elapsed().as_millis() / 100).unwrap();
    assert!((1..=2 + refilled).contains(&counted), "{counted}");
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_millis(100),
        "{wait:?}"
    );
}

/// Two stores on the same backend share a team's count.
async fn replicas_share_a_teams_count<B: Backend>() {
    let backend = B::open().await;
    let (a, b) = (backend.store(), backend.another());
    assert_eq!(a.hit_rate("payments", per_minute(3)).await.unwrap(), Ok(()));
    assert_eq!(b.hit_rate("payments", per_minute(3)).await.unwrap(), Ok(()));
    assert_eq!(a.hit_rate("payments", per_minute(3)).await.unwrap(), Ok(()));
    assert!(b.hit_rate("payments", per_minute(3)).await.unwrap().is_err());
    assert!(a.hit_rate("payments", per_minute(3)).await.unwrap().is_err());
}

// ---- outage -------------------------------------------------------------------------------

/// Whether `err` says the store cannot answer (unreachable, or full).
fn cannot_answer(err: &StoreError) -> bool {
    matches!(err, StoreError::Unavailable(_) | StoreError::Full(_))
}

/// An unavailable store refuses the record and answers every lookup and its ping with an
/// error, known ids and unknown ones alike, never "no record", and quickly; rate counts kept
/// in the backend fail too (those of this process go on). Back, it answers and records again.
async fn an_unavailable_store_answers_errors_never_no_record<B: Outage>() {
    let mut backend = B::open_fallible().await;
    let store = backend.store();
    store
        .put_response(&response("resp_before", 7, 600))
        .await
        .unwrap();
    backend.take_down().await;

    let err = store
        .put_response(&response("resp_during", 8, 600))
        .await
        .unwrap_err();
    assert!(cannot_answer(&err), "{err:?}");
    for _ in 0..2 {
        let started = Instant::now();
        for found in [
            store.response("resp_before").await.map(|r| r.is_some()),
            store.response("resp_nope").await.map(|r| r.is_some()),
        ] {
            let err = found.unwrap_err();
            assert!(cannot_answer(&err), "{err:?}");
        }
        for found in [
            store
                .items_by_id(&ids(&["rs_0123456789_resp_before", "nope"]))
                .await,
            store.items_by_digest(&[[7; 32], [9; 32]]).await,
        ] {
            let err = found.unwrap_err();
            assert!(cannot_answer(&err), "{err:?}");
        }
        let err = store.ping().await.unwrap_err();
        assert!(cannot_answer(&err), "{err:?}");
        let rate = store.hit_rate("payments", per_minute(100)).await;
        if B::SHARED_RATES {
            let err = rate.unwrap_err();
            assert!(cannot_answer(&err), "{err:?}");
        } else {
            assert_eq!(rate.unwrap(), Ok(()));
        }
        // Within the store's timeout (a second at most), plus slack for a loaded machine.
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{:?}",
            started.elapsed()
        );
    }

    backend.bring_back().await;
    let answers = eventually(Duration::from_secs(10), || async { store.ping().await.is_ok() }).await;
    assert!(answers, "the store did not answer again");
    store.put_response(&response("resp_after", 9, 600)).await.unwrap();
    assert!(store.response("resp_after").await.unwrap().is_some());
    let found = store.items_by_digest(&[[9; 32]]).await.unwrap();
    assert_eq!(owners(&found), [Some("resp_after")]);
}
