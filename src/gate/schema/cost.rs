//! How much work a tool schema can cause, measured before it is compiled.
//!
//! A schema is small on the wire but may be large once its `$ref`s are unfolded: `$defs` that
//! each refer to the next one twice unfold to 2^levels subschemas, and validating one value
//! may visit all of them. The gate refuses schemas whose unfolded size passes a budget, so a
//! 3 KB schema cannot hold a worker for hours.

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
/// Keywords that jump to another subschema.
const REFS: &[&str] = &["$ref", "$dynamicRef", "$recursiveRef"];

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
        let children: Box<dyn Iterator<Item = &'s Value>> = match value {
            Value::Object(_) | Value::Bool(_) if ONE.contains(&keyword) => Box::new(std::iter::once(value)),
            Value::Array(items) if MANY.contains(&keyword) => Box::new(items.iter()),
            Value::Object(named) if NAMED.contains(&keyword) => Box::new(named.values()),
            _ => return 0,
        };
        let mut size: u64 = 0;
        for child in children {
            size = size.saturating_add(self.size(child));
            if size > self.budget {
                break;
            }
        }
        size
    }

    /// A local reference (`#` or `#/json/pointer`); others are not unfolded here.
    fn resolve(&self, reference: &str) -> Option<&'s Value> {
        let pointer = reference.strip_prefix('#')?;
        if pointer.is_empty() {
            return Some(self.root);
        }
        self.root.pointer(pointer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doubling(levels: usize) -> Value {
        let mut defs = serde_json::Map::new();
        for i in 0..levels {
            let next = format!("#/$defs/d{}", i + 1);
            defs.insert(
                format!("d{i}"),
                json!({"anyOf": [{"$ref": next}, {"$ref": next}]}),
            );
        }
        defs.insert(format!("d{levels}"), json!({"type": "string"}));
        json!({"$defs": defs, "$ref": "#/$defs/d0"})
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
    fn non_local_references_are_not_followed() {
        let schema = json!({"$ref":"https://example.com/s.json","anyOf":[{"$ref":"#/nope"}]});
        // root + the remote ref + (the anyOf branch + its dangling ref)
        assert_eq!(unfolded_size(&schema, 10), Ok(4));
    }
}
