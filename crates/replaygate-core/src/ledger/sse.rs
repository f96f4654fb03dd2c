//! Server-sent event framing, read incrementally (the WHATWG `text/event-stream` rules): lines
//! end with `\r\n`, `\n` or `\r`, even when split across chunks; `:` starts a comment; `data:`
//! lines join with `\n`; a blank line ends an event; `id:`, `retry:` and unknown fields are
//! ignored; a leading byte order mark is skipped; an event not ended by a blank line is never
//! delivered.
//!
//! The reader never holds a whole line: it reads each line's field name (a few bytes), then
//! passes the value on as it comes. It holds the pending event's data up to `cap` bytes and
//! delivers such an event whole ([`Sink::event`]); an event whose data passes `cap` is
//! delivered as it streams instead ([`Sink::data`], then [`Sink::end`]), so no event is too
//! large to read. The switch depends on the data's length alone, never on where the stream is
//! cut into chunks. Lines of other fields are skipped as they pass, whatever their length; an
//! `event` name over [`NAME_CAP`] is delivered as an empty name (it names no event anyone
//! reads).

/// The longest `event` name kept, in bytes.
pub(crate) const NAME_CAP: usize = 1024;

/// The longest field name read: `event`. A longer one is a field the reader ignores.
const FIELD_NAME_CAP: usize = 5;

/// The byte order mark a stream may open with.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// What a [`Framing`] delivers.
pub(crate) trait Sink {
    /// An event whose data was held whole: its `event` name and its data (the `data` lines
    /// joined with `\n`).
    fn event(&mut self, name: &[u8], data: &[u8]);
    /// The next bytes of the data of an event over the cap, in order; the first call brings
    /// what was held of it.
    fn data(&mut self, bytes: &[u8]);
    /// The end of an event over the cap, with its `event` name.
    fn end(&mut self, name: &[u8]);
}

/// The field of the line being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// Its name is being read (in `Framing::name`).
    Name,
    /// A `data` line, past its colon.
    Data,
    /// An `event` line, past its colon.
    Event,
    /// A comment or a field the reader ignores: skipped to the line's end.
    Ignored,
}

/// An incremental event reader.
#[derive(Debug)]
pub(crate) struct Framing {
    cap: usize,
    field: Field,
    /// The field name read so far (at most [`FIELD_NAME_CAP`] bytes, or the byte order mark).
    name: Vec<u8>,
    /// The value has not started: a single leading space is still to be skipped.
    value_start: bool,
    /// The pending event's data while it is held: its `data` lines joined with `\n`.
    data: Vec<u8>,
    /// The pending event has a `data` line (perhaps empty).
    has_data: bool,
    /// A `data` line ended: the next one starts with `\n`.
    newline_due: bool,
    /// The pending event's data passed the cap: it is delivered as it comes.
    streaming: bool,
    /// The pending event's `event` field.
    event: Vec<u8>,
    /// The `event` field passed [`NAME_CAP`].
    event_overlong: bool,
    /// The last chunk ended with `\r`: a `\n` opening the next one ends no line.
    after_cr: bool,
    /// No line has ended yet, and no byte but the byte order mark's was read.
    at_start: bool,
}

