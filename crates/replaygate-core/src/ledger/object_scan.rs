//! The byte-level machine the tap's streamed readers share ([`JsonStream`](super::json_stream::JsonStream)
//! for large JSON answers, [`EventStream`](super::event_stream::EventStream) for large events;
//! docs/ledger.md): one JSON object followed as its bytes pass, its members' names read and the
//! bytes of the values its user keeps handed over, with nothing held but the name being read.
//!
//! It follows only JSON's structure (strings, escapes, nesting, the object's members); the
//! rest of the grammar is held by a [`JsonSyntax`] check of the whole text, when the machine has
//! one. Its user ([`MemberReader`]) says, as each member's name is read, what to do with its
//! value ([`Take`]): skip it, take its bytes as one value, or take each element of the array it
//! is as one value. The user holds what it takes, within its own caps, and fails the read when
//! it must; the machine stops at the first failure.
//!
//! The hot loop is the inside of a value's string, passed on in one step up to its next quote
//! or escape; every other byte is one match, and nothing is allocated per byte.

use super::json_syntax::JsonSyntax;

/// The most bytes of a member's name kept (as JSON, escapes undecoded): a longer name is none
/// a reader keeps.
pub(crate) const NAME_CAP: usize = 1024;

/// What the user does with a member's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// Nothing: it is skipped as it passes.
    Skip,
    /// Its bytes, as one value ([`MemberReader::take`]; the whitespace around it is not taken).
    Value,
    /// When it is an array, each element's bytes as one value, each ended by
    /// [`MemberReader::element_ended`]; `false`, the elements are skipped. A value that is an
    /// object fails the read; a scalar is skipped.
    Elements(bool),
}

/// The user of an [`ObjectScan`]: what is done with the object's members.
pub(crate) trait MemberReader {
    /// Whether the read has failed: the machine reads no further.
    fn failed(&self) -> bool;
    /// The text is not one JSON object (or not one the user reads): the read fails.
    fn fail(&mut self);
    /// A member's name was read (its JSON text without quotes, at most [`NAME_CAP`] bytes):
    /// its value follows.
    fn member_started(&mut self, name: &[u8]) -> Take;
    /// The current member's value ended.
    fn member_ended(&mut self);
    /// The next bytes of a taken value.
    fn take(&mut self, bytes: &[u8]);
    /// The array of a [`Take::Elements`] member opened.
    fn elements_opened(&mut self) {}
    /// A taken element ended, or the array did (nothing was taken since the last element
    /// ended: an empty array, or its close).
    fn element_ended(&mut self) {}
}

/// The machine's state: where the current byte stands in the object.
#[derive(Debug)]
pub(crate) struct ObjectScan {
    /// The grammar check of the whole text (`None`: the text is part of one checked
    /// elsewhere).
    syntax: Option<JsonSyntax>,
    /// Containers open around the current byte (the object is depth 1).
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// At depth 1: the next string is a member name.
    expect_key: bool,
    /// The member name being read (at most [`NAME_CAP`] bytes).
    key: Vec<u8>,
    /// The least depth whose bytes are taken (`usize::MAX`: none are); whitespace is taken
    /// only deeper, inside a taken value's containers.
    taken_from: usize,
    /// The current member is a [`Take::Elements`] one.
    elements: bool,
    /// The object has closed.
    ended: bool,
}

impl ObjectScan {
    /// A machine for one object; `checked`: it holds the text to JSON's grammar too.
    pub(crate) fn new(checked: bool) -> ObjectScan {
        ObjectScan {
            syntax: checked.then(JsonSyntax::default),
            depth: 0,
            in_string: false,
            escaped: false,
            expect_key: false,
            key: Vec::new(),
            taken_from: usize::MAX,
            elements: false,
            ended: false,
        }
    }

    /// Bytes held now.
    pub(crate) fn held_bytes(&self) -> usize {
        self.key.len()
    }

    /// Whether the text was read to the object's end, and (when checked) is one JSON text.
    pub(crate) fn complete(&self) -> bool {
        self.ended && self.syntax.as_ref().is_none_or(JsonSyntax::complete)
    }

    /// Reads the next bytes of the text, as far as they are JSON (when checked); past that,
    /// the read fails.
    pub(crate) fn feed(&mut self, chunk: &[u8], reader: &mut impl MemberReader) {
        let json = match &mut self.syntax {
            Some(syntax) => syntax.feed(chunk),
            None => chunk.len(),
        };
        self.scan(&chunk[..json], reader);
        if json < chunk.len() && !reader.failed() {
            reader.fail();
        }
        if reader.failed() {
            self.key = Vec::new();
        }
    }

