//! The headers an answer carries about what the gate did to a forwarded request.

use std::fmt::{Display, Write};

use http::HeaderValue;

use crate::gate::{Action, Verdict};

/// The response header naming the violations a request was forwarded with.
pub const MONITORED_HEADER: &str = "x-replaygate-monitored";

/// The response header naming the items cut from the forwarded body.
pub const STRIPPED_HEADER: &str = "x-replaygate-stripped";

/// The response header naming the members cut out of the forwarded items (contract §5a).
pub const REPAIRED_HEADER: &str = "x-replaygate-repaired";

/// The response header naming the foreign response whose recorded chain replaced the
/// request's `previous_response_id` (contract §8, `carry_sessions`).
pub const CARRIED_HEADER: &str = "x-replaygate-carried";

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

/// `item_field@input[2].parsed_arguments`: the listed `repair` violations of a verdict whose
/// items were not cut out whole (`removed`, ascending), at most `limit` named (then `+N`).
pub(super) fn repaired(
    verdict: &Verdict,
    removed: &[usize],
    limit: usize,
) -> Option<(&'static str, HeaderValue)> {
    let kept = |index: &Option<usize>| index.is_none_or(|i| removed.binary_search(&i).is_err());
    let names: Vec<String> = verdict
        .with_action(Action::Repair)
        .filter(|violation| kept(&violation.index))
        .map(|violation| format!("{}@{}", violation.reason, violation.param))
        .collect();
    let listed_count = names.len().min(limit);
    let total = verdict.repairs.iter().filter(|r| kept(&Some(r.index))).count();
    listed(
        REPAIRED_HEADER,
        names.into_iter().take(limit),
        total.saturating_sub(listed_count),
    )
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
