//! The names of the `redis` backend's keys (docs/operations.md#state-backends).
//!
//! On one server (a url, or the master Sentinel names) a key is `P:v1:KIND:NAME`. On a Redis
//! Cluster a key must say which hash slot it lives in, and only the first `{...}` of a key
//! decides that; a name is a response or item id, a team, or a digest, and an id may hold `{`
//! and `}` itself. So a cluster key is `P:v1:KIND:{TAG}:NAME`, where `TAG` is 16 hex digits of a
//! hash of the name: the slot is the tag's, whatever the name holds or however long it is, and
//! the names spread evenly over the slots. (`P` may hold no brace there; the configuration
//! checks that.)

use super::redis_conn::Slots;

/// Makes the keys of one store.
#[derive(Debug, Clone)]
pub(super) struct Keys {
    prefix: String,
    slots: Slots,
}

impl Keys {
    pub(super) fn new(prefix: &str, slots: Slots) -> Keys {
        Keys {
            prefix: prefix.to_owned(),
            slots,
        }
    }

    /// The prefix the keys start with.
    pub(super) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The key of `name` among the keys of `kind` (`resp`, `item`, `digest`, `rate`).
    pub(super) fn key(&self, kind: &str, name: &str) -> String {
        match self.slots {
            Slots::One => format!("{}:v1:{kind}:{name}", self.prefix),
            Slots::Many => format!("{}:v1:{kind}:{{{}}}:{name}", self.prefix, tag(name)),
        }
    }
}

/// A cluster key's hash tag for `name`.
fn tag(name: &str) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(name.as_bytes()))
}

#[cfg(test)]
mod tests {
    use ::redis::cluster_routing::Slot;

    use super::*;

    #[test]
    fn one_server_keeps_the_plain_layout() {
        let keys = Keys::new("rg", Slots::One);
        assert_eq!(keys.key("resp", "resp_1"), "rg:v1:resp:resp_1");
        assert_eq!(keys.key("item", "a{b}c"), "rg:v1:item:a{b}c");
    }

    #[test]
    fn a_cluster_key_is_in_the_slot_of_its_tag_whatever_the_name_holds() {
        let keys = Keys::new("rg", Slots::Many);
        let long = "x".repeat(10 * 1024);
        for name in ["resp_1", "{}", "{resp_1}", "a}b{c}d", "}{", "{{x}}", &long] {
            let key = keys.key("item", name);
            assert!(key.starts_with("rg:v1:item:{"), "{key}");
            assert!(key.ends_with(name));
            let tagged = format!("{{{}}}", tag(name));
            assert_eq!(Slot::for_key(&key), Slot::for_key(&tagged), "{name}");
        }
        // The same name always lands in the same slot; names with braces spread like others.
        assert_eq!(keys.key("resp", "{a}x"), keys.key("resp", "{a}x"));
        assert_ne!(
            Slot::for_key(keys.key("item", "{a}x")),
            Slot::for_key(keys.key("item", "{a}y"))
        );
        let slots: std::collections::HashSet<_> = (0..64)
            .map(|n| Slot::for_key(keys.key("item", &format!("fc_{n}"))))
            .collect();
        assert!(slots.len() > 48, "{} slots for 64 names", slots.len());
    }
}
