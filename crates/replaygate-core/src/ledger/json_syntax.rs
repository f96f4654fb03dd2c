//! A check that bytes fed in pieces form one JSON text, for the tap's readers of answers and
//! events too large to hold whole ([`JsonStream`](super::json_stream::JsonStream) and
//! [`EventStream`](super::event_stream::EventStream)), run by the machine they share
//! ([`ObjectScan`](super::object_scan::ObjectScan)). That machine follows only strings,
//! escapes and nesting; this holds the rest of the text to JSON's grammar (literals, numbers,
//! separators, whitespace, control characters and UTF-8 in strings), so that an answer they
//! record is one the whole-body read would take.
//!
//! It holds no text: a few bytes of a UTF-8 sequence cut between pieces, and one bit per open
//! container, up to [`MAX_NESTING`] levels. Escapes are checked for their form only (`\ud800`
//! alone passes), as serde_json checks the strings it skips.

/// The deepest nesting checked; deeper text is refused. The whole-body read skips unread
/// members without a bound; no provider's answer comes near this.
pub(crate) const MAX_NESTING: usize = 1 << 16;

/// What may come next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A value (at the start, after `:`, or after `,` in an array).
    Value,
    /// A value or `]` (after `[`).
    ValueOrClose,
    /// A member name or `}` (after `{`).
    KeyOrClose,
    /// A member name (after `,` in an object).
    Key,
    /// The `:` after a member name.
    Colon,
    /// `,` or the innermost container's close (after a value inside one).
    CommaOrClose,
    /// Whitespace only: the text's value has ended.
    End,
    /// Inside a string (`key`: a member name).
    Str { key: bool },
    /// After a backslash in a string.
    Escape { key: bool },
    /// The `left` hex digits still due of a `\u` escape.
    Hex { key: bool, left: u8 },
    /// The rest of `true`, `false` or `null`.
    Literal { rest: &'static [u8] },
    /// Inside a number.
    Number(NumberPart),
}

/// Where a number stands: `-? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NumberPart {
    Minus,
    Zero,
    Integer,
    Point,
    Fraction,
    Exponent,
    ExponentSign,
    ExponentDigits,
}

impl NumberPart {
    /// Whether the number may end here.
    fn complete(self) -> bool {
        matches!(
            self,
            NumberPart::Zero | NumberPart::Integer | NumberPart::Fraction | NumberPart::ExponentDigits
        )
    }
}

/// The checker's state: see the module documentation.
#[derive(Debug, Clone)]
pub(crate) struct JsonSyntax {
    state: State,
    /// One bit per open container, innermost last: set for an object.
    open: Vec<u64>,
    depth: usize,
    /// The first bytes of a UTF-8 sequence in a string, cut off by the end of a piece.
    partial: [u8; 4],
    partial_len: usize,
    failed: bool,
}

impl Default for JsonSyntax {
    fn default() -> Self {
        JsonSyntax {
            state: State::Value,
            open: Vec::new(),
            depth: 0,
            partial: [0; 4],
            partial_len: 0,
            failed: false,
        }
    }
}

fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

impl JsonSyntax {
    /// Checks the next piece of the text; how many of its bytes are JSON so far (all of them,
    /// or up to the first that cannot continue the text; none once one could not).
    pub(crate) fn feed(&mut self, piece: &[u8]) -> usize {
        if self.failed {
            return 0;
        }
        let mut at = 0;
        while at < piece.len() {
            if let State::Str { key } = self.state {
                match self.string_run(&piece[at..], key) {
                    Some(taken) => at += taken,
                    None => {
                        self.failed = true;
                        return at;
                    }
                }
                continue;
            }
            if !self.byte(piece[at]) {
                self.failed = true;
                return at;
            }
            at += 1;
        }
        piece.len()
    }

    /// Whether the text fed is one whole JSON text.
    pub(crate) fn complete(&self) -> bool {
        !self.failed
            && match self.state {
                State::End => true,
                State::Number(part) => part.complete() && self.depth == 0,
                _ => false,
            }
    }

    /// Reads string content up to its next quote or backslash (taken as one byte when first),
    /// checking UTF-8 across pieces; the bytes taken, or `None` when they are not JSON.
    fn string_run(&mut self, bytes: &[u8], key: bool) -> Option<usize> {
        let run = bytes
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
            .unwrap_or(bytes.len());
        let text = self.complete_partial(&bytes[..run])?;
        match simdutf8::compat::from_utf8(text) {
            Ok(_) => {}
            Err(error) if error.error_len().is_none() => {
                let tail = &text[error.valid_up_to()..];
                self.partial[..tail.len()].copy_from_slice(tail);
                self.partial_len = tail.len();
            }
            Err(_) => return None,
        }
        let Some(&special) = bytes.get(run) else {
            return Some(run);
        };
        // A quote, backslash or control character cannot finish a UTF-8 sequence.
        if self.partial_len > 0 {
            return None;
        }
        match special {
            b'"' => self.state = self.after_string(key),
            b'\\' => self.state = State::Escape { key },
            _ => return None,
        }
        Some(run + 1)
    }

