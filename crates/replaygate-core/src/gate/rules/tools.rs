//! Finding a call's tool, among the schemas the team pins and the request's function tools,
//! and its compiled schema.

use std::collections::HashMap;
use std::sync::Arc;

use foldhash::fast::RandomState;

use super::WorkMeter;
use crate::gate::request::{Tool, WorkExceeded};
use crate::gate::schema::{CompiledSchema, SchemaCache};
use crate::gate::tool_rules::ToolRules;

/// Where a call's tool schema comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ToolSource {
    /// The request's `tools[position]`.
    Declared(usize),
    /// The team's pinned schema for the tool (which wins over a declared one).
    Pinned,
}

/// A function tool as the schema rules need it.
#[derive(Debug, Clone, Copy)]
pub(super) struct FunctionTool<'r> {
    /// Where its schema comes from.
    pub source: ToolSource,
    /// Its `parameters` schema, exactly as sent (or pinned); `None` when it has none.
    pub parameters: Option<&'r str>,
}

/// The request's function tools by name, indexed on first use (the first declaration wins),
/// with each tool's schema looked up at most once per request; a team's pinned schemas come
/// first.
pub(super) struct ToolIndex<'r> {
    tools: &'r [Tool<'r>],
    rules: Option<&'r ToolRules>,
    by_name: Option<HashMap<&'r str, usize, RandomState>>,
    compiled: Vec<Option<Arc<CompiledSchema>>>,
    /// Pinned schemas compiled for this request, by tool name (a team pins a few).
    pinned: Vec<(&'r str, Arc<CompiledSchema>)>,
}

impl<'r> ToolIndex<'r> {
    pub(super) fn new(tools: &'r [Tool<'r>], rules: Option<&'r ToolRules>) -> Self {
        Self {
            tools,
            rules,
            by_name: None,
            compiled: Vec::new(),
            pinned: Vec::new(),
        }
    }

    /// Whether the team may call a tool named `name`.
    pub(super) fn allows(&self, name: &str) -> bool {
        self.rules.is_none_or(|rules| rules.allows(name))
    }

    /// The function tool called `name`: the team's pinned one, else the request's.
    pub(super) fn find(&mut self, name: &str) -> Option<FunctionTool<'r>> {
        if let Some(pinned) = self.rules.and_then(|rules| rules.pinned(name)) {
            return Some(FunctionTool {
                source: ToolSource::Pinned,
                parameters: pinned.text.as_deref(),
            });
        }
        let tools = self.tools;
        let by_name = self.by_name.get_or_insert_with(|| {
            let mut map = HashMap::with_capacity_and_hasher(tools.len(), RandomState::default());
            for (position, tool) in tools.iter().enumerate() {
                if let (true, Some(name)) = (tool.is_function(), tool.name.as_str()) {
                    map.entry(name).or_insert(position);
                }
            }
            map
        });
        let position = *by_name.get(name)?;
        Some(FunctionTool {
            source: ToolSource::Declared(position),
            parameters: tools[position].parameters,
        })
    }

    /// The compiled schema of `tool`; `None` when it declares none. The first lookup of each
    /// schema in a request charges its memory to the work budget (whether or not it was
    /// cached, so the verdict does not depend on the cache), which bounds what the schemas of
    /// one request can hold.
    pub(super) fn schema(
        &mut self,
        tool: FunctionTool<'r>,
        schemas: &SchemaCache,
        work: &mut WorkMeter,
    ) -> Result<Option<Arc<CompiledSchema>>, WorkExceeded> {
        let Some(parameters) = tool.parameters else {
            return Ok(None);
        };
        let ToolSource::Declared(position) = tool.source else {
            if let Some((_, schema)) = self.pinned.iter().find(|(text, _)| *text == parameters) {
                return Ok(Some(schema.clone()));
            }
            let schema = charged(schemas, parameters, work)?;
            self.pinned.push((parameters, schema.clone()));
            return Ok(Some(schema));
        };
        if self.compiled.is_empty() {
            self.compiled.resize(self.tools.len(), None);
        }
        let slot = &mut self.compiled[position];
        if let Some(schema) = slot {
            return Ok(Some(schema.clone()));
        }
        let schema = charged(schemas, parameters, work)?;
        Ok(Some(slot.insert(schema).clone()))
    }
}

/// The compiled schema for `parameters`, its memory charged to the work budget.
fn charged(
    schemas: &SchemaCache,
    parameters: &str,
    work: &mut WorkMeter,
) -> Result<Arc<CompiledSchema>, WorkExceeded> {
    let schema = schemas.get(parameters);
    work.charge(schema.footprint() / FOOTPRINT_BYTES_PER_UNIT)?;
    Ok(schema)
}

/// Bytes of compiled-schema memory that cost one unit of the work budget: the default budget
/// of 4,000,000 lets one request's schemas hold about 128 MiB.
pub(super) const FOOTPRINT_BYTES_PER_UNIT: u64 = 32;