    /// Whether the current byte is in a member's name.
    fn in_key(&self) -> bool {
        self.depth == 1 && self.expect_key
    }

    /// Follows the structure of the next bytes, handing over what is taken: each run of taken
    /// bytes in one call, ended where a byte is not taken or the reader is told of a step.
    fn scan(&mut self, chunk: &[u8], reader: &mut impl MemberReader) {
        if reader.failed() {
            return;
        }
        // The taken bytes not yet handed over.
        let mut run = 0..0;
        let mut at = 0;
        while at < chunk.len() {
            // The inside of a value's string, up to its next quote or escape, in one step.
            let mut len = 0;
            if self.in_string && !self.escaped && !self.in_key() {
                len = chunk[at..]
                    .iter()
                    .position(|&b| b == b'"' || b == b'\\')
                    .unwrap_or(chunk.len() - at);
            }
            let step = match len {
                0 => {
                    len = 1;
                    self.byte(chunk[at])
                }
                _ if self.depth >= self.taken_from => Step::Taken,
                _ => Step::Passed,
            };
            match step {
                Step::Passed => {}
                Step::Taken if run.end == at => run.end = at + len,
                Step::Taken => {
                    reader.take(&chunk[run]);
                    run = at..at + len;
                }
                step => {
                    if !run.is_empty() {
                        reader.take(&chunk[std::mem::replace(&mut run, at..at)]);
                        if reader.failed() {
                            return;
                        }
                    }
                    self.tell(step, reader);
                    if reader.failed() {
                        return;
                    }
                }
            }
            at += len;
        }
        if !run.is_empty() {
            reader.take(&chunk[run]);
        }
    }

    /// Tells the reader of a step of the object.
    fn tell(&mut self, step: Step, reader: &mut impl MemberReader) {
        match step {
            Step::Taken | Step::Passed => {}
            Step::Failed => reader.fail(),
            Step::MemberStarted => {
                let take = reader.member_started(&self.key);
                self.key.clear();
                (self.taken_from, self.elements) = match take {
                    Take::Skip => (usize::MAX, false),
                    Take::Value => (1, false),
                    Take::Elements(true) => (2, true),
                    Take::Elements(false) => (usize::MAX, true),
                };
            }
            Step::MemberEnded => {
                reader.member_ended();
                self.taken_from = usize::MAX;
                self.elements = false;
            }
            Step::ElementsOpened => reader.elements_opened(),
            Step::ElementEnded => {
                if self.taken_from == 2 {
                    reader.element_ended();
                }
            }
        }
    }

    /// Follows one byte inside a string (a key's or a value's): an escape, or the closing quote
    /// (whether it was).
    fn string_byte(&mut self, byte: u8) -> bool {
        if self.escaped {
            self.escaped = false;
        } else if byte == b'\\' {
            self.escaped = true;
        } else if byte == b'"' {
            self.in_string = false;
            return true;
        }
        false
    }

    /// Follows one byte outside the inside of a value's string; says what it was.
    fn byte(&mut self, byte: u8) -> Step {
        if self.ended {
            return match byte.is_ascii_whitespace() {
                true => Step::Passed,
                false => Step::Failed,
            };
        }
        if self.in_string {
            let closed = self.string_byte(byte);
            if !self.in_key() {
                return self.taken(self.depth);
            }
            if !closed && self.key.len() < NAME_CAP {
                self.key.push(byte);
            }
            return Step::Passed;
        }
        match byte {
            // Whitespace is taken only inside a taken value's containers.
            b' ' | b'\t' | b'\n' | b'\r' => self.taken(self.depth.saturating_sub(1)),
            b'{' | b'[' => {
                if self.depth == 0 {
                    if byte == b'[' {
                        return Step::Failed;
                    }
                    self.depth = 1;
                    self.expect_key = true;
                    return Step::Passed;
                }
                if self.depth == 1 {
                    if self.expect_key {
                        return Step::Failed;
                    }
                    if self.elements {
                        if byte != b'[' {
                            return Step::Failed;
                        }
                        self.depth = 2;
                        return Step::ElementsOpened;
                    }
                }
                self.depth += 1;
                self.taken(self.depth)
            }
            b'}' | b']' => match self.depth {
                0 => Step::Failed,
                1 => {
                    self.depth = 0;
                    self.ended = true;
                    Step::MemberEnded
                }
                2 if self.elements => {
                    self.depth = 1;
                    Step::ElementEnded
                }
                depth => {
                    self.depth -= 1;
                    self.taken(depth)
                }
            },
            b',' if self.depth == 1 => {
                self.expect_key = true;
                Step::MemberEnded
            }
            b',' if self.depth == 2 && self.elements => Step::ElementEnded,
            b':' if self.in_key() => {
                self.expect_key = false;
                Step::MemberStarted
            }
            _ => {
                if self.depth == 0 {
                    return Step::Failed;
                }
                self.in_string = byte == b'"';
                self.taken(self.depth)
            }
        }
    }

