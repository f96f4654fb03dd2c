//! The item profile's rules about the order and repetition of replayed items (docs/item-profiles.md):
//! the refusals agents meet most when they send a conversation back.
//!
//! - `duplicate_item_id`: an item whose `id` an earlier item of the request already has. A
//!   byte-identical repeat can be cut (`repair`); one that differs cannot, and is refused. Ids
//!   too short to name one item ([`names_one_item`]: Bedrock Mantle numbers items per
//!   response) are not judged.
//! - `reasoning_orphaned`: a `reasoning` item last among the items, or directly followed by a
//!   `user`, `system` or `developer` message or by another `reasoning` item. The provider
//!   refuses it for want of the item it led to, so `repair` cuts it and nothing it would read
//!   is lost.
//! - `reasoning_missing` (with the ledger): an item sent back by an `id` the ledger recorded
//!   right after a reasoning item of its response, without that reasoning item before it.
//!   `repair` inserts the reasoning item's bytes before it when the ledger kept them
//!   (`store_items`), and is refused otherwise.
//!
//! Each is a whole-item finding, after `item_value` and in this order; an item gets at most
//! one, and with one no member finding and no `call_without_output`. All are found before the
//! items are judged, in one pass over them each, and only for a provider whose profile has the
//! rule.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use foldhash::fast::RandomState;

use crate::gate::item::{Item, ItemClass};
use crate::gate::item_profile::ReplayRules;
use crate::gate::judged::JudgedPrefix;
use crate::gate::profile::{Policy, ProviderProfile};
use crate::gate::provenance::names_one_item;
use crate::gate::provenance::{ItemTexts, Provenance};
use crate::gate::request::{ItemsAt, ParsedRequest};
use crate::gate::verdict::{Action, Insert, Reason, Verdict};

/// One whole-item finding, before it gets its action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct WholeFinding {
    reason: Reason,
    message: String,
    cure: Cure,
}

impl WholeFinding {
    /// A finding of `reason`, with its `message` and what `repair` can do about it.
    pub(super) fn new(reason: Reason, message: String, cure: Cure) -> WholeFinding {
        WholeFinding {
            reason,
            message,
            cure,
        }
    }
}

/// What `repair` can do about a finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Cure {
    /// Nothing: `repair` acts as `reject`.
    None,
    /// Cut the item out whole.
    Cut,
    /// Put this reasoning item (its `id` and JSON text) before the item.
    Insert { id: String, text: String },
    /// Put this item (its `id` and JSON text, as recorded) in the item's place.
    Replace { id: String, text: String },
}

/// The whole-item findings of one request, by item position.
#[derive(Debug, Default)]
pub(super) struct ReplayFindings {
    /// Ascending by position, at most one per item.
    found: Vec<(usize, WholeFinding)>,
}

impl ReplayFindings {
    /// The findings of `request` under `rules` (a profile's), for `provider`, with what the
    /// ledger knows (`None`: not asked, and `reasoning_missing` finds nothing), or judged
    /// `offline` from the body alone. `None` when there are none.
    pub(super) fn find(
        request: &ParsedRequest<'_>,
        rules: &ReplayRules,
        provider: &ProviderProfile,
        provenance: Option<&Provenance>,
        known: Option<&JudgedPrefix>,
        offline: bool,
    ) -> Option<ReplayFindings> {
        if !rules.any() {
            return None;
        }
        let items = request.items();
        let mut found = Vec::new();
        // First: an item the provider cannot read at all is cut before its place is weighed.
        if let Some(source) = &rules.state_not_stored {
            match provenance {
                Some(provenance) => {
                    super::not_stored::find(items, provenance, provider.name(), source, &mut found)
                }
                None if offline && request.store == Some(false) => {
                    super::not_stored::find_in_body(items, source, &mut found)
                }
                None => {}
            }
        }
        if let Some(source) = &rules.duplicate_item_id {
            duplicates(request, source, &mut found);
        }
        if let Some(source) = &rules.reasoning_orphaned {
            orphans(items, source, &mut found);
        }
        if let Some((source, provenance)) = rules.reasoning_missing.as_ref().zip(provenance) {
            missing_reasoning(items, provenance, provider, source, known, &mut found);
        }
        if found.is_empty() {
            return None;
        }
        // Found rule by rule, in the order docs/item-profiles.md gives: a stable sort keeps an
        // item's first.
        found.sort_by_key(|(index, _)| *index);
        found.dedup_by_key(|(index, _)| *index);
        Some(ReplayFindings { found })
    }

