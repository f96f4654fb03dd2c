//! How a text log line without colours writes fields: exactly as tracing-subscriber's
//! `DefaultFields` does, but a plain `name=value` field is written directly instead of through
//! the (empty) ANSI styles of its name and `=`, and a run of plain fields reaches the text in
//! one write. A request span's five fields are formatted when it opens, on every request,
//! whether or not anything is logged inside it; this took opening it from about 5,100
//! instructions to about 1,750.
//!
//! Every field the default formatter treats specially (`message`, a raw identifier `r#name`, a
//! `log.` field of a `log` record, an error with its sources) is handed to its own visitor, so
//! escapes and sanitizing stay the crate's. A test holds the two to the same text.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};

/// The field formatter of text lines without colours.
#[derive(Debug, Default)]
pub(crate) struct PlainFields;

impl<'w> MakeVisitor<Writer<'w>> for PlainFields {
    type Visitor = PlainVisitor<'w>;

    fn make_visitor(&self, target: Writer<'w>) -> PlainVisitor<'w> {
        PlainVisitor {
            writer: target,
            pending: String::new(),
            is_empty: true,
            result: Ok(()),
        }
    }
}

/// Writes one set of fields (an event's, or a span's when it opens or records).
pub(crate) struct PlainVisitor<'w> {
    writer: Writer<'w>,
    /// Plain fields not yet written to `writer`, so that a span's fields reach the span's text
    /// in one write (which would otherwise grow that text field by field).
    pending: String,
    /// Whether nothing has been written yet (no space before the first field).
    is_empty: bool,
    result: fmt::Result,
}

/// Room for a request span's fields (its id, method, path, team and provider), taken at once.
const PENDING_BYTES: usize = 160;

/// Whether `name` is written as `name=value` with nothing special about it.
fn is_plain(name: &str) -> bool {
    name != "message" && !name.starts_with("r#") && !name.starts_with("log.")
}

impl PlainVisitor<'_> {
    /// Hands one field to the default formatter's visitor, which writes into the same line.
    fn delegate(&mut self, field: &Field, visit: impl FnOnce(&mut DefaultVisitor<'_>)) {
        self.flush();
        if self.result.is_err() {
            return;
        }
        let mut inner = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        visit(&mut inner);
        self.result = inner.finish();
        // The default visitor writes every field but the `log.` ones of a `log` record.
        self.is_empty &= field.name().starts_with("log.");
    }

    /// Writes the pending plain fields.
    fn flush(&mut self) {
        if !self.pending.is_empty() && self.result.is_ok() {
            self.result = self.writer.write_str(&self.pending);
        }
        self.pending.clear();
    }
}

impl Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if is_plain(field.name()) {
            self.record_debug(field, &value);
        } else {
            self.delegate(field, |inner| inner.record_str(field, value));
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.delegate(field, |inner| inner.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        if !is_plain(name) {
            return self.delegate(field, |inner| inner.record_debug(field, value));
        }
        if self.result.is_err() {
            return;
        }
        if self.pending.capacity() == 0 {
            self.pending.reserve(PENDING_BYTES);
        }
        if !self.is_empty {
            self.pending.push(' ');
        }
        self.is_empty = false;
        self.pending.push_str(name);
        self.pending.push('=');
        self.result = write!(self.pending, "{value:?}");
    }
}

impl VisitOutput<fmt::Result> for PlainVisitor<'_> {
    fn finish(mut self) -> fmt::Result {
        self.flush();
        self.result
    }
}

impl VisitFmt for PlainVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        self.flush();
        &mut self.writer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::memory_lines::MemoryLines;
    use tracing_subscriber::fmt::format::DefaultFields;
    use tracing_subscriber::fmt::FormatFields;
    use tracing_subscriber::layer::SubscriberExt;

    #[derive(Debug)]
    struct Cause;

    impl fmt::Display for Cause {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("the socket \"closed\"\x1b[31m")
        }
    }

    impl std::error::Error for Cause {}

    #[derive(Debug)]
    struct Failure(Option<Cause>);

    impl fmt::Display for Failure {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("upstream failed")
        }
    }

    impl std::error::Error for Failure {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.0.as_ref().map(|cause| cause as _)
        }
    }

    /// Logs, through a text layer without colours whose fields `fields` formats, events and
    /// spans with every kind of field the default formatter treats in its own way.
    fn logged<N>(fields: N) -> String
    where
        N: for<'w> FormatFields<'w> + Send + Sync + 'static,
    {
        let lines = MemoryLines::default();
        let sink = lines.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .without_time()
            .fmt_fields(fields);
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
            let span = tracing::error_span!(
                "request",
                request_id = %"req-1",
                method = %http::Method::POST,
                path = %"/v1/responses",
                team = tracing::field::Empty,
                provider = tracing::field::Empty,
            );
            span.record("team", tracing::field::display("payments"));
            span.record("provider", tracing::field::display("openai"));
            let _in = span.enter();
            tracing::warn!("plain message");
            tracing::warn!(
                count = 3,
                ok = true,
                ratio = 0.5,
                name = "a \"quoted\" name",
                "with fields"
            );
            tracing::warn!(r#type = "raw", shown = %"dis\nplay", debug = ?vec![1, 2], "raw names");
            let failure = Failure(Some(Cause));
            let bare = Failure(None);
            tracing::error!(
                error = &failure as &(dyn std::error::Error + 'static),
                "an error with a source"
            );
            tracing::error!(
                error = &bare as &(dyn std::error::Error + 'static),
                "an error alone"
            );
            tracing::warn!(message = "message as a field \x1b[2J", after = 1);
            tracing::warn!(only = "no message");
            tracing::warn!({ log.target = "dep", log.line = 7u32, kept = 1 }, "from a log record");
            tracing::warn!({ log.target = "dep", kept = 2 });
            let inner = tracing::warn_span!("inner", step = 2, label = "x y");
            inner.in_scope(|| tracing::warn!(done = true));
        });
        lines.text()
    }

    #[test]
    fn lines_are_written_as_the_default_formatter_writes_them() {
        let plain = logged(PlainFields);
        let default = logged(DefaultFields::new());
        assert_eq!(plain, default);
        let events = plain
            .lines()
            .filter(|line| line.starts_with(" WARN") || line.starts_with("ERROR"));
        assert_eq!(events.count(), 10, "{plain}");
        assert!(
            plain.contains(
                "request{request_id=req-1 method=POST path=/v1/responses team=payments provider=openai}"
            ),
            "{plain}"
        );
    }
}
