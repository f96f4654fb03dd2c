//! The differential check of incremental judging against the full check
//! (docs/incremental-judging.md): one body, cut at every item, with the ledger's records as
//! they were when the earlier bodies were judged and as they are now. The differential tests
//! and the `judged_prefix` fuzz target call it; it panics where the two disagree.

use std::ops::Range;

use serde_json::Value;

use super::provenance::{item_record_from_value, link_reasoning, names_one_item, Owner, StoredItem};
use super::{
    parse_after_known, parse_noting_spans, Gate, InputProbe, ItemsAt, JudgeKey, LedgerQuery, Policy,
    Provenance, ProviderProfile, StateAccess, Target, Verdict,
};

/// What the ledger would know of `body`'s items had `owner` produced every one, in order, as
/// one answer (an item right after a reasoning item recorded as following it): each with an
/// `id` that names one item by its id, each reasoning or compaction item with a blob by its blob. Empty for a
/// body that is not JSON.
#[doc(hidden)]
pub fn recorded_as_sent(body: &str, owner: &str) -> Provenance {
    recorded_for(body, owner, None, u64::MAX)
}

/// [`recorded_as_sent`], recorded for `team` and expiring at `expires_unix`; with a team, the
/// ids too short to name one item are known by id (as the ledger tells whether any team's
/// record has one).
#[doc(hidden)]
pub fn recorded_for(body: &str, owner: &str, team: Option<&str>, expires_unix: u64) -> Provenance {
    let mut provenance = Provenance::default();
    let Ok(value) = serde_json::from_str::<Value>(body) else {
        return provenance;
    };
    let mut records: Vec<_> = value["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(item_record_from_value)
        .collect();
    link_reasoning(&mut records);
    for record in records {
        let stored = StoredItem {
            response_id: "resp_recorded".into(),
            owner: Owner {
                provider: owner.into(),
                model: value["model"].as_str().map(str::to_owned),
            },
            record,
            expires_unix,
            team: team.map(str::to_owned),
            not_stored: false,
        };
        if stored.record.has_encrypted_content {
            provenance.encrypted.insert(stored.record.digest, stored.clone());
        }
        // The ledger is asked only about ids that name one item, and indexes only those: it
        // can know nothing by a shorter id, but whether some team's record has it.
        match stored.record.id.clone() {
            Some(id) if names_one_item(&id) => {
                provenance.items.insert(id, stored);
            }
            Some(id) if team.is_some() => {
                provenance.short_ids.insert(id, expires_unix);
            }
            _ => {}
        }
    }
    provenance
}

/// How the ledger changed between the earlier bodies (judged at time 0) and the last one.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct LedgerChange<'a> {
    /// What the ledger held when the earlier bodies were judged.
    pub then: &'a Provenance,
    /// Records written since, of keys `then` had none of (records are written once: a key
    /// `then` has keeps its record).
    pub written: &'a Provenance,
    /// Whether the store lost records since (then `then`'s are gone, and its loss epoch
    /// changed).
    pub lost: bool,
    /// When the last body is judged (unix seconds): records that expire by then are gone.
    pub now_unix: u64,
}

impl LedgerChange<'_> {
    /// What the ledger holds when the last body is judged (expired records included: the
    /// answers leave them out).
    fn now(&self) -> Provenance {
        let mut now = match self.lost {
            true => Provenance::default(),
            false => self.then.clone(),
        };
        now.add_missing(self.written);
        now
    }
}

/// The ledger's answer to `query` from what it `holds`, at `now_unix`, as the proxy's lookup
/// gives it.
fn answer(holds: &Provenance, query: &LedgerQuery, now_unix: u64) -> Provenance {
    let live = |stored: &&StoredItem| now_unix < stored.expires_unix;
    let mut answer = Provenance::default();
    for id in &query.item_ids {
        if let Some(stored) = holds.items.get(id).filter(live) {
            answer.items.insert(id.clone(), stored.clone());
        }
    }
    for digest in &query.digests {
        if let Some(stored) = holds.encrypted.get(digest).filter(live) {
            answer.encrypted.insert(*digest, stored.clone());
        }
    }
    for id in &query.short_ids {
        if let Some(&expires) = holds.short_ids.get(id).filter(|&&expires| now_unix < expires) {
            answer.short_ids.insert(id.clone(), expires);
        }
    }
    if query.previous_response_id.is_some() {
        answer.previous = holds.previous.clone();
    }
    if query.conversation.is_some() {
        answer.conversation = holds.conversation.clone();
    }
    let texts: Vec<String> = answer
        .missing_reasoning(query)
        .into_iter()
        .map(|(_, reasoning)| reasoning.to_owned())
        .collect();
    for reasoning in texts {
        if let Some(text) = holds.reasoning_texts.get(&reasoning) {
            answer.reasoning_texts.insert(reasoning, text.clone());
        }
    }
    let named: Vec<String> = answer
        .unstored_named(query)
        .into_iter()
        .map(|(_, id)| id.to_owned())
        .collect();
    for id in named {
        if let Some(text) = holds.unstored_texts.get(&id) {
            answer.unstored_texts.insert(id, text.clone());
        }
    }
    answer
}

