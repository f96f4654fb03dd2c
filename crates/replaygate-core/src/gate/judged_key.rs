//! The secret the hashes of incremental judging are keyed with
//! (docs/incremental-judging.md#identity): every hash over text a client chose that decides
//! whether text is passed over as judged (a kept input's text, its lead, its item ids, what else
//! the gate read of its body, what the ledger said of it) is keyed BLAKE3 under one
//! [`JudgeKey`], cut to 128 bits. Without the key no one can make two texts that hash alike.
//!
//! The core draws no key (it does no I/O): the caller draws one at start and passes it in.

/// A secret of 32 bytes that the hashes finding a kept input are keyed with. The proxy draws
/// one per process, from the system's random source, and it never leaves the process; tests
/// make one from fixed bytes. `Debug` shows none of it.
#[derive(Clone, PartialEq, Eq)]
pub struct JudgeKey([u8; 32]);

impl std::fmt::Debug for JudgeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JudgeKey(..)")
    }
}

impl JudgeKey {
    /// The key of these 32 bytes: random ones in a process, fixed ones in a test.
    pub fn from_bytes(bytes: [u8; 32]) -> JudgeKey {
        JudgeKey(bytes)
    }

    /// A keyed hasher, to feed and finish (at several ends of one text, with [`digest`]).
    pub(crate) fn hasher(&self) -> blake3::Hasher {
        blake3::Hasher::new_keyed(&self.0)
    }

    /// The keyed 128-bit digest of `text`.
    pub(crate) fn digest(&self, text: &[u8]) -> u128 {
        cut(blake3::keyed_hash(&self.0, text))
    }

    /// The keyed 128-bit digest of `parts`, each framed by its length (or its absence): what
    /// a caller names its context by ([`InputProbe::of`](super::InputProbe::of)).
    pub fn context(&self, parts: &[Option<&[u8]>]) -> u128 {
        let mut hasher = self.hasher();
        for part in parts {
            match part {
                Some(bytes) => {
                    hasher.update(&[1]);
                    hasher.update(&(bytes.len() as u64).to_le_bytes());
                    hasher.update(bytes);
                }
                None => {
                    hasher.update(&[0]);
                }
            }
        }
        digest(&hasher)
    }
}

/// What `hasher` was fed so far, as a 128-bit digest (it can be fed on after).
pub(crate) fn digest(hasher: &blake3::Hasher) -> u128 {
    cut(hasher.finalize())
}

/// The first 128 bits of a digest.
fn cut(hash: blake3::Hash) -> u128 {
    let mut first = [0; 16];
    first.copy_from_slice(&hash.as_bytes()[..16]);
    u128::from_le_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_not_in_its_debug_output() {
        let bytes = [0xa5; 32];
        let shown = format!(
            "{:?} {:#?}",
            JudgeKey::from_bytes(bytes),
            JudgeKey::from_bytes(bytes)
        );
        assert_eq!(shown, "JudgeKey(..) JudgeKey(..)");
        for byte in ["a5", "A5", "165"] {
            assert!(!shown.contains(byte), "{shown}");
        }
    }

    #[test]
    fn the_same_text_under_two_keys_has_two_digests() {
        let (one, other) = (JudgeKey::from_bytes([1; 32]), JudgeKey::from_bytes([2; 32]));
        assert_eq!(one.digest(b"text"), one.digest(b"text"));
        assert_ne!(one.digest(b"text"), other.digest(b"text"));
        assert_ne!(one.digest(b"text"), one.digest(b"texT"));
        let parts: &[Option<&[u8]>] = &[Some(b"team"), None];
        assert_ne!(one.context(parts), other.context(parts));
        // Parts are framed: moving a byte from one to the next, or a part for its absence, is
        // another context.
        assert_ne!(
            one.context(&[Some(b"ab"), Some(b"c")]),
            one.context(&[Some(b"a"), Some(b"bc")])
        );
        assert_ne!(one.context(&[None]), one.context(&[Some(b"")]));
    }

    #[test]
    fn a_text_fed_in_pieces_has_the_digest_of_the_whole() {
        let key = JudgeKey::from_bytes([3; 32]);
        let text: Vec<u8> = (0..200_000u32).map(|n| (n % 251) as u8).collect();
        let mut hasher = key.hasher();
        hasher.update(&text[..5_000]);
        let early = digest(&hasher);
        hasher.update(&text[5_000..]);
        assert_eq!(early, key.digest(&text[..5_000]));
        assert_eq!(digest(&hasher), key.digest(&text));
    }
}
