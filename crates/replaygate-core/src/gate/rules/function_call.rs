//! `tool_not_allowed`, `status`, `arguments_type`, `arguments_parse`, `unknown_tool`,
//! `tool_schema_invalid` and `arguments_schema`: whether a `function_call` may be made, is
//! finished and fits its tool (the team's pinned schema, else the declared one).

use serde_json::Value;

use super::tools::{ToolIndex, ToolSource};
use super::{Finding, Param, WorkMeter};
use crate::gate::item::Item;
use crate::gate::request::WorkExceeded;
use crate::gate::schema::{value_count, CompiledSchema, SchemaCache};
use crate::gate::verdict::Reason;
use crate::json::RawField;

/// What one `function_call` is checked with.
pub(super) struct CallContext<'c, 'r> {
    pub tools: &'c mut ToolIndex<'r>,
    pub schemas: &'c SchemaCache,
    pub require_status: bool,
    pub work: &'c mut WorkMeter,
}

/// Runs the call's checks in the order docs/reasons.md gives, a tool the team may not call first;
/// the first failure is the call's one finding. Fails
/// only when validating would pass the request's work budget.
pub(super) fn check(item: &Item<'_>, cx: &mut CallContext<'_, '_>) -> Result<Option<Finding>, WorkExceeded> {
    if let Some(name) = item.name.as_str().filter(|name| !cx.tools.allows(name)) {
        return Ok(Some(super::team_tools::not_allowed(
            name,
            Param::Member("name"),
            "call",
        )));
    }
    if let Some(finding) = check_status(item, cx.require_status) {
        return Ok(Some(finding));
    }
    let Some(encoded) = item.arguments.encoded() else {
        return Ok(Some(Finding::new(
            Reason::ArgumentsType,
            Param::Member("arguments"),
            format!(
                "arguments is {}; it must be a JSON-encoded string",
                item.arguments.describe()
            ),
        )));
    };
    let tool = item.name.as_str().and_then(|name| cx.tools.find(name));
    let schema = match tool {
        Some(tool) => cx.tools.schema(tool, cx.schemas, cx.work)?,
        None => None,
    };
    // A replayed call whose arguments, as written, already passed this exact schema passes
    // again without being decoded, parsed or validated.
    if tool.is_some() && cx.schemas.has_passed(schema.as_deref(), encoded) {
        return Ok(None);
    }
    let parsed = RawField::decode(encoded).and_then(|text| crate::json::Reader::read::<Value>(&text));
    let arguments = match parsed {
        Ok(arguments) => arguments,
        Err(e) => {
            return Ok(Some(Finding::new(
                Reason::ArgumentsParse,
                Param::Member("arguments"),
                format!("arguments is not valid JSON: {e}"),
            )))
        }
    };
    let Some(tool) = tool else {
        return Ok(Some(unknown_tool(item)));
    };
    let finding = match schema.as_deref() {
        Some(schema) => check_schema(item, &arguments, encoded.len(), tool.source, schema, cx.work)?,
        None => None,
    };
    if finding.is_none() {
        cx.schemas.remember_pass(schema.as_deref(), encoded);
    }
    Ok(finding)
}

/// `status` must be `"completed"` when present; a missing (or null) one counts only under
/// `require_status` (clients such as the Vercel AI SDK replay calls without it).
fn check_status(item: &Item<'_>, require_status: bool) -> Option<Finding> {
    let problem = match item.status.as_str() {
        Some("completed") => return None,
        Some(status) => format!("function_call status is `{status}`"),
        None if item.status.is_absent_or_null() && !require_status => return None,
        None if item.status.is_absent_or_null() => {
            "function_call has no status (and `require_status` is on)".to_owned()
        }
        None => format!("function_call status is {}", item.status.describe()),
    };
    Some(Finding::new(
        Reason::Status,
        Param::Member("status"),
        format!("{problem}; only a completed call may be replayed"),
    ))
}

fn unknown_tool(item: &Item<'_>) -> Finding {
    let message = match item.name.as_str() {
        Some(name) => format!("no function tool named `{name}` in the request's tools"),
        None => format!(
            "function_call name is {}; no tool can be found",
            item.name.describe()
        ),
    };
    Finding::new(Reason::UnknownTool, Param::Member("name"), message)
}

