//! Incremental judging against the full check (docs/incremental-judging.md) on bodies the
//! fuzzer builds: the first byte picks the provider (bit 0: `openai`, else `bedrock`; bit 1: the
//! `openai` item profile), what the ledger knows (bits 2-3: nothing, every item recorded for
//! the provider, for another provider, or for the provider then and another now) and the
//! policy (bit 4: unknown tools refused; bit 5: the proxy's small inline work budget); the rest
//! is the body. The body is cut at every item; each earlier part judged clean is kept, the
//! whole body judged after it, and the answer must be the full check's (a clean verdict, the
//! same), the ledger query told from the new items the whole body's
//! (`judged_after_prefixes_as_whole` panics otherwise).

#![no_main]

use libfuzzer_sys::fuzz_target;
use replaygate::gate::{
    judged_after_prefixes_as_whole, recorded_as_sent, Action, ItemProfile, Policy, Provenance,
    ProviderProfile, Reason,
};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
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
    let own = || recorded_as_sent(body, name);
    let other = || recorded_as_sent(body, "elsewhere");
    let (then, now): (Option<Provenance>, Option<Provenance>) = match (selector >> 2) & 3 {
        0 => (None, None),
        1 => (Some(own()), Some(own())),
        2 => (Some(other()), Some(other())),
        _ => (Some(own()), Some(other())),
    };
    judged_after_prefixes_as_whole(body, &provider, &policy, then.as_ref(), now.as_ref());
});
