//! The lookup before the gate: what the store knows of the ids a request names.

use std::collections::{HashMap, HashSet};

use foldhash::fast::RandomState;

use super::Ledger;
use crate::gate::{ChainFacts, ConversationFacts, LedgerQuery, Provenance, StateAccess, MAX_QUERY_KEYS};
use crate::ledger::{CarriedTurn, StoredItem, StoredResponse};
use crate::metrics::{LedgerOp, LedgerResult};
use crate::state::{StateStore, StoreError};

impl Ledger {
    /// The facts the store holds for `query`: the items it names by id, the encrypted blobs
    /// by digest, and the `previous_response_id` chain (its owner, and the calls recorded in
    /// it, walked back at most `max_chain` responses). Ids the store never saw are simply
    /// absent: unknown provenance is judged by the gate (docs/reasons.md#unknown_state). Counted as a `lookup`: `ok` when the
    /// store knew any of them, `miss` when it knew none, `error` when it could not answer.
    pub(crate) async fn provenance(&self, query: &LedgerQuery) -> Result<Provenance, StoreError> {
        let looked_up = self.look_up(query).await;
        let result = match &looked_up {
            Ok(facts)
                if facts.items.is_empty()
                    && facts.encrypted.is_empty()
                    && facts.previous.is_none()
                    && facts.conversation.is_none() =>
            {
                LedgerResult::Miss
            }
            Ok(_) => LedgerResult::Ok,
            Err(_) => LedgerResult::Error,
        };
        self.count(LedgerOp::Lookup, result);
        looked_up
    }

    /// The lookups a request needs: the first ones ([`FirstLookups`]), then a chain walk past
    /// the previous response or a kept reasoning item, when there are any.
    async fn look_up(&self, query: &LedgerQuery) -> Result<Provenance, StoreError> {
        let FirstLookups {
            mut by_id,
            by_digest,
            previous,
            conversation,
        } = match self.store.is_remote() {
            // Boxed: four store calls held at once make a large future, which would otherwise
            // be part of (and moved with) every request's judge future, the ledger's or not.
            true => Box::pin(FirstLookups::together(&self.store, query)).await?,
            false => FirstLookups::in_turn(&self.store, query).await?,
        };
        let mut facts = Provenance::default();
        // The short ids were asked after the others, in the same lookups.
        let short = by_id.split_off(query.item_ids.len().min(by_id.len()));
        for (id, item) in query.short_ids.iter().zip(short) {
            if let Some(item) = item.filter(|item| item.team.is_some()) {
                facts.short_ids.insert(id.clone(), item.expires_unix);
            }
        }
        for (id, item) in query.item_ids.iter().zip(by_id) {
            if let Some(item) = item {
                facts.items.insert(id.clone(), item);
            }
        }
        for (digest, item) in query.digests.iter().zip(by_digest) {
            if let Some(item) = item {
                facts.encrypted.insert(*digest, item);
            }
        }
        if self.settings.store_items {
            facts.reasoning_texts = self.kept_texts(facts.missing_reasoning(query)).await?;
            facts.unstored_texts = self.kept_texts(facts.unstored_named(query)).await?;
        }
        if let Some(first) = previous {
            facts.previous = Some(self.chain_facts(first, &query.unpaired_call_ids).await?);
        }
        facts.conversation = conversation.map(|recorded| ConversationFacts { team: recorded.team });
        Ok(facts)
    }

