//! `namespaced`: an extension item whose provider namespace the target does not accept.

use super::{Finding, Param};
use crate::gate::item::Item;
use crate::gate::profile::ProviderProfile;
use crate::gate::verdict::Reason;

/// Refuses an extension item unless `provider` accepts its namespace.
pub(super) fn check(item: &Item<'_>, provider: &ProviderProfile) -> Option<Finding> {
    let slug = item.namespace()?;
    if provider.accepts(slug) {
        return None;
    }
    let kind = item.type_name();
    let origin = if kind.contains(':') {
        format!("item type `{kind}` belongs to namespace `{slug}`")
    } else {
        format!("item type `{kind}` is not portable (it belongs to namespace `{slug}`)")
    };
    Some(Finding::new(
        Reason::Namespaced,
        Param::Member("type"),
        format!("{origin}, which provider `{}` does not accept", provider.name()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_json(json: &str, provider: &ProviderProfile) -> Option<Finding> {
        check(&serde_json::from_str(json).unwrap(), provider)
    }

    #[test]
    fn foreign_namespaces_are_refused() {
        let bedrock = ProviderProfile::own_namespace("bedrock");
        let f = check_json(r#"{"type":"openai:web_search_call","id":"ws_1"}"#, &bedrock).unwrap();
        assert_eq!((f.reason, f.param), (Reason::Namespaced, Param::Member("type")));
        assert!(
            f.message.contains("`openai`") && f.message.contains("`bedrock`"),
            "{}",
            f.message
        );
    }

    #[test]
    fn own_namespace_passes() {
        let openai = ProviderProfile::own_namespace("openai");
        assert!(check_json(r#"{"type":"openai:web_search_call"}"#, &openai).is_none());
    }

    #[test]
    fn bare_non_portable_types_belong_to_openai() {
        let bedrock = ProviderProfile::own_namespace("bedrock");
        let f = check_json(r#"{"type":"web_search_call"}"#, &bedrock).unwrap();
        assert!(f.message.contains("not portable"));
        let openai = ProviderProfile::own_namespace("openai");
        assert!(check_json(r#"{"type":"web_search_call"}"#, &openai).is_none());
    }

    #[test]
    fn a_provider_may_accept_several_namespaces() {
        let gw = ProviderProfile::new("gateway", ["acme", "openai"]);
        assert!(check_json(r#"{"type":"acme:trace"}"#, &gw).is_none());
        assert!(check_json(r#"{"type":"other:trace"}"#, &gw).is_some());
    }

    #[test]
    fn an_empty_slug_is_never_accepted() {
        let p = ProviderProfile::own_namespace("openai");
        assert!(check_json(r#"{"type":":call"}"#, &p).is_some());
    }
}
