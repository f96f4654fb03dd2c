//! What a team may do with function tools (docs/teams.md#teams-and-policy): which names it may
//! declare or call, and the schemas pinned for some of them.

use std::collections::HashMap;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde_json::Value;

/// One matcher for `globs` (the configuration's globs are checked when it loads; building the
/// set fails only when they are together too large).
pub fn glob_set<'g>(globs: impl IntoIterator<Item = &'g Glob>) -> Result<GlobSet, globset::Error> {
    let mut set = GlobSetBuilder::new();
    for glob in globs {
        set.add(glob.clone());
    }
    set.build()
}

/// A tool schema pinned by policy: calls to the tool are validated against it, and a request
/// that declares the tool with other `parameters` has drifted from it.
#[derive(Debug, Clone, PartialEq)]
pub struct PinnedSchema {
    /// `parameters` as JSON text, compiled by the gate's schema cache; `None` when the pinned
    /// tool declares none (any arguments fit).
    pub text: Option<String>,
    /// `parameters` as a value, compared with a declared tool's (key order ignored).
    pub value: Option<Value>,
}

impl PinnedSchema {
    /// A pinned schema from its JSON text (`None`: the tool takes any arguments). Fails when
    /// the text is not JSON.
    pub fn from_text(text: Option<&str>) -> Result<PinnedSchema, serde_json::Error> {
        let value = text.map(serde_json::from_str).transpose()?;
        Ok(PinnedSchema {
            text: text.map(str::to_owned),
            value,
        })
    }
}

/// A team's rules for function tools. The default allows every name and pins nothing.
#[derive(Debug, Clone, Default)]
pub struct ToolRules {
    /// The globs of the names it may declare or call; `None` allows every name.
    allowed: Option<GlobSet>,
    /// Pinned schemas by tool name.
    pinned: HashMap<String, PinnedSchema>,
}

impl ToolRules {
    /// Rules allowing the names that match one of `allowed` (every name when `None`) with
    /// `pinned` schemas by tool name.
    pub fn new(
        allowed: Option<&[Glob]>,
        pinned: HashMap<String, PinnedSchema>,
    ) -> Result<ToolRules, globset::Error> {
        let allowed = allowed.map(glob_set).transpose()?;
        Ok(ToolRules { allowed, pinned })
    }

    /// Whether a function tool called `name` may be declared or called.
    pub fn allows(&self, name: &str) -> bool {
        self.allowed.as_ref().is_none_or(|set| set.is_match(name))
    }

    /// Whether the rules restrict anything at all.
    pub fn is_empty(&self) -> bool {
        self.allowed.is_none() && self.pinned.is_empty()
    }

    /// The schema pinned for `name`, if any.
    pub fn pinned(&self, name: &str) -> Option<&PinnedSchema> {
        if self.pinned.is_empty() {
            return None;
        }
        self.pinned.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(text: &str) -> Glob {
        Glob::new(text).unwrap()
    }

    #[test]
    fn names_are_allowed_by_any_matching_glob() {
        let rules = ToolRules::new(Some(&[glob("get_report"), glob("refund_*")]), HashMap::new()).unwrap();
        assert!(rules.allows("get_report") && rules.allows("refund_card"));
        assert!(!rules.allows("delete_account") && !rules.allows("get_reports"));
        assert!(ToolRules::default().allows("anything"));
        assert!(!ToolRules::new(Some(&[]), HashMap::new()).unwrap().allows("x"));
    }

    #[test]
    fn pinned_schemas_keep_text_and_value() {
        let pinned = PinnedSchema::from_text(Some(r#"{"type":"object"}"#)).unwrap();
        assert_eq!(pinned.value, Some(serde_json::json!({"type": "object"})));
        assert!(PinnedSchema::from_text(Some("{")).is_err());
        assert_eq!(PinnedSchema::from_text(None).unwrap().value, None);
    }
}