/// Who asks, as the check judges for: the provider, the policy, and with teams the team's
/// access and whether state the ledger does not know is refused.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct CheckedFor<'a> {
    /// The provider the bodies go to.
    pub provider: &'a ProviderProfile,
    /// The policy.
    pub policy: &'a Policy,
    /// With teams: the asker's access.
    pub access: Option<&'a StateAccess>,
    /// With teams: whether `unknown_state` is judged.
    pub deny_unknown_state: bool,
}

impl<'a> CheckedFor<'a> {
    /// For `provider` under `policy`, without teams.
    pub fn provider(provider: &'a ProviderProfile, policy: &'a Policy) -> CheckedFor<'a> {
        CheckedFor {
            provider,
            policy,
            access: None,
            deny_unknown_state: false,
        }
    }

    fn target(&self, facts: Option<&'a Provenance>) -> Target<'a> {
        let mut target = Target::new(self.provider, self.policy);
        if let Some(facts) = facts {
            target = target.with_provenance(facts);
        }
        if let Some(access) = self.access {
            target = target
                .with_access(access)
                .with_unknown_state_denied(self.deny_unknown_state && facts.is_some());
        }
        target
    }
}

/// `body` with only its first `count` items (of `spans`): the turn sent before it.
fn cut(body: &str, spans: &[Range<usize>], count: usize) -> String {
    let end = spans.last().map_or(0, |span| span.end);
    format!("{}{}", &body[..spans[count - 1].end], &body[end..])
}

/// What a verdict says, to compare.
fn summary(verdict: &Verdict) -> String {
    format!(
        "{:?}",
        (
            &verdict.violations,
            &verdict.tally,
            &verdict.stripped,
            &verdict.repairs,
            &verdict.repair_cuts,
            &verdict.inserts
        )
    )
}

/// The facts of an answer that a verdict reads by key, to compare.
fn by_key(facts: &Provenance) -> impl PartialEq + std::fmt::Debug + '_ {
    (&facts.items, &facts.encrypted, &facts.short_ids)
}