    /// Whether a byte at `depth` is taken.
    fn taken(&self, depth: usize) -> Step {
        match depth >= self.taken_from {
            true => Step::Taken,
            false => Step::Passed,
        }
    }
}

/// What one byte was, to the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Part of a taken value.
    Taken,
    /// Nothing the reader is told of.
    Passed,
    /// The text is not one JSON object.
    Failed,
    /// The colon after a member's name.
    MemberStarted,
    /// The comma or close after a member's value.
    MemberEnded,
    /// The open of a [`Take::Elements`] member's array.
    ElementsOpened,
    /// The comma or close after an element of that array.
    ElementEnded,
}

#[cfg(test)]
mod tests {
    use super::{MemberReader, ObjectScan, Take};

    /// Writes down what the machine tells it: taken bytes joined, each step marked.
    #[derive(Default)]
    struct Log {
        text: String,
        failed: bool,
    }

    impl MemberReader for Log {
        fn failed(&self) -> bool {
            self.failed
        }

        fn fail(&mut self) {
            self.failed = true;
            self.text.push('!');
        }

        fn member_started(&mut self, name: &[u8]) -> Take {
            let name = std::str::from_utf8(name).unwrap();
            self.text.push_str(&format!("<{name}>"));
            match name {
                "skip" => Take::Skip,
                "list" => Take::Elements(true),
                "heads" => Take::Elements(false),
                _ => Take::Value,
            }
        }

        fn member_ended(&mut self) {
            self.text.push(';');
        }

        fn take(&mut self, bytes: &[u8]) {
            self.text.push_str(std::str::from_utf8(bytes).unwrap());
        }

        fn elements_opened(&mut self) {
            self.text.push('[');
        }

        fn element_ended(&mut self) {
            self.text.push('|');
        }
    }

    fn scan(chunks: &[&[u8]]) -> (String, bool) {
        let mut machine = ObjectScan::new(true);
        let mut log = Log::default();
        for chunk in chunks {
            machine.feed(chunk, &mut log);
        }
        (log.text, machine.complete())
    }

    const TEXT: &str = r#" {"a" : "x\"y" , "skip":{"b":[1, "}"]}, "list": [ {"c": [1, 2]} , "s\\" ,3 ],
        "heads":[{"d":1}], "n\"ame": { "e" : 1 }, "z": null } "#;

    #[test]
    fn members_and_elements_are_told_as_they_pass() {
        let (text, complete) = scan(&[TEXT.as_bytes()]);
        assert_eq!(
            text,
            r#"<a>"x\"y";<skip>;<list>[{"c": [1, 2]}|"s\\"|3|;<heads>[;<n\"ame>{ "e" : 1 };<z>null;"#
        );
        assert!(complete);
    }

    #[test]
    fn every_split_tells_the_same() {
        let bytes = TEXT.as_bytes();
        let whole = scan(&[bytes]);
        for at in 0..=bytes.len() {
            assert_eq!(scan(&[&bytes[..at], &bytes[at..]]), whole, "split at {at}");
        }
        let single: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(scan(&single), whole);
    }

    #[test]
    fn what_is_not_one_object_fails() {
        for text in [
            r#"[1]"#,
            r#"{"a":1} x"#,
            r#"{"list":{"a":1}}"#,
            r#""s""#,
            r#"{"a":1"#,
        ] {
            let (log, complete) = scan(&[text.as_bytes()]);
            assert!(log.ends_with('!') || !complete, "{text}: {log}");
        }
        assert_eq!(scan(&[br#"{"a":1} x"#]).0, "<a>1;!");
    }
}
