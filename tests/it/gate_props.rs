//! Property tests: the gate never panics and always answers, and on well-formed histories it
//! allows exactly what it should and refuses exactly the one thing that was broken.
//!
//! Case counts are kept moderate so the whole file runs in well under 20 s in a debug build;
//! set `GATE_PROPS_SCALE=N` to run N times as many cases as a longer soak.

use std::ops::Range;
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::TestCaseError;
use replaygate::gate::request::{parse_with_serde_json, same_refusal};
use replaygate::gate::{
    parse, strip, Action, BodyError, Gate, ItemProfile, ItemsAt, Policy, ProviderProfile, Reason, Target,
    Verdict,
};
use serde_json::{json, Map, Value};

// ---------------------------------------------------------------------------------------------
// Shared gate and target
// ---------------------------------------------------------------------------------------------

/// One long-lived gate, as in the proxy: its schema cache stays warm across cases.
fn gate() -> &'static Gate {
    static GATE: OnceLock<Gate> = OnceLock::new();
    GATE.get_or_init(Gate::default)
}

fn openai() -> &'static ProviderProfile {
    static OPENAI: OnceLock<ProviderProfile> = OnceLock::new();
    OPENAI.get_or_init(|| ProviderProfile::own_namespace("openai"))
}

/// `cases` cases, times `GATE_PROPS_SCALE` when set (for a longer soak than the default run).
fn config(cases: u32) -> ProptestConfig {
    let scale = std::env::var("GATE_PROPS_SCALE")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(1);
    ProptestConfig::with_cases(cases.saturating_mul(scale.max(1)))
}

fn check(body: &[u8]) -> Result<Verdict, BodyError> {
    gate().check(body, &Target::provider(openai()))
}

/// What every answer must look like, whatever the body: an error with a code of docs/answers.md, or
/// violations in strictly increasing input order (at most one per item), each pointing at its
/// own item or at a tool's schema, with a pointer exactly for schema failures.
///
/// `items` is the number of `input` items, when the caller knows it.
fn assert_well_formed(
    answer: &Result<Verdict, BodyError>,
    items: Option<usize>,
) -> Result<(), TestCaseError> {
    let verdict = match answer {
        Err(e) => {
            prop_assert!(
                matches!(e.code(), "invalid_json" | "invalid_input"),
                "unexpected error code {}",
                e.code()
            );
            prop_assert!(!e.to_string().is_empty());
            return Ok(());
        }
        Ok(verdict) => verdict,
    };
    let mut previous = None;
    for v in &verdict.violations {
        let index = v
            .index
            .expect("without team policy every violation is about an item");
        if let Some(previous) = previous {
            prop_assert!(index > previous, "violations out of order: {verdict:?}");
        }
        previous = Some(index);
        if let Some(items) = items {
            prop_assert!(index < items, "index {} of {items} items", index);
        }
        let own = format!("input[{}].", index);
        prop_assert!(
            v.param.starts_with(&own) || v.param.starts_with("tools["),
            "param {} for index {}",
            v.param,
            index
        );
        prop_assert_eq!(v.pointer.is_some(), v.reason == Reason::ArgumentsSchema);
        prop_assert!(!v.message.is_empty());
        prop_assert!(!v.item_type.is_empty());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Arbitrary JSON
// ---------------------------------------------------------------------------------------------

/// Member names the gate or JSON Schema give meaning to, so arbitrary objects often hit them.
const KEYS: &[&str] = &[
    "model",
    "input",
    "tools",
    "type",
    "id",
    "call_id",
    "name",
    "status",
    "role",
    "arguments",
    "content",
    "tool_calls",
    "output",
    "parameters",
    "summary",
    "properties",
    "required",
    "items",
    "prefixItems",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "minItems",
    "maxItems",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "minProperties",
    "maxProperties",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "$ref",
    "$defs",
    "definitions",
    "$id",
    "$schema",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
    "format",
];

/// String values with meaning to the gate or to JSON Schema.
const WORDS: &[&str] = &[
    "",
    "object",
    "string",
    "integer",
    "number",
    "array",
    "boolean",
    "null",
    "function",
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
    "compaction",
    "item_reference",
    "web_search_call",
    "openai:web_search_call",
    "acme:trace",
    ":x",
    "completed",
    "in_progress",
    "user",
    "assistant",
    "tool",
    "c1",
    "t",
    "#",
    "#/$defs/a",
    "#/properties/a",
    "#a",
    "urn:x",
    "https://example.com/s.json",
    "https://json-schema.org/draft/2020-12/schema",
    "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-04/schema#",
    "^(a+)+$",
    "[",
    "\\p{L}+",
    "a{1000000}",
    "date-time",
    "email",
    "{}",
    "{\"a\":",
];

fn json_string() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(WORDS).prop_map(str::to_owned),
        2 => "[a-z_]{0,10}",
        // Characters JSON must escape, and ones that need care in UTF-8.
        2 => "[\"\\\\/\u{0}-\u{1f}\u{7f} a-zé€😀\u{2028}\u{2029}\u{fffd}\u{10ffff}]{0,16}",
        1 => any::<String>(),
    ]
}

fn json_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (-3i64..300).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        // Non-finite floats become null, which is fine here.
        1 => any::<f64>().prop_map(Value::from),
        1 => select(&[0.0, -0.0, 0.5, 1e-320, 1e308, -1e308, 1.5e300][..]).prop_map(Value::from),
    ]
}

fn json_key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(KEYS).prop_map(str::to_owned),
        1 => json_string(),
    ]
}

