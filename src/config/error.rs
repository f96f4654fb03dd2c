//! Configuration errors, each pointing at the file and the place in it.

use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {}: {error}", path.display())]
    Read {
        /// The file that was asked for.
        path: PathBuf,
        /// The I/O failure.
        error: io::Error,
    },
    /// The text is not TOML, or does not have the expected shape: an
    /// unknown key, a missing key, a value of the wrong type or range.
    /// The TOML error renders its own line and column.
    #[error("{}{error}", file_prefix(path))]
    Parse {
        /// The file the text came from, if any.
        path: Option<PathBuf>,
        /// The parser's error.
        error: toml::de::Error,
    },
    /// The text has the right shape, but a value is unusable or refers to
    /// something that is not defined.
    #[error(
        "{}invalid configuration at line {line}, column {column}: {message}",
        file_prefix(path)
    )]
    Invalid {
        /// The file the text came from, if any.
        path: Option<PathBuf>,
        /// 1-based line of the offending value.
        line: usize,
        /// 1-based column (in characters) of the offending value.
        column: usize,
        /// What is wrong with it.
        message: String,
    },
}

impl ConfigError {
    /// Locates a semantic error in the text it was found in.
    pub(super) fn invalid(text: &str, invalid: Invalid) -> Self {
        let (line, column) = line_column(text, invalid.span.start);
        ConfigError::Invalid {
            path: None,
            line,
            column,
            message: invalid.message,
        }
    }

    /// Names the file the configuration text came from.
    pub(super) fn in_file(mut self, file: &Path) -> Self {
        match &mut self {
            ConfigError::Parse { path, .. } | ConfigError::Invalid { path, .. } => {
                *path = Some(file.to_owned());
            }
            ConfigError::Read { .. } => {}
        }
        self
    }
}

/// A semantic error found after parsing, at a byte range of the text.
pub(super) struct Invalid {
    pub(super) span: Range<usize>,
    pub(super) message: String,
}

impl Invalid {
    pub(super) fn new(span: Range<usize>, message: impl Into<String>) -> Self {
        Self {
            span,
            message: message.into(),
        }
    }
}

fn file_prefix(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|path| format!("{}: ", path.display()))
        .unwrap_or_default()
}

/// The 1-based line and character column of a byte offset, counted the way
/// the TOML parser counts them in its own errors.
pub(super) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let line = before.matches('\n').count() + 1;
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_counts_lines_and_characters() {
        let text = "a = 1\nbé = \"x\"\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 4), (1, 5));
        assert_eq!(line_column(text, 6), (2, 1));
        // "bé = " is 6 bytes but 5 characters.
        assert_eq!(line_column(text, 12), (2, 6));
        assert_eq!(line_column(text, 999), (3, 1));
    }

    #[test]
    fn line_column_tolerates_an_offset_inside_a_character() {
        assert_eq!(line_column("é", 1), (1, 1));
    }
}