/// Validates `arguments` (written in `written_bytes`) against the tool's schema, charging the
/// work to the request's meter first.
fn check_schema(
    item: &Item<'_>,
    arguments: &Value,
    written_bytes: usize,
    source: ToolSource,
    schema: &CompiledSchema,
    work: &mut WorkMeter,
) -> Result<Option<Finding>, WorkExceeded> {
    let validator = match schema.validator() {
        Ok(validator) => validator,
        Err(why) => {
            let name = item.name.as_str().unwrap_or_default();
            let (param, whose) = match source {
                ToolSource::Declared(position) => (Param::ToolParameters(position), ""),
                // Pinned schemas are checked when the configuration loads; only a gate with
                // tighter schema limits than that check can find one unusable.
                ToolSource::Pinned => (Param::Member("name"), "pinned "),
            };
            return Ok(Some(Finding::new(
                Reason::ToolSchemaInvalid,
                param,
                format!("the {whose}parameters of tool `{name}` are not a usable JSON Schema: {why}"),
            )));
        }
    };
    // A validation may visit every unfolded subschema once per value of the arguments, and
    // keywords such as `pattern` read long strings whole.
    let reads = value_count(arguments) + written_bytes as u64 / 64;
    let visits = schema.unfolded().saturating_mul(reads);
    work.charge(visits)?;
    // Most calls fit: the yes-or-no check is cheaper, and the error is built only when needed.
    if validator.is_valid(arguments) {
        return Ok(None);
    }
    // Finding the first error walks failing branches again at every level of nesting.
    work.charge(visits.saturating_mul(FIRST_ERROR_FACTOR))?;
    let Some(error) = validator.validate(arguments).err() else {
        return Ok(None);
    };
    let pointer = error.instance_path().to_string();
    let place = if pointer.is_empty() {
        "the top level"
    } else {
        &pointer
    };
    let message = format!("{error} at {place}");
    Ok(Some(Finding {
        pointer: Some(pointer),
        ..Finding::new(Reason::ArgumentsSchema, Param::Member("arguments"), message)
    }))
}