    /// The texts the store kept of the items `wanted` names, each as (response id, item id),
    /// a response's together (rare: one read of each response), by id: the reasoning items that
    /// items of the request were recorded right after and that it does not send, for
    /// `reasoning_missing` to put back, or the items of responses not stored that it names by
    /// id, for `state_not_stored` to put in an `item_reference`'s place.
    async fn kept_texts(
        &self,
        wanted: Vec<(&str, &str)>,
    ) -> Result<HashMap<String, String, RandomState>, StoreError> {
        let mut texts = HashMap::default();
        let mut read: Option<(&str, Option<StoredResponse>)> = None;
        for (response_id, id) in wanted {
            // A response's come together: each is read once.
            if read.as_ref().is_none_or(|(id, _)| *id != response_id) {
                read = Some((response_id, self.store.response(response_id).await?));
            }
            let Some((_, Some(response))) = &read else {
                continue;
            };
            if let Some(text) = kept_text(response, id) {
                texts.insert(id.to_owned(), text.to_owned());
            }
        }
        Ok(texts)
    }

    /// The owner of response `first` (already read) and the calls of its chain. The walk stops once every call
    /// id in `wanted` was found (most continuations answer the previous response's calls),
    /// or at the chain's start; a chain cut short (a response expired or never recorded, or
    /// `max_chain` reached) or one that reaches a response whose calls are not known whole (an
    /// owner-only record, or one of a response that did not complete) is reported as
    /// incomplete, so the gate does not judge pairing on it.
    async fn chain_facts(&self, first: StoredResponse, wanted: &[String]) -> Result<ChainFacts, StoreError> {
        if !first.knows_its_calls() {
            // Whose it is, and not all of its calls: pairing is not judged on it.
            return Ok(ChainFacts {
                owner: first.owner,
                call_ids: Vec::new(),
                complete: false,
                not_stored: first.not_stored,
                team: first.team,
            });
        }
        let mut missing: HashSet<&str, RandomState> = wanted.iter().map(String::as_str).collect();
        let mut call_ids = Vec::new();
        let mut take_calls = |response: &StoredResponse, missing: &mut HashSet<&str, RandomState>| {
            for call_id in calls_of(response) {
                missing.remove(call_id);
                call_ids.push(call_id.to_owned());
            }
        };
        take_calls(&first, &mut missing);
        let mut complete = true;
        let mut next = first.previous_response_id.clone();
        let mut walked = 1;
        while let Some(id) = next.take() {
            if missing.is_empty() {
                break;
            }
            if walked >= self.settings.max_chain {
                complete = false;
                break;
            }
            match self.store.response(&id).await? {
                Some(response) if !response.knows_its_calls() => {
                    complete = false;
                    break;
                }
                Some(response) => {
                    take_calls(&response, &mut missing);
                    next = response.previous_response_id;
                    walked += 1;
                }
                None => complete = false,
            }
        }
        Ok(ChainFacts {
            owner: first.owner,
            call_ids,
            complete,
            not_stored: first.not_stored,
            team: first.team,
        })
    }

    /// The chain of `id`, oldest first, when every response in it was recorded with its items
    /// (`store_items`), for a team `access` lets the caller name (with teams), and the walk ends
    /// at the chain's start within `max_chain`; `None` otherwise (the session cannot be
    /// carried). The walk stops at the first response of a team outside `access`, whose items
    /// are never read.
    pub(crate) async fn chain(
        &self,
        id: &str,
        access: Option<&StateAccess>,
    ) -> Result<Option<Vec<StoredResponse>>, StoreError> {
        let mut chain = Vec::new();
        let mut next = Some(id.to_owned());
        while let Some(id) = next.take() {
            if chain.len() >= self.settings.max_chain {
                return Ok(None);
            }
            let Some(response) = self.store.response(&id).await? else {
                return Ok(None);
            };
            if access.is_some_and(|access| !access.may_use(response.team.as_deref())) {
                return Ok(None);
            }
            if response.content.is_none() {
                return Ok(None);
            }
            next = response.previous_response_id.clone();
            chain.push(response);
        }
        chain.reverse();
        Ok(Some(chain))
    }
}

