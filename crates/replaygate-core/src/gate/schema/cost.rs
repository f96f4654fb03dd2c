//! How much work a tool schema can cause, measured before it is compiled.
//!
//! A schema is small on the wire but may be large once its `$ref`s are unfolded: `$defs` that
//! each refer to the next one twice unfold to 2^levels subschemas, and validating one value may
//! visit all of them. The gate measures the unfolded size of every schema and refuses those
//! past a budget, so a 2 KB schema cannot hold a thread or exhaust memory.
//!
//! The measure is only sound if it follows every reference the validator follows, so the forms
//! of reference the validator would resolve differently are refused first ([`check_references`]):
//! a reference must be a local JSON pointer (`#` or `#/...`, percent-escapes allowed), and only
//! the root may set `$id` (a nested `$id` changes what `#/...` means below it). Real tool
//! schemas (pydantic, zod, the MCP SDKs) use `#/$defs/...` or `#/definitions/...` only.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde_json::Value;

/// Keywords whose value is one subschema.
const ONE: &[&str] = &[
    "not",
    "if",
    "then",
    "else",
    "items",
    "additionalItems",
    "contains",
    "additionalProperties",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
];
/// Keywords whose value is an array of subschemas.
const MANY: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];
/// Keywords whose value maps names to subschemas.
const NAMED: &[&str] = &[
    "properties",
    "patternProperties",
    "dependentSchemas",
    "dependencies",
];
/// Keywords whose value maps names to subschemas that apply only when referred to.
const DEFINITIONS: &[&str] = &["$defs", "definitions"];
/// Keywords that jump to another subschema.
const REFS: &[&str] = &["$ref", "$dynamicRef", "$recursiveRef"];

/// The subschemas a keyword's value holds (none for keywords whose value is data).
fn subschemas<'s>(keyword: &str, value: &'s Value) -> Box<dyn Iterator<Item = &'s Value> + 's> {
    match value {
        Value::Object(_) | Value::Bool(_) if ONE.contains(&keyword) => Box::new(std::iter::once(value)),
        Value::Array(items) if MANY.contains(&keyword) => Box::new(items.iter()),
        Value::Object(named) if NAMED.contains(&keyword) => Box::new(named.values()),
        _ => Box::new(std::iter::empty()),
    }
}

/// Refuses the reference forms the unfolded size could not follow: anything but a local JSON
/// pointer to a place in the schema, and a `$id` (or, in draft 4, an `id`) below the root.
///
/// A pointer may lead anywhere in the document, also below keywords that hold no subschemas
/// (`"#/x-defs/a"`); the validator compiles what it finds there, so the targets are checked too.
pub fn check_references(root: &Value) -> Result<(), String> {
    let draft4 = root
        .get("$schema")
        .and_then(Value::as_str)
        .is_some_and(|s| s.contains("draft-04"));
    let mut pending = vec![(root, true)];
    let mut targets: HashSet<*const Value> = HashSet::new();
    while let Some((schema, is_root)) = pending.pop() {
        let Value::Object(members) = schema else { continue };
        for (keyword, value) in members {
            let keyword = keyword.as_str();
            if REFS.contains(&keyword) {
                let reference = value.as_str().unwrap_or_default();
                let Some(pointer) = local_pointer(reference) else {
                    return Err(format!(
                        "`{keyword}: {value}` is not a local JSON pointer (`#` or `#/...`); only those are supported"
                    ));
                };
                let Some(target) = root.pointer(&pointer) else {
                    return Err(format!("`{keyword}: {value}` points to nothing in the schema"));
                };
                if targets.insert(target) {
                    pending.push((target, std::ptr::eq(target, root)));
                }
            }
            let sets_base = keyword == "$id" || (draft4 && keyword == "id");
            if sets_base && !is_root && value.is_string() {
                return Err(format!(
                    "`{keyword}` inside the schema changes what its `$ref`s resolve against; only the root may set it"
                ));
            }
            if DEFINITIONS.contains(&keyword) {
                if let Value::Object(named) = value {
                    pending.extend(named.values().map(|s| (s, false)));
                }
            }
            pending.extend(subschemas(keyword, value).map(|s| (s, false)));
        }
    }
    Ok(())
}

