//! The reader's error: what was wrong, where, and of which kind.

use std::fmt;

/// What kind of failure an [`Error`] is, as serde_json classifies its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// The text is not JSON.
    Syntax,
    /// The text ends before the value does.
    Eof,
    /// Valid JSON that the value read does not accept (a wrong type, a missing member).
    Data,
}

/// A failure to read a JSON text, with the 1-based line and column where it was met (0 and 0
/// until a position is known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    category: Category,
    message: String,
    line: usize,
    column: usize,
}

impl Error {
    /// An error met at byte `at` of `text`.
    pub(crate) fn at(category: Category, message: impl Into<String>, text: &str, at: usize) -> Error {
        let mut error = Error {
            category,
            message: message.into(),
            line: 0,
            column: 0,
        };
        error.place(text, at);
        error
    }

    /// Gives the error the position of byte `at` of `text`, unless it has one.
    pub(crate) fn place(&mut self, text: &str, at: usize) {
        if self.line != 0 {
            return;
        }
        let before = &text.as_bytes()[..at.min(text.len())];
        let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        self.line = 1 + before.iter().filter(|&&b| b == b'\n').count();
        self.column = before.len() - line_start;
    }

    /// The kind of failure.
    pub fn category(&self) -> Category {
        self.category
    }

    /// The line (1-based; 0 when unknown).
    pub fn line(&self) -> usize {
        self.line
    }

    /// The column: bytes into the line (0 when unknown).
    pub fn column(&self) -> usize {
        self.column
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            f.write_str(&self.message)
        } else {
            write!(f, "{} at line {} column {}", self.message, self.line, self.column)
        }
    }
}

impl std::error::Error for Error {}

impl serde::de::Error for Error {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Error {
            category: Category::Data,
            message: message.to_string(),
            line: 0,
            column: 0,
        }
    }
}
