//! A JSON reader for serde that reads the body as the gate needs: strings without escapes
//! borrowed, skipped values (ignored members, raw values) passed over sixteen bytes at a time,
//! every byte still checked against the grammar.
//!
//! It reads a `&str`, so the text is known to be UTF-8 (the gate validates the whole body with
//! SIMD first). It accepts exactly the texts serde_json accepts and gives visitors the same
//! values: the differential tests and the `json_reader` fuzz target hold it to serde_json.
//! Nesting is bounded as serde_json bounds it (127 levels read by visitors; skipped values are
//! skipped without recursion), so a million `[` is an error, never a deep stack. serde_json's
//! raw values (`&RawValue`, `Box<RawValue>`) read through it.
//!
//! Beside the reader, what the gate and the ledger both read members with: [`Field`] and
//! [`RawField`] (a member's string, or only its kind), [`read_once`] (a repeated member fails),
//! and the member names a reader keys on, with [`misspelling_of`] for names a lenient reader
//! would take for them.

use std::borrow::Cow;

mod de;
pub use de::{array_after_known, array_in_place, Spanned};
mod error;
mod field;
mod names;
mod scan;
pub mod structure;

pub use error::{Category, Error};
pub(crate) use field::FieldVisitor;
pub use field::{read_once, Field, JsonKind, RawField, Text};
pub(crate) use names::member_names;
pub use names::{misspelling_of, Misspelling};

/// A reading result.
pub type Result<T> = std::result::Result<T, Error>;

/// How deep visitors may nest arrays and objects (serde_json's limit: the 128th level fails).
const DEPTH: u8 = 128;
/// What the buffer of decoded strings holds from the first string with an escape on.
const SCRATCH_BYTES: usize = 256;

/// Reads one JSON text; pass `&mut reader` to a `Deserialize` or `DeserializeSeed`, then call
/// [`Reader::end`].
#[derive(Debug)]
pub struct Reader<'de> {
    text: &'de str,
    pos: usize,
    remaining_depth: u8,
    /// Decoded strings that had escapes.
    scratch: String,
    /// The open arrays (`false`) and objects (`true`) of a value being skipped.
    skipping: Vec<bool>,
    /// Where each value read through [`Spanned`] lies in the text, in the order read.
    spans: Vec<std::ops::Range<usize>>,
    /// The array [`array_after_known`] reads from a resume point: where it opens, and where
    /// the elements still to read begin (just after the last one passed over).
    resume: Option<(usize, usize)>,
}

