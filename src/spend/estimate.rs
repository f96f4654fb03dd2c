//! What a request reserves before it is forwarded (docs/budgets.md#reservation-and-settlement):
//! its input estimated from the body's size, its output from `max_output_tokens`, else
//! `[usage] default_output_reservation`.

use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};

use super::{Price, MAX_BUDGET_UNITS};
use crate::json::structure;

/// Body bytes per input token the estimate assumes: a token is about four characters of
/// English text, and the JSON around the text makes a body's bytes more than its text's.
pub(crate) const BYTES_PER_TOKEN: u64 = 4;

/// A request's estimated tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Estimate {
    /// Input tokens: the body's bytes over [`BYTES_PER_TOKEN`], rounded up.
    pub(crate) input: u64,
    /// Output tokens: the body's `max_output_tokens`, else the default reservation.
    pub(crate) output: u64,
}

impl Estimate {
    /// The estimate of `body`, reserving `default_output` output tokens when it names no
    /// `max_output_tokens` (a top-level whole number; given twice, the larger counts).
    pub(crate) fn of(body: &[u8], default_output: u32) -> Estimate {
        let input = (body.len() as u64).div_ceil(BYTES_PER_TOKEN);
        let output = max_output_tokens(body).unwrap_or(u64::from(default_output));
        Estimate {
            input,
            output: output.min(MAX_BUDGET_UNITS),
        }
    }

    /// Input plus output tokens, what a `tokens` budget reserves.
    pub(crate) fn tokens(&self) -> u64 {
        self.input.saturating_add(self.output).min(MAX_BUDGET_UNITS)
    }

    /// What it costs at most at `price`, in micro-dollars: what a `usd` budget reserves.
    pub(crate) fn cost(&self, price: &Price) -> u64 {
        price.at_most(self.input, self.output)
    }
}

/// The body's top-level `max_output_tokens`, when it is a whole number of at least 0 (the
/// largest, when given more than once). Anything else (not an object, not JSON, a string, a
/// fraction) is `None`: the default reservation counts. The members are walked by the core's
/// structural scan, which passes over each value without reading it; a body it cannot walk (a
/// member name with an escape, which may spell `max_output_tokens`) is read by serde instead.
fn max_output_tokens(body: &[u8]) -> Option<u64> {
    // A member is named `max_output_tokens` by those letters, or by `\u` escapes of some: a
    // body with neither has none, and is not walked.
    let named = memchr::memmem::find(body, b"max_output_tokens").is_some();
    if !named && memchr::memmem::find(body, b"\\u").is_none() {
        return None;
    }
    let mut largest: Option<u64> = None;
    let mut whole = true;
    let walked = structure::members(body, |name, start| {
        let end = structure::value_end(body, start)?;
        if name == b"max_output_tokens" {
            match std::str::from_utf8(&body[start..end])
                .ok()
                .and_then(|text| text.parse::<u64>().ok())
            {
                Some(tokens) => largest = Some(largest.map_or(tokens, |seen| seen.max(tokens))),
                None => whole = false,
            }
        }
        Some(end)
    });
    match walked {
        Some(()) if whole => largest,
        Some(()) => None,
        None => max_output_tokens_read(body),
    }
}

/// [`max_output_tokens`] by serde, for a body the structural scan cannot walk.
fn max_output_tokens_read(body: &[u8]) -> Option<u64> {
    struct Largest;

    impl<'de> Visitor<'de> for Largest {
        type Value = Option<u64>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut largest: Option<u64> = None;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == "max_output_tokens" {
                    if let Ok(Some(tokens)) = map.next_value::<Option<u64>>() {
                        largest = Some(largest.map_or(tokens, |seen| seen.max(tokens)));
                    } else {
                        // Not a whole number: the provider refuses it, or another number
                        // counts; either way, the default.
                        return Ok(None);
                    }
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(largest)
        }
    }

    let mut reader = serde_json::Deserializer::from_slice(body);
    reader.deserialize_map(Largest).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_output_is_max_output_tokens_else_the_default() {
        let estimate = |body: &str| Estimate::of(body.as_bytes(), 4096);
        assert_eq!(estimate(r#"{"max_output_tokens":300}"#).output, 300);
        assert_eq!(estimate(r#"{"input":"hi"}"#).output, 4096);
        for odd in [
            r#"{"max_output_tokens":"300"}"#,
            r#"{"max_output_tokens":-1}"#,
            r#"{"max_output_tokens":3.5}"#,
            r#"{"max_output_tokens":null}"#,
            r#"[1]"#,
            "not json",
            r#"{"meta":{"max_output_tokens":5}}"#,
        ] {
            assert_eq!(estimate(odd).output, 4096, "{odd}");
        }
        // Read as the provider reads it: an escaped name, whitespace, any member order.
        assert_eq!(
            estimate(r#"{"max_output_\u0074okens":77,"input":[{"a":"}"}]}"#).output,
            77
        );
        assert_eq!(
            estimate(" {\"input\":\"x\" , \"max_output_tokens\" : 12 } ").output,
            12
        );
        // Given twice, the larger: whichever the provider reads is reserved for.
        assert_eq!(
            estimate(r#"{"max_output_tokens":300,"max_output_tokens":900}"#).output,
            900
        );
        assert_eq!(
            estimate(r#"{"max_output_tokens":18446744073709551615}"#).output,
            MAX_BUDGET_UNITS
        );
    }

    #[test]
    fn the_input_is_a_token_per_four_bytes_rounded_up() {
        let body = format!(r#"{{"input":"{}","max_output_tokens":10}}"#, "a".repeat(1000));
        let estimate = Estimate::of(body.as_bytes(), 4096);
        assert_eq!(estimate.input, (body.len() as u64).div_ceil(4));
        assert_eq!(estimate.tokens(), estimate.input + 10);
        let price = Price {
            input: 2.0,
            cached_input: 0.5,
            output: 8.0,
        };
        assert_eq!(estimate.cost(&price), estimate.input * 2 + 80);
    }
}
