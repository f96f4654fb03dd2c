//! Member names as a reader keys them: the names it cares about, and the names that only read
//! as one of them to a lenient JSON reader (see [`misspelling_of`]).

use serde::de;

/// Declares an enum of the member names a reader cares about, plus `Other`, deserialized from
/// an object key without allocating. A name that only reads as one of them once case is ignored
/// or control characters are removed is `Misspelled` (see [`misspelling_of`]).
macro_rules! member_names {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $text:literal),* $(,)? }) => {
        $(#[$doc])*
        enum $name {
            $($variant,)*
            Misspelled($crate::json::Misspelling),
            Other,
        }

        impl $name {
            /// The names, as written.
            #[cfg(test)]
            #[allow(dead_code)]
            const NAMES: &[&str] = &[$($text),*];

            /// The member called `v` (escapes decoded).
            #[allow(dead_code)]
            fn from_name(v: &str) -> Self {
                match v {
                    $($text => $name::$variant,)*
                    _ => match $crate::json::misspelling_of(v, &[$($text),*]) {
                        Some(gated) => $name::Misspelled(
                            $crate::json::Misspelling::new(v, gated),
                        ),
                        None => $name::Other,
                    },
                }
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct NameVisitor;
                impl serde::de::Visitor<'_> for NameVisitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("a member name")
                    }
                    fn visit_str<E>(self, v: &str) -> Result<$name, E> {
                        Ok($name::from_name(v))
                    }
                }
                deserializer.deserialize_identifier(NameVisitor)
            }
        }
    };
}
pub(crate) use member_names;

/// A member name that is not a gated name but reads as one to a lenient JSON reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misspelling {
    /// The name as written.
    pub written: String,
    /// The gated name it reads as.
    pub gated: &'static str,
}

impl Misspelling {
    /// A misspelling of `gated` written as `written`.
    pub fn new(written: &str, gated: &'static str) -> Self {
        Self {
            written: written.to_owned(),
            gated,
        }
    }

    /// The reader error that refuses the request for it.
    pub fn into_error<E: de::Error>(self) -> E {
        E::custom(format_args!(
            "member name {:?} reads as `{}` to case-insensitive JSON readers; spell it `{}`",
            self.written, self.gated, self.gated
        ))
    }
}

/// The gated name (one of `gated`, all lowercase ASCII) that `name` reads as once ASCII and
/// Unicode case is folded and control and zero-width characters are removed, as Go's
/// `encoding/json` or ASP.NET bind members, when `name` is not written exactly so.
///
/// The gate and such an upstream must never read two different members as `type` or `input`,
/// so such a name is refused rather than skipped.
pub fn misspelling_of(name: &str, gated: &[&'static str]) -> Option<&'static str> {
    let plain = name.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
    if plain {
        return gated
            .iter()
            .find(|g| g.len() == name.len() && g.eq_ignore_ascii_case(name))
            .copied();
    }
    let folded: String = name
        .chars()
        .filter(|c| !c.is_control() && !is_zero_width(*c))
        .flat_map(fold_case)
        .collect();
    gated.iter().find(|g| **g == folded).copied()
}

/// Characters that print as nothing, which a reader may drop or a person not see.
fn is_zero_width(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{2060}' | '\u{FEFF}' | '\u{00AD}')
}

/// Simple case folding as the lenient readers do it: lowercase, plus the two non-ASCII letters
/// that fold to ASCII ones (`ſ` to `s`, the Kelvin sign to `k`).
fn fold_case(c: char) -> impl Iterator<Item = char> {
    let single = match c {
        '\u{017F}' => Some('s'),
        '\u{212A}' => Some('k'),
        _ => None,
    };
    single
        .into_iter()
        .chain(c.to_lowercase().filter(move |_| single.is_none()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_read_as_gated_ones_are_misspellings() {
        let gated = ["type", "input", "status"];
        for (name, expected) in [
            ("Type", Some("type")),
            ("INPUT", Some("input")),
            ("type\u{0}", Some("type")),
            ("ty\u{1}pe", Some("type")),
            ("\u{200B}input", Some("input")),
            ("\u{017F}tatus", Some("status")),
            ("Status\u{7F}", Some("status")),
            ("TYPE", Some("type")),
            ("types", None),
            ("typ", None),
            ("tipe", None),
            ("t ype", None),
            ("\u{0442}ype", None),
        ] {
            assert_eq!(misspelling_of(name, &gated), expected, "{name:?}");
        }
    }
}
