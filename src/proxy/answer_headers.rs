//! The headers an answer carries about what the gate did to a forwarded request.

use std::fmt::{Display, Write};

use http::HeaderValue;

use crate::gate::strip::Stripped;
use crate::gate::{Action, Verdict};

/// The response header naming the violations a request was forwarded with.
pub(crate) const MONITORED_HEADER: &str = "x-replaygate-monitored";

/// The response header naming the items cut from the forwarded body.
pub(crate) const STRIPPED_HEADER: &str = "x-replaygate-stripped";

/// The response header naming the members cut out of the forwarded items (docs/item-profiles.md).
pub(crate) const REPAIRED_HEADER: &str = "x-replaygate-repaired";

/// The response header naming the items `repair` inserted into the forwarded body (the
/// reasoning items the ledger kept, for `reasoning_missing`).
pub(crate) const INSERTED_HEADER: &str = "x-replaygate-inserted";

/// The response header naming the foreign response whose recorded chain replaced the
/// request's `previous_response_id` (docs/ledger.md, `carry_sessions`).
pub(crate) const CARRIED_HEADER: &str = "x-replaygate-carried";

/// Under `[usage] mode = "monitor"` (or a team's `mode = "monitor"`): the budgets a forwarded
/// request passed, `team:NAME` or `key:ID`, comma-separated (docs/budgets.md).
pub(crate) const BUDGET_PASSED_HEADER: &str = "x-replaygate-budget-passed";

/// `resp_...`: the response a carried request's chain came from.
pub(super) fn carried(from: &str) -> Option<(&'static str, HeaderValue)> {
    Some((CARRIED_HEADER, HeaderValue::try_from(from).ok()?))
}

/// `unknown_tool@input[4],status@input[7]`: the listed `monitor` violations of a verdict (items
/// in body member `member`), if any.
pub(super) fn monitored(verdict: &Verdict, member: &str) -> Option<(&'static str, HeaderValue)> {
    let names = verdict
        .with_action(Action::Monitor)
        .map(|violation| format!("{}@{}", violation.reason, violation.location(member)));
    listed(MONITORED_HEADER, names, 0)
}

/// `input[1],input[2]`: the items cut out, at most `limit` named (then `+N`).
pub(super) fn stripped(member: &str, removed: &[usize], limit: usize) -> Option<(&'static str, HeaderValue)> {
    let names = removed
        .iter()
        .take(limit)
        .map(|index| format!("{member}[{index}]"));
    listed(STRIPPED_HEADER, names, removed.len().saturating_sub(limit))
}

/// `item_field@input[2].parsed_arguments,reasoning_orphaned@input[5]`: the listed `repair`
/// violations of a verdict whose items `strip` did not cut out (`cut.removed`), then the items
/// cut out along with a call or output that `repair` cut whole (`input[7]`), at most `limit`
/// named (then `+N`).
pub(super) fn repaired(
    verdict: &Verdict,
    member: &str,
    cut: &Stripped,
    limit: usize,
) -> Option<(&'static str, HeaderValue)> {
    let in_list = |list: &[usize], index: usize| list.binary_search(&index).is_ok();
    // Cut along with an item `repair` cut whole, not for a finding of its own.
    let along = |index: usize| in_list(&cut.repair_cut, index) && !in_list(&verdict.repair_cuts, index);
    let kept = |index: usize| !in_list(&cut.removed, index) && !along(index);
    let mut names: Vec<String> = verdict
        .with_action(Action::Repair)
        .filter(|violation| violation.index.is_none_or(kept))
        .map(|violation| format!("{}@{}", violation.reason, violation.param))
        .collect();
    let alongside = cut.repair_cut.iter().filter(|&&index| along(index));
    names.extend(alongside.clone().map(|index| format!("{member}[{index}]")));
    let total = verdict.repairs.iter().filter(|r| kept(r.index)).count()
        + verdict.repair_cuts.iter().filter(|&&index| kept(index)).count()
        + verdict.inserts.iter().filter(|insert| kept(insert.index)).count()
        + alongside.count();
    let listed_count = names.len().min(limit);
    listed(
        REPAIRED_HEADER,
        names.into_iter().take(limit),
        total.saturating_sub(listed_count),
    )
}

/// `rs_1@input[4]`: the items `repair` inserted, each with the position of the item it went
/// before (in the body as received), at most `limit` named (then `+N`).
pub(super) fn inserted(member: &str, cut: &Stripped, limit: usize) -> Option<(&'static str, HeaderValue)> {
    let names = cut
        .inserted
        .iter()
        .take(limit)
        .map(|insert| format!("{}@{member}[{}]", insert.id, insert.index));
    listed(INSERTED_HEADER, names, cut.inserted.len().saturating_sub(limit))
}

/// `name: a,b,c` (and `,+more` when `more` were left out); `None` for an empty list.
pub(super) fn listed(
    name: &'static str,
    names: impl Iterator<Item = impl Display>,
    more: usize,
) -> Option<(&'static str, HeaderValue)> {
    let mut value = String::new();
    for item in names {
        if !value.is_empty() {
            value.push(',');
        }
        write!(value, "{item}").expect("writing to a String");
    }
    if value.is_empty() {
        return None;
    }
    if more > 0 {
        write!(value, ",+{more}").expect("writing to a String");
    }
    Some((name, HeaderValue::try_from(value).ok()?))
}

/// `x-replaygate-budget-passed`, naming `passed` (`None` when it is empty).
pub(crate) fn budget_passed(passed: &[String]) -> Option<(&'static str, HeaderValue)> {
    if passed.is_empty() {
        return None;
    }
    let value = HeaderValue::from_str(&passed.join(", ")).ok()?;
    Some((BUDGET_PASSED_HEADER, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_list_of_stripped_items_names_the_first_and_counts_the_rest() {
        let (name, value) = stripped("items", &[1, 2, 5, 8], 3).unwrap();
        assert_eq!(
            (name, value.to_str().unwrap()),
            (STRIPPED_HEADER, "items[1],items[2],items[5],+1")
        );
        assert!(stripped("input", &[], 3).is_none());
        assert!(monitored(&Verdict::default(), "input").is_none());
    }
}