/// Any JSON value: null, booleans, numbers, strings with unicode and escapes, arrays, objects.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        2 => json_number(),
        3 => json_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((json_key(), inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A value serialized to text, sometimes (one time in four) cut short on a character boundary.
fn json_text() -> impl Strategy<Value = String> {
    (json_value(), 0..4, any::<Index>()).prop_map(|(value, cut, at)| {
        let mut text = value.to_string();
        if cut == 0 {
            let mut end = at.index(text.len() + 1);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        text
    })
}

/// Members an input item may carry.
const ITEM_KEYS: &[&str] = &[
    "type",
    "id",
    "call_id",
    "name",
    "status",
    "role",
    "arguments",
    "content",
    "tool_calls",
    "output",
    "summary",
    "encrypted_content",
];

/// Something shaped like an input item: usually a string `type`, and members the gate reads
/// holding either meaningful words or anything at all.
fn item_like() -> impl Strategy<Value = Value> {
    let member_value = prop_oneof![
        3 => select(WORDS).prop_map(Value::from),
        1 => json_text().prop_map(Value::from),
        1 => json_value(),
    ];
    (
        prop::option::weighted(0.8, select(WORDS)),
        prop::collection::vec((select(ITEM_KEYS), member_value), 0..6),
    )
        .prop_map(|(kind, members)| {
            let mut item: Map<String, Value> = members.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            if let Some(kind) = kind {
                item.insert("type".into(), kind.into());
            }
            Value::Object(item)
        })
}

/// A `function_call` that reaches the argument checks: completed, naming a declared tool (or
/// not), with arguments that may or may not parse or fit.
fn call_like() -> impl Strategy<Value = Value> {
    (
        select(&["search_orders", "set_reminder", "web_search", "nope"][..]),
        prop_oneof![valid_call().prop_map(|(_, args)| args.to_string()), json_text()],
        prop::option::of(select(&["c1", "call_1"][..])),
    )
        .prop_map(|(name, arguments, call_id)| {
            let mut call = json!({
                "type": "function_call", "name": name, "status": "completed", "arguments": arguments,
            });
            if let Some(call_id) = call_id {
                call["call_id"] = call_id.into();
            }
            call
        })
}

/// Names a generated schema gives to properties, definitions and anchors.
const PROPERTY_NAMES: &[&str] = &["a", "b", "next", "customer_id"];

const TYPES: &[&str] = &[
    "object", "string", "integer", "number", "array", "boolean", "null", "nope",
];

const REFS: &[&str] = &[
    "#",
    "#/$defs/a",
    "#/$defs/b",
    "#/definitions/a",
    "#/properties/a",
    "#/$defs/missing",
    "#a",
    "#/items",
    "other.json",
    "urn:x#/$defs/a",
];

const PATTERNS: &[&str] = &[
    "^a",
    "^(a+)+$",
    "[",
    "\\p{L}+",
    "\\d{2,}",
    "(a)\\1",
    "(?=a)",
    "a{1000000}",
    "",
];

const SCHEMA_URIS: &[&str] = &[
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-06/schema#",
    "http://json-schema.org/draft-04/schema#",
    "https://example.com/unknown-draft",
];

/// Something shaped like a JSON Schema: real keywords with values of the right shape most of
/// the time, nested through the applicator keywords, with references that may or may not
/// resolve, and now and then anything at all.
fn schema_like() -> impl Strategy<Value = Value> {
    let small = prop_oneof![
        4 => (0i64..6).prop_map(Value::from),
        1 => json_number(),
    ];
    let leaf = prop_oneof![
        2 => any::<bool>().prop_map(Value::Bool),
        1 => Just(json!({})),
        4 => select(TYPES).prop_map(|t| json!({"type": t})),
        1 => prop::collection::vec(select(TYPES), 0..3).prop_map(|t| json!({"type": t})),
        2 => prop::collection::vec(json_value(), 0..4).prop_map(|e| json!({"enum": e})),
        1 => json_value().prop_map(|c| json!({"const": c})),
        3 => (
            select(&[
                "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
                "minLength", "maxLength", "minItems", "maxItems", "minProperties",
                "maxProperties", "minContains", "maxContains",
            ][..]),
            small,
        )
            .prop_map(|(k, n)| json!({ k: n })),
        1 => any::<bool>().prop_map(|b| json!({"uniqueItems": b})),
        2 => select(PATTERNS).prop_map(|p| json!({"pattern": p})),
        2 => select(REFS).prop_map(|r| json!({"$ref": r})),
        1 => prop::collection::vec(select(PROPERTY_NAMES), 0..3).prop_map(|r| json!({"required": r})),
        1 => select(PROPERTY_NAMES).prop_map(|a| json!({"$anchor": a})),
        1 => json_value(),
    ];
    let schema = leaf.prop_recursive(4, 40, 4, |inner| {
        let named = prop::collection::vec((select(PROPERTY_NAMES), inner.clone()), 0..4)
            .prop_map(|members| Value::Object(members.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()));
        prop_oneof![
            (
                select(&["allOf", "anyOf", "oneOf", "prefixItems"][..]),
                prop::collection::vec(inner.clone(), 0..4)
            )
                .prop_map(|(k, v)| json!({ k: v })),
            (
                select(
                    &[
                        "not",
                        "items",
                        "additionalProperties",
                        "contains",
                        "if",
                        "then",
                        "else",
                        "propertyNames",
                        "unevaluatedProperties",
                        "unevaluatedItems",
                        "additionalItems",
                    ][..]
                ),
                inner.clone(),
            )
                .prop_map(|(k, v)| json!({ k: v })),
            (
                select(
                    &[
                        "properties",
                        "patternProperties",
                        "$defs",
                        "definitions",
                        "dependentSchemas"
                    ][..]
                ),
                named,
            )
                .prop_map(|(k, v)| json!({ k: v })),
            // Several keywords side by side in one schema object.
            prop::collection::vec(inner, 1..4).prop_map(|parts| {
                let mut merged = Map::new();
                for part in parts {
                    if let Value::Object(members) = part {
                        merged.extend(members);
                    }
                }
                Value::Object(merged)
            }),
        ]
    });
    (schema, prop::option::weighted(0.2, select(SCHEMA_URIS))).prop_map(|(mut schema, uri)| {
        if let (Value::Object(members), Some(uri)) = (&mut schema, uri) {
            members.insert("$schema".into(), uri.into());
        }
        schema
    })
}

/// Arguments text for schemas from [`schema_like`]: objects over the same property names,
/// or any JSON text.
fn arguments_like() -> impl Strategy<Value = String> {
    let object = prop::collection::vec((select(PROPERTY_NAMES), json_value()), 0..4).prop_map(|members| {
        let members: Map<String, Value> = members.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        Value::Object(members).to_string()
    });
    prop_oneof![2 => object, 1 => json_text()]
}

fn bytes_of(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("a Value serializes")
}

fn items_in(body: &Value) -> Option<usize> {
    body.get("input").and_then(Value::as_array).map(Vec::len)
}

/// A verdict with the messages of unusable schemas blanked out: when a schema has several
/// unresolvable references, which one the compiler reports first varies from one compilation
/// to the next, so only the rest of such a violation is compared.
fn comparable(answer: &Result<Verdict, BodyError>) -> Result<Verdict, BodyError> {
    let mut answer = answer.clone();
    if let Ok(verdict) = &mut answer {
        for v in &mut verdict.violations {
            if v.reason == Reason::ToolSchemaInvalid {
                v.message.clear();
            }
        }
    }
    answer
}

// ---------------------------------------------------------------------------------------------
// (a) and (b): never panics, always answers
// ---------------------------------------------------------------------------------------------

/// Openings that put arbitrary bytes where the reader is deepest.
const PREFIXES: &[&[u8]] = &[
    b"{\"input\":[",
    b"{\"input\":[{\"type\":\"function_call\",\"arguments\":\"",
    b"{\"tools\":[{\"type\":\"function\",\"name\":\"t\",\"parameters\":",
    b"{\"model\":\"",
];

proptest! {
    #![proptest_config(config(2048))]

    #[test]
    fn arbitrary_bytes_get_an_answer(body in prop::collection::vec(any::<u8>(), 0..4096)) {
        assert_well_formed(&check(&body), None)?;
    }

    #[test]
    fn arbitrary_bytes_after_a_request_prefix_get_an_answer(
        prefix in select(PREFIXES),
        tail in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let body = [prefix, &tail[..]].concat();
        assert_well_formed(&check(&body), None)?;
    }
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn any_json_as_the_body_gets_an_answer(body in json_value()) {
        let answer = check(&bytes_of(&body));
        if !body.is_object() {
            prop_assert_eq!(answer.as_ref().map_err(BodyError::code).err(), Some("invalid_json"));
        }
        assert_well_formed(&answer, items_in(&body))?;
    }

    #[test]
    fn any_json_as_input_gets_an_answer(input in json_value()) {
        let body = json!({"model": "gpt-5", "input": input});
        let answer = check(&bytes_of(&body));
        if matches!(input, Value::Number(_) | Value::Bool(_) | Value::Object(_)) {
            let err = answer.as_ref().err().map(|e| (e.code(), e.param()));
            prop_assert_eq!(err, Some(("invalid_input", Some("input"))));
        }
        if matches!(input, Value::Null | Value::String(_)) {
            prop_assert!(answer.as_ref().is_ok_and(Verdict::is_allowed));
        }
        assert_well_formed(&answer, items_in(&body))?;
    }

    #[test]
    fn any_json_as_an_item_gets_an_answer(
        item in prop_oneof![json_value(), item_like(), call_like()],
        at_end in any::<bool>(),
    ) {
        let hello = json!({"role": "user", "content": "hello"});
        let input = if at_end { vec![hello, item] } else { vec![item, hello] };
        let body = json!({"model": "gpt-5", "tools": tools(), "input": input});
        let answer = check(&bytes_of(&body));
        if let Err(e) = &answer {
            // Only the arbitrary item can be at fault.
            let at = if at_end { "input[1]" } else { "input[0]" };
            prop_assert_eq!(e.param(), Some(at), "{}", e);
        }
        assert_well_formed(&answer, items_in(&body))?;
    }

    #[test]
    fn any_text_as_arguments_gets_an_answer(
        arguments in json_text(),
        name in select(&["search_orders", "set_reminder", "no_such_tool"][..]),
    ) {
        let call = json!({
            "type": "function_call", "id": "fc_1", "call_id": "call_1", "name": name,
            "status": "completed", "arguments": arguments,
        });
        let body = json!({"model": "gpt-5", "tools": tools(), "input": [call]});
        let answer = check(&bytes_of(&body));
        prop_assert!(answer.is_ok(), "{:?}", answer);
        assert_well_formed(&answer, Some(1))?;
        let verdict = answer.unwrap();
        prop_assert!(verdict.violations.len() <= 1);
        if let Some(v) = verdict.violations.first() {
            prop_assert!(matches!(
                v.reason,
                Reason::ArgumentsParse | Reason::ArgumentsSchema | Reason::UnknownTool
            ), "{:?}", v);
        }
        if serde_json::from_str::<Value>(&arguments).is_err() {
            prop_assert_eq!(verdict.violations[0].reason, Reason::ArgumentsParse);
        }
    }

    #[test]
    fn any_json_as_tool_parameters_gets_an_answer(
        parameters in prop_oneof![1 => json_value(), 3 => schema_like()],
        arguments in arguments_like(),
    ) {
        let body = json!({
            "model": "gpt-5",
            "tools": [{"type": "function", "name": "t", "parameters": parameters}],
            "input": [{
                "type": "function_call", "call_id": "c1", "name": "t",
                "status": "completed", "arguments": arguments,
            }],
        });
        let body = bytes_of(&body);
        let warm = check(&body);
        prop_assert!(warm.is_ok(), "{:?}", warm);
        assert_well_formed(&warm, Some(1))?;
        // A cold gate (empty schema cache) gives the same verdict as the warm one.
        let cold = Gate::default().check(&body, &Target::provider(openai()));
        prop_assert_eq!(comparable(&warm), comparable(&cold));
        let verdict = warm.unwrap();
        prop_assert!(verdict.violations.len() <= 1);
        if let Some(v) = verdict.violations.first() {
            prop_assert!(matches!(
                v.reason,
                Reason::ArgumentsParse | Reason::ArgumentsSchema | Reason::ToolSchemaInvalid
            ), "{:?}", v);
            if v.reason == Reason::ToolSchemaInvalid {
                prop_assert_eq!(&v.param, "tools[0].parameters");
            }
        }
        // Non-object, non-boolean JSON (null aside, which means "no schema") is never usable.
        if matches!(parameters, Value::Number(_) | Value::String(_) | Value::Array(_))
            && serde_json::from_str::<Value>(&arguments).is_ok()
        {
            prop_assert_eq!(verdict.violations[0].reason, Reason::ToolSchemaInvalid);
        }
    }
}

/// The gate's own JSON reader reads `body` as serde_json's reader would: the same request
/// (every field, item and member name) or the same error code at the same parameter.
fn reads_as_serde_json(body: &[u8]) -> Result<(), TestCaseError> {
    let ours = parse(body);
    let theirs = parse_with_serde_json(body, ItemsAt::Input);
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) => prop_assert_eq!(format!("{a:?}"), format!("{b:?}")),
        (Err(a), Err(b)) => prop_assert!(same_refusal(a, b), "{} / {}", a, b),
        _ => prop_assert!(false, "ours {:?}, serde_json {:?}", ours, theirs),
    }
    Ok(())
}

/// `text` with one byte removed, replaced or inserted (a JSON-significant one), or cut there.
fn broken(text: &[u8], at: Index, how: u8, byte: Index) -> Vec<u8> {
    const PUT: &[u8] = b"\"\\{}[],:0-.eE tfnu\n\x01a\xff";
    let mut bytes = text.to_vec();
    if bytes.is_empty() {
        return bytes;
    }
    let at = at.index(bytes.len());
    let byte = PUT[byte.index(PUT.len())];
    match how % 4 {
        0 => drop(bytes.remove(at)),
        1 => bytes[at] = byte,
        2 => bytes.insert(at, byte),
        _ => bytes.truncate(at),
    }
    bytes
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn generated_requests_read_as_serde_json_reads_them(
        items in prop::collection::vec(prop_oneof![item_like(), call_like(), json_value()], 0..6),
        with_tools in any::<bool>(),
        pretty in any::<bool>(),
    ) {
        let mut body = json!({"model": "gpt-5", "input": items});
        if with_tools {
            body["tools"] = tools();
        }
        let text = if pretty { serde_json::to_vec_pretty(&body) } else { serde_json::to_vec(&body) };
        reads_as_serde_json(&text.unwrap())?;
    }

    #[test]
    fn broken_requests_are_refused_as_serde_json_refuses_them(
        items in prop::collection::vec(prop_oneof![item_like(), call_like()], 1..5),
        at in any::<Index>(),
        how in any::<u8>(),
        byte in any::<Index>(),
    ) {
        let body = json!({"model": "gpt-5", "tools": tools(), "input": items});
        reads_as_serde_json(&broken(&bytes_of(&body), at, how, byte))?;
    }

    #[test]
    fn arbitrary_bytes_after_a_prefix_read_as_serde_json_reads_them(
        prefix in select(PREFIXES),
        tail in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        reads_as_serde_json(&[prefix, &tail[..]].concat())?;
    }
}

// ---------------------------------------------------------------------------------------------
// (c) Structured histories
// ---------------------------------------------------------------------------------------------

fn search_orders_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["customer_id", "status"],
        "properties": {
            "customer_id": {"type": "string", "minLength": 1},
            "status": {"type": "string", "enum": ["open", "shipped", "returned"]},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            "tags": {"type": "array", "items": {"type": "string"}}
        }
    })
}

