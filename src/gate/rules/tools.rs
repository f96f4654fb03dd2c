//! Finding a call's tool among the request's function tools, and its compiled schema.

use std::collections::HashMap;
use std::sync::Arc;

use foldhash::fast::RandomState;
use serde_json::value::RawValue;

use super::WorkMeter;
use crate::gate::request::{Tool, WorkExceeded};
use crate::gate::schema::{CompiledSchema, SchemaCache};

/// A function tool as the schema rules need it.
#[derive(Debug, Clone, Copy)]
pub(super) struct FunctionTool<'r> {
    /// Its position in `tools`.
    pub position: usize,
    /// Its `parameters` schema, exactly as sent; `None` when the tool declares none.
    pub parameters: Option<&'r RawValue>,
}

/// The request's function tools by name, indexed on first use (the first declaration wins),
/// with each tool's schema looked up at most once per request.
pub(super) struct ToolIndex<'r> {
    tools: &'r [Tool<'r>],
    by_name: Option<HashMap<&'r str, usize, RandomState>>,
    compiled: Vec<Option<Arc<CompiledSchema>>>,
}

impl<'r> ToolIndex<'r> {
    pub(super) fn new(tools: &'r [Tool<'r>]) -> Self {
        Self {
            tools,
            by_name: None,
            compiled: Vec::new(),
        }
    }

    /// The function tool called `name`, if the request declares one.
    pub(super) fn find(&mut self, name: &str) -> Option<FunctionTool<'r>> {
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
            position,
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
        if self.compiled.is_empty() {
            self.compiled.resize(self.tools.len(), None);
        }
        let slot = &mut self.compiled[tool.position];
        if let Some(schema) = slot {
            return Ok(Some(schema.clone()));
        }
        let schema = schemas.get(parameters.get());
        work.charge(schema.footprint() / FOOTPRINT_BYTES_PER_UNIT)?;
        Ok(Some(slot.insert(schema).clone()))
    }
}

/// Bytes of compiled-schema memory that cost one unit of the work budget: the default budget
/// of 4,000,000 lets one request's schemas hold about 128 MiB.
pub(super) const FOOTPRINT_BYTES_PER_UNIT: u64 = 32;