/// The JSON pointer of a local reference (`#` gives the root's, empty), percent-escapes decoded.
fn local_pointer(reference: &str) -> Option<Cow<'_, str>> {
    let pointer = reference.strip_prefix('#')?;
    if !(pointer.is_empty() || pointer.starts_with('/')) {
        return None;
    }
    if !pointer.contains('%') {
        return Some(Cow::Borrowed(pointer));
    }
    percent_decode(pointer).map(Cow::Owned)
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// How many JSON values `value` holds, itself included: what a compiled schema's memory and a
/// validation's walk over its instance grow with.
pub fn value_count(value: &Value) -> u64 {
    // Recursion, not a stack of its own: no allocation, and parsed JSON is at most 128 deep.
    1 + match value {
        Value::Array(items) => items.iter().map(value_count).sum(),
        Value::Object(members) => members.values().map(value_count).sum(),
        _ => 0,
    }
}

/// The number of subschemas `root` unfolds to through its local `$ref`s, or `Err` once that
/// passes `budget`. A `$ref` back into a subschema being unfolded counts once: such recursion
/// only goes as deep as the instance does.
pub fn unfolded_size(root: &Value, budget: u64) -> Result<u64, ()> {
    let mut walk = Walk {
        root,
        budget,
        sizes: HashMap::new(),
        open: HashSet::new(),
    };
    let size = walk.size(root);
    if size > budget {
        Err(())
    } else {
        Ok(size)
    }
}

struct Walk<'s> {
    root: &'s Value,
    budget: u64,
    /// Sizes already computed, by the subschema's address.
    sizes: HashMap<*const Value, u64>,
    /// Subschemas being unfolded now.
    open: HashSet<*const Value>,
}

impl<'s> Walk<'s> {
    fn size(&mut self, schema: &'s Value) -> u64 {
        let key: *const Value = schema;
        if self.open.contains(&key) {
            return 1;
        }
        if let Some(&size) = self.sizes.get(&key) {
            return size;
        }
        let Value::Object(members) = schema else {
            return 1;
        };
        self.open.insert(key);
        let mut size: u64 = 1;
        for (keyword, value) in members {
            let keyword = keyword.as_str();
            size = size.saturating_add(self.keyword_size(keyword, value));
            if size > self.budget {
                break;
            }
        }
        self.open.remove(&key);
        self.sizes.insert(key, size);
        size
    }

    fn keyword_size(&mut self, keyword: &str, value: &'s Value) -> u64 {
        if REFS.contains(&keyword) {
            return match value.as_str().and_then(|reference| self.resolve(reference)) {
                Some(target) => self.size(target),
                None => 1,
            };
        }
        let mut size: u64 = 0;
        for child in subschemas(keyword, value) {
            size = size.saturating_add(self.size(child));
            if size > self.budget {
                break;
            }
        }
        size
    }