fn set_reminder_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["when", "note"],
        "properties": {
            "when": {
                "type": "object",
                "additionalProperties": false,
                "required": ["hour", "minute"],
                "properties": {
                    "hour": {"type": "integer", "minimum": 0, "maximum": 23},
                    "minute": {"type": "integer", "minimum": 0, "maximum": 59}
                }
            },
            "note": {"type": "string"},
            "urgent": {"type": "boolean"}
        }
    })
}

fn tools() -> Value {
    json!([
        {"type": "function", "name": "search_orders", "description": "Find a customer's orders",
         "parameters": search_orders_schema()},
        {"type": "function", "name": "set_reminder", "description": "Remind the user later",
         "parameters": set_reminder_schema()},
        {"type": "web_search"}
    ])
}

/// A tool name and arguments that fit that tool's schema.
fn valid_call() -> impl Strategy<Value = (&'static str, Value)> {
    let search = (
        json_string().prop_filter("non-empty", |s| !s.is_empty()),
        select(&["open", "shipped", "returned"][..]),
        prop::option::of(1i64..=100),
        prop::option::of(prop::collection::vec(json_string(), 0..4)),
    )
        .prop_map(|(customer, status, limit, tags)| {
            let mut args = json!({"customer_id": customer, "status": status});
            if let Some(limit) = limit {
                args["limit"] = json!(limit);
            }
            if let Some(tags) = tags {
                args["tags"] = json!(tags);
            }
            ("search_orders", args)
        });
    let remind = (0i64..24, 0i64..60, json_string(), prop::option::of(any::<bool>())).prop_map(
        |(hour, minute, note, urgent)| {
            let mut args = json!({"when": {"hour": hour, "minute": minute}, "note": note});
            if let Some(urgent) = urgent {
                args["urgent"] = json!(urgent);
            }
            ("set_reminder", args)
        },
    );
    prop_oneof![search, remind]
}

