//! A string pattern an item profile states for a member (`"pattern"` in a profile's rule),
//! compiled with the `regex` crate: the engine the tool schemas' patterns use, whose matching
//! takes time linear in the text. A pattern that engine cannot compile (backreferences,
//! look-around) or whose compiled form is over [`MAX_PATTERN_BYTES`] is refused, never run by
//! a backtracking engine.
//!
//! The usual pattern, a whole string of characters from an ASCII set (`^[a-zA-Z0-9_-]+$`), is
//! also compiled to a table of its bytes and tested without the engine.

use regex::{Regex, RegexBuilder};
use regex_syntax::hir::{Class, HirKind, Look};

/// The most memory one pattern's compiled program, and its lazy DFA's cache, may take.
pub const MAX_PATTERN_BYTES: usize = 256 * 1024;

/// A compiled pattern; two are equal when written alike.
#[derive(Debug, Clone)]
pub struct Pattern {
    regex: Regex,
    /// The pattern as a set of ASCII bytes repeated over the whole string, when it is one.
    ascii_run: Option<AsciiRun>,
}

/// `^[SET]{min,}$` with an ASCII set: the set as bits, and the fewest bytes.
#[derive(Debug, Clone, Copy)]
struct AsciiRun {
    set: u128,
    min: usize,
}

impl AsciiRun {
    /// The run `text` is written as, when it is one (per the `regex` crate's reading of it).
    fn of(text: &str) -> Option<AsciiRun> {
        let hir = regex_syntax::parse(text).ok()?;
        let HirKind::Concat(parts) = hir.kind() else {
            return None;
        };
        let [start, run, end] = parts.as_slice() else {
            return None;
        };
        if start.kind() != &HirKind::Look(Look::Start) || end.kind() != &HirKind::Look(Look::End) {
            return None;
        }
        let HirKind::Repetition(repetition) = run.kind() else {
            return None;
        };
        let HirKind::Class(Class::Unicode(class)) = repetition.sub.kind() else {
            return None;
        };
        if repetition.max.is_some() {
            return None;
        }
        let mut set = 0u128;
        for range in class.iter() {
            let (first, last) = (u32::from(range.start()), u32::from(range.end()));
            if last >= 128 {
                return None;
            }
            for c in first..=last {
                set |= 1 << c;
            }
        }
        Some(AsciiRun {
            set,
            min: usize::try_from(repetition.min).ok()?,
        })
    }

    #[inline]
    fn is_match(&self, text: &str) -> bool {
        text.len() >= self.min && text.bytes().all(|b| b < 128 && self.set & (1 << b) != 0)
    }
}

impl Pattern {
    /// Compiles `text` (the `regex` crate's syntax; like JSON Schema's `pattern`, unanchored
    /// unless it says `^` or `$`); the error is a sentence fragment saying why it cannot be
    /// used.
    pub fn new(text: &str) -> Result<Pattern, String> {
        RegexBuilder::new(text)
            .size_limit(MAX_PATTERN_BYTES)
            .dfa_size_limit(MAX_PATTERN_BYTES)
            .build()
            .map(|regex| Pattern {
                regex,
                ascii_run: AsciiRun::of(text),
            })
            .map_err(|e| match e {
                regex::Error::CompiledTooBig(_) => format!(
                    "pattern `{text}` compiles to more than {} KiB; write a smaller one",
                    MAX_PATTERN_BYTES / 1024
                ),
                other => format!(
                    "pattern `{text}` is not one the linear-time regex engine takes \
                     (no backreferences or look-around): {}",
                    one_line(&other.to_string())
                ),
            })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        self.regex.as_str()
    }

    /// Whether `text` (decoded) matches.
    #[inline]
    pub fn is_match(&self, text: &str) -> bool {
        match &self.ascii_run {
            Some(run) => run.is_match(text),
            None => self.regex.is_match(text),
        }
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Pattern {}

/// The regex crate's error (which draws the pattern over several lines) on one line.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty())
        .unwrap_or(message)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn the_name_pattern_matches_what_openai_takes() {
        let name = Pattern::new("^[a-zA-Z0-9_-]+$").unwrap();
        for ok in ["get_weather", "a", "A-9_z"] {
            assert!(name.is_match(ok), "{ok}");
        }
        for bad in ["", "get weather", "get.weather", "tool:run", "é", "a\n"] {
            assert!(!name.is_match(bad), "{bad:?}");
        }
        assert_eq!(name, Pattern::new("^[a-zA-Z0-9_-]+$").unwrap());
        assert_eq!(name.as_str(), "^[a-zA-Z0-9_-]+$");
    }

    #[test]
    fn an_ascii_run_matches_as_the_engine_does() {
        let texts = [
            "", "a", "ab_9", "a-b", "a b", "é", "a\n", "\na", "_", "--", "Z", "\u{7f}",
        ];
        for pattern in [
            "^[a-zA-Z0-9_-]+$",
            "^[a-z]*$",
            "^[a-z_]{2,}$",
            "^[^a-z]+$",
            "^[a-z]{1,3}$",
            "[a-z]+",
            "^(?i)[a-z]+$",
            "^\\w+$",
        ] {
            let compiled = Pattern::new(pattern).unwrap();
            for text in texts {
                assert_eq!(
                    compiled.is_match(text),
                    compiled.regex.is_match(text),
                    "{pattern} on {text:?}"
                );
            }
        }
        assert!(AsciiRun::of("^[a-zA-Z0-9_-]+$").is_some_and(|run| run.min == 1));
        assert!(AsciiRun::of("^[a-z_]{2,}$").is_some_and(|run| run.min == 2));
        // A bounded run, a set reaching past ASCII, an unanchored one: the engine decides.
        for pattern in ["^[a-z]{1,3}$", "^[^a-z]+$", "[a-z]+", "^\\w+$"] {
            assert!(AsciiRun::of(pattern).is_none(), "{pattern}");
        }
    }

    #[test]
    fn catastrophic_patterns_run_in_linear_time_or_are_refused() {
        // Nested quantifiers: exponential under backtracking, linear here.
        let nested = Pattern::new("^(a+)+$").unwrap();
        let text = format!("{}!", "a".repeat(100_000));
        let started = Instant::now();
        assert!(!nested.is_match(&text));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let backreference = Pattern::new(r"^(a)\1$").unwrap_err();
        assert!(backreference.contains("linear-time"), "{backreference}");
        let look_ahead = Pattern::new("^(?=a)").unwrap_err();
        assert!(
            look_ahead.contains("linear-time") && !look_ahead.contains('\n'),
            "{look_ahead}"
        );
        let huge = Pattern::new("^[a-z]{5000}[0-9]{5000}$").unwrap_err();
        assert!(huge.contains("KiB"), "{huge}");
    }
}