    /// Finishes a UTF-8 sequence begun in an earlier piece from the first bytes of `run`; the
    /// rest of `run`, or `None` when the sequence is not UTF-8.
    fn complete_partial<'a>(&mut self, run: &'a [u8]) -> Option<&'a [u8]> {
        if self.partial_len == 0 {
            return Some(run);
        }
        let need = match self.partial[0] {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            _ => 4,
        };
        let take = (need - self.partial_len).min(run.len());
        self.partial[self.partial_len..self.partial_len + take].copy_from_slice(&run[..take]);
        self.partial_len += take;
        if self.partial_len < need {
            // Still cut off: valid so far only if it is a prefix of a sequence.
            return match simdutf8::compat::from_utf8(&self.partial[..self.partial_len]) {
                Err(error) if error.error_len().is_none() => Some(&run[take..]),
                _ => None,
            };
        }
        let whole = std::str::from_utf8(&self.partial[..need]).is_ok();
        self.partial_len = 0;
        whole.then(|| &run[take..])
    }

    /// What follows a string that ended.
    fn after_string(&self, key: bool) -> State {
        if key {
            State::Colon
        } else {
            self.after_value()
        }
    }

    /// What follows a value that ended.
    fn after_value(&self) -> State {
        if self.depth == 0 {
            State::End
        } else {
            State::CommaOrClose
        }
    }

    fn innermost_is_object(&self) -> bool {
        let index = self.depth - 1;
        self.open[index / 64] & (1 << (index % 64)) != 0
    }

    fn push(&mut self, object: bool) -> bool {
        if self.depth == MAX_NESTING {
            return false;
        }
        let (word, bit) = (self.depth / 64, self.depth % 64);
        if word == self.open.len() {
            self.open.push(0);
        }
        if object {
            self.open[word] |= 1 << bit;
        } else {
            self.open[word] &= !(1 << bit);
        }
        self.depth += 1;
        true
    }

    /// Closes the innermost container with `byte`, when it is the one that closes it.
    fn close(&mut self, byte: u8) -> bool {
        if self.depth == 0 || self.innermost_is_object() != (byte == b'}') {
            return false;
        }
        self.depth -= 1;
        self.state = self.after_value();
        true
    }

    /// Starts a value at `byte`.
    fn value(&mut self, byte: u8) -> bool {
        self.state = match byte {
            b'"' => State::Str { key: false },
            b'{' => {
                if !self.push(true) {
                    return false;
                }
                State::KeyOrClose
            }
            b'[' => {
                if !self.push(false) {
                    return false;
                }
                State::ValueOrClose
            }
            b't' => State::Literal { rest: b"rue" },
            b'f' => State::Literal { rest: b"alse" },
            b'n' => State::Literal { rest: b"ull" },
            b'-' => State::Number(NumberPart::Minus),
            b'0' => State::Number(NumberPart::Zero),
            b'1'..=b'9' => State::Number(NumberPart::Integer),
            _ => return false,
        };
        true
    }

    /// Checks one byte outside a string's content; whether the text may go on with it.
    fn byte(&mut self, byte: u8) -> bool {
        match self.state {
            State::Number(part) => {
                let next = match (part, byte) {
                    (NumberPart::Minus, b'0') => NumberPart::Zero,
                    (NumberPart::Minus, b'1'..=b'9') => NumberPart::Integer,
                    (NumberPart::Integer, b'0'..=b'9') => NumberPart::Integer,
                    (NumberPart::Zero | NumberPart::Integer, b'.') => NumberPart::Point,
                    (NumberPart::Point | NumberPart::Fraction, b'0'..=b'9') => NumberPart::Fraction,
                    (NumberPart::Zero | NumberPart::Integer | NumberPart::Fraction, b'e' | b'E') => {
                        NumberPart::Exponent
                    }
                    (NumberPart::Exponent, b'+' | b'-') => NumberPart::ExponentSign,
                    (
                        NumberPart::Exponent | NumberPart::ExponentSign | NumberPart::ExponentDigits,
                        b'0'..=b'9',
                    ) => NumberPart::ExponentDigits,
                    (part, _) if part.complete() => {
                        // The number ended before this byte, which is read after it.
                        self.state = self.after_value();
                        return self.byte(byte);
                    }
                    _ => return false,
                };
                self.state = State::Number(next);
                true
            }
            State::Literal { rest } => {
                if rest.first() != Some(&byte) {
                    return false;
                }
                self.state = match &rest[1..] {
                    [] => self.after_value(),
                    rest => State::Literal { rest },
                };
                true
            }
            State::Escape { key } => {
                self.state = match byte {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => State::Str { key },
                    b'u' => State::Hex { key, left: 4 },
                    _ => return false,
                };
                true
            }
            State::Hex { key, left } => {
                if !byte.is_ascii_hexdigit() {
                    return false;
                }
                self.state = match left {
                    1 => State::Str { key },
                    left => State::Hex { key, left: left - 1 },
                };
                true
            }
            _ if is_space(byte) => true,
            State::Value => self.value(byte),
            State::ValueOrClose => byte == b']' && self.close(byte) || byte != b']' && self.value(byte),
            State::KeyOrClose | State::Key => {
                if byte == b'"' {
                    self.state = State::Str { key: true };
                    true
                } else {
                    self.state == State::KeyOrClose && byte == b'}' && self.close(byte)
                }
            }
            State::Colon => {
                self.state = State::Value;
                byte == b':'
            }
            State::CommaOrClose => match byte {
                b',' => {
                    self.state = if self.innermost_is_object() {
                        State::Key
                    } else {
                        State::Value
                    };
                    true
                }
                b'}' | b']' => self.close(byte),
                _ => false,
            },
            State::End => false,
            State::Str { .. } => unreachable!("string content is read by string_run"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Whether `text` fed in pieces cut at `cuts` is complete JSON.
    fn checks(text: &[u8], cuts: &[usize]) -> bool {
        let mut syntax = JsonSyntax::default();
        let mut from = 0;
        for &cut in cuts.iter().chain(std::iter::once(&text.len())) {
            let cut = cut.clamp(from, text.len());
            let piece = &text[from..cut];
            if syntax.feed(piece) != piece.len() {
                return false;
            }
            from = cut;
        }
        syntax.complete()
    }

    /// Whether serde_json reads `text` as one JSON text (of UTF-8, as the whole-body read
    /// requires before it reads).
    fn serde_json_takes(text: &[u8]) -> bool {
        std::str::from_utf8(text)
            .is_ok_and(|text| serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok())
    }

    #[test]
    fn takes_what_serde_json_takes_and_refuses_the_rest() {
        let texts: &[&[u8]] = &[
            br#"{"id":"resp_1","created_at":1764600000,"output":[]}"#,
            br#"{"a":[1,-0.5e+3,0E1,true,false,null,{},[],"\u00e9\n\/"]}"#,
            b" {\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\" : \"\\ud800\" } \r\n",
            br#"{"created_at":17646x1600}"#,
            b"{\"\xff\":1}",
            b"{\"a\":\"\xc3\"}",
            b"{\"a\":\"\xed\xa0\x80\"}",
            b"{\"a\":\"tab\there\"}",
            b"{\"a\":1}\x0c",
            br#"{"a":01}"#,
            br#"{"a":1.}"#,
            br#"{"a":-}"#,
            br#"{"a":1e}"#,
            br#"{"a":tru}"#,
            br#"{"a":[1,]}"#,
            br#"{"a":1,}"#,
            br#"{"a" 1}"#,
            br#"{"a":[}"#,
            br#"{"a":"\x"}"#,
            br#"{"a":"\u12g4"}"#,
            br#"{"a":1}{"#,
            br#"{"a":1"#,
            br#""#,
        ];
        for text in texts {
            let expected = serde_json_takes(text);
            for cut in 0..=text.len() {
                assert_eq!(
                    checks(text, &[cut]),
                    expected,
                    "{} cut at {cut}",
                    String::from_utf8_lossy(text)
                );
            }
        }
    }

    #[test]
    fn says_where_the_text_stops_being_json() {
        let mut syntax = JsonSyntax::default();
        assert_eq!(syntax.feed(br#"{"n":17646x"#), 10);
        assert_eq!(syntax.feed(b"}"), 0, "nothing more once it failed");
        assert!(!syntax.complete());
    }

    #[test]
    fn nesting_is_bounded_and_held_in_bits() {
        let mut syntax = JsonSyntax::default();
        let deep = vec![b'['; MAX_NESTING];
        assert_eq!(syntax.feed(&deep), MAX_NESTING);
        assert!(syntax.open.len() * 8 <= MAX_NESTING / 8, "one bit a level");
        assert_eq!(syntax.feed(b"["), 0);
    }

    proptest! {
        #[test]
        fn agrees_with_serde_json_on_any_bytes_in_any_pieces(
            text in prop::collection::vec(
                prop::sample::select(&b"{}[]\":,. 0123456789-+eEtrufalsn\\u\xc3\xa9\xff\t"[..]),
                0..40,
            ),
            cuts in prop::collection::vec(0..40usize, 0..4),
        ) {
            let mut cuts = cuts;
            cuts.sort_unstable();
            let expected = serde_json_takes(&text);
            prop_assert_eq!(checks(&text, &cuts), expected, "{}", String::from_utf8_lossy(&text));
        }

        #[test]
        fn agrees_with_serde_json_on_json_values(value in json_value(), cuts in prop::collection::vec(0..200usize, 0..4)) {
            let text = serde_json::to_vec(&value).unwrap();
            let mut cuts = cuts;
            cuts.sort_unstable();
            prop_assert!(checks(&text, &cuts), "{}", String::from_utf8_lossy(&text));
        }
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(Into::into),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Into::into),
            ".{0,8}".prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                prop::collection::btree_map(".{0,6}", inner, 0..4)
                    .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
            ]
        })
    }
}
