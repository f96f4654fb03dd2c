//! One entry of a team's `keys` as written: a digest, `"sha256:..."`, or a table
//! `{ id = "...", digest = "sha256:...", expires = "..." }`; and its checks.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use toml::Spanned;

use super::budgets::BudgetEntry;
use super::error::Invalid;
use super::ClientKey;
use crate::keys;

/// A `keys` entry as written (the file holds it with its span, which is the digest's in the
/// string form).
pub(super) enum KeyEntry {
    /// `"sha256:..."`.
    Digest(String),
    /// `{ id = ..., digest = ..., expires = ... }`.
    Table(Box<KeyTable>),
}

/// The table form of a `keys` entry.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KeyTable {
    id: Option<Spanned<String>>,
    digest: Spanned<String>,
    expires: Option<Spanned<ExpiresText>>,
    budget: Option<Spanned<BudgetEntry>>,
}

/// `expires` as written: a string, or a TOML date-time (`expires = 2027-03-01T00:00:00Z`,
/// unquoted), as its text; both are read as RFC 3339.
pub(super) struct ExpiresText(String);

impl<'de> Deserialize<'de> for KeyEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Not an untagged enum: that would buffer the table and lose its fields' spans.
        struct EntryVisitor;

        impl<'de> Visitor<'de> for EntryVisitor {
            type Value = KeyEntry;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a key digest \"sha256:...\" or a table { id = \"...\", digest = \"sha256:...\", expires = \"...\" }",
                )
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<KeyEntry, E> {
                Ok(KeyEntry::Digest(text.to_owned()))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<KeyEntry, A::Error> {
                KeyTable::deserialize(MapAccessDeserializer::new(map))
                    .map(|table| KeyEntry::Table(Box::new(table)))
            }
        }

        deserializer.deserialize_any(EntryVisitor)
    }
}

impl<'de> Deserialize<'de> for ExpiresText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ExpiresVisitor;

        impl<'de> Visitor<'de> for ExpiresVisitor {
            type Value = ExpiresText;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 date and time, like \"2027-03-01T00:00:00Z\"")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<ExpiresText, E> {
                Ok(ExpiresText(text.to_owned()))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ExpiresText, A::Error> {
                let datetime = toml::value::Datetime::deserialize(MapAccessDeserializer::new(map))?;
                Ok(ExpiresText(datetime.to_string()))
            }
        }

        deserializer.deserialize_any(ExpiresVisitor)
    }
}

/// Checks a `keys` entry of `team`: a usable digest, id, expiry and budget, the digest listed
/// nowhere else (`owners`, digest to team) and the id naming no other key (`ids`, id to team).
/// Returns the key, and where its budget is written if it has one.
pub(super) fn validate_key(
    entry: Spanned<KeyEntry>,
    team: &str,
    owners: &mut HashMap<[u8; 32], String>,
    ids: &mut HashMap<String, String>,
) -> Result<(ClientKey, Option<Range<usize>>), Invalid> {
    let span = entry.span();
    let (written, id, expires, budget) = match entry.into_inner() {
        KeyEntry::Digest(text) => (Spanned::new(span, text), None, None, None),
        KeyEntry::Table(table) => {
            let KeyTable {
                id,
                digest,
                expires,
                budget,
            } = *table;
            (digest, id, expires, budget)
        }
    };
    let digest = parse_key_digest(&written)?;
    if let Some(owner) = owners.insert(digest, team.to_owned()) {
        return Err(Invalid::new(
            written.span(),
            format!(
                "a key digest may be listed once: {}; a key maps to one team",
                whose(&owner, team)
            ),
        ));
    }
    let id = id.map(|id| check_id(id, team, ids)).transpose()?;
    let expires = expires
        .map(|written| {
            keys::parse_expiry(&written.get_ref().0).ok_or_else(|| {
                Invalid::new(
                    written.span(),
                    format!(
                        "expires {:?} is not an RFC 3339 date and time with its offset, like \
                         \"2027-03-01T00:00:00Z\"",
                        written.get_ref().0
                    ),
                )
            })
        })
        .transpose()?;
    let budget_span = budget.as_ref().map(Spanned::span);
    let budget = budget
        .map(|written| {
            let span = written.span();
            written.into_inner().validate(span)
        })
        .transpose()?;
    let key = ClientKey {
        digest,
        id,
        expires,
        budget,
    };
    Ok((key, budget_span))
}

/// "this team already lists it" or "team "OWNER" already lists it".
fn whose(owner: &str, team: &str) -> String {
    if owner == team {
        "this team already lists it".to_owned()
    } else {
        format!("team {owner:?} already lists it")
    }
}

/// A key id: a short printable word, naming one key in the whole file.
fn check_id(id: Spanned<String>, team: &str, ids: &mut HashMap<String, String>) -> Result<String, Invalid> {
    if !keys::is_valid_key_id(id.get_ref()) {
        return Err(Invalid::new(
            id.span(),
            format!(
                "key id {:?} may contain only ASCII letters, digits, `_`, `-` and `.`, 1 to {} of them \
                 (it appears in the access log, the audit log and spans)",
                id.get_ref(),
                keys::MAX_KEY_ID_LEN
            ),
        ));
    }
    if let Some(owner) = ids.insert(id.get_ref().clone(), team.to_owned()) {
        return Err(Invalid::new(
            id.span(),
            format!(
                "key id {:?} names one key only: {}",
                id.get_ref(),
                whose(&owner, team)
            ),
        ));
    }
    Ok(id.into_inner())
}

/// A key digest as written in `keys`. The message never repeats the text: what was written
/// there by mistake may be a key itself.
fn parse_key_digest(written: &Spanned<String>) -> Result<[u8; 32], Invalid> {
    let text = written.get_ref();
    keys::parse_digest(text).ok_or_else(|| {
        let hint = if text.starts_with(keys::KEY_PREFIX) {
            "; this looks like a client key itself, which must not be written here: list its digest, \
             and make a new key if this file was shared"
        } else {
            ""
        };
        Invalid::new(
            written.span(),
            format!(
                "not a key digest: expected \"sha256:\" and the 64 hex digits of the SHA-256 of the \
                 client key (as `replaygate keys new` prints it){hint}"
            ),
        )
    })
}