/// When a call's output comes.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Now,
    Later,
    Never,
}

#[derive(Debug, Clone)]
enum Step {
    User {
        text: String,
        typed: bool,
    },
    Assistant {
        text: String,
    },
    Call {
        name: &'static str,
        args: Value,
        answer: Answer,
    },
    Reasoning {
        summary: String,
    },
    Reference {
        typed: bool,
    },
    OwnExtension {
        bare: bool,
    },
    /// Emit the outputs of calls answered `Later`.
    Flush,
}

fn step() -> impl Strategy<Value = Step> {
    let answer = prop_oneof![4 => Just(Answer::Now), 2 => Just(Answer::Later), 1 => Just(Answer::Never)];
    prop_oneof![
        3 => (json_string(), any::<bool>()).prop_map(|(text, typed)| Step::User { text, typed }),
        2 => json_string().prop_map(|text| Step::Assistant { text }),
        4 => (valid_call(), answer).prop_map(|((name, args), answer)| Step::Call { name, args, answer }),
        1 => json_string().prop_map(|summary| Step::Reasoning { summary }),
        1 => any::<bool>().prop_map(|typed| Step::Reference { typed }),
        1 => any::<bool>().prop_map(|bare| Step::OwnExtension { bare }),
        2 => Just(Step::Flush),
    ]
}

/// What an item of a built history is, for choosing and predicting mutations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    UserMessage,
    AssistantMessage,
    /// A function call, and the index of its output if it has one.
    Call {
        output: Option<usize>,
    },
    Output,
    Other,
}

#[derive(Debug, Clone)]
struct History {
    items: Vec<Value>,
    roles: Vec<Role>,
}

impl History {
    fn build(steps: &[Step]) -> Self {
        let mut history = History {
            items: Vec::new(),
            roles: Vec::new(),
        };
        let mut pending: Vec<(usize, String)> = Vec::new();
        let mut calls = 0;
        for step in steps {
            match step {
                Step::User { text, typed } => {
                    let mut item = json!({"role": "user", "content": text});
                    if *typed {
                        item["type"] = json!("message");
                    }
                    history.push(item, Role::UserMessage);
                }
                Step::Assistant { text } => {
                    history.push(
                        json!({
                            "type": "message", "role": "assistant", "status": "completed",
                            "id": format!("msg_{}", history.items.len()),
                            "content": [{"type": "output_text", "text": text, "annotations": []}],
                        }),
                        Role::AssistantMessage,
                    );
                }
                Step::Call { name, args, answer } => {
                    calls += 1;
                    let call_id = format!("call_{calls}");
                    let at = history.push(
                        json!({
                            "type": "function_call", "id": format!("fc_{calls}"),
                            "call_id": call_id, "name": name,
                            "arguments": args.to_string(), "status": "completed",
                        }),
                        Role::Call { output: None },
                    );
                    match answer {
                        Answer::Now => history.answer(at, &call_id),
                        Answer::Later => pending.push((at, call_id)),
                        Answer::Never => {}
                    }
                }
                Step::Reasoning { summary } => {
                    history.push(
                        json!({
                            "type": "reasoning", "id": format!("rs_{}", history.items.len()),
                            "summary": [{"type": "summary_text", "text": summary}],
                        }),
                        Role::Other,
                    );
                }
                Step::Reference { typed } => {
                    let mut item = json!({"id": format!("msg_ref_{}", history.items.len())});
                    if *typed {
                        item["type"] = json!("item_reference");
                    }
                    history.push(item, Role::Other);
                }
                Step::OwnExtension { bare } => {
                    let kind = if *bare {
                        "web_search_call"
                    } else {
                        "openai:web_search_call"
                    };
                    history.push(
                        json!({"type": kind, "id": format!("ws_{}", history.items.len()),
                               "status": "completed", "action": {"type": "search", "query": "q"}}),
                        Role::Other,
                    );
                }
                Step::Flush => {
                    for (at, call_id) in pending.drain(..) {
                        history.answer(at, &call_id);
                    }
                }
            }
        }
        for (at, call_id) in pending.drain(..) {
            history.answer(at, &call_id);
        }
        history
    }

    fn push(&mut self, item: Value, role: Role) -> usize {
        self.items.push(item);
        self.roles.push(role);
        self.items.len() - 1
    }

    fn answer(&mut self, call: usize, call_id: &str) {
        let output = self.push(
            json!({
                "type": "function_call_output", "call_id": call_id,
                "output": json!({"ok": true, "call": call}).to_string(),
            }),
            Role::Output,
        );
        self.roles[call] = Role::Call { output: Some(output) };
    }

    fn indices(&self, wanted: impl Fn(Role) -> bool) -> Vec<usize> {
        (0..self.roles.len()).filter(|&i| wanted(self.roles[i])).collect()
    }

    fn body(&self) -> Vec<u8> {
        bytes_of(&json!({"model": "gpt-5", "tools": tools(), "input": self.items}))
    }
}

fn history() -> impl Strategy<Value = History> {
    // A history always opens with a user turn and one answered call, so every mutation below
    // has something to act on.
    (valid_call(), prop::collection::vec(step(), 0..24)).prop_map(|((name, args), rest)| {
        let mut steps = vec![
            Step::User {
                text: "Look this up for me, please.".into(),
                typed: false,
            },
            Step::Call {
                name,
                args,
                answer: Answer::Now,
            },
        ];
        steps.extend(rest);
        History::build(&steps)
    })
}

/// One thing broken in an otherwise allowed history.
#[derive(Debug, Clone, Copy)]
enum Mutation {
    /// A call's `status` becomes `in_progress`.
    Status,
    /// An output's `call_id` no longer names any call.
    OutputCallId,
    /// A call's `arguments` becomes the JSON object itself instead of its text.
    ArgumentsObject,
    /// A call's `arguments` text is cut short.
    ArgumentsTruncated,
    /// A call's arguments break its tool's schema.
    ArgumentsSchema,
    /// A call names a tool the request does not declare.
    UnknownTool,
    /// An item's `type` is put in another provider's namespace.
    ForeignNamespace,
    /// A message takes `role: "tool"`.
    ToolRole,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    select(
        &[
            Mutation::Status,
            Mutation::OutputCallId,
            Mutation::ArgumentsObject,
            Mutation::ArgumentsTruncated,
            Mutation::ArgumentsSchema,
            Mutation::UnknownTool,
            Mutation::ForeignNamespace,
            Mutation::ToolRole,
        ][..],
    )
}

fn is_call(role: Role) -> bool {
    matches!(role, Role::Call { .. })
}