impl Framing {
    /// A reader holding at most `cap` bytes of a pending event's data.
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap,
            field: Field::Name,
            name: Vec::new(),
            value_start: false,
            data: Vec::new(),
            has_data: false,
            newline_due: false,
            streaming: false,
            event: Vec::new(),
            event_overlong: false,
            after_cr: false,
            at_start: true,
        }
    }

    /// Bytes of the pending event held now: its data (at most the cap), its name and the
    /// field name being read.
    pub(crate) fn held_bytes(&self) -> usize {
        self.data.len() + self.event.len() + self.name.len()
    }

    /// Reads `chunk`, delivering to `sink` each event it completes or streams. Each byte is
    /// looked at a bounded number of times.
    pub(crate) fn feed(&mut self, chunk: &[u8], sink: &mut impl Sink) {
        let mut rest = chunk;
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
        }
        while let Some(&byte) = rest.first() {
            if self.field == Field::Name {
                match byte {
                    b'\n' | b'\r' => {
                        self.end_line(sink);
                        rest = self.past_line_end(rest);
                    }
                    b':' => {
                        self.start_value(sink);
                        rest = &rest[1..];
                    }
                    _ => {
                        self.name_byte(byte);
                        rest = &rest[1..];
                    }
                }
                continue;
            }
            let end = rest.iter().position(|&b| b == b'\n' || b == b'\r');
            let (value, after) = rest.split_at(end.unwrap_or(rest.len()));
            self.value(value, sink);
            if after.is_empty() {
                break;
            }
            self.end_line(sink);
            rest = self.past_line_end(after);
        }
    }

    /// `rest` past the line end it opens with (`\r\n` counted once, even when split).
    fn past_line_end<'a>(&mut self, rest: &'a [u8]) -> &'a [u8] {
        match rest {
            [b'\r', b'\n', after @ ..] => after,
            [b'\r'] => {
                self.after_cr = true;
                &[]
            }
            [_, after @ ..] => after,
            [] => rest,
        }
    }

    /// Reads one byte of a field name.
    fn name_byte(&mut self, byte: u8) {
        self.name.push(byte);
        if self.at_start {
            if self.name == BOM {
                self.name.clear();
                self.at_start = false;
                return;
            }
            if BOM.starts_with(&self.name) {
                return;
            }
            self.at_start = false;
        }
        if self.name.len() > FIELD_NAME_CAP {
            // No field read has so long a name: the rest of the line is skipped.
            self.name.clear();
            self.field = Field::Ignored;
        }
    }

    /// The colon after a field name: its value starts.
    fn start_value(&mut self, sink: &mut impl Sink) {
        self.at_start = false;
        self.field = match self.name.as_slice() {
            b"data" => {
                self.start_data_line(sink);
                Field::Data
            }
            b"event" => {
                self.event.clear();
                self.event_overlong = false;
                Field::Event
            }
            _ => Field::Ignored,
        };
        self.name.clear();
        self.value_start = true;
    }

    /// Reads bytes of the current line's value (no line end among them).
    fn value(&mut self, mut bytes: &[u8], sink: &mut impl Sink) {
        if bytes.is_empty() {
            return;
        }
        if self.value_start {
            self.value_start = false;
            bytes = bytes.strip_prefix(b" ").unwrap_or(bytes);
        }
        match self.field {
            Field::Data => self.push_data(bytes, sink),
            Field::Event => {
                if self.event_overlong || self.event.len() + bytes.len() > NAME_CAP {
                    self.event_overlong = true;
                    self.event = Vec::new();
                } else {
                    self.event.extend_from_slice(bytes);
                }
            }
            Field::Name | Field::Ignored => {}
        }
    }

    /// Handles the end of the current line.
    fn end_line(&mut self, sink: &mut impl Sink) {
        self.at_start = false;
        match self.field {
            // A line without a colon: its whole text is the field name, its value empty.
            Field::Name => match self.name.as_slice() {
                b"" => self.dispatch(sink),
                b"data" => {
                    self.start_data_line(sink);
                    self.newline_due = true;
                }
                b"event" => {
                    self.event.clear();
                    self.event_overlong = false;
                }
                _ => {}
            },
            Field::Data => self.newline_due = true,
            Field::Event | Field::Ignored => {}
        }
        self.field = Field::Name;
        self.name.clear();
        self.value_start = false;
    }

    /// A `data` line starts: the pending event has data, joined to the last line's by `\n`.
    fn start_data_line(&mut self, sink: &mut impl Sink) {
        self.has_data = true;
        if std::mem::take(&mut self.newline_due) {
            self.push_data(b"\n", sink);
        }
    }

    /// Adds `bytes` to the pending event's data: held while the data fits in the cap, passed
    /// on as it comes once it does not.
    fn push_data(&mut self, bytes: &[u8], sink: &mut impl Sink) {
        if bytes.is_empty() {
            return;
        }
        if self.streaming {
            sink.data(bytes);
        } else if self.data.len() + bytes.len() > self.cap {
            self.streaming = true;
            let held = std::mem::take(&mut self.data);
            if !held.is_empty() {
                sink.data(&held);
            }
            sink.data(bytes);
        } else {
            push_capped(&mut self.data, bytes, self.cap);
        }
    }

    /// Ends the pending event: delivers it when it has data, then forgets it.
    fn dispatch(&mut self, sink: &mut impl Sink) {
        if self.has_data {
            let name = if self.event_overlong {
                &[][..]
            } else {
                &self.event[..]
            };
            if self.streaming {
                sink.end(name);
            } else {
                sink.event(name, &self.data);
            }
        }
        self.data.clear();
        self.has_data = false;
        self.newline_due = false;
        self.streaming = false;
        self.event.clear();
        self.event_overlong = false;
    }
}