/// Judges `body` whole as `asker` asks, and after each of its prefixes that judged clean, and
/// panics where the two differ. With `ledger`, the earlier bodies are judged with its answers
/// then and the last one with its answers now, as the proxy does: after a prefix only while
/// its kept facts hold (nothing lost, nothing expired), asking only about the keys
/// [`JudgedPrefix::query_after`](super::JudgedPrefix::query_after) names; where the new items
/// cannot tell, the whole body with the whole answer told from the kept facts. The verdict
/// after a prefix must be the whole check's, that told whole answer the ledger's answer to the
/// whole body, and the input kept after the prefix as long as the one kept when judged whole.
/// Returns how many cuts were judged after their prefix.
#[doc(hidden)]
pub fn judged_after_prefixes_as_whole(
    body: &str,
    asker: &CheckedFor<'_>,
    ledger: Option<&LedgerChange<'_>>,
) -> usize {
    let gate = Gate::default();
    // A fixed key: the check is of what is judged, the same under any key.
    let key = JudgeKey::from_bytes([0x5a; 32]);
    let Some(probe) = InputProbe::of(body.as_bytes(), 1, &key) else {
        return 0;
    };
    let Ok(whole) = parse_noting_spans(body.as_bytes(), ItemsAt::Input) else {
        return 0;
    };
    let Some(spans) = whole.item_spans().map(<[_]>::to_vec) else {
        return 0;
    };
    let holds_now = ledger.map(LedgerChange::now);
    let whole_query = ledger.map(|_| LedgerQuery::of(&whole));
    let whole_facts = ledger
        .zip(holds_now.as_ref())
        .zip(whole_query.as_ref())
        .map(|((ledger, holds), query)| answer(holds, query, ledger.now_unix));
    let target = asker.target(whole_facts.as_ref());
    let Ok((expected, kept_whole)) = gate.judge_keeping(&whole, &target, whole_query.as_ref(), &key) else {
        return 0;
    };
    let kept_whole = kept_whole.and_then(|prefix| probe.keep(body.as_bytes(), None, &whole, prefix));
    let mut incremental = 0;
    // Cut at every item, and the whole input itself (a body sent again).
    for count in 2..=spans.len() {
        let earlier = cut(body, &spans, count);
        let earlier_probe = InputProbe::of(earlier.as_bytes(), 1, &key).expect("a prefix of a probed body");
        assert_eq!(
            earlier_probe.lead(),
            probe.lead(),
            "the same leading items, the same lead"
        );
        let earlier_request = parse_noting_spans(earlier.as_bytes(), ItemsAt::Input).expect("a prefix reads");
        let earlier_query = ledger.map(|_| LedgerQuery::of(&earlier_request));
        let earlier_facts = ledger
            .zip(earlier_query.as_ref())
            .map(|(ledger, query)| answer(ledger.then, query, 0));
        let earlier_target = asker.target(earlier_facts.as_ref());
        let Ok((_, Some(prefix))) =
            gate.judge_keeping(&earlier_request, &earlier_target, earlier_query.as_ref(), &key)
        else {
            continue;
        };
        assert_eq!(prefix.items(), count);
        let kept = earlier_probe
            .keep(earlier.as_bytes(), None, &earlier_request, prefix)
            .expect("a clean input with its spans is kept");
        let mut continued = probe
            .continues(body.as_bytes(), &kept)
            .expect("a body goes on from each of its prefixes");
        let after = parse_after_known(body.as_bytes(), ItemsAt::Input, true, continued.known())
            .expect("the rest of a body that reads whole reads");
        assert_eq!(after.known_items(), count);
        assert!(kept.decides_alike(&after), "the same model and tools");
        assert!(
            continued.decides_alike(&after),
            "as the body that continues it tells"
        );
        let known = kept.prefix();
        // The facts after the prefix, as the proxy asks for them.
        let (query, facts) = match (ledger, holds_now.as_ref()) {
            (Some(ledger), Some(holds)) => {
                // The proxy judges the whole body when a record the prefix relied on may be
                // gone.
                if ledger.lost || !known.facts().holds_at(ledger.now_unix) {
                    continue;
                }
                let Some(query) = known.query_after(&after) else {
                    continue;
                };
                let answered = answer(holds, &query, ledger.now_unix);
                let told = known.whole_answer(answered.clone());
                assert_eq!(
                    by_key(&told),
                    by_key(whole_facts.as_ref().expect("a ledger's answer")),
                    "{body}\nthe whole answer told after {count} items"
                );
                // Where the new items cannot tell, the proxy judges the whole body with it.
                let told_target = asker.target(Some(&told));
                let told_verdict = gate.judge(&whole, &told_target).expect("judged whole before");
                assert_eq!(
                    summary(&told_verdict),
                    summary(&expected),
                    "{body}\ntold after {count} items"
                );
                (Some(query), Some(known.answer_after(&after, answered)))
            }
            _ => (None, None),
        };
        let target = asker.target(facts.as_ref());
        let Ok(Some((verdict, next))) = gate.judge_after(&after, &target, known, query.as_ref()) else {
            continue;
        };
        incremental += 1;
        assert_eq!(
            summary(&verdict),
            summary(&expected),
            "{body}\ncut after {count} items"
        );
        assert!(
            expected.tally.is_empty(),
            "only a clean verdict is given after a prefix"
        );
        let next = next.and_then(|prefix| probe.keep(body.as_bytes(), Some(&continued), &after, prefix));
        if count == spans.len() {
            // The same input again: nothing new to keep, and what was kept stays.
            assert!(next.is_none(), "an input sent again is kept once");
            continue;
        }
        match (&next, &kept_whole) {
            (Some(next), Some(whole)) => {
                assert!(next.same_as(whole), "kept after the prefix as when judged whole");
                assert_eq!(next.prefix().items(), whole.prefix().items());
                assert_eq!(
                    next.prefix().facts().expires_unix(),
                    whole.prefix().facts().expires_unix(),
                    "the same records relied on"
                );
            }
            (None, None) => {}
            _ => panic!("kept after the prefix but not whole, or the other way round"),
        }
    }
    incremental
}