/// Applies `mutation` to one item chosen by `pick`, and says which violations must follow.
fn mutate(history: &mut History, mutation: Mutation, pick: Index, slug: &str) -> Vec<(usize, Reason)> {
    let candidates = match mutation {
        Mutation::OutputCallId => history.indices(|r| r == Role::Output),
        Mutation::ForeignNamespace => history.indices(|_| true),
        Mutation::ToolRole => history.indices(|r| r == Role::UserMessage),
        _ => history.indices(is_call),
    };
    let at = candidates[pick.index(candidates.len())];
    let item = &mut history.items[at];
    let reason = match mutation {
        Mutation::Status => {
            item["status"] = json!("in_progress");
            Reason::Status
        }
        Mutation::OutputCallId => {
            item["call_id"] = json!("call_nobody_made");
            // An item reference continues stored state, where the call may live; without one,
            // nothing can answer for the output.
            for other in &mut history.items {
                if other
                    .get("id")
                    .is_some_and(|id| id.as_str().is_some_and(|id| id.starts_with("msg_ref_")))
                {
                    *other = json!({"type": "message", "role": "assistant", "content": "(was a reference)"});
                }
            }
            Reason::CallIdMismatch
        }
        Mutation::ArgumentsObject => {
            let text = item["arguments"].as_str().unwrap().to_owned();
            item["arguments"] = serde_json::from_str(&text).unwrap();
            Reason::ArgumentsType
        }
        Mutation::ArgumentsTruncated => {
            let mut text = item["arguments"].as_str().unwrap().to_owned();
            let mut end = pick.index(text.len());
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            item["arguments"] = json!(text);
            Reason::ArgumentsParse
        }
        Mutation::ArgumentsSchema => {
            let mut args: Value = serde_json::from_str(item["arguments"].as_str().unwrap()).unwrap();
            match item["name"].as_str().unwrap() {
                "search_orders" => args["status"] = json!("lost"),
                _ => args["when"]["hour"] = json!(24),
            }
            item["arguments"] = json!(args.to_string());
            Reason::ArgumentsSchema
        }
        Mutation::UnknownTool => {
            item["name"] = json!("web_search");
            Reason::UnknownTool
        }
        Mutation::ForeignNamespace => {
            let bare = item["type"].as_str().unwrap_or("message");
            let bare = bare.split_once(':').map_or(bare, |(_, name)| name).to_owned();
            item["type"] = json!(format!("{slug}:{bare}"));
            Reason::Namespaced
        }
        Mutation::ToolRole => {
            item["role"] = json!("tool");
            Reason::ChatCompletionsEnvelope
        }
    };
    let mut expected = vec![(at, reason)];
    // A call moved to another namespace is no longer a function_call, so its output now
    // answers a foreign item.
    if let (Mutation::ForeignNamespace, Role::Call { output: Some(output) }) = (mutation, history.roles[at]) {
        expected.push((output, Reason::NotFunctionCall));
    }
    expected
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn well_formed_histories_are_allowed(history in history()) {
        let answer = check(&history.body());
        assert_well_formed(&answer, Some(history.items.len()))?;
        let verdict = answer.unwrap();
        prop_assert!(verdict.is_allowed(), "{:#?}", verdict.violations);
    }

    #[test]
    fn one_broken_thing_is_exactly_one_violation(
        mut history in history(),
        mutation in mutation(),
        pick in any::<Index>(),
        slug in select(&["anthropic", "bedrock", "acme", ""][..]),
    ) {
        let expected = mutate(&mut history, mutation, pick, slug);
        let answer = check(&history.body());
        assert_well_formed(&answer, Some(history.items.len()))?;
        let verdict = answer.unwrap();
        let got: Vec<(usize, Reason)> =
            verdict.violations.iter().map(|v| (v.index.unwrap(), v.reason)).collect();
        prop_assert_eq!(&got, &expected, "{:#?}", verdict.violations);
        let first = &verdict.violations[0];
        let item = &history.items[first.index.unwrap()];
        prop_assert_eq!(first.call_id.as_deref(), item["call_id"].as_str());
        prop_assert_eq!(first.id.as_deref(), item["id"].as_str());
        if first.reason == Reason::ArgumentsSchema {
            let pointer = first.pointer.as_deref();
            prop_assert!(matches!(pointer, Some("/status" | "/when/hour")), "{:?}", pointer);
        }
    }

    /// Byte-level damage to a realistic body: any answer, never a panic.
    #[test]
    fn damaged_histories_get_an_answer(
        history in history(),
        edits in prop::collection::vec(
            (any::<Index>(), 0usize..8, prop::collection::vec(any::<u8>(), 0..8)),
            1..4,
        ),
    ) {
        let mut body = history.body();
        for (at, remove, insert) in edits {
            let start = at.index(body.len() + 1);
            let end = (start + remove).min(body.len());
            body.splice(start..end, insert);
        }
        assert_well_formed(&check(&body), None)?;
    }
}

// ---------------------------------------------------------------------------------------------
// (d) Strip: cutting items out of the bytes
// ---------------------------------------------------------------------------------------------

/// Whitespace between tokens, taken in turn from a generated list.
struct Spacer {
    spaces: Vec<String>,
    next: usize,
}

impl Spacer {
    fn space(&mut self, out: &mut String) {
        if !self.spaces.is_empty() {
            out.push_str(&self.spaces[self.next % self.spaces.len()]);
            self.next += 1;
        }
    }
}

/// `value` as JSON text with whitespace from `spacer` around every token.
fn write_spaced(value: &Value, out: &mut String, spacer: &mut Spacer) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    spacer.space(out);
                    out.push(',');
                }
                spacer.space(out);
                write_spaced(item, out, spacer);
            }
            spacer.space(out);
            out.push(']');
        }
        Value::Object(members) => write_members(members, out, spacer),
        leaf => out.push_str(&leaf.to_string()),
    }
}

fn write_members<'v>(
    members: impl IntoIterator<Item = (&'v String, &'v Value)>,
    out: &mut String,
    spacer: &mut Spacer,
) {
    out.push('{');
    for (i, (name, value)) in members.into_iter().enumerate() {
        if i > 0 {
            spacer.space(out);
            out.push(',');
        }
        spacer.space(out);
        out.push_str(&Value::from(name.as_str()).to_string());
        spacer.space(out);
        out.push(':');
        spacer.space(out);
        write_spaced(value, out, spacer);
    }
    spacer.space(out);
    out.push('}');
}

/// A request body holding `items` in the member `at` names, among other members (which may
/// hold arrays named `input` or `items` deeper down), with odd whitespace around every token.
#[derive(Debug, Clone)]
struct SpacedBody {
    at: ItemsAt,
    text: String,
    items: Vec<Value>,
}

fn spaced_body() -> impl Strategy<Value = SpacedBody> {
    let members = || prop::collection::vec((json_key(), json_value()), 0..3);
    (
        select(&[ItemsAt::Input, ItemsAt::Items][..]),
        prop::collection::vec(prop_oneof![2 => item_like(), 1 => json_value()], 0..8),
        members(),
        members(),
        prop::collection::vec("[ \t\r\n]{0,3}", 0..12),
    )
        .prop_map(|(at, items, before, after, spaces)| {
            let name = if at == ItemsAt::Input { "input" } else { "items" };
            // Another member of the gated name would be a duplicate the gate refuses.
            let others = |members: Vec<(String, Value)>| members.into_iter().filter(move |(k, _)| k != name);
            let members: Vec<(String, Value)> = others(before)
                .chain([(name.to_owned(), Value::Array(items.clone()))])
                .chain(others(after))
                .collect();
            let mut spacer = Spacer { spaces, next: 0 };
            let mut text = String::new();
            spacer.space(&mut text);
            write_members(members.iter().map(|(k, v)| (k, v)), &mut text, &mut spacer);
            spacer.space(&mut text);
            SpacedBody { at, text, items }
        })
}

/// `value` with the items of its member `name` at the positions `remove` taken out.
fn without_items(mut value: Value, name: &str, remove: &[usize]) -> Value {
    if let Some(Value::Array(items)) = value.get_mut(name) {
        let mut at = 0;
        items.retain(|_| {
            at += 1;
            !remove.contains(&(at - 1))
        });
    }
    value
}

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