/// How many times a validation's work finding the first error of a failing call may cost.
const FIRST_ERROR_FACTOR: u64 = 8;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::request::parse;
    use crate::gate::rules::tools::FOOTPRINT_BYTES_PER_UNIT;

    const TOOLS: &str = r#"[
        {"type":"function","name":"report","parameters":{"type":"object","additionalProperties":false,"required":["region"],
            "properties":{"region":{"type":"string","enum":["apac","emea","amer"]},"days":{"type":"integer","minimum":1}}}},
        {"type":"function","name":"free"},
        {"type":"function","name":"broken","parameters":{"type":"nope"}},
        {"type":"function","name":"remote","parameters":{"$ref":"https://example.com/s.json"}},
        {"type":"web_search","name":"web"}
    ]"#;

    fn check_call(call: &str) -> Option<Finding> {
        check_call_with(call, &SchemaCache::default())
    }

    fn check_call_with(call: &str, schemas: &SchemaCache) -> Option<Finding> {
        check_call_in(call, schemas, false)
    }

    fn check_call_in(call: &str, schemas: &SchemaCache, require_status: bool) -> Option<Finding> {
        let body = format!(r#"{{"tools":{TOOLS},"input":[{call}]}}"#);
        let (mut checked, _) = check_calls(&body, schemas, require_status, u64::MAX);
        checked.remove(0).unwrap()
    }

    /// Checks every item of `body` as one request does, until the work budget is passed;
    /// returns each item's outcome and the work used.
    fn check_calls(
        body: &str,
        schemas: &SchemaCache,
        require_status: bool,
        budget: u64,
    ) -> (Vec<Result<Option<Finding>, WorkExceeded>>, u64) {
        let request = parse(body.as_bytes()).unwrap();
        let mut tools = ToolIndex::new(&request.tools, None);
        let mut work = WorkMeter::new(budget);
        let mut cx = CallContext {
            tools: &mut tools,
            schemas,
            require_status,
            work: &mut work,
        };
        let mut checked = Vec::new();
        for item in request.items() {
            let outcome = check(item, &mut cx);
            let exceeded = outcome.is_err();
            checked.push(outcome);
            if exceeded {
                break;
            }
        }
        (checked, work.used)
    }

    fn call(status: &str, name: &str, arguments: &str) -> String {
        format!(
            r#"{{"type":"function_call","call_id":"c1","name":"{name}","status":{status},"arguments":{arguments}}}"#
        )
    }

    fn reason(call: &str) -> Option<Reason> {
        check_call(call).map(|f| f.reason)
    }

    #[test]
    fn a_completed_call_that_fits_its_schema_passes() {
        assert_eq!(
            reason(&call(r#""completed""#, "report", r#""{\"region\":\"apac\"}""#)),
            None
        );
    }

    #[test]
    fn a_present_status_must_be_completed() {
        for status in [r#""in_progress""#, r#""incomplete""#, "3", r#""""#] {
            let f = check_call(&call(status, "report", r#""{\"region\":\"apac\"}""#)).unwrap();
            assert_eq!(
                (f.reason, f.param),
                (Reason::Status, Param::Member("status")),
                "{status}"
            );
        }
    }

    #[test]
    fn a_missing_status_counts_only_when_required() {
        let missing =
            r#"{"type":"function_call","call_id":"c1","name":"report","arguments":"{\"region\":\"apac\"}"}"#;
        let null = call("null", "report", r#""{\"region\":\"apac\"}""#);
        let schemas = SchemaCache::default();
        for body in [missing, null.as_str()] {
            assert_eq!(check_call_in(body, &schemas, false), None, "{body}");
            let f = check_call_in(body, &schemas, true).unwrap();
            assert_eq!(f.reason, Reason::Status);
            assert!(f.message.contains("no status"), "{}", f.message);
        }
    }

    #[test]
    fn validation_is_charged_to_the_work_budget() {
        let body_with = |arguments: &str| {
            format!(
                r#"{{"tools":{TOOLS},"input":[{}]}}"#,
                call(r#""completed""#, "report", arguments)
            )
        };
        // Both arguments hold two JSON values; one fits the schema, one does not.
        let (passing, failing) = (
            body_with(r#""{\"region\":\"apac\"}""#),
            body_with(r#""{\"region\":\"global\"}""#),
        );
        let schemas = SchemaCache::default();
        let (_, schema_and_validation) = check_calls(&passing, &schemas, false, u64::MAX);
        // A remembered pass costs only the schema's charge.
        let (_, schema) = check_calls(&passing, &schemas, false, u64::MAX);
        let validation = schema_and_validation - schema;
        assert!(validation > 0);
        // A failing call costs its validation, and the search for its first error again.
        let total = schema + validation * (1 + FIRST_ERROR_FACTOR);
        let run = |budget: u64| {
            let (mut checked, used) = check_calls(&failing, &schemas, false, budget);
            (checked.remove(0).map(|f| f.map(|f| f.reason)), used)
        };
        assert_eq!(run(u64::MAX), (Ok(Some(Reason::ArgumentsSchema)), total));
        assert_eq!(run(total).0, Ok(Some(Reason::ArgumentsSchema)));
        assert!(run(total - 1).0.is_err());
        assert!(run(schema + validation).0.is_err());
        assert!(run(schema - 1).0.is_err());
    }

    /// The reasons found in `body`'s items, and the work used.
    fn work_of(body: &str, schemas: &SchemaCache) -> (Vec<Option<Reason>>, u64) {
        let (checked, used) = check_calls(body, schemas, false, u64::MAX);
        let reasons = checked
            .into_iter()
            .map(|f| f.unwrap().map(|f| f.reason))
            .collect();
        (reasons, used)
    }

    #[test]
    fn a_schema_is_charged_once_per_request_whether_cached_or_not() {
        let schemas = SchemaCache::default();
        let footprint = schemas
            .get(r#"{"type":"array","items":{"type":"integer"}}"#)
            .footprint();
        let tools =
            r#"[{"type":"function","name":"sum","parameters":{"type":"array","items":{"type":"integer"}}}]"#;
        let one = call(r#""completed""#, "sum", r#""[1,2]""#);
        let body = |calls: &[&str]| format!(r#"{{"tools":{tools},"input":[{}]}}"#, calls.join(","));
        let (reasons, first) = work_of(&body(&[&one]), &schemas);
        assert_eq!(reasons, [None]);
        assert!(first > footprint / FOOTPRINT_BYTES_PER_UNIT, "{first}");
        // The same call again in the same request is a remembered pass and the schema is
        // already charged; in a later request only the schema is charged.
        assert_eq!(work_of(&body(&[&one, &one]), &SchemaCache::default()).1, first);
        assert_eq!(
            work_of(&body(&[&one]), &schemas).1,
            footprint / FOOTPRINT_BYTES_PER_UNIT
        );
    }

    #[test]
    fn dense_arguments_are_charged_per_value() {
        let tools = r#"[{"type":"function","name":"sum","parameters":{"type":"array","items":{"anyOf":[{"type":"string"},{"type":"integer"}]}}}]"#;
        let values = 5_000;
        let arguments = format!(r#""[{}]""#, vec!["1"; values].join(","));
        let body = format!(
            r#"{{"tools":{tools},"input":[{}]}}"#,
            call(r#""completed""#, "sum", &arguments)
        );
        let schemas = SchemaCache::default();
        let schema =
            schemas.get(r#"{"type":"array","items":{"anyOf":[{"type":"string"},{"type":"integer"}]}}"#);
        let (reasons, used) = work_of(&body, &schemas);
        assert_eq!(reasons, [None]);
        // 10 KB of arguments, but 5,001 values each of which may meet every subschema.
        let schema_charge = schema.footprint() / FOOTPRINT_BYTES_PER_UNIT;
        assert!(
            used - schema_charge >= schema.unfolded() * values as u64,
            "{used}"
        );
    }

    #[test]
    fn status_is_checked_before_arguments() {
        assert_eq!(
            reason(&call(r#""incomplete""#, "report", r#""{\"region\":\"ap""#)),
            Some(Reason::Status)
        );
    }

    #[test]
    fn arguments_must_be_a_string() {
        for arguments in [r#"{"region":"apac"}"#, "[1]", "42", "null", "true"] {
            let f = check_call(&call(r#""completed""#, "report", arguments)).unwrap();
            assert_eq!(
                (f.reason, f.param),
                (Reason::ArgumentsType, Param::Member("arguments")),
                "{arguments}"
            );
        }
        let absent = r#"{"type":"function_call","call_id":"c1","name":"report","status":"completed"}"#;
        assert!(check_call(absent).unwrap().message.contains("missing"));
    }

    #[test]
    fn arguments_must_parse() {
        for arguments in [r#""{\"region\":\"ap""#, r#""""#, r#""{region:1}""#, r#""{} {}""#] {
            assert_eq!(
                reason(&call(r#""completed""#, "report", arguments)),
                Some(Reason::ArgumentsParse),
                "{arguments}"
            );
        }
    }

    #[test]
    fn a_call_must_name_a_declared_function_tool() {
        assert_eq!(
            reason(&call(r#""completed""#, "missing", r#""{}""#)),
            Some(Reason::UnknownTool)
        );
        // `web` is declared, but not as a function tool.
        assert_eq!(
            reason(&call(r#""completed""#, "web", r#""{}""#)),
            Some(Reason::UnknownTool)
        );
        let nameless = r#"{"type":"function_call","call_id":"c1","status":"completed","arguments":"{}"}"#;
        assert_eq!(check_call(nameless).unwrap().param, Param::Member("name"));
    }

    #[test]
    fn parse_errors_come_before_unknown_tools() {
        assert_eq!(
            reason(&call(r#""completed""#, "missing", r#""{""#)),
            Some(Reason::ArgumentsParse)
        );
    }

    #[test]
    fn a_tool_without_parameters_accepts_any_arguments() {
        assert_eq!(
            reason(&call(r#""completed""#, "free", r#""{\"x\":[1,2]}""#)),
            None
        );
    }

    #[test]
    fn unusable_schemas_point_at_the_tool() {
        let f = check_call(&call(r#""completed""#, "broken", r#""{}""#)).unwrap();
        assert_eq!(
            (f.reason, f.param),
            (Reason::ToolSchemaInvalid, Param::ToolParameters(2))
        );
        let f = check_call(&call(r#""completed""#, "remote", r#""{}""#)).unwrap();
        assert_eq!(
            (f.reason, f.param),
            (Reason::ToolSchemaInvalid, Param::ToolParameters(3))
        );
    }

    #[test]
    fn schema_failures_carry_a_pointer_and_a_clear_message() {
        let f = check_call(&call(r#""completed""#, "report", r#""{\"region\":\"global\"}""#)).unwrap();
        assert_eq!(
            (f.reason, f.param),
            (Reason::ArgumentsSchema, Param::Member("arguments"))
        );
        assert_eq!(f.pointer.as_deref(), Some("/region"));
        assert!(
            f.message.starts_with(r#""global" is not one of"#) && f.message.ends_with("at /region"),
            "{}",
            f.message
        );

        let f = check_call(&call(
            r#""completed""#,
            "report",
            r#""{\"region\":\"apac\",\"days\":0}""#,
        ))
        .unwrap();
        assert_eq!(f.pointer.as_deref(), Some("/days"));

        let f = check_call(&call(r#""completed""#, "report", r#""{\"days\":2}""#)).unwrap();
        assert_eq!(f.pointer.as_deref(), Some(""));
        assert!(
            f.message.contains("region") && f.message.ends_with("at the top level"),
            "{}",
            f.message
        );
    }

    #[test]
    fn the_first_declaration_of_a_name_wins() {
        let body = r#"{"tools":[{"type":"function","name":"t","parameters":{"type":"object"}},{"type":"function","name":"t","parameters":{"type":"string"}}],
            "input":[{"type":"function_call","call_id":"c","name":"t","status":"completed","arguments":"{}"}]}"#;
        let request = parse(body.as_bytes()).unwrap();
        let mut tools = ToolIndex::new(&request.tools, None);
        let mut work = WorkMeter::new(u64::MAX);
        let mut cx = CallContext {
            tools: &mut tools,
            schemas: &SchemaCache::default(),
            require_status: false,
            work: &mut work,
        };
        assert!(check(&request.items()[0], &mut cx).unwrap().is_none());
    }

    #[test]
    fn a_replayed_call_is_judged_the_same_from_memory() {
        let schemas = SchemaCache::default();
        let good = call(r#""completed""#, "report", r#""{\"region\":\"apac\"}""#);
        let bad = call(r#""completed""#, "report", r#""{\"region\":\"global\"}""#);
        for _ in 0..3 {
            assert_eq!(check_call_with(&good, &schemas), None);
            assert_eq!(
                check_call_with(&bad, &schemas).map(|f| f.reason),
                Some(Reason::ArgumentsSchema)
            );
        }
    }

    #[test]
    fn a_pass_is_remembered_per_schema() {
        let schemas = SchemaCache::default();
        let text = r#""{\"region\":\"global\"}""#;
        // `free` declares no schema, so this passes there ...
        assert_eq!(
            check_call_with(&call(r#""completed""#, "free", text), &schemas),
            None
        );
        // ... which says nothing about `report`, `broken` or an unknown tool.
        let reason =
            |name: &str| check_call_with(&call(r#""completed""#, name, text), &schemas).map(|f| f.reason);
        assert_eq!(reason("report"), Some(Reason::ArgumentsSchema));
        assert_eq!(reason("broken"), Some(Reason::ToolSchemaInvalid));
        assert_eq!(reason("missing"), Some(Reason::UnknownTool));
    }

    #[test]
    fn the_same_arguments_written_with_other_escapes_are_judged_alike() {
        let schemas = SchemaCache::default();
        let plain = call(r#""completed""#, "report", r#""{\"region\":\"apac\"}""#);
        let escaped = call(r#""completed""#, "report", r#""{\"region\":\"\u0061pac\"}""#);
        let bad = call(r#""completed""#, "report", r#""{\"region\":\"\u0067lobal\"}""#);
        assert_eq!(check_call_with(&plain, &schemas), None);
        assert_eq!(check_call_with(&escaped, &schemas), None);
        assert_eq!(
            check_call_with(&bad, &schemas).map(|f| f.reason),
            Some(Reason::ArgumentsSchema)
        );
    }

    #[test]
    fn arguments_that_do_not_decode_cannot_parse() {
        // A lone surrogate escape is read past by the body scan but is no Unicode text.
        assert_eq!(
            reason(&call(r#""completed""#, "free", r#""{\"x\":\"\ud800\"}""#)),
            Some(Reason::ArgumentsParse)
        );
    }
}