    /// The finding of the item at `index`, if any.
    pub(super) fn at(&self, index: usize) -> Option<&WholeFinding> {
        let at = self.found.binary_search_by_key(&index, |(i, _)| *i).ok()?;
        Some(&self.found[at].1)
    }
}

/// `duplicate_item_id`: each item whose string `id` an earlier item has, curable when its text
/// is byte for byte the earlier one's.
fn duplicates(request: &ParsedRequest<'_>, source: &str, found: &mut Vec<(usize, WholeFinding)>) {
    let items = request.items();
    let mut first: HashMap<&str, usize, RandomState> = HashMap::default();
    let mut texts = None;
    for (index, item) in items.iter().enumerate() {
        // A per-response number (`msg_0` in every turn) names no single item: not judged.
        let Some(id) = item.id().filter(|id| names_one_item(id)) else {
            continue;
        };
        let earlier = match first.entry(id) {
            Entry::Vacant(vacant) => {
                vacant.insert(index);
                continue;
            }
            Entry::Occupied(occupied) => *occupied.get(),
        };
        // The items' texts are read again only for a request that repeats an id.
        let texts = texts.get_or_insert_with(|| ItemTexts::read(request, request.body_text().as_bytes()));
        let text_of = |at: usize| texts.as_ref().and_then(|texts| texts.get(at));
        let identical = text_of(earlier).is_some_and(|text| Some(text) == text_of(index));
        let member = request.at.member();
        let (message, cure) = match identical {
            true => (
                format!(
                    "{} `{id}` repeats {member}[{earlier}] byte for byte; repair cuts this copy ({source})",
                    item.type_name()
                ),
                Cure::Cut,
            ),
            false => (
                format!(
                    "{} `{id}` has the id of {member}[{earlier}] but not its bytes: send one of them ({source})",
                    item.type_name()
                ),
                Cure::None,
            ),
        };
        found.push((
            index,
            WholeFinding {
                reason: Reason::DuplicateItemId,
                message,
                cure,
            },
        ));
    }
}