/// Checks `cut` on one body and removal set: the result is the body's JSON without those items,
/// and differs from the body only by the ranges `cut_ranges` names, which hold nothing but the
/// removed items, whitespace, and one comma per removed item.
fn check_cut(body: &[u8], at: ItemsAt, remove: &[usize]) -> Result<(), TestCaseError> {
    let name = if at == ItemsAt::Input { "input" } else { "items" };
    let spans = strip::item_spans(body, at).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let out = strip::cut(body, &spans, remove);

    let original: Value = serde_json::from_slice(body).unwrap();
    let got: Value = serde_json::from_slice(&out)
        .map_err(|e| TestCaseError::fail(format!("{e}: {}", String::from_utf8_lossy(&out))))?;
    prop_assert_eq!(got, without_items(original, name, remove));

    let ranges: Vec<Range<usize>> = strip::cut_ranges(&spans, remove).collect();
    let mut kept = Vec::new();
    let mut from = 0;
    for range in &ranges {
        prop_assert!(from <= range.start && range.start < range.end, "{:?}", ranges);
        kept.extend_from_slice(&body[from..range.start]);
        from = range.end;
    }
    kept.extend_from_slice(&body[from..]);
    prop_assert_eq!(&kept, &out, "not the body less the ranges {:?}", ranges);

    let mut commas = 0;
    for range in &ranges {
        let mut inside = range.start;
        for (i, span) in spans.iter().enumerate().filter(|(_, span)| overlaps(span, range)) {
            prop_assert!(remove.contains(&i), "kept item {} overlaps {:?}", i, range);
            prop_assert!(range.start <= span.start && span.end <= range.end);
            let between = &body[inside..span.start];
            prop_assert!(between.iter().all(|b| b" \t\r\n,".contains(b)), "{:?}", between);
            commas += between.iter().filter(|&&b| b == b',').count();
            inside = span.end;
        }
        let between = &body[inside..range.end];
        prop_assert!(between.iter().all(|b| b" \t\r\n,".contains(b)), "{:?}", between);
        commas += between.iter().filter(|&&b| b == b',').count();
    }
    // One comma per removed item; when every item goes, the n - 1 between them.
    let all_removed = remove.len() == spans.len();
    let expected_commas = if all_removed {
        remove.len().saturating_sub(1)
    } else {
        remove.len()
    };
    prop_assert_eq!(commas, expected_commas);
    for (i, span) in spans.iter().enumerate() {
        let covered = ranges.iter().any(|r| r.start <= span.start && span.end <= r.end);
        prop_assert_eq!(covered, remove.contains(&i), "item {}", i);
    }
    Ok(())
}

/// The policy under which every reason about an item strips it.
fn strip_everything() -> Policy {
    let mut policy = Policy::default();
    for reason in Reason::ALL {
        if reason.is_strippable() {
            policy.set_action(reason, Action::Strip);
        }
    }
    policy
}

/// Gives the calls of a clean history the ids Bedrock Mantle does: the lowest `call_N` no
/// unanswered call holds, so ids repeat once answered.
fn renumber_calls_like_mantle(history: &mut History) {
    let mut open: Vec<Option<String>> = Vec::new();
    for item in &mut history.items {
        let Some(old) = item["call_id"].as_str().map(str::to_owned) else {
            continue;
        };
        let new = if item["type"] == "function_call" {
            let slot = open.iter().position(Option::is_none).unwrap_or_else(|| {
                open.push(None);
                open.len() - 1
            });
            open[slot] = Some(old);
            slot
        } else {
            let slot = open
                .iter()
                .position(|o| o.as_deref() == Some(old.as_str()))
                .unwrap();
            open[slot] = None;
            slot
        };
        item["call_id"] = json!(format!("call_{new}"));
    }
}

/// Whether `mutation` has an item to act on in `history`.
fn can_mutate(history: &History, mutation: Mutation) -> bool {
    history.roles.iter().any(|&role| match mutation {
        Mutation::OutputCallId => role == Role::Output,
        Mutation::ForeignNamespace => true,
        Mutation::ToolRole => role == Role::UserMessage,
        _ => is_call(role),
    })
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn cut_removes_the_items_and_keeps_every_other_byte(
        body in spaced_body(),
        removal in prop::collection::vec(any::<bool>(), 8),
    ) {
        let remove: Vec<usize> = (0..body.items.len()).filter(|&i| removal[i]).collect();
        check_cut(body.text.as_bytes(), body.at, &remove)?;
    }

    #[test]
    fn cut_body_of_a_history_is_the_history_less_the_items(
        history in history(),
        removal in prop::collection::vec(any::<bool>(), 64),
    ) {
        let remove: Vec<usize> = (0..history.items.len()).filter(|&i| removal[i % 64]).collect();
        check_cut(&history.body(), ItemsAt::Input, &remove)?;
    }

    /// Judged again after its stripped items are cut out, a history has nothing left to strip.
    #[test]
    fn a_stripped_history_gates_clean(
        history in history(),
        mutations in prop::collection::vec((mutation(), any::<Index>()), 0..4),
        slug in select(&["anthropic", "bedrock", "acme", ""][..]),
    ) {
        check_stripped_gates_clean(history, &mutations, slug)?;
    }

    /// The same with call ids reused once answered, as Bedrock Mantle numbers them (see
    /// `a_stripped_output_takes_its_call_along`).
    #[test]
    fn a_stripped_mantle_history_gates_clean(
        mut history in history(),
        mutations in prop::collection::vec((mutation(), any::<Index>()), 0..4),
        slug in select(&["anthropic", "bedrock", "acme", ""][..]),
    ) {
        renumber_calls_like_mantle(&mut history);
        check_stripped_gates_clean(history, &mutations, slug)?;
    }
}

/// Breaks `history` with `mutations` (each on an item not broken yet), judges it with every item
/// reason stripping, and, when nothing is rejected, checks that the body with the stripped items
/// cut out has nothing left to strip or reject.
fn check_stripped_gates_clean(
    mut history: History,
    mutations: &[(Mutation, Index)],
    slug: &str,
) -> Result<(), TestCaseError> {
    for &(mutation, pick) in mutations {
        if !can_mutate(&history, mutation) {
            continue;
        }
        let (at, _) = mutate(&mut history, mutation, pick, slug)[0];
        // Each item is broken once: a second mutation would find its members changed.
        history.roles[at] = Role::Other;
    }
    let policy = strip_everything();
    let target = Target::new(openai(), &policy);
    let body = history.body();
    let request = parse(&body).unwrap();
    let verdict = gate().judge(&request, &target).unwrap();
    if verdict.rejected > 0 {
        return Ok(());
    }
    let to_cut = strip::items_to_cut(&request, &verdict.stripped);
    let Some(stripped) = strip::strip(&body, &request, &verdict).unwrap() else {
        prop_assert!(to_cut.is_empty());
        return Ok(());
    };
    prop_assert_eq!(&stripped.removed, &to_cut);
    let again = gate().judge(&parse(&stripped.body).unwrap(), &target).unwrap();
    prop_assert!(
        again.stripped.is_empty() && again.rejected == 0,
        "judged again: {:#?}\nbody: {}",
        again.violations,
        String::from_utf8_lossy(&stripped.body)
    );
    Ok(())
}

/// The counterexample the Mantle property found with the pairing rule as first written (only a
/// removed call takes its outputs along): an output stripped for its own reason (here a foreign
/// namespace) had answered a call that stayed, so the next call reusing the id repeated an
/// unanswered one. A removed output now takes its call along.
#[test]
fn a_stripped_output_takes_its_call_along() {
    let call = r#"{"type":"function_call","call_id":"call_0","name":"search_orders","arguments":"{\"customer_id\":\"a\",\"status\":\"open\"}","status":"completed"}"#;
    let body = format!(
        r#"{{"tools":{},"input":[{call},{{"type":"anthropic:function_call_output","call_id":"call_0","output":"x"}},
           {call},{{"type":"function_call_output","call_id":"call_0","output":"y"}}]}}"#,
        tools()
    );
    let policy = strip_everything();
    let target = Target::new(openai(), &policy);
    let request = parse(body.as_bytes()).unwrap();
    let verdict = gate().judge(&request, &target).unwrap();
    assert_eq!((verdict.stripped.as_slice(), verdict.rejected), (&[1][..], 0));
    let stripped = strip::strip(body.as_bytes(), &request, &verdict)
        .unwrap()
        .unwrap();
    assert_eq!(stripped.removed, [0, 1]);
    let again = gate().judge(&parse(&stripped.body).unwrap(), &target).unwrap();
    assert!(again.violations.is_empty(), "{:#?}", again.violations);
}