/// A string as read: borrowed from the text, or decoded into the reader's scratch.
enum Str<'de, 's> {
    Borrowed(&'de str),
    Decoded(&'s str),
}

impl<'de> Reader<'de> {
    /// A reader at the start of `text`.
    pub fn new(text: &'de str) -> Self {
        Reader {
            text,
            pos: 0,
            remaining_depth: DEPTH,
            scratch: String::new(),
            skipping: Vec::new(),
            spans: Vec::new(),
            resume: None,
        }
    }

    /// Has the array that opens at `open`, when [`array_after_known`] reads it, read from
    /// `resume` on: the caller knows the text between (whole elements it read before), and
    /// none of it is read again. `resume` must be just after an element of that array.
    pub fn resume_array(&mut self, open: usize, resume: usize) {
        self.resume = Some((open, resume));
    }

    /// Whether the array [`Reader::resume_array`] named has been read from its resume point.
    pub fn resumed(&self) -> bool {
        self.resume.is_none()
    }

    /// Makes room for `count` spans, so noting them does not grow the list.
    pub fn reserve_spans(&mut self, count: usize) {
        self.spans.reserve(count);
    }

    /// Where each value read through [`Spanned`] lies in the text, in the order read.
    pub fn take_spans(&mut self) -> Vec<std::ops::Range<usize>> {
        std::mem::take(&mut self.spans)
    }

    /// Checks that only whitespace follows the value read.
    pub fn end(&mut self) -> Result<()> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.syntax("trailing characters")),
        }
    }

    /// Reads one value and checks that nothing follows it: serde_json's `from_str`.
    pub fn read<T: serde::Deserialize<'de>>(text: &'de str) -> Result<T> {
        let mut reader = Reader::new(text);
        let value = T::deserialize(&mut reader)?;
        reader.end()?;
        Ok(value)
    }

    /// Reads a text that is one JSON string and nothing else (serde_json's `from_str::<String>`
    /// on it), decoding its escapes into a string allocated once: a JSON string decodes to no
    /// more bytes than its text, so the decoded string never grows.
    pub fn read_string(text: &'de str) -> Result<Cow<'de, str>> {
        let mut reader = Reader::new(text);
        match reader.peek() {
            Some(b'"') => reader.pos += 1,
            Some(_) => return Err(reader.syntax("expected a string")),
            None => return Err(reader.eof("EOF while parsing a value")),
        }
        reader.scratch = String::with_capacity(text.len());
        let borrowed = match reader.string()? {
            Str::Borrowed(text) => Some(text),
            Str::Decoded(_) => None,
        };
        reader.end()?;
        Ok(match borrowed {
            Some(text) => Cow::Borrowed(text),
            None => Cow::Owned(std::mem::take(&mut reader.scratch)),
        })
    }

    fn bytes(&self) -> &'de [u8] {
        self.text.as_bytes()
    }

    /// The next byte after whitespace (the reader left on it).
    #[inline]
    fn peek(&mut self) -> Option<u8> {
        let bytes = self.bytes();
        while let Some(&b) = bytes.get(self.pos) {
            if !scan::is_whitespace(b) {
                return Some(b);
            }
            self.pos += 1;
        }
        None
    }

    fn error(&self, category: Category, message: &str) -> Error {
        Error::at(category, message, self.text, self.pos)
    }

    fn syntax(&self, message: &str) -> Error {
        self.error(Category::Syntax, message)
    }

    fn eof(&self, message: &str) -> Error {
        self.error(Category::Eof, message)
    }

    /// Gives an error from a visitor the reader's position.
    fn placed(&self, mut error: Error) -> Error {
        error.place(self.text, self.pos);
        error
    }

    /// One level deeper for a visitor.
    fn descend(&mut self) -> Result<()> {
        self.remaining_depth -= 1;
        if self.remaining_depth == 0 {
            return Err(self.syntax("recursion limit exceeded"));
        }
        Ok(())
    }

    fn ascend(&mut self) {
        self.remaining_depth += 1;
    }

    /// Reads `true`, `false` or `null` (the reader on its first byte).
    fn literal(&mut self, word: &'static str) -> Result<()> {
        for &expected in word.as_bytes() {
            match self.bytes().get(self.pos) {
                Some(&b) if b == expected => self.pos += 1,
                Some(_) => return Err(self.syntax("expected ident")),
                None => return Err(self.eof("EOF while parsing a value")),
            }
        }
        Ok(())
    }

    /// The number starting here, as text, and whether it is an integer.
    fn number(&mut self) -> Result<(&'de str, bool)> {
        let start = self.pos;
        match scan::number_end(self.bytes(), start) {
            Ok((end, integer)) => {
                self.pos = end;
                Ok((&self.text[start..end], integer))
            }
            Err(at) => {
                self.pos = at;
                Err(if at >= self.text.len() {
                    self.eof("EOF while parsing a value")
                } else if at == start {
                    self.syntax("expected value")
                } else {
                    self.syntax("invalid number")
                })
            }
        }
    }

    /// Reads a string's contents (the reader just past its opening quote), decoding escapes.
    #[inline]
    fn string(&mut self) -> Result<Str<'de, '_>> {
        let bytes = self.bytes();
        let start = self.pos;
        let stop = scan::string_stop(bytes, start);
        if bytes.get(stop) == Some(&b'"') {
            self.pos = stop + 1;
            return Ok(Str::Borrowed(&self.text[start..stop]));
        }
        self.string_from(start, stop)
    }

    /// [`Reader::string`] past its first run, which did not end the string: `start` is where
    /// the contents began, `stop` where the run ended.
    #[inline(never)]
    fn string_from(&mut self, start: usize, mut stop: usize) -> Result<Str<'de, '_>> {
        let bytes = self.bytes();
        let mut run_from = start;
        let mut decoded = false;
        loop {
            if run_from != start {
                stop = scan::string_stop(bytes, run_from);
            }
            match bytes.get(stop) {
                Some(b'"') => {
                    self.pos = stop + 1;
                    if !decoded {
                        return Ok(Str::Borrowed(&self.text[start..stop]));
                    }
                    self.scratch.push_str(&self.text[run_from..stop]);
                    return Ok(Str::Decoded(&self.scratch));
                }
                Some(b'\\') => {
                    if !decoded {
                        self.scratch.clear();
                        // One allocation for the usual decoded string (a call's arguments)
                        // rather than a doubling from eight bytes up.
                        self.scratch.reserve(SCRATCH_BYTES);
                        decoded = true;
                    }
                    self.scratch.push_str(&self.text[run_from..stop]);
                    self.pos = stop + 1;
                    let c = self.escape()?;
                    self.scratch.push(c);
                    run_from = self.pos;
                }
                Some(_) => {
                    self.pos = stop;
                    return Err(
                        self.syntax("control character (\\u0000-\\u001F) found while parsing a string")
                    );
                }
                None => {
                    self.pos = bytes.len();
                    return Err(self.eof("EOF while parsing a string"));
                }
            }
        }
    }

    /// Decodes one escape (the reader just past its backslash), pairing surrogates.
    fn escape(&mut self) -> Result<char> {
        let Some(&b) = self.bytes().get(self.pos) else {
            return Err(self.eof("EOF while parsing a string"));
        };
        self.pos += 1;
        let c = match b {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => return self.unicode_escape(),
            _ => {
                self.pos -= 1;
                return Err(self.syntax("invalid escape"));
            }
        };
        Ok(c)
    }

    fn unicode_escape(&mut self) -> Result<char> {
        let first = self.hex4()?;
        let code = match first {
            0xD800..=0xDBFF => {
                if self.bytes().get(self.pos..self.pos + 2) != Some(b"\\u") {
                    return Err(if self.pos + 2 > self.text.len() {
                        self.eof("EOF while parsing a string")
                    } else {
                        self.syntax("unexpected end of hex escape")
                    });
                }
                self.pos += 2;
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(self.syntax("lone leading surrogate in hex escape"));
                }
                0x10000 + ((u32::from(first) - 0xD800) << 10) + (u32::from(second) - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err(self.syntax("lone leading surrogate in hex escape")),
            n => u32::from(n),
        };
        char::from_u32(code).ok_or_else(|| self.syntax("invalid unicode code point"))
    }

    /// Four hex digits.
    fn hex4(&mut self) -> Result<u16> {
        let mut n = 0u16;
        for _ in 0..4 {
            let Some(&b) = self.bytes().get(self.pos) else {
                self.pos = self.text.len();
                return Err(self.eof("EOF while parsing a string"));
            };
            let digit = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                b'A'..=b'F' => b - b'A' + 10,
                _ => return Err(self.syntax("invalid escape")),
            };
            self.pos += 1;
            n = n * 16 + u16::from(digit);
        }
        Ok(n)
    }

    /// Passes over a string's contents (the reader just past its opening quote) checking the
    /// grammar only: escapes must be escapes, `\u` four hex digits (unpaired surrogates pass,
    /// as serde_json passes them in what it skips).
    #[inline]
    fn skip_string(&mut self) -> Result<()> {
        let bytes = self.bytes();
        let stop = scan::string_stop(bytes, self.pos);
        if bytes.get(stop) == Some(&b'"') {
            self.pos = stop + 1;
            return Ok(());
        }
        self.skip_string_from(stop)
    }

    /// [`Reader::skip_string`] from `stop`, where its first run ended without ending the string.
    #[inline(never)]
    fn skip_string_from(&mut self, mut stop: usize) -> Result<()> {
        let bytes = self.bytes();
        let first = stop;
        let mut at = stop;
        loop {
            if at != first {
                stop = scan::string_stop(bytes, at);
            }
            match bytes.get(stop) {
                Some(b'"') => {
                    self.pos = stop + 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.pos = stop + 1;
                    match bytes.get(self.pos) {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.pos += 1,
                        Some(b'u') => {
                            self.pos += 1;
                            self.hex4()?;
                        }
                        Some(_) => return Err(self.syntax("invalid escape")),
                        None => return Err(self.eof("EOF while parsing a string")),
                    }
                    at = self.pos;
                }
                Some(_) => {
                    self.pos = stop;
                    return Err(
                        self.syntax("control character (\\u0000-\\u001F) found while parsing a string")
                    );
                }
                None => {
                    self.pos = bytes.len();
                    return Err(self.eof("EOF while parsing a string"));
                }
            }
        }
    }

    /// Passes over one value, any depth, without recursion (the reader on or before its first
    /// byte).
    fn skip_value(&mut self) -> Result<()> {
        self.skipping.clear();
        loop {
            // A value.
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    self.skip_string()?;
                }
                Some(b'{') => {
                    self.pos += 1;
                    match self.peek() {
                        Some(b'}') => self.pos += 1,
                        _ => {
                            self.skipping.push(true);
                            self.skip_key()?;
                            continue;
                        }
                    }
                }
                Some(b'[') => {
                    self.pos += 1;
                    match self.peek() {
                        Some(b']') => self.pos += 1,
                        _ => {
                            self.skipping.push(false);
                            continue;
                        }
                    }
                }
                Some(b't') => self.literal("true")?,
                Some(b'f') => self.literal("false")?,
                Some(b'n') => self.literal("null")?,
                Some(b'-' | b'0'..=b'9') => {
                    self.number()?;
                }
                Some(_) => return Err(self.syntax("expected value")),
                None => return Err(self.eof("EOF while parsing a value")),
            }
            // What follows it: the next element or member, or the end of enclosing values.
            loop {
                let Some(&in_object) = self.skipping.last() else {
                    return Ok(());
                };
                let (close, expected, eof) = if in_object {
                    (b'}', "expected `,` or `}`", "EOF while parsing an object")
                } else {
                    (b']', "expected `,` or `]`", "EOF while parsing a list")
                };
                match self.peek() {
                    Some(b',') => {
                        self.pos += 1;
                        if in_object {
                            self.skip_key()?;
                        }
                        break;
                    }
                    Some(b) if b == close => {
                        self.pos += 1;
                        self.skipping.pop();
                    }
                    Some(_) => return Err(self.syntax(expected)),
                    None => return Err(self.eof(eof)),
                }
            }
        }
    }

    /// Passes over a member's name and colon while skipping an object.
    fn skip_key(&mut self) -> Result<()> {
        match self.peek() {
            Some(b'"') => {
                self.pos += 1;
                self.skip_string()?;
            }
            Some(b'}') => return Err(self.syntax("trailing comma")),
            Some(_) => return Err(self.syntax("key must be a string")),
            None => return Err(self.eof("EOF while parsing a value")),
        }
        self.colon()
    }

    #[inline]
    fn colon(&mut self) -> Result<()> {
        if self.bytes().get(self.pos) == Some(&b':') {
            self.pos += 1;
            return Ok(());
        }
        match self.peek() {
            Some(b':') => {
                self.pos += 1;
                Ok(())
            }
            Some(_) => Err(self.syntax("expected `:`")),
            None => Err(self.eof("EOF while parsing an object")),
        }
    }
}

#[cfg(test)]
mod tests;