/// `reasoning_orphaned`: each reasoning item with nothing after it that it led to.
fn orphans(items: &[Item<'_>], source: &str, found: &mut Vec<(usize, WholeFinding)>) {
    for (index, item) in items.iter().enumerate() {
        if item.class != ItemClass::Reasoning {
            continue;
        }
        let next = items.get(index + 1);
        let followed_by = match next {
            None => "is the last item".to_owned(),
            Some(next) if next.class == ItemClass::Reasoning => {
                "is followed by another reasoning item".to_owned()
            }
            Some(next) => match next.role.as_str().filter(|_| next.class == ItemClass::Message) {
                Some(role @ ("user" | "system" | "developer")) => format!("is followed by a {role} message"),
                _ => continue,
            },
        };
        let named = match item.id() {
            Some(id) => format!("reasoning item `{id}`"),
            None => "this reasoning item".to_owned(),
        };
        found.push((
            index,
            WholeFinding {
                reason: Reason::ReasoningOrphaned,
                message: format!(
                    "{named} {followed_by}, not the item it led to; repair cuts it, which loses \
                     nothing the provider would read ({source})"
                ),
                cure: Cure::Cut,
            },
        ));
    }
}

/// `reasoning_missing`: each item the ledger recorded (for this provider) right after a
/// reasoning item of its response, sent without that reasoning item before it.
///
/// The reasoning item is there when an earlier item (the reasoning item, or an
/// `item_reference` to it) has its `id`, among `items` or the `known` items before them.
fn missing_reasoning(
    items: &[Item<'_>],
    provenance: &Provenance,
    provider: &ProviderProfile,
    source: &str,
    known: Option<&JudgedPrefix>,
    found: &mut Vec<(usize, WholeFinding)>,
) {
    let follows_reasoning = provenance
        .items
        .values()
        .any(|item| item.record.preceded_by.is_some());
    if !follows_reasoning {
        return;
    }
    let mut earlier: HashSet<&str, RandomState> = HashSet::default();
    for (index, item) in items.iter().enumerate() {
        let id = item.id();
        let recorded = id
            .filter(|_| item.class != ItemClass::Reasoning)
            .and_then(|id| provenance.items.get(id))
            .filter(|stored| stored.owner.provider == provider.name())
            // The provider kept nothing of a response not stored, so it cannot tell what
            // preceded the item (docs/item-profiles.md#precedence).
            .filter(|stored| !stored.not_stored);
        if let Some((id, stored)) = id.zip(recorded) {
            if let Some(reasoning) = stored.record.preceded_by.as_deref() {
                let sent = earlier.contains(reasoning) || known.is_some_and(|known| known.has_id(reasoning));
                if !sent {
                    let kept = provenance.reasoning_texts.get(reasoning);
                    let (cure, then) = match kept {
                        Some(text) => (
                            Cure::Insert {
                                id: reasoning.to_owned(),
                                text: text.clone(),
                            },
                            "repair inserts the reasoning item the ledger kept before it",
                        ),
                        None => (
                            Cure::None,
                            "send that reasoning item before it (the ledger did not keep its bytes)",
                        ),
                    };
                    let message = format!(
                        "{} `{id}` was produced right after reasoning item `{reasoning}` of response \
                         `{}`, which input does not send before it: {then} ({source})",
                        item.type_name(),
                        stored.response_id
                    );
                    found.push((
                        index,
                        WholeFinding {
                            reason: Reason::ReasoningMissing,
                            message,
                            cure,
                        },
                    ));
                }
            }
        }
        if let Some(id) = id {
            earlier.insert(id);
        }
    }
}

/// Counts (and lists, within the limit) the whole-item finding of the item at `index`, and
/// records its repair: the item cut, a reasoning item inserted before it, or a recorded item put
/// in its place. A finding `repair`
/// cannot cure is refused.
pub(super) fn push(
    verdict: &mut Verdict,
    at: ItemsAt,
    index: usize,
    item: &Item<'_>,
    finding: &WholeFinding,
    policy: &Policy,
) {
    let mut action = policy.action(finding.reason);
    if action == Action::Repair {
        match &finding.cure {
            Cure::Cut => verdict.repair_cuts.push(index),
            Cure::Insert { id, text } => verdict.inserts.push(Insert {
                index,
                id: id.clone(),
                text: text.clone(),
                replaces: false,
            }),
            Cure::Replace { id, text } => verdict.inserts.push(Insert {
                index,
                id: id.clone(),
                text: text.clone(),
                replaces: true,
            }),
            Cure::None => action = Action::Reject,
        }
    }
    verdict.push_with(finding.reason, action, Some(index), policy.max_listed, || {
        super::item_violation(
            index,
            item,
            finding.reason,
            action,
            format!("{}[{index}]", at.member()),
            None,
            finding.message.clone(),
        )
    });
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::super::tests_corpus::corpus;
    use crate::gate::provenance::{item_record_from_value, link_reasoning, Owner, StoredItem};
    use crate::gate::{
        parse_with, strip, Action, Gate, ItemProfile, ItemsAt, Policy, Provenance, ProviderProfile, Reason,
        Target, Verdict,
    };

    fn openai() -> ProviderProfile {
        ProviderProfile::own_namespace("openai")
            .with_item_profile(Some(ItemProfile::built_in("openai").unwrap()))
    }

    fn body_of(items: &[&str]) -> String {
        format!(
            r#"{{"model":"m","tools":[{{"type":"function","name":"f"}}],"input":[{}]}}"#,
            items.join(",")
        )
    }

    fn judge_with(
        body: &str,
        provider: &ProviderProfile,
        policy: &Policy,
        provenance: Option<&Provenance>,
    ) -> Verdict {
        let request = parse_with(body.as_bytes(), ItemsAt::Input).unwrap();
        let mut target = Target::new(provider, policy);
        if let Some(provenance) = provenance {
            target = target.with_provenance(provenance);
        }
        Gate::default().judge(&request, &target).unwrap()
    }

    fn judge(body: &str) -> Verdict {
        judge_with(body, &openai(), &Policy::default(), None)
    }

    /// Each violation as `(reason, action, param)`.
    fn summary(verdict: &Verdict) -> Vec<(Reason, Action, String)> {
        verdict
            .violations
            .iter()
            .map(|v| (v.reason, v.action, v.param.clone()))
            .collect()
    }

    /// The body as it would be forwarded.
    fn forwarded(body: &str, verdict: &Verdict) -> String {
        let request = parse_with(body.as_bytes(), ItemsAt::Input).unwrap();
        let cut = strip::strip(body.as_bytes(), &request, verdict).unwrap().unwrap();
        String::from_utf8(cut.body).unwrap()
    }

    const USER: &str = r#"{"role":"user","content":"hi"}"#;
    const SYSTEM: &str = r#"{"type":"message","role":"system","content":"be brief"}"#;
    const DEVELOPER: &str = r#"{"role":"developer","content":"be brief"}"#;
    const ASSISTANT: &str = r#"{"type":"message","id":"msg_a1_0123456789abcdef","role":"assistant","content":[{"type":"output_text","text":"ok"}]}"#;
    const RS: &str =
        r#"{"type":"reasoning","id":"rs_a1_0123456789abcdef","summary":[],"encrypted_content":"gAAA"}"#;
    const RS2: &str =
        r#"{"type":"reasoning","id":"rs_b2_0123456789abcdef","summary":[],"encrypted_content":"gBBB"}"#;
    const CALL: &str = r#"{"type":"function_call","id":"fc_a1_0123456789abcdef","call_id":"call_1","name":"f","arguments":"{}"}"#;
    const ANSWER: &str = r#"{"type":"function_call_output","call_id":"call_1","output":"ok"}"#;

    #[test]
    fn a_reasoning_item_with_nothing_it_led_to_after_it_is_cut_byte_exactly() {
        for (items, at) in [
            (vec![USER, RS], 1),
            (vec![USER, RS, USER], 1),
            (vec![RS, SYSTEM], 0),
            (vec![USER, RS, DEVELOPER, USER], 1),
            (vec![USER, RS, RS2, CALL, ANSWER], 1),
        ] {
            let body = body_of(&items);
            let verdict = judge(&body);
            assert_eq!(
                summary(&verdict),
                [(Reason::ReasoningOrphaned, Action::Repair, format!("input[{at}]"))],
                "{body}"
            );
            assert!(verdict.is_allowed());
            assert_eq!(verdict.repair_cuts, [at]);
            let mut kept = items.clone();
            kept.remove(at);
            assert_eq!(forwarded(&body, &verdict), body_of(&kept), "{body}");
        }
        let verdict = judge(&body_of(&[USER, RS, RS2]));
        assert_eq!(verdict.repair_cuts, [1, 2], "both are orphaned");
        assert_eq!(forwarded(&body_of(&[USER, RS, RS2]), &verdict), body_of(&[USER]));
    }

    #[test]
    fn a_reasoning_item_followed_by_what_it_led_to_is_allowed() {
        for items in [
            vec![USER, RS, CALL, ANSWER],
            vec![USER, RS, ASSISTANT, USER],
            vec![USER, RS, r#"{"role":"assistant","content":"done"}"#],
            vec![USER, RS2, RS, CALL, ANSWER][2..].to_vec(),
        ] {
            let body = body_of(&items);
            assert!(judge(&body).violations.is_empty(), "{body}");
        }
        // Without the profile's rule, nothing is judged.
        let plain = ProviderProfile::own_namespace("openai");
        let body = body_of(&[USER, RS]);
        assert!(judge_with(&body, &plain, &Policy::default(), None)
            .violations
            .is_empty());
    }

    #[test]
    fn the_rules_actions_are_the_policys() {
        let body = body_of(&[USER, RS]);
        let mut policy = Policy::default();
        policy.set_action(Reason::ReasoningOrphaned, Action::Reject);
        let verdict = judge_with(&body, &openai(), &policy, None);
        assert_eq!(summary(&verdict)[0].1, Action::Reject);
        assert!(!verdict.is_allowed() && verdict.repair_cuts.is_empty());
        policy.set_action(Reason::ReasoningOrphaned, Action::Monitor);
        let verdict = judge_with(&body, &openai(), &policy, None);
        assert_eq!(summary(&verdict)[0].1, Action::Monitor);
        assert!(verdict.is_allowed());
        assert!(strip::strip(
            body.as_bytes(),
            &parse_with(body.as_bytes(), ItemsAt::Input).unwrap(),
            &verdict
        )
        .unwrap()
        .is_none());
        policy.set_action(Reason::ReasoningOrphaned, Action::Strip);
        let verdict = judge_with(&body, &openai(), &policy, None);
        assert_eq!(verdict.stripped, [1]);
        assert_eq!(forwarded(&body, &verdict), body_of(&[USER]));
    }

    #[test]
    fn a_repeated_item_is_cut_when_identical_and_refused_when_not() {
        let body = body_of(&[USER, ASSISTANT, USER, ASSISTANT, USER]);
        let verdict = judge(&body);
        assert_eq!(
            summary(&verdict),
            [(Reason::DuplicateItemId, Action::Repair, "input[3]".to_owned())]
        );
        assert!(
            verdict.violations[0].message.contains("input[1]"),
            "{}",
            verdict.violations[0].message
        );
        assert_eq!(
            forwarded(&body, &verdict),
            body_of(&[USER, ASSISTANT, USER, USER])
        );

        // The same id with other bytes (even only other whitespace) cannot be cut safely.
        let changed = ASSISTANT.replace("\"ok\"", "\"no\"");
        let spaced = ASSISTANT.replace(",\"role\"", ", \"role\"");
        for other in [changed.as_str(), spaced.as_str()] {
            let verdict = judge(&body_of(&[USER, ASSISTANT, USER, other]));
            assert_eq!(
                summary(&verdict),
                [(Reason::DuplicateItemId, Action::Reject, "input[3]".to_owned())]
            );
        }
        // A repeated call takes the output paired with it along, so every call stays answered.
        let body = body_of(&[USER, CALL, ANSWER, CALL, ANSWER, USER]);
        let verdict = judge(&body);
        assert_eq!(verdict.repair_cuts, [3]);
        assert_eq!(forwarded(&body, &verdict), body_of(&[USER, CALL, ANSWER, USER]));
    }

    #[test]
    fn a_whole_item_finding_comes_after_item_value_and_replaces_the_member_findings() {
        // An orphaned reasoning item with a refused member: cut whole, no member repair.
        let with_status =
            r#"{"type":"reasoning","id":"rs_s1_0123456789abcdef","summary":[],"status":"completed"}"#;
        let verdict = judge(&body_of(&[USER, with_status]));
        assert_eq!(
            summary(&verdict),
            [(Reason::ReasoningOrphaned, Action::Repair, "input[1]".to_owned())]
        );
        assert!(verdict.repairs.is_empty());
        // A repeated message whose content is of a kind the profile does not take: item_value
        // alone.
        let broken = r#"{"type":"message","id":"msg_a1_0123456789abcdef","role":"assistant","content":5}"#;
        let verdict = judge(&body_of(&[USER, ASSISTANT, USER, broken]));
        assert_eq!(
            summary(&verdict)
                .into_iter()
                .map(|(reason, _, param)| (reason, param))
                .collect::<Vec<_>>(),
            [(Reason::ItemValue, "input[3].content".to_owned())]
        );
        // A repeated message that is also an orphan's follower: the repeat is judged, and the
        // reasoning item before a repeated assistant message is not orphaned.
        let verdict = judge(&body_of(&[USER, ASSISTANT, RS, ASSISTANT]));
        assert_eq!(
            summary(&verdict),
            [(Reason::DuplicateItemId, Action::Repair, "input[3]".to_owned())]
        );
    }

    /// The ledger's record of `output` (with its id), produced by `provider` in `resp_1`,
    /// right after reasoning item `after` when given.
    fn recorded(provider: &str, output: &str, after: Option<&str>) -> (String, StoredItem) {
        let mut record = item_record_from_value(&serde_json::from_str(output).unwrap()).unwrap();
        record.preceded_by = after.map(str::to_owned);
        let stored = StoredItem {
            response_id: "resp_1".to_owned(),
            owner: Owner {
                provider: provider.to_owned(),
                model: Some("m".to_owned()),
            },
            record,
            expires_unix: u64::MAX,
            team: None,
            not_stored: false,
        };
        (stored.record.id.clone().unwrap(), stored)
    }

    fn ledger(provider: &str, kept: Option<&str>) -> Provenance {
        let mut provenance = Provenance::default();
        let (id, item) = recorded(provider, CALL, Some("rs_a1_0123456789abcdef"));
        provenance.items.insert(id, item);
        if let Some(text) = kept {
            provenance
                .reasoning_texts
                .insert("rs_a1_0123456789abcdef".to_owned(), text.to_owned());
        }
        provenance
    }

    #[test]
    fn an_item_sent_back_without_its_reasoning_item_is_refused_or_given_it_back() {
        let body = body_of(&[USER, CALL, ANSWER]);
        let policy = Policy::default();
        let verdict = judge_with(&body, &openai(), &policy, Some(&ledger("openai", None)));
        assert_eq!(
            summary(&verdict),
            [(Reason::ReasoningMissing, Action::Reject, "input[1]".to_owned())]
        );
        let message = &verdict.violations[0].message;
        assert!(
            message.contains("`rs_a1_0123456789abcdef`") && message.contains("`fc_a1_0123456789abcdef`"),
            "{message}"
        );
        // Repair can only insert what the ledger kept.
        let mut repair = Policy::default();
        repair.set_action(Reason::ReasoningMissing, Action::Repair);
        let verdict = judge_with(&body, &openai(), &repair, Some(&ledger("openai", None)));
        assert_eq!(summary(&verdict)[0].1, Action::Reject);
        let kept = r#"{"id":"rs_a1_0123456789abcdef","type":"reasoning","summary":[{"type":"summary_text","text":"t"}],"encrypted_content":"gAAA"}"#;
        let verdict = judge_with(&body, &openai(), &repair, Some(&ledger("openai", Some(kept))));
        assert_eq!(
            summary(&verdict),
            [(Reason::ReasoningMissing, Action::Repair, "input[1]".to_owned())]
        );
        assert_eq!(forwarded(&body, &verdict), body_of(&[USER, kept, CALL, ANSWER]));
        // At the start of input too.
        let first = body_of(&[CALL, ANSWER]);
        let verdict = judge_with(&first, &openai(), &repair, Some(&ledger("openai", Some(kept))));
        assert_eq!(forwarded(&first, &verdict), body_of(&[kept, CALL, ANSWER]));
    }

    #[test]
    fn an_item_sent_back_with_its_reasoning_item_or_unknown_is_allowed() {
        let ledger = ledger("openai", None);
        let other_call = CALL.replace("fc_a1", "fc_b2").replace("call_1", "call_2");
        let other_answer = ANSWER.replace("call_1", "call_2");
        for items in [
            vec![USER, RS, CALL, ANSWER],
            // Sent earlier, not right before: the provider finds it.
            vec![USER, RS, &other_call, &other_answer, CALL, ANSWER],
            vec![
                USER,
                r#"{"type":"item_reference","id":"rs_a1_0123456789abcdef"}"#,
                CALL,
                ANSWER,
            ],
        ] {
            let body = body_of(&items);
            let verdict = judge_with(&body, &openai(), &Policy::default(), Some(&ledger));
            assert!(verdict.violations.is_empty(), "{body}: {:?}", summary(&verdict));
        }
        // Another provider's record says nothing of what this one wants; without the ledger
        // nothing is known.
        let body = body_of(&[USER, CALL, ANSWER]);
        let elsewhere = self::ledger("azure", None);
        assert!(judge_with(&body, &openai(), &Policy::default(), Some(&elsewhere))
            .violations
            .is_empty());
        assert!(judge(&body).violations.is_empty());
    }

    /// What a faithful ledger knows of `body`, every item with an id recorded in input order as
    /// one response's output, so an item right after a reasoning item is recorded as such.
    fn faithful(body: &str, at: ItemsAt) -> Provenance {
        let value: Value = serde_json::from_str(body).unwrap();
        let items = value[at.member()].as_array().cloned().unwrap_or_default();
        let mut records: Vec<_> = items
            .iter()
            .filter(|item| item.get("type").is_some_and(|t| t != "item_reference"))
            .filter_map(item_record_from_value)
            .collect();
        link_reasoning(&mut records);
        let mut provenance = Provenance::default();
        for record in records {
            let Some(id) = record.id.clone() else {
                continue;
            };
            let stored = StoredItem {
                response_id: "resp_1".to_owned(),
                owner: Owner {
                    provider: "openai".to_owned(),
                    model: None,
                },
                record,
                expires_unix: u64::MAX,
                team: None,
                not_stored: false,
            };
            provenance.items.insert(id, stored);
        }
        provenance
    }

    #[test]
    fn no_reasoning_item_of_the_real_client_corpus_is_orphaned_repeated_or_missing() {
        let whole = [
            Reason::DuplicateItemId,
            Reason::ReasoningOrphaned,
            Reason::ReasoningMissing,
        ];
        let mut reasoning_items = 0;
        for (origin, at, body) in corpus() {
            let request = parse_with(body.as_bytes(), at).unwrap();
            reasoning_items += request
                .items()
                .iter()
                .filter(|item| item.class == crate::gate::item::ItemClass::Reasoning)
                .count();
            let provenance = faithful(&body, at);
            for facts in [None, Some(&provenance)] {
                let verdict = judge_with(&body, &openai(), &Policy::default(), facts);
                let found: Vec<_> = summary(&verdict)
                    .into_iter()
                    .filter(|(reason, _, _)| whole.contains(reason))
                    .collect();
                assert!(found.is_empty(), "{origin}: {found:?}");
            }
        }
        assert!(reasoning_items >= 50, "{reasoning_items} reasoning items");
    }
}