// ---------------------------------------------------------------------------------------------
// (e) One precedence: section 5 first, then the item profile
// ---------------------------------------------------------------------------------------------

/// OpenAI with its item profile (docs/item-profiles.md).
fn openai_profiled() -> &'static ProviderProfile {
    static PROFILED: OnceLock<ProviderProfile> = OnceLock::new();
    PROFILED.get_or_init(|| {
        ProviderProfile::own_namespace("openai")
            .with_item_profile(Some(ItemProfile::built_in("openai").expect("built-in profile")))
    })
}

/// One more thing broken in a history: a pairing the section 5 rules refuse, or a member the
/// `openai` item profile has something to say about.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// A section 5 mutation of [`mutate`].
    Rule(Mutation),
    /// A copy of a call right after it, while the call is still unanswered.
    RepeatedCall,
    /// A message, or a reasoning item, carrying the `call_id` of the call just before it.
    CallIdOnOther { reasoning: bool },
    /// An output without `call_id`.
    OutputWithoutCallId,
    /// A call and its output with a `call_id` of 65 to 80 characters (OpenAI takes 64).
    LongCallId { extra: usize },
    /// `parsed_arguments` on a call (refused by OpenAI, repaired by default).
    ParsedArguments,
    /// A member no schema lists, on any item.
    UnknownMember,
    /// `status` on a reasoning item.
    ReasoningStatus,
    /// An output whose `output` is a number.
    OutputNumber,
    /// A call without `name`.
    NoName,
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        3 => mutation().prop_map(Damage::Rule),
        2 => Just(Damage::RepeatedCall),
        2 => any::<bool>().prop_map(|reasoning| Damage::CallIdOnOther { reasoning }),
        1 => Just(Damage::OutputWithoutCallId),
        2 => (1usize..17).prop_map(|extra| Damage::LongCallId { extra }),
        2 => Just(Damage::ParsedArguments),
        2 => Just(Damage::UnknownMember),
        1 => Just(Damage::ReasoningStatus),
        1 => Just(Damage::OutputNumber),
        1 => Just(Damage::NoName),
    ]
}

/// The reasons of the item profile (its member checks, and its whole-item replay rules); every
/// other item reason is section 5's.
fn is_shape(reason: Reason) -> bool {
    matches!(
        reason,
        Reason::ItemValue
            | Reason::ItemField
            | Reason::ItemUnknownField
            | Reason::CallWithoutOutput
            | Reason::DuplicateItemId
            | Reason::ReasoningOrphaned
            | Reason::ReasoningMissing
    )
}

/// Inserts `item` at `at`, keeping the roles' output positions right.
fn insert_item(history: &mut History, at: usize, item: Value, role: Role) {
    for r in &mut history.roles {
        if let Role::Call { output: Some(o) } = r {
            if *o >= at {
                *o += 1;
            }
        }
    }
    history.items.insert(at, item);
    history.roles.insert(at, role);
}

/// Applies `damage` to an item chosen by `pick` (when there is one to act on). The item is then
/// marked [`Role::Other`], so no later damage finds its members changed.
fn apply_damage(history: &mut History, damage: Damage, pick: Index, slug: &str) {
    let candidates = |history: &History, wanted: &dyn Fn(usize, Role) -> bool| -> Vec<usize> {
        (0..history.roles.len())
            .filter(|&i| wanted(i, history.roles[i]))
            .collect()
    };
    let calls = candidates(history, &|_, r| is_call(r));
    let outputs = candidates(history, &|_, r| r == Role::Output);
    let reasoning = candidates(history, &|i, r| {
        r == Role::Other && history.items[i]["type"] == "reasoning"
    });
    let untouched = candidates(history, &|_, r| r != Role::Other);
    let chosen = |list: &[usize]| (!list.is_empty()).then(|| list[pick.index(list.len())]);
    match damage {
        Damage::Rule(mutation) => {
            if can_mutate(history, mutation) {
                let (at, _) = mutate(history, mutation, pick, slug)[0];
                history.roles[at] = Role::Other;
            }
        }
        Damage::RepeatedCall => {
            if let Some(at) = chosen(&calls) {
                let mut copy = history.items[at].clone();
                copy["id"] = json!(format!("fc_copy_{at}"));
                insert_item(history, at + 1, copy, Role::Other);
                history.roles[at] = Role::Other;
            }
        }
        Damage::CallIdOnOther { reasoning } => {
            if let Some(at) = chosen(&calls) {
                let call_id = history.items[at]["call_id"].clone();
                let item = if reasoning {
                    json!({"type": "reasoning", "id": format!("rs_x_{at}"), "summary": [], "call_id": call_id})
                } else {
                    json!({"role": "assistant", "content": "calling", "call_id": call_id})
                };
                insert_item(history, at + 1, item, Role::Other);
                history.roles[at] = Role::Other;
            }
        }
        Damage::OutputWithoutCallId => {
            if let Some(at) = chosen(&outputs) {
                history.items[at].as_object_mut().unwrap().remove("call_id");
                history.roles[at] = Role::Other;
            }
        }
        Damage::LongCallId { extra } => {
            let answered: Vec<usize> = calls
                .iter()
                .copied()
                .filter(|&c| matches!(history.roles[c], Role::Call { output: Some(o) } if history.roles[o] == Role::Output))
                .collect();
            if let Some(at) = chosen(&answered) {
                let Role::Call { output: Some(output) } = history.roles[at] else {
                    unreachable!()
                };
                let long = format!("call_{at}_{}", "x".repeat(64 + extra));
                history.items[at]["call_id"] = json!(long);
                history.items[output]["call_id"] = json!(long);
                history.roles[at] = Role::Other;
                history.roles[output] = Role::Other;
            }
        }
        Damage::ParsedArguments => {
            if let Some(at) = chosen(&calls) {
                history.items[at]["parsed_arguments"] = json!({"a": 1});
                history.roles[at] = Role::Other;
            }
        }
        Damage::UnknownMember => {
            if let Some(at) = chosen(&untouched) {
                history.items[at]["x_extra"] = json!([1]);
                history.roles[at] = Role::Other;
            }
        }
        Damage::ReasoningStatus => {
            if let Some(at) = chosen(&reasoning) {
                history.items[at]["status"] = json!("completed");
            }
        }
        Damage::OutputNumber => {
            if let Some(at) = chosen(&outputs) {
                history.items[at]["output"] = json!(42);
                history.roles[at] = Role::Other;
            }
        }
        Damage::NoName => {
            if let Some(at) = chosen(&calls) {
                history.items[at].as_object_mut().unwrap().remove("name");
                history.roles[at] = Role::Other;
            }
        }
    }
}

