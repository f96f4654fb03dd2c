//! Incremental judging against the full check (docs/incremental-judging.md) on bodies the
//! fuzzer builds, with the ledger's records as they were when the earlier turns were judged and
//! as they are now. The first byte picks the provider (bit 0: `openai`, else `bedrock`; bit 1:
//! the `openai` item profile), the ledger (bits 2-3: none, every item recorded for the provider,
//! recorded for another provider, recorded for the provider expiring at time 4) and the policy
//! (bit 4: unknown tools refused; bit 5: the proxy's small inline work budget). The second byte
//! says how the ledger changed and who asks: bit 0, records lost since (and recorded again for
//! another provider); bits 1-3, the time the last body is judged; bit 4, the records are
//! another team's; bit 5, that team granted the asker its state; bit 6, `unknown_state`
//! judged; bit 7, the records were written only after the earlier turns. The rest is the body.
//! It is cut at every item; each earlier part judged clean is kept, the whole body judged after
//! it, and the answer must be the full check's (a clean verdict, the same), and the ledger's
//! answer to the whole body told from the kept facts the ledger's own
//! (`judged_after_prefixes_as_whole` panics otherwise).

#![no_main]

use libfuzzer_sys::fuzz_target;
use replaygate::gate::{
    judged_after_prefixes_as_whole, recorded_for, Action, CheckedFor, ItemProfile, LedgerChange, Policy,
    Provenance, ProviderProfile, Reason, StateAccess,
};

fuzz_target!(|data: &[u8]| {
    let [selector, change, body @ ..] = data else {
        return;
    };
    let Ok(body) = std::str::from_utf8(body) else {
        return;
    };
    let name = if selector & 1 != 0 { "openai" } else { "bedrock" };
    let mut provider = ProviderProfile::own_namespace(name);
    if selector & 2 != 0 {
        provider = provider.with_item_profile(Some(ItemProfile::built_in("openai").expect("built in")));
    }
    let mut policy = Policy::default();
    if selector & 16 != 0 {
        policy.set_action(Reason::UnknownTool, Action::Reject);
    }
    if selector & 32 != 0 {
        policy.work_budget = 20_000;
    }
    let team = match change & 16 != 0 {
        true => "granter",
        false => "asker",
    };
    let records = match (selector >> 2) & 3 {
        0 => None,
        1 => Some(recorded_for(body, name, Some(team), u64::MAX)),
        2 => Some(recorded_for(body, "elsewhere", Some(team), u64::MAX)),
        _ => Some(recorded_for(body, name, Some(team), 4)),
    };
    let access = StateAccess::new("asker", (change & 32 != 0).then(|| "granter".to_owned()));
    let asker = CheckedFor {
        provider: &provider,
        policy: &policy,
        access: Some(&access),
        deny_unknown_state: change & 64 != 0,
    };
    let Some(records) = records else {
        judged_after_prefixes_as_whole(body, &CheckedFor::provider(&provider, &policy), None);
        return;
    };
    let nothing = Provenance::default();
    let lost = change & 1 != 0;
    let again = recorded_for(body, "elsewhere", Some(team), u64::MAX);
    let (then, written) = match (change & 128 != 0, lost) {
        (true, _) => (&nothing, &records),
        (false, true) => (&records, &again),
        (false, false) => (&records, &nothing),
    };
    let ledger = LedgerChange {
        then,
        written,
        lost,
        now_unix: 1 + u64::from((change >> 1) & 7),
    };
    judged_after_prefixes_as_whole(body, &asker, Some(&ledger));
    judged_after_prefixes_as_whole(body, &CheckedFor::provider(&provider, &policy), Some(&ledger));
});
