//! The differential check of incremental judging against the full check
//! (docs/incremental-judging.md): one body, cut at every item. The differential tests and the
//! `judged_prefix` fuzz target call it; it panics where the two disagree.

use std::ops::Range;

use serde_json::Value;

use super::provenance::{item_record_from_value, link_reasoning, names_one_item, Owner, StoredItem};
use super::{
    parse_after_known, parse_noting_spans, Gate, InputProbe, ItemsAt, JudgeKey, LedgerQuery, Policy,
    Provenance, ProviderProfile, Target, Verdict,
};

/// What the ledger would know of `body`'s items had `owner` produced every one, in order, as
/// one answer (an item right after a reasoning item recorded as following it): each with an
/// `id` that names one item by its id, each reasoning or compaction item with a blob by its blob. Empty for a
/// body that is not JSON.
#[doc(hidden)]
pub fn recorded_as_sent(body: &str, owner: &str) -> Provenance {
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
            expires_unix: u64::MAX,
            team: None,
        };
        if stored.record.has_encrypted_content {
            provenance.encrypted.insert(stored.record.digest, stored.clone());
        }
        // The ledger is asked only about ids that name one item, and indexes only those: it
        // can know nothing by a shorter id.
        if let Some(id) = stored.record.id.clone().filter(|id| names_one_item(id)) {
            provenance.items.insert(id, stored);
        }
    }
    provenance
}

/// `body` with only its first `count` items (of `spans`): the turn sent before it.
fn cut(body: &str, spans: &[Range<usize>], count: usize) -> String {
    let end = spans.last().map_or(0, |span| span.end);
    format!("{}{}", &body[..spans[count - 1].end], &body[end..])
}

fn with_facts<'a>(
    provider: &'a ProviderProfile,
    policy: &'a Policy,
    facts: Option<&'a Provenance>,
) -> Target<'a> {
    let target = Target::new(provider, policy);
    match facts {
        Some(facts) => target.with_provenance(facts),
        None => target,
    }
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

/// Judges `body` whole for `provider` under `policy`, and after each of its prefixes that
/// judged clean (the earlier bodies judged with `earlier_facts`, the whole one with `facts`:
/// what the ledger said then and now), and panics where the two differ: a verdict after a
/// prefix must be the whole check's, the ledger query told from the new items the whole
/// body's, and the input kept after the prefix as long as the one kept when judged whole.
/// Returns how many cuts were judged after their prefix.
#[doc(hidden)]
pub fn judged_after_prefixes_as_whole(
    body: &str,
    provider: &ProviderProfile,
    policy: &Policy,
    earlier_facts: Option<&Provenance>,
    facts: Option<&Provenance>,
) -> usize {
    let gate = Gate::default();
    // A fixed key: the check is of what is judged, the same under any key.
    let key = JudgeKey::from_bytes([0x5a; 32]);
    let (target, earlier_target) = (
        with_facts(provider, policy, facts),
        with_facts(provider, policy, earlier_facts),
    );
    let Some(probe) = InputProbe::of(body.as_bytes(), 1, &key) else {
        return 0;
    };
    let Ok(whole) = parse_noting_spans(body.as_bytes(), ItemsAt::Input) else {
        return 0;
    };
    let Some(spans) = whole.item_spans().map(<[_]>::to_vec) else {
        return 0;
    };
    let whole_query = facts.map(|_| LedgerQuery::of(&whole));
    let Ok((expected, kept_whole)) = gate.judge_keeping(&whole, &target, whole_query.as_ref(), &key) else {
        return 0;
    };
    let kept_whole = kept_whole.and_then(|prefix| probe.keep(body.as_bytes(), None, &whole, prefix));
    let mut incremental = 0;
    for count in 2..spans.len() {
        let earlier = cut(body, &spans, count);
        let earlier_probe = InputProbe::of(earlier.as_bytes(), 1, &key).expect("a prefix of a probed body");
        assert_eq!(
            earlier_probe.lead(),
            probe.lead(),
            "the same leading items, the same lead"
        );
        let earlier_request = parse_noting_spans(earlier.as_bytes(), ItemsAt::Input).expect("a prefix reads");
        let earlier_query = earlier_facts.map(|_| LedgerQuery::of(&earlier_request));
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
        let query = match facts {
            Some(_) => match known.query_after(&after) {
                Some(query) => {
                    assert_eq!(
                        Some(&query),
                        whole_query.as_ref(),
                        "the query after a prefix is the body's"
                    );
                    Some(query)
                }
                None => continue,
            },
            None => None,
        };
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
        match (&next, &kept_whole) {
            (Some(next), Some(whole)) => {
                assert!(next.same_as(whole), "kept after the prefix as when judged whole");
                assert_eq!(next.prefix().items(), whole.prefix().items());
            }
            (None, None) => {}
            _ => panic!("kept after the prefix but not whole, or the other way round"),
        }
    }
    incremental
}