/// The output text the store kept (`store_items`) of the item `id` of `response`, as carry
/// replays it ([`CarriedTurn`]).
fn kept_text<'r>(response: &'r StoredResponse, id: &str) -> Option<&'r str> {
    let output = CarriedTurn::from_stored(response)?.output;
    // The kept texts are the recorded items', one each, in output order.
    if output.len() != response.items.len() {
        return None;
    }
    let at = response
        .items
        .iter()
        .position(|item| item.id.as_deref() == Some(id))?;
    Some(output[at].as_str())
}

/// The call ids of the calls in a response's context: those it produced (items with a
/// `call_id` that are not outputs) and those its request put in `input`.
fn calls_of(response: &StoredResponse) -> impl Iterator<Item = &str> {
    response
        .items
        .iter()
        .filter(|item| !item.item_type.ends_with("_output"))
        .filter_map(|item| item.call_id.as_deref())
        .chain(response.input_call_ids.iter())
}

/// What a request's first lookups found: its items by id and by digest (in the order asked),
/// the previous response and the conversation's.
struct FirstLookups {
    by_id: Vec<Option<StoredItem>>,
    by_digest: Vec<Option<StoredItem>>,
    previous: Option<StoredResponse>,
    conversation: Option<StoredResponse>,
}

impl FirstLookups {
    /// Asked together: on Redis they share one round trip (the connection pipelines what is in
    /// flight at once).
    async fn together(store: &StateStore, query: &LedgerQuery) -> Result<FirstLookups, StoreError> {
        let (by_id, by_digest, previous, conversation) = futures_util::try_join!(
            by_id(store, query),
            by_digest(store, query),
            response(store, query.previous_response_id.as_deref()),
            response(store, query.conversation.as_deref()),
        )?;
        Ok(FirstLookups {
            by_id,
            by_digest,
            previous,
            conversation,
        })
    }

    /// Asked one after another: the in-process stores gain nothing from overlapping calls (the
    /// embedded one would wake a pool thread for each).
    async fn in_turn(store: &StateStore, query: &LedgerQuery) -> Result<FirstLookups, StoreError> {
        Ok(FirstLookups {
            by_id: by_id(store, query).await?,
            by_digest: by_digest(store, query).await?,
            previous: response(store, query.previous_response_id.as_deref()).await?,
            conversation: response(store, query.conversation.as_deref()).await?,
        })
    }
}

/// The items of `query` by id: its [`item_ids`](LedgerQuery::item_ids), then its
/// [`short_ids`](LedgerQuery::short_ids), in that order. Every id is asked about, at most
/// [`MAX_QUERY_KEYS`] in one call to the store.
async fn by_id(store: &StateStore, query: &LedgerQuery) -> Result<Vec<Option<StoredItem>>, StoreError> {
    if query.short_ids.is_empty() {
        return in_calls(&query.item_ids, |ids| store.items_by_id(ids)).await;
    }
    let ids: Vec<String> = query.item_ids.iter().chain(&query.short_ids).cloned().collect();
    in_calls(&ids, |ids| store.items_by_id(ids)).await
}

/// The items of `query` by digest, at most [`MAX_QUERY_KEYS`] in one call to the store.
async fn by_digest(store: &StateStore, query: &LedgerQuery) -> Result<Vec<Option<StoredItem>>, StoreError> {
    in_calls(&query.digests, |digests| store.items_by_digest(digests)).await
}

/// `keys` looked up by `lookup`, at most [`MAX_QUERY_KEYS`] a call, the answers in the order
/// of the keys: no key is left unasked, however many a body names.
async fn in_calls<'k, K, F, Fut>(keys: &'k [K], lookup: F) -> Result<Vec<Option<StoredItem>>, StoreError>
where
    F: Fn(&'k [K]) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Option<StoredItem>>, StoreError>>,
{
    let mut found = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(MAX_QUERY_KEYS) {
        found.extend(lookup(chunk).await?);
    }
    Ok(found)
}

async fn response(store: &StateStore, id: Option<&str>) -> Result<Option<StoredResponse>, StoreError> {
    match id {
        Some(id) => store.response(id).await,
        None => Ok(None),
    }
}
