//! A provider's `item_profile`: the name of a built-in item profile (`"openai"`), or a profile
//! file an operator writes in the built-in's own JSON format (`{ file = "profiles/x.json" }`,
//! relative to the configuration file like `pinned_tools`).

use std::fmt;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use toml::Spanned;

use crate::gate::item_profile::MAX_PROFILE_BYTES;
use crate::gate::{ItemProfile, ProfileError};

/// `item_profile` as written.
pub(super) enum ItemProfileEntry {
    /// `"openai"`: a built-in profile.
    Named(String),
    /// `{ file = "profiles/x.json" }`.
    File(FileTable),
}

/// The table form of `item_profile`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileTable {
    pub(super) file: Spanned<String>,
}

impl<'de> Deserialize<'de> for ItemProfileEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Not an untagged enum: that would buffer the table and lose its fields' spans.
        struct EntryVisitor;

        impl<'de> Visitor<'de> for EntryVisitor {
            type Value = ItemProfileEntry;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a built-in item profile's name (\"openai\") or a table { file = \"profiles/x.json\" }",
                )
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<ItemProfileEntry, E> {
                Ok(ItemProfileEntry::Named(text.to_owned()))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ItemProfileEntry, A::Error> {
                FileTable::deserialize(MapAccessDeserializer::new(map)).map(ItemProfileEntry::File)
            }
        }

        deserializer.deserialize_any(EntryVisitor)
    }
}

/// Reads and checks the item profile file at `path` (already resolved). The error is a
/// sentence that names the file and, for an error in its JSON, the line and column.
pub(crate) fn read_file(path: &Path) -> Result<Arc<ItemProfile>, String> {
    let file = format!("item profile file {}", path.display());
    let text = read_capped(path).map_err(|why| format!("cannot read {file}: {why}"))?;
    ItemProfile::from_json(&path.display().to_string(), &text)
        .map(Arc::new)
        .map_err(|e| match e {
            ProfileError::Invalid { message, .. } => format!("{file} is not a valid item profile: {message}"),
            other => format!("{file}: {other}"),
        })
}

/// The file's text, refused without reading it whole when it is over [`MAX_PROFILE_BYTES`].
fn read_capped(path: &Path) -> Result<String, String> {
    let too_big = |bytes: u64| {
        format!(
            "it is {bytes} bytes; an item profile may be at most {} MiB",
            MAX_PROFILE_BYTES >> 20
        )
    };
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let length = file.metadata().map_err(|e| e.to_string())?.len();
    if length > MAX_PROFILE_BYTES as u64 {
        return Err(too_big(length));
    }
    // The length is read again as the file is: it may grow, or not say (a pipe).
    let mut bytes = Vec::new();
    file.take(MAX_PROFILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() > MAX_PROFILE_BYTES {
        return Err(too_big(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|e| format!("it is not UTF-8 text ({e})"))
}
