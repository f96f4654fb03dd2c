//! Client keys of teams (contract §7).
//!
//! `replaygate keys new` makes a key: `rg-` and 64 lowercase hex digits (32 bytes from the
//! operating system's random source). `proxy.toml` lists only the key's digest,
//! `sha256:` and the 64 hex digits of the SHA-256 of the whole key text (`rg-` included), and the
//! proxy finds a request's team by the digest of the key it carries. So neither the file nor the
//! process ever holds a key, and a digest in the file cannot be used as a key.

use sha2::{Digest, Sha256};

/// What every key made by [`new_key`] starts with.
pub const KEY_PREFIX: &str = "rg-";

/// What a key digest in `proxy.toml` starts with.
pub const DIGEST_PREFIX: &str = "sha256:";

/// Random bytes in a new key.
const KEY_RANDOM_BYTES: usize = 32;

/// The SHA-256 of a client key, as the proxy compares it with the configured digests.
pub fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Reads a digest as written in `keys`: `sha256:` followed by exactly 64 hex digits, in either
/// case. `None` for anything else.
pub fn parse_digest(text: &str) -> Option<[u8; 32]> {
    let digits = text.strip_prefix(DIGEST_PREFIX)?;
    let mut bytes = [0; 32];
    hex::decode_to_slice(digits, &mut bytes).ok()?;
    Some(bytes)
}

/// A digest as written in `keys`: `sha256:` and 64 lowercase hex digits.
pub fn format_digest(digest: &[u8; 32]) -> String {
    format!("{DIGEST_PREFIX}{}", hex::encode(digest))
}

/// A new client key: `rg-` and 32 bytes from the operating system's random source, in
/// lowercase hex (67 characters in all). Fails only when that source cannot be read.
pub fn new_key() -> std::io::Result<String> {
    let mut random = [0; KEY_RANDOM_BYTES];
    getrandom::fill(&mut random).map_err(std::io::Error::other)?;
    Ok(format!("{KEY_PREFIX}{}", hex::encode(random)))
}

/// Whether `name` may name a team: 1 to 64 ASCII letters, digits, `_` and `-`, not starting
/// with `-` (team names appear in logs, metrics and the audit log, where `-` stands for
/// "no team").
pub fn is_valid_team_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_the_sha256_of_the_whole_key() {
        // SHA-256("test"), a published test vector.
        assert_eq!(
            format_digest(&digest("test")),
            "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        );
        assert_ne!(digest("rg-abc"), digest("abc"));
    }

    #[test]
    fn parse_digest_reads_what_format_digest_writes_in_either_case() {
        let bytes = digest("rg-key");
        let text = format_digest(&bytes);
        assert_eq!(parse_digest(&text), Some(bytes));
        let upper = format!("sha256:{}", text["sha256:".len()..].to_uppercase());
        assert_eq!(parse_digest(&upper), Some(bytes));
    }

    #[test]
    fn parse_digest_refuses_anything_else() {
        let hex64 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        assert!(parse_digest(hex64).is_none(), "the prefix is required");
        assert!(parse_digest(&format!("SHA256:{hex64}")).is_none());
        assert!(parse_digest(&format!("sha256:{}", &hex64[..63])).is_none());
        assert!(parse_digest(&format!("sha256:{hex64}0")).is_none());
        assert!(parse_digest(&format!("sha256:{hex64}00")).is_none());
        assert!(parse_digest(&format!("sha256:{}g", &hex64[..63])).is_none());
        assert!(parse_digest(&format!("sha256: {}", &hex64[..63])).is_none());
        assert!(parse_digest("sha256:").is_none());
        assert!(parse_digest("").is_none());
    }

    #[test]
    fn new_keys_are_prefixed_hex_and_differ() {
        let a = new_key().unwrap();
        let b = new_key().unwrap();
        assert_ne!(a, b);
        for key in [&a, &b] {
            let digits = key.strip_prefix(KEY_PREFIX).unwrap();
            assert_eq!(digits.len(), 2 * KEY_RANDOM_BYTES);
            assert!(digits.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
        }
    }

    #[test]
    fn team_names_are_plain_words() {
        for good in ["payments", "team_1", "a-b", "A", "_x", &"x".repeat(64)] {
            assert!(is_valid_team_name(good), "{good}");
        }
        for bad in ["", "-", "-x", "a b", "a.b", "a/b", "é", "a:b", &"x".repeat(65)] {
            assert!(!is_valid_team_name(bad), "{bad}");
        }
    }
}
