//! A team's `pinned_tools` file: a JSON array of tool definitions whose `parameters` requests
//! may not change (docs/teams.md#teams-and-policy).

use std::collections::HashMap;
use std::path::Path;

use serde_json::value::RawValue;
use serde_json::Value;

use super::error::line_column;
use super::{PinnedTool, PinnedTools};
use crate::gate::SchemaCache;

/// Reads and checks the pinned tools file at `path` (already resolved), compiling each
/// `parameters` with `schemas`. The error is a sentence that names the file and, where there is
/// one, the line and column in it.
pub(super) fn read(path: &Path, schemas: &SchemaCache) -> Result<PinnedTools, String> {
    let file = format!("pinned tools file {}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {file}: {e}"))?;
    let whole: &RawValue =
        serde_json::from_str(&text).map_err(|e| format!("{file} is not valid JSON: {e}"))?;
    if !whole.get().starts_with('[') {
        return Err(format!(
            "{file} must hold a JSON array of tool definitions, e.g. \
             [{{\"type\": \"function\", \"name\": \"get_report\", \"parameters\": {{...}}}}]"
        ));
    }
    let entries: Vec<&RawValue> =
        serde_json::from_str(whole.get()).map_err(|e| format!("{file} is not valid JSON: {e}"))?;
    // Where an entry starts, for messages: every `RawValue` here borrows from `text`.
    let position = |raw: &RawValue| {
        let (line, column) = line_column(&text, offset_in(&text, raw.get()));
        format!("line {line}, column {column}")
    };
    let mut tools = Vec::with_capacity(entries.len());
    let mut first_at: HashMap<String, String> = HashMap::new();
    for (index, entry) in entries.into_iter().enumerate() {
        let at = position(entry);
        let tool =
            read_entry(entry, schemas).map_err(|why| format!("{file}, {at}: entry [{index}] {why}"))?;
        if let Some(first) = first_at.get(&tool.name) {
            return Err(format!(
                "{file}, {at}: tool {:?} is pinned twice (first at {first})",
                tool.name
            ));
        }
        first_at.insert(tool.name.clone(), at);
        tools.push(tool);
    }
    Ok(PinnedTools {
        path: path.to_owned(),
        tools,
    })
}

/// Reads one entry of the array; the error completes "entry [i] ...".
fn read_entry(entry: &RawValue, schemas: &SchemaCache) -> Result<PinnedTool, String> {
    if !entry.get().starts_with('{') {
        return Err("is not a tool definition (a JSON object)".into());
    }
    let members: HashMap<String, &RawValue> =
        serde_json::from_str(entry.get()).map_err(|e| format!("cannot be read: {e}"))?;
    let value = |raw: &RawValue| serde_json::from_str::<Value>(raw.get()).unwrap_or(Value::Null);
    if let Some(kind) = members.get("type").map(|raw| value(raw)) {
        if kind != "function" {
            return Err(format!(
                "has \"type\": {kind}; only function tools can be pinned (\"type\": \"function\", or no \"type\")"
            ));
        }
    }
    let name = match members.get("name").map(|raw| value(raw)) {
        Some(Value::String(name)) if !name.is_empty() => name,
        _ if members.contains_key("function") => {
            return Err(
                "has no string \"name\": it looks like a Chat Completions tool; write the \
                        Responses shape, {\"type\": \"function\", \"name\": ..., \"parameters\": ...}"
                    .into(),
            )
        }
        _ => return Err("has no \"name\" that is a non-empty string".into()),
    };
    let parameters_text = members
        .get("parameters")
        .map(|raw| raw.get())
        .filter(|text| *text != "null");
    if let Some(text) = parameters_text {
        if let Err(why) = schemas.get(text).validator() {
            return Err(format!(
                "(tool {name:?}): \"parameters\" is not a usable JSON Schema: {why}"
            ));
        }
    }
    Ok(PinnedTool {
        name,
        parameters: parameters_text.map(|text| serde_json::from_str(text).unwrap_or(Value::Null)),
        parameters_text: parameters_text.map(str::to_owned),
    })
}

/// The byte offset of `inner` in `outer`, when `inner` is a slice of `outer`; else 0.
fn offset_in(outer: &str, inner: &str) -> usize {
    let start = outer.as_ptr() as usize;
    let at = inner.as_ptr() as usize;
    if (start..=start + outer.len()).contains(&at) {
        at - start
    } else {
        0
    }
}
