//! The gate: judges the `input` items of one Responses request body for one target provider.
//!
//! Pure and synchronous: no I/O, no async, no global state. The only state is the
//! [`SchemaCache`] a [`Gate`] owns, so a tool schema sent on every turn compiles once.
//!
//! ```
//! use replaygate_core::gate::{Gate, ProviderProfile, Target};
//!
//! let gate = Gate::default();
//! let bedrock = ProviderProfile::own_namespace("bedrock");
//! let body = br#"{"model":"m","input":[{"type":"openai:web_search_call","id":"ws_1"}]}"#;
//! let verdict = gate.check(body, &Target::provider(&bedrock)).unwrap();
//! assert_eq!(verdict.violations[0].reason.as_str(), "namespaced");
//! ```
//!
//! Layout: [`request`] reads the body once (borrowing), [`item`] reads one item and says what
//! kind it is, `rules` holds one small unit per rule, [`schema`] compiles and caches tool
//! schemas, [`verdict`] is what comes out, [`strip`] cuts stripped items out of a body, and
//! [`output`] is what the response side checks: the calls a provider produced.
//! `pairing` says which call each output answers, by `call_id`, for the rules, for cutting
//! stripped items in pairs and for the ledger query.
//! [`shape`] is every member name the reading met, which [`item_profile`]s check, and
//! [`repair`] cuts repaired members out of a body.
//! [`provenance`] is what the provenance ledger is asked and answers: the facts it answers
//! with (who produced an item, its record and digest) are plain data defined here, which the
//! ledger fills in; the gate never imports the ledger.

pub mod access;
mod conversation;
pub mod item;
pub mod item_pattern;
pub mod item_profile;
pub mod judged;
#[cfg(any(test, feature = "fuzzing"))]
mod judged_check;
mod judged_facts;
mod judged_key;
mod name_table;
pub mod output;
mod pairing;
mod profile;
pub mod provenance;
pub mod repair;
pub mod request;
mod rules;
pub mod schema;
pub mod shape;
pub mod strip;
#[cfg(test)]
mod tests_judged;
#[cfg(test)]
mod tests_member_props;
#[cfg(test)]
mod tests_repair_props;
mod text_set;
mod tool_rules;
pub mod verdict;

pub use crate::json::{misspelling_of, Field, JsonKind, Text};
pub use access::StateAccess;
pub use item_profile::{ItemProfile, ProfileError};
pub use judged::{Continued, InputProbe, JudgedPrefix, KeptInput};
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub use judged_check::{
    judged_after_prefixes_as_whole, recorded_as_sent, recorded_for, CheckedFor, LedgerChange,
};
pub use judged_facts::KeptFacts;
pub use judged_key::JudgeKey;
pub use output::{OutputCall, ResponseViolation};
pub use profile::{EncryptedScope, Policy, ProviderProfile, Target, DEFAULT_WORK_BUDGET};
pub use provenance::{ChainFacts, ConversationFacts, LedgerQuery, Provenance, MAX_QUERY_KEYS};
pub use request::{
    parse, parse_after_known, parse_noting_spans, parse_tools, parse_with, BodyError, DeclaredTools, ItemsAt,
    KnownItems, ParsedRequest, WorkExceeded, MAX_ITEMS,
};
pub use schema::{SchemaCache, SchemaLimits};
pub use tool_rules::{glob_set, PinnedSchema, ToolRules};
pub use verdict::{Action, Decision, Insert, Reason, Repair, Verdict, Violation};

/// The gate with its schema cache. Share one per process (it is `Send + Sync`).
#[derive(Debug, Default)]
pub struct Gate {
    schemas: SchemaCache,
}

impl Gate {
    /// A gate whose schema cache keeps to `limits`.
    pub fn new(limits: SchemaLimits) -> Self {
        Self {
            schemas: SchemaCache::new(limits),
        }
    }

    /// Reads `body` and judges it for `target`.
    pub fn check(&self, body: &[u8], target: &Target<'_>) -> Result<Verdict, BodyError> {
        let request = parse(body)?;
        Ok(self.judge(&request, target)?)
    }