/// Appends `bytes` to `buf` (whose length plus `bytes` is at most `cap`) without letting its
/// capacity pass `cap`, while still growing geometrically.
pub(crate) fn push_capped(buf: &mut Vec<u8>, bytes: &[u8], cap: usize) {
    let needed = buf.len() + bytes.len();
    if needed > buf.capacity() {
        let target = needed.max(buf.capacity().saturating_mul(2).min(cap));
        buf.reserve_exact(target - buf.len());
    }
    buf.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a sink was given: `(name, data, streamed)` per event, a streamed event's data
    /// being its pieces joined.
    #[derive(Default)]
    struct Seen {
        events: Vec<(String, String, bool)>,
        streaming: Option<Vec<u8>>,
    }

    impl Sink for Seen {
        fn event(&mut self, name: &[u8], data: &[u8]) {
            assert!(self.streaming.is_none(), "an event ended inside a streamed one");
            self.events.push((text(name), text(data), false));
        }

        fn data(&mut self, bytes: &[u8]) {
            assert!(!bytes.is_empty(), "an empty piece");
            self.streaming
                .get_or_insert_with(Vec::new)
                .extend_from_slice(bytes);
        }

        fn end(&mut self, name: &[u8]) {
            let data = self.streaming.take().expect("data came before the end");
            self.events.push((text(name), text(&data), true));
        }
    }

    fn text(bytes: &[u8]) -> String {
        String::from_utf8_lossy(bytes).into_owned()
    }

    /// The events of a stream fed in the given chunks, checking what is held as it goes.
    fn events(chunks: &[&[u8]], cap: usize) -> Vec<(String, String, bool)> {
        let mut framing = Framing::new(cap);
        let mut seen = Seen::default();
        for chunk in chunks {
            framing.feed(chunk, &mut seen);
            assert!(framing.held_bytes() <= cap + NAME_CAP + FIELD_NAME_CAP);
        }
        seen.events
    }

    fn whole(name: &str, data: &str) -> (String, String, bool) {
        (name.to_owned(), data.to_owned(), false)
    }

    fn streamed(name: &str, data: &str) -> (String, String, bool) {
        (name.to_owned(), data.to_owned(), true)
    }

    #[test]
    fn fields_comments_and_multi_line_data() {
        let stream = b"\xEF\xBB\xBF: comment\nevent: a\nid: 7\ndata: one\ndata:two\nretry: 5\n\ndata\n\nevent: empty\n\n";
        assert_eq!(
            events(&[stream], 1024),
            vec![whole("a", "one\ntwo"), whole("", "")]
        );
        // Empty data lines join too; a name without a colon is a field with no value.
        assert_eq!(
            events(&[b"data: a\ndata:\ndata\ndata:  b\nevent\n\n"], 1024),
            vec![whole("", "a\n\n\n b")]
        );
        // Only a whole byte order mark opening the stream is skipped.
        assert_eq!(
            events(&[b"\xEF\xBBdata: a\n\ndata: b\n\n"], 1024),
            vec![whole("", "b")]
        );
        assert_eq!(events(&[b"\xEF\xBB\xBFdata: a\n\n"], 1024), vec![whole("", "a")]);
        assert_eq!(
            events(&[b"data: a\n\n\xEF\xBB\xBFdata: b\n\n"], 1024),
            vec![whole("", "a")]
        );
    }

    #[test]
    fn every_line_end_is_read_even_when_split() {
        let stream = b"data: a\r\n\r\ndata: b\r\rdata: c\n\n";
        let expected = vec![whole("", "a"), whole("", "b"), whole("", "c")];
        for cut in 0..=stream.len() {
            let (first, second) = stream.split_at(cut);
            assert_eq!(events(&[first, second], 1024), expected, "cut at {cut}");
        }
    }

    #[test]
    fn an_unended_event_is_not_delivered() {
        assert_eq!(events(&[b"data: a\n"], 1024), vec![]);
        assert_eq!(events(&[b"data: abcdefgh\n"], 4), vec![]);
    }

    #[test]
    fn an_event_over_the_cap_is_delivered_as_it_streams() {
        // The data counts, its lines joined: `12345` is 5 bytes, `1234\n5` is 6.
        assert_eq!(events(&[b"data: 12345\n\n"], 5), vec![whole("", "12345")]);
        assert_eq!(events(&[b"data: 123456\n\n"], 5), vec![streamed("", "123456")]);
        assert_eq!(
            events(&[b"event: e\ndata: 1234\ndata: 5\n\ndata: 6\n\n"], 5),
            vec![streamed("e", "1234\n5"), whole("", "6")]
        );
        // Lines that add nothing to the event are skipped, whatever their length.
        let long_comment = format!(":{}\nid: {}\ndata: a\n\n", "c".repeat(5000), "7".repeat(5000));
        assert_eq!(events(&[long_comment.as_bytes()], 5), vec![whole("", "a")]);
        // An event name past its cap names nothing.
        let long_name = format!("event: {}\ndata: a\n\n", "n".repeat(NAME_CAP + 1));
        assert_eq!(events(&[long_name.as_bytes()], 5), vec![whole("", "a")]);
    }

    #[test]
    fn a_large_event_is_never_held_whole() {
        let mut framing = Framing::new(64);
        let mut seen = Seen::default();
        framing.feed(b"event: big\ndata: ", &mut seen);
        for _ in 0..10_000 {
            framing.feed(&[b'x'; 100], &mut seen);
            assert!(framing.held_bytes() <= 64 + 3);
        }
        framing.feed(b"\n\n", &mut seen);
        assert_eq!(seen.events, vec![streamed("big", &"x".repeat(1_000_000))]);
    }

    #[test]
    fn where_a_stream_is_cut_never_changes_what_is_read() {
        let stream: &[u8] = b"\xEF\xBB\xBFevent: a\ndata: 12345\n: a long comment line\nid: 1234567890\n\ndata: 123\r\ndata: 4\r\n\r\ndata\rdata:x\r\rdataa: y\nevent\ndata:  z\n\n";
        for cap in 0..=stream.len() {
            let whole = events(&[stream], cap);
            assert_eq!(whole.len(), 4, "cap {cap}");
            let bytes: Vec<&[u8]> = stream.chunks(1).collect();
            assert_eq!(events(&bytes, cap), whole, "cap {cap}, byte by byte");
            for cut in 0..=stream.len() {
                let (first, second) = stream.split_at(cut);
                assert_eq!(events(&[first, second], cap), whole, "cap {cap}, cut at {cut}");
            }
        }
        assert_eq!(
            events(&[stream], 1024),
            vec![
                whole("a", "12345"),
                whole("", "123\n4"),
                whole("", "\nx"),
                whole("", " z")
            ]
        );
    }
}