/// What the pairing rule (docs/reasons.md#call_id_mismatch) says of each item of `items`, read from
/// the JSON alone: a call is any item with a string `call_id` that is not an output; an output
/// (`function_call_output` or another `*_output` type) pairs with the most recent earlier call
/// with its `call_id` that no earlier output answered.
fn pairing_model(items: &[Value]) -> Vec<Option<Reason>> {
    let continues_stored_state = items.iter().any(|item| {
        item["type"] == "item_reference" || (item.get("type").is_none() && item.get("role").is_none())
    });
    // Per call id, the unanswered calls (the most recent last) and whether one was answered.
    let mut open: std::collections::HashMap<String, (Vec<bool>, bool)> = Default::default();
    items
        .iter()
        .map(|item| {
            let kind = item["type"].as_str().unwrap_or("");
            let is_output = kind == "function_call_output"
                || (kind.contains(':') || !is_core(kind)) && kind.ends_with("_output");
            let call_id = item["call_id"].as_str();
            match (is_output, call_id) {
                (false, Some(id)) => {
                    let calls = open.entry(id.to_owned()).or_default();
                    let repeats = !calls.0.is_empty();
                    calls.0.push(kind == "function_call");
                    repeats.then_some(Reason::CallIdMismatch)
                }
                (false, None) => None,
                (true, None) => (kind == "function_call_output").then_some(Reason::CallIdMismatch),
                (true, Some(id)) => match open.get_mut(id) {
                    Some((calls, answered)) if !calls.is_empty() => {
                        *answered = true;
                        let is_function_call = calls.pop().unwrap();
                        (kind == "function_call_output" && !is_function_call)
                            .then_some(Reason::NotFunctionCall)
                    }
                    Some((_, true)) => Some(Reason::CallIdMismatch),
                    _ if continues_stored_state => None,
                    _ => Some(Reason::CallIdMismatch),
                },
            }
        })
        .collect()
}

/// Whether `kind` is a portable core item type.
fn is_core(kind: &str) -> bool {
    matches!(
        kind,
        "message"
            | "function_call"
            | "function_call_output"
            | "reasoning"
            | "compaction"
            | "item_reference"
            | ""
    )
}

/// Each violation's (index, reason, action).
fn listed(verdict: &Verdict, wanted: impl Fn(Reason) -> bool) -> Vec<(Option<usize>, Reason, Action)> {
    verdict
        .violations
        .iter()
        .filter(|v| wanted(v.reason))
        .map(|v| (v.index, v.reason, v.action))
        .collect()
}

/// Judges `body` with and without the `openai` item profile and checks the one precedence:
/// section 5 comes first on every item, so the profile adds findings and changes none of section
/// 5's; an item that section 5 refuses gets no shape finding (one only monitored still does, so
/// a member its provider refuses is not sent).
fn check_precedence(body: &[u8]) -> Result<(), TestCaseError> {
    let policy = Policy::default();
    let profiled = gate()
        .judge(&parse(body).unwrap(), &Target::new(openai_profiled(), &policy))
        .unwrap();
    let plain = gate()
        .judge(&parse(body).unwrap(), &Target::new(openai(), &policy))
        .unwrap();
    let dump = || {
        format!(
            "{:#?}\nbody: {}",
            profiled.violations,
            String::from_utf8_lossy(body)
        )
    };
    prop_assert_eq!(
        listed(&profiled, |r| !is_shape(r)),
        listed(&plain, |r| !is_shape(r)),
        "section 5 changed by the profile: {}",
        dump()
    );
    prop_assert!(listed(&plain, is_shape).is_empty());
    // Pairing comes first on every item, whatever its type: the model's finding is the item's
    // section 5 violation, unless the item's namespace or envelope, judged before its pairing,
    // was refused.
    let items: Value = serde_json::from_slice::<Value>(body).unwrap()["input"].clone();
    let model = pairing_model(items.as_array().unwrap());
    for (index, expected) in model.iter().enumerate() {
        let got = profiled
            .violations
            .iter()
            .find(|v| v.index == Some(index) && !is_shape(v.reason))
            .map(|v| v.reason);
        let pairing = |r: Option<Reason>| matches!(r, Some(Reason::CallIdMismatch | Reason::NotFunctionCall));
        let judged_before = matches!(got, Some(Reason::Namespaced | Reason::ChatCompletionsEnvelope));
        if !judged_before {
            prop_assert!(
                got == *expected || (!pairing(got) && expected.is_none()),
                "input[{}]: pairing says {:?}, the gate {:?}: {}",
                index,
                expected,
                got,
                dump()
            );
        }
    }
    let mut section5_at = std::collections::BTreeMap::new();
    for v in profiled.violations.iter().filter(|v| !is_shape(v.reason)) {
        let index = v.index.expect("an item's violation");
        let earlier = section5_at.insert(index, v.action);
        prop_assert!(
            earlier.is_none(),
            "two section 5 violations on input[{}]: {}",
            index,
            dump()
        );
    }
    for v in profiled.violations.iter().filter(|v| is_shape(v.reason)) {
        let index = v.index.expect("an item's violation");
        prop_assert!(
            matches!(section5_at.get(&index), None | Some(Action::Monitor)),
            "input[{}] refused under section 5 and given {} too: {}",
            index,
            v.reason.as_str(),
            dump()
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn section_5_comes_first_and_the_profile_never_changes_it(
        mut history in history(),
        damages in prop::collection::vec((damage(), any::<Index>()), 0..5),
        slug in select(&["anthropic", "bedrock", ""][..]),
    ) {
        for (damage, pick) in damages {
            apply_damage(&mut history, damage, pick, slug);
        }
        check_precedence(&history.body())?;
    }

    /// Call ids over OpenAI's 64 characters still pair: the profile finds each such call and
    /// output (`item_value`), and pairing finds nothing.
    #[test]
    fn over_long_call_ids_still_pair(mut history in history(), extra in 1usize..40) {
        let mut long_ids = Vec::new();
        for (at, item) in history.items.iter_mut().enumerate() {
            if let Some(call_id) = item["call_id"].as_str() {
                item["call_id"] = json!(format!("{call_id}_{}", "y".repeat(64 + extra)));
                long_ids.push(at);
            }
        }
        let body = history.body();
        check_precedence(&body)?;
        let plain = gate().check(&body, &Target::provider(openai())).unwrap();
        prop_assert!(plain.violations.is_empty(), "{:#?}", plain.violations);
        let profiled = gate().check(&body, &Target::provider(openai_profiled())).unwrap();
        // The profile's whole-item replay rules (an orphaned reasoning item the generator drew)
        // have nothing to do with call ids.
        let got: Vec<(usize, Reason)> = profiled
            .violations
            .iter()
            .filter(|v| !matches!(v.reason, Reason::ReasoningOrphaned | Reason::DuplicateItemId | Reason::ReasoningMissing))
            .map(|v| (v.index.unwrap(), v.reason))
            .collect();
        let expected: Vec<(usize, Reason)> = long_ids.iter().map(|&at| (at, Reason::ItemValue)).collect();
        prop_assert_eq!(got, expected, "{:#?}", profiled.violations);
    }
}

// ---------------------------------------------------------------------------------------------
// Fixed cases worth keeping whatever the generators draw
// ---------------------------------------------------------------------------------------------

#[test]
fn self_referencing_schemas_do_not_loop() {
    for parameters in [
        json!({"$ref": "#"}),
        json!({"allOf": [{"$ref": "#"}]}),
        json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}),
        json!({"type": "object", "properties": {"next": {"$ref": "#"}}}),
    ] {
        let body = json!({
            "tools": [{"type": "function", "name": "t", "parameters": parameters}],
            "input": [{"type": "function_call", "call_id": "c", "name": "t",
                       "status": "completed", "arguments": "{\"next\":{\"next\":{}}}"}],
        });
        let answer = check(&bytes_of(&body));
        assert!(answer.is_ok(), "{parameters}: {answer:?}");
    }
}

#[test]
fn deeply_nested_bodies_are_refused_not_overflowed() {
    for depth in [127, 128, 129, 10_000] {
        let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        for body in [
            format!(r#"{{"input":{nested}}}"#),
            format!(r#"{{"metadata":{nested}}}"#),
            format!(
                r#"{{"tools":[{{"type":"function","name":"t"}}],"input":[{{"type":"function_call","call_id":"c","name":"t","status":"completed","arguments":"{nested}"}}]}}"#
            ),
        ] {
            let answer = check(body.as_bytes());
            assert!(
                assert_well_formed(&answer, None).is_ok(),
                "depth {depth}: {answer:?}"
            );
        }
    }
}
