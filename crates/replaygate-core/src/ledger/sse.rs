//! Server-sent event framing, read incrementally (the WHATWG `text/event-stream` rules): lines
//! end with `\r\n`, `\n` or `\r`, even when split across chunks; `:` starts a comment; `data:`
//! lines join with `\n`; a blank line ends an event; `id:`, `retry:` and unknown fields are
//! ignored; a leading byte order mark is skipped; an event not ended by a blank line is never
//! delivered.
//!
//! The reader holds at most `cap` bytes of the event being read (its partial line, its data
//! and its `event` name together). Every line, with the pending event's data and name, must fit
//! in `cap` whether it arrives whole or in pieces, so where a stream is cut into chunks never
//! changes what is read. When an event would pass that, [`Framing::feed`] fails and the reader
//! is spent.

/// The pending event would hold more than the reader's cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overflow;

/// An incremental event reader.
#[derive(Debug)]
pub(crate) struct Framing {
    cap: usize,
    /// The start of a line whose end has not arrived.
    line: Vec<u8>,
    /// The `data` lines of the pending event, each followed by `\n`.
    data: Vec<u8>,
    /// The pending event's `event` field.
    event: Vec<u8>,
    /// The last chunk ended with `\r`: a `\n` opening the next one ends no line.
    after_cr: bool,
    /// No line has ended yet (the byte order mark may start this one).
    first_line: bool,
}

impl Framing {
    /// A reader holding at most `cap` bytes of a pending event.
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap,
            line: Vec::new(),
            data: Vec::new(),
            event: Vec::new(),
            after_cr: false,
            first_line: true,
        }
    }

    /// Bytes of the pending event held now.
    pub(crate) fn held_bytes(&self) -> usize {
        self.line.len() + self.data.len() + self.event.len()
    }

    /// Reads `chunk`, calling `on_event(event_name, data)` for each event it completes (the
    /// data without its final `\n`). Each byte is looked at a bounded number of times.
    pub(crate) fn feed(
        &mut self,
        chunk: &[u8],
        on_event: &mut impl FnMut(&[u8], &[u8]),
    ) -> Result<(), Overflow> {
        let mut rest = chunk;
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
        }
        while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            if self.line.is_empty() {
                // Held in pieces, the line would count against the cap: so it does whole.
                if self.held_bytes() + end > self.cap {
                    return Err(self.overflow());
                }
                self.end_line(&rest[..end], on_event)?;
            } else {
                self.hold_line(&rest[..end])?;
                let line = std::mem::take(&mut self.line);
                let ended = self.end_line(&line, on_event);
                self.line = line;
                self.line.clear();
                ended?;
            }
            let mut next = end + 1;
            if rest[end] == b'\r' {
                match rest.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            rest = &rest[next..];
        }
        self.hold_line(rest)
    }

    /// Keeps the start of a line whose end has not arrived.
    fn hold_line(&mut self, bytes: &[u8]) -> Result<(), Overflow> {
        if bytes.is_empty() {
            return Ok(());
        }
        if self.held_bytes() + bytes.len() > self.cap {
            return Err(self.overflow());
        }
        push_capped(&mut self.line, bytes, self.cap);
        Ok(())
    }

    /// Handles one whole line (without its end).
    fn end_line(&mut self, mut line: &[u8], on_event: &mut impl FnMut(&[u8], &[u8])) -> Result<(), Overflow> {
        if self.first_line {
            self.first_line = false;
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        if line.is_empty() {
            self.dispatch(on_event);
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match name {
            b"data" => {
                if self.data.len() + self.event.len() + value.len() + 1 > self.cap {
                    return Err(self.overflow());
                }
                push_capped(&mut self.data, value, self.cap);
                push_capped(&mut self.data, b"\n", self.cap);
            }
            b"event" => {
                if self.data.len() + value.len() > self.cap {
                    return Err(self.overflow());
                }
                self.event.clear();
                push_capped(&mut self.event, value, self.cap);
            }
            _ => {}
        }
        Ok(())
    }

    /// Ends the pending event: delivers it when it has data, then forgets it.
    fn dispatch(&mut self, on_event: &mut impl FnMut(&[u8], &[u8])) {
        if let Some(data) = self.data.strip_suffix(b"\n") {
            on_event(&self.event, data);
        }
        self.data.clear();
        self.event.clear();
    }

    /// Drops everything held (and its memory) and reports the overflow.
    fn overflow(&mut self) -> Overflow {
        self.line = Vec::new();
        self.data = Vec::new();
        self.event = Vec::new();
        Overflow
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

    /// The events of `stream` fed in the given chunks, as `(name, data)` strings.
    fn events(chunks: &[&[u8]], cap: usize) -> Result<Vec<(String, String)>, Overflow> {
        let mut framing = Framing::new(cap);
        let mut out = Vec::new();
        for chunk in chunks {
            framing.feed(chunk, &mut |name: &[u8], data: &[u8]| {
                out.push((
                    String::from_utf8_lossy(name).into_owned(),
                    String::from_utf8_lossy(data).into_owned(),
                ))
            })?;
        }
        Ok(out)
    }

    fn pair(name: &str, data: &str) -> (String, String) {
        (name.to_owned(), data.to_owned())
    }

    #[test]
    fn fields_comments_and_multi_line_data() {
        let stream = b"\xEF\xBB\xBF: comment\nevent: a\nid: 7\ndata: one\ndata:two\nretry: 5\n\ndata\n\nevent: empty\n\n";
        assert_eq!(
            events(&[stream], 1024).unwrap(),
            vec![pair("a", "one\ntwo"), pair("", "")]
        );
    }

    #[test]
    fn every_line_end_is_read_even_when_split() {
        let stream = b"data: a\r\n\r\ndata: b\r\rdata: c\n\n";
        let expected = vec![pair("", "a"), pair("", "b"), pair("", "c")];
        for cut in 0..=stream.len() {
            let (first, second) = stream.split_at(cut);
            assert_eq!(events(&[first, second], 1024).unwrap(), expected, "cut at {cut}");
        }
    }

    #[test]
    fn an_unended_event_is_not_delivered() {
        assert_eq!(events(&[b"data: a\n"], 1024).unwrap(), vec![]);
    }

    #[test]
    fn a_pending_event_over_the_cap_overflows() {
        // A line counts whole: `data: 12345` is 11 bytes.
        assert_eq!(
            events(&[b"data: 12345\n\n"], 11).unwrap(),
            vec![pair("", "12345")]
        );
        assert_eq!(events(&[b"data: 123456\n\n"], 11), Err(Overflow));
        assert_eq!(events(&[b"data: 1234\ndata: 5\n\n"], 11), Err(Overflow));
        assert_eq!(events(&[b"data: 1", b"23456789"], 11), Err(Overflow));
        // Lines that add nothing to the event count too: held in pieces, they take memory.
        assert_eq!(events(&[b": a comment of 24 bytes\n\n"], 11), Err(Overflow));
    }

    #[test]
    fn where_a_stream_is_cut_never_changes_what_is_read() {
        let stream: &[u8] =
            b"event: a\ndata: 12345\n: a long comment line\nid: 1234567890\n\ndata: 123\r\ndata: 4\r\n\r\n";
        for cap in 0..=stream.len() {
            let whole = events(&[stream], cap);
            let bytes: Vec<&[u8]> = stream.chunks(1).collect();
            assert_eq!(events(&bytes, cap), whole, "cap {cap}, byte by byte");
            for cut in 0..=stream.len() {
                let (first, second) = stream.split_at(cut);
                assert_eq!(events(&[first, second], cap), whole, "cap {cap}, cut at {cut}");
            }
        }
    }
}