    /// Judges a request already read with [`parse`] (the proxy reads once, routes on the
    /// model, then judges for the chosen provider). Fails only when checking the request's
    /// tool calls would pass the policy's work budget.
    pub fn judge(&self, request: &ParsedRequest<'_>, target: &Target<'_>) -> Result<Verdict, WorkExceeded> {
        rules::judge(request, target, &self.schemas)
    }

    /// [`Gate::judge`], and what a later body that begins with this one's items needs to be
    /// judged after them ([`JudgedPrefix`], docs/incremental-judging.md): `None` unless the
    /// verdict is clean and such a body could be. `query` is what the ledger was asked for
    /// this request (`None`: not asked), and the target carries what it said; what is kept is
    /// hashed under `key` (the one the body is probed with, [`InputProbe::of`]).
    pub fn judge_keeping(
        &self,
        request: &ParsedRequest<'_>,
        target: &Target<'_>,
        query: Option<&LedgerQuery>,
        key: &JudgeKey,
    ) -> Result<(Verdict, Option<JudgedPrefix>), WorkExceeded> {
        let (verdict, tail) = rules::judge_whole(request, target, &self.schemas)?;
        let kept = judged::keep(key, request, None, &verdict, &tail, query, target.provenance);
        Ok((verdict, kept))
    }

    /// Judges a request read after the items of `known` ([`parse_after_known`]): the verdict
    /// [`Gate::judge`] would give the whole body, with the [`JudgedPrefix`] of the whole
    /// input as [`Gate::judge_keeping`] gives it; `None` when that cannot be told from the new
    /// items alone (only a clean verdict can), and the caller reads and judges the whole body.
    /// `query` is what the ledger was asked ([`JudgedPrefix::query_after`]).
    pub fn judge_after(
        &self,
        request: &ParsedRequest<'_>,
        target: &Target<'_>,
        known: &JudgedPrefix,
        query: Option<&LedgerQuery>,
    ) -> Result<Option<(Verdict, Option<JudgedPrefix>)>, WorkExceeded> {
        let Some((verdict, tail)) = rules::judge_after(request, target, &self.schemas, known)? else {
            return Ok(None);
        };
        let kept = judged::keep(
            known.key(),
            request,
            Some(known),
            &verdict,
            &tail,
            query,
            target.provenance,
        );
        Ok(Some((verdict, kept)))
    }

    /// Checks the `function_call` items a provider produced (in answer order) against the
    /// request's tools: `tools_json` is the request's `tools` array as sent (`null` when it
    /// declared none), and `target` the team's policy and work budget the request was judged
    /// with. Each call gets the checks a replayed call gets, but `status`
    /// (docs/ledger.md#the-answers-calls): `tool_not_allowed`, `arguments_type`, `arguments_parse`,
    /// `unknown_tool`,
    /// `tool_schema_invalid`, `arguments_schema`; the first failure is its one violation.
    /// Schemas compile once in this gate's cache, and a call that passes is remembered, so its
    /// replay on the next turn costs nothing.
    ///
    /// Fails when `tools_json` is not a tools array, or when checking would pass the work
    /// budget (a hostile schema cannot hold the thread).
    pub fn check_output_calls(
        &self,
        tools_json: &str,
        calls: &[OutputCall],
        target: &Target<'_>,
    ) -> Result<Vec<ResponseViolation>, BodyError> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let tools = parse_tools(tools_json)?;
        Ok(self.check_produced_calls(&tools, calls, target)?)
    }

    /// [`check_output_calls`](Gate::check_output_calls) against tools already read (the
    /// proxy keeps them from the request's one parse, as [`DeclaredTools`]). Fails only when
    /// checking would pass the work budget.
    pub fn check_produced_calls(
        &self,
        tools: &[request::Tool<'_>],
        calls: &[OutputCall],
        target: &Target<'_>,
    ) -> Result<Vec<ResponseViolation>, WorkExceeded> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        rules::output_calls::check(tools, calls, target, &self.schemas)
    }

    /// The compiled tool schemas this gate holds.
    pub fn schemas(&self) -> &SchemaCache {
        &self.schemas
    }
}
