//! A fixed set of strings that a text is compared with in a few word compares (no call to
//! `memcmp` per candidate when the strings are short): how item profiles test `enum` values
//! and part types.

/// The strings of a set, each up to [`WORD_BYTES`] bytes kept as its length and two words.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TextSet {
    /// The strings of up to [`WORD_BYTES`] bytes, with their positions in the set.
    short: Vec<(Words, usize)>,
    /// The longer strings, compared as text, with their positions.
    long: Vec<(String, usize)>,
}

/// The longest string kept as words.
const WORD_BYTES: usize = 16;

/// A string of at most [`WORD_BYTES`] bytes: its length and its bytes as two words that
/// overlap when it is shorter than sixteen bytes (so two strings of one length are equal
/// exactly when their words are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Words {
    len: usize,
    head: u64,
    tail: u64,
}

impl Words {
    #[inline(always)]
    fn of(bytes: &[u8]) -> Option<Words> {
        let len = bytes.len();
        let (head, tail) = match len {
            8..=WORD_BYTES => (word8(&bytes[..8]), word8(&bytes[len - 8..])),
            4..=7 => (word4(&bytes[..4]), word4(&bytes[len - 4..])),
            0..=3 => (bytes.iter().fold(0, |word, &b| word << 8 | u64::from(b)), 0),
            _ => return None,
        };
        Some(Words { len, head, tail })
    }
}

#[inline]
fn word8(bytes: &[u8]) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

#[inline]
fn word4(bytes: &[u8]) -> u64 {
    let mut word = [0; 4];
    word.copy_from_slice(bytes);
    u64::from(u32::from_le_bytes(word))
}

impl TextSet {
    /// The empty set.
    pub(crate) const fn new() -> TextSet {
        TextSet {
            short: Vec::new(),
            long: Vec::new(),
        }
    }

    /// The set of `values`.
    pub(crate) fn of<'v>(values: impl IntoIterator<Item = &'v str>) -> TextSet {
        let mut set = TextSet::default();
        for (at, value) in values.into_iter().enumerate() {
            match Words::of(value.as_bytes()) {
                Some(words) => set.short.push((words, at)),
                None => set.long.push((value.to_owned(), at)),
            }
        }
        set
    }

    /// The position of `text` among the values the set was made of, if it is one of them.
    #[inline(always)]
    pub(crate) fn position(&self, text: &str) -> Option<usize> {
        match Words::of(text.as_bytes()) {
            Some(words) => self.short.iter().find(|(w, _)| *w == words).map(|(_, at)| *at),
            None => self.long.iter().find(|(v, _)| v == text).map(|(_, at)| *at),
        }
    }

    /// Whether `text` is one of the set.
    #[inline(always)]
    pub(crate) fn contains(&self, text: &str) -> bool {
        self.position(text).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_is_in_the_set_exactly_when_it_equals_a_member() {
        let values = [
            "",
            "a",
            "ab",
            "abc",
            "user",
            "system",
            "abcdefg",
            "completed",
            "in_progress",
            "exactly_16_bytes",
            "longer than sixteen bytes",
        ];
        let set = TextSet::of(values);
        for value in values {
            assert!(set.contains(value), "{value:?}");
        }
        // Same lengths, other bytes: at the start, in the middle (where the words overlap),
        // at the end; and neighbours in length.
        for other in [
            "b",
            "ac",
            "abd",
            "usex",
            "systen",
            "abcdefh",
            "compleTed",
            "in_progresS",
            "exactly_16_bytez",
            "exactly_16_bytes!",
            "longer than sixteen byteS",
            "in_progres",
            "\0",
            "\0a",
        ] {
            assert!(!set.contains(other), "{other:?}");
        }
        assert_eq!(set.position("longer than sixteen bytes"), Some(10));
        assert_eq!(set.position("completed"), Some(7));
        assert_eq!(TextSet::of(["x"]).position("x"), Some(0));
    }

    #[test]
    fn every_short_string_is_told_from_every_other_of_its_length() {
        // All strings of one to three bytes over a small alphabet that includes zero bytes.
        let alphabet = [0u8, 1, b'a', 0xff];
        let mut all: Vec<Vec<u8>> = vec![Vec::new()];
        for len in 1..=3 {
            let shorter: Vec<Vec<u8>> = all.iter().filter(|s| s.len() == len - 1).cloned().collect();
            for s in shorter {
                for &b in &alphabet {
                    let mut longer = s.clone();
                    longer.push(b);
                    all.push(longer);
                }
            }
        }
        for a in &all {
            for b in &all {
                assert_eq!(Words::of(a) == Words::of(b), a == b, "{a:?} {b:?}");
            }
        }
    }
}