    /// A local reference, as [`check_references`] allows them.
    fn resolve(&self, reference: &str) -> Option<&'s Value> {
        let pointer = local_pointer(reference)?;
        self.root.pointer(&pointer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_counted_at_every_depth() {
        assert_eq!(value_count(&json!(1)), 1);
        assert_eq!(value_count(&json!({"a": [1, {"b": null}], "c": {}})), 6);
    }

    /// `$defs` d0..d{levels}, each referring to the next twice, written with `reference(i)`.
    fn doubling_with(levels: usize, reference: impl Fn(usize) -> String) -> Value {
        let mut defs = serde_json::Map::new();
        for i in 0..levels {
            let next = reference(i + 1);
            defs.insert(
                format!("d{i}"),
                json!({"$anchor": format!("a{i}"), "anyOf": [{"$ref": next}, {"$ref": next}]}),
            );
        }
        defs.insert(format!("d{levels}"), json!({"type": "string"}));
        json!({"$defs": defs, "$ref": reference(0)})
    }

    fn doubling(levels: usize) -> Value {
        doubling_with(levels, |i| format!("#/$defs/d{i}"))
    }

    #[test]
    fn plain_schemas_cost_their_size() {
        let schema = json!({"type":"object","properties":{"a":{"type":"string"},"b":{"items":{"enum":[1,2]}}},"required":["a"]});
        assert_eq!(unfolded_size(&schema, 1000), Ok(4));
    }

    #[test]
    fn shared_definitions_count_per_use() {
        let schema = json!({"$defs":{"x":{"type":"object","properties":{"a":true}}},
            "properties":{"p":{"$ref":"#/$defs/x"},"q":{"$ref":"#/$defs/x"}}});
        // root + 2 × (ref holder + x + its property)
        assert_eq!(unfolded_size(&schema, 1000), Ok(7));
    }

    #[test]
    fn recursion_counts_once() {
        let tree = json!({"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#"}}}});
        assert!(unfolded_size(&tree, 100).unwrap() < 10);
    }

    #[test]
    fn exponential_fan_out_passes_the_budget() {
        assert!(unfolded_size(&doubling(10), 1_000_000).is_ok());
        assert!(unfolded_size(&doubling(40), 1_000_000).is_err());
    }

    #[test]
    fn percent_escaped_pointers_are_followed() {
        let schema = doubling_with(40, |i| format!("#/%24defs/d{i}"));
        assert_eq!(check_references(&schema), Ok(()));
        assert!(unfolded_size(&schema, 1_000_000).is_err());
    }

    #[test]
    fn references_other_than_local_pointers_are_refused() {
        for reference in [
            "#a1",
            "urn:x#/$defs/d1",
            "https://example.com/s.json",
            "d1.json",
            "#/%zz",
        ] {
            let schema = json!({"$defs": {"d1": {"$anchor": "a1"}}, "$ref": reference});
            assert!(check_references(&schema).is_err(), "{reference}");
        }
        let anchors = doubling_with(30, |i| format!("#a{i}"));
        assert!(check_references(&anchors).is_err());
        let dynamic = json!({"$dynamicRef": "#meta"});
        assert!(check_references(&dynamic).is_err());
    }

    #[test]
    fn references_reached_through_a_pointer_are_checked_too() {
        // `$defs` d0..d30 lead through pointers into `x-defs`, which no keyword makes a
        // subschema; from there each refers to the next definition twice by its anchor. The
        // validator follows the anchors, 2^30 times; the unfolded size could not.
        let (mut defs, mut hidden) = (serde_json::Map::new(), serde_json::Map::new());
        for i in 0..30 {
            defs.insert(
                format!("d{i}"),
                json!({"$anchor": format!("a{i}"), "$ref": format!("#/x-defs/d{i}")}),
            );
            let next = format!("#a{}", i + 1);
            hidden.insert(
                format!("d{i}"),
                json!({"anyOf": [{"$ref": next}, {"$ref": next}]}),
            );
        }
        defs.insert("d30".into(), json!({"$anchor": "a30", "type": "string"}));
        let schema = json!({"$defs": defs, "x-defs": hidden, "properties": {"x": {"$ref": "#/$defs/d0"}}});
        let refused = check_references(&schema).unwrap_err();
        assert!(refused.contains("#a1"), "{refused}");
        // The same holds for a base set where a pointer leads, and for a pointer to nothing.
        let based = json!({"x-defs": {"a": {"$id": "urn:a"}}, "$ref": "#/x-defs/a"});
        assert!(check_references(&based).is_err());
        let dangling = json!({"anyOf": [{"$ref": "#/anyOf/01"}, true]});
        assert!(check_references(&dangling)
            .unwrap_err()
            .contains("points to nothing"));
        // A pointer back to the root is the root, which may set its own base.
        let recursive = json!({"$id": "urn:root", "x-tree": {"items": {"$ref": "#"}}, "$ref": "#/x-tree"});
        assert_eq!(check_references(&recursive), Ok(()));
    }

    #[test]
    fn only_the_root_may_set_its_base() {
        assert_eq!(
            check_references(&json!({"$id": "urn:root", "$ref": "#/$defs/a", "$defs": {"a": {}}})),
            Ok(())
        );
        let nested = json!({"properties": {"p": {"$id": "urn:p", "$defs": {"x": {}}, "$ref": "#/$defs/x"}}});
        assert!(check_references(&nested).is_err());
        let in_defs = json!({"$defs": {"a": {"$id": "urn:a"}}});
        assert!(check_references(&in_defs).is_err());
        let draft4 = json!({"$schema": "http://json-schema.org/draft-04/schema#", "properties": {"p": {"id": "p.json"}}});
        assert!(check_references(&draft4).is_err());
        // Names are data: a property called `$id` or `$ref` is no keyword.
        let names = json!({"properties": {"$id": {"type": "string"}, "$ref": {"const": "#x"}}, "enum": [{"$ref": "x"}]});
        assert_eq!(check_references(&names), Ok(()));
    }

    #[test]
    fn the_usual_tool_schemas_pass() {
        let pydantic = json!({"$defs": {"Unit": {"enum": ["c", "f"], "type": "string"}},
            "properties": {"city": {"type": "string"}, "unit": {"$ref": "#/$defs/Unit"}}, "required": ["city"], "type": "object"});
        let zod = json!({"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"a": {"type": "number"}},
            "type": "object", "properties": {"x": {"$ref": "#/definitions/a"}}, "additionalProperties": false});
        for schema in [pydantic, zod] {
            assert_eq!(check_references(&schema), Ok(()));
            assert!(unfolded_size(&schema, 100).is_ok());
        }
    }
}
