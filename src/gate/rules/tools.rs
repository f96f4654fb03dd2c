//! Finding a call's tool among the request's function tools.

use std::collections::HashMap;

use serde_json::value::RawValue;

use crate::gate::request::Tool;

/// A function tool as the schema rules need it.
#[derive(Debug, Clone, Copy)]
pub(super) struct FunctionTool<'r> {
    /// Its position in `tools`.
    pub position: usize,
    /// Its `parameters` schema, exactly as sent; `None` when the tool declares none.
    pub parameters: Option<&'r RawValue>,
}

/// The request's function tools by name, indexed on first use (the first declaration wins).
#[derive(Debug)]
pub(super) struct ToolIndex<'r> {
    tools: &'r [Tool<'r>],
    by_name: Option<HashMap<&'r str, FunctionTool<'r>>>,
}

impl<'r> ToolIndex<'r> {
    pub(super) fn new(tools: &'r [Tool<'r>]) -> Self {
        Self { tools, by_name: None }
    }

    /// The function tool called `name`, if the request declares one.
    pub(super) fn find(&mut self, name: &str) -> Option<FunctionTool<'r>> {
        let tools = self.tools;
        let by_name = self.by_name.get_or_insert_with(|| {
            let mut map = HashMap::with_capacity(tools.len());
            for (position, tool) in tools.iter().enumerate() {
                if let (true, Some(name)) = (tool.is_function(), tool.name.as_str()) {
                    map.entry(name).or_insert(FunctionTool {
                        position,
                        parameters: tool.parameters,
                    });
                }
            }
            map
        });
        by_name.get(name).copied()
    }
}
