//! Client keys of teams (docs/teams.md#teams-and-policy).
//!
//! `replaygate keys new` makes a key: `rg-` and 64 lowercase hex digits (32 bytes from the
//! operating system's random source). `proxy.toml` lists only the key's digest,
//! `sha256:` and the 64 hex digits of the SHA-256 of the whole key text (`rg-` included), and the
//! proxy finds a request's team by the digest of the key it carries. So neither the file nor the
//! process ever holds a key, and a digest in the file cannot be used as a key.
//!
//! A key may also have an id, which names it in the logs (else the first 8 hex digits of its
//! digest do), and an expiry, from which on it is refused.

use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

/// What every key made by [`new_key`] starts with.
pub(crate) const KEY_PREFIX: &str = "rg-";

/// What a key digest in `proxy.toml` starts with.
pub(crate) const DIGEST_PREFIX: &str = "sha256:";

/// Random bytes in a new key.
const KEY_RANDOM_BYTES: usize = 32;

/// The SHA-256 of a client key, as the proxy compares it with the configured digests.
pub fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Reads a digest as written in `keys`: `sha256:` followed by exactly 64 hex digits, in either
/// case. `None` for anything else.
pub(crate) fn parse_digest(text: &str) -> Option<[u8; 32]> {
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
pub(crate) fn new_key() -> std::io::Result<String> {
    let mut random = [0; KEY_RANDOM_BYTES];
    getrandom::fill(&mut random).map_err(std::io::Error::other)?;
    Ok(format!("{KEY_PREFIX}{}", hex::encode(random)))
}

/// Whether `name` may name a team: 1 to 64 ASCII letters, digits, `_` and `-`, not starting
/// with `-` (team names appear in logs, metrics and the audit log, where `-` stands for
/// "no team").
pub(crate) fn is_valid_team_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

/// The longest key id.
pub(crate) const MAX_KEY_ID_LEN: usize = 64;

/// Whether `id` may name a key: 1 to 64 ASCII letters, digits, `_`, `-` and `.` (key ids appear
/// in the access log, the audit log and request spans).
pub(crate) fn is_valid_key_id(id: &str) -> bool {
    (1..=MAX_KEY_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// What the logs call a key without an id: the first 8 hex digits of its digest (which say
/// nothing usable about the key itself).
pub(crate) fn short_id(digest: &[u8; 32]) -> String {
    hex::encode(&digest[..4])
}

/// Reads an expiry as written in `keys` or given to `keys new --expires`: an RFC 3339 date and
/// time with its offset, `2027-03-01T00:00:00Z` or `2027-03-01T01:00:00+01:00`, seconds
/// fractions allowed. `None` for anything else (a date alone, no offset, a day that does not
/// exist, a year before 1970).
pub fn parse_expiry(text: &str) -> Option<SystemTime> {
    // RFC 3339 allows a lowercase `t` and `z`; the parser below wants them uppercase.
    let text = text.to_ascii_uppercase();
    let (local, offset_east) = match text.strip_suffix('Z') {
        Some(local) => (local, 0),
        None => {
            let split = text
                .len()
                .checked_sub(6)
                .filter(|&at| text.is_char_boundary(at))?;
            let (local, zone) = text.split_at(split);
            (local, utc_offset(zone)?)
        }
    };
    // The local part alone: the offset is applied below, not by the parser.
    if local.ends_with(['Z', '+', '-']) || local.contains('+') {
        return None;
    }
    let local = humantime::parse_rfc3339(&format!("{local}Z")).ok()?;
    if offset_east >= 0 {
        local.checked_sub(Duration::from_secs(offset_east.unsigned_abs()))
    } else {
        local.checked_add(Duration::from_secs(offset_east.unsigned_abs()))
    }
}

/// Seconds east of UTC of an RFC 3339 offset, `+HH:MM` or `-HH:MM`.
fn utc_offset(zone: &str) -> Option<i64> {
    let bytes = zone.as_bytes();
    let sign = match bytes.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let digits = |at: usize| -> Option<i64> {
        let pair = zone.get(at..at + 2)?;
        pair.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| pair.parse().ok())
            .flatten()
    };
    let (hours, minutes) = (digits(1)?, digits(4)?);
    (bytes.get(3) == Some(&b':') && hours <= 23 && minutes <= 59)
        .then_some(sign * (hours * 3600 + minutes * 60))
}

/// An expiry as `keys` shows it: RFC 3339 in UTC, with a fraction of a second only when it
/// has one.
pub(crate) fn format_expiry(expires: SystemTime) -> String {
    let fraction = expires
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    if fraction == 0 {
        humantime::format_rfc3339_seconds(expires).to_string()
    } else {
        humantime::format_rfc3339_nanos(expires).to_string()
    }
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

    #[test]
    fn key_ids_are_short_printable_words() {
        for good in ["ci-2026-12", "a", "A.b_c-9", &"x".repeat(64)] {
            assert!(is_valid_key_id(good), "{good}");
        }
        for bad in ["", "a b", "a/b", "é", "a:b", "a\n", "\"x\"", &"x".repeat(65)] {
            assert!(!is_valid_key_id(bad), "{bad}");
        }
    }

    #[test]
    fn a_short_id_is_the_digests_first_eight_hex_digits() {
        assert_eq!(short_id(&digest("test")), "9f86d081");
    }

    #[test]
    fn expiries_are_rfc3339_with_an_offset() {
        let at = |secs: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        // 2027-03-01T00:00:00Z.
        let march = at(1_803_859_200);
        assert_eq!(parse_expiry("2027-03-01T00:00:00Z"), Some(march));
        assert_eq!(parse_expiry("2027-03-01t00:00:00z"), Some(march));
        assert_eq!(parse_expiry("2027-03-01T01:30:00+01:30"), Some(march));
        assert_eq!(parse_expiry("2027-02-28T19:00:00-05:00"), Some(march));
        assert_eq!(parse_expiry("2027-03-01T00:00:00+00:00"), Some(march));
        assert_eq!(
            parse_expiry("2027-03-01T00:00:00.250Z"),
            Some(march + Duration::from_millis(250))
        );
        assert_eq!(
            parse_expiry("2027-03-01T02:00:00.5+02:00"),
            Some(march + Duration::from_millis(500))
        );
        for bad in [
            "",
            "2027-03-01",
            "2027-03-01T00:00:00",
            "2027-03-01 00:00:00Z",
            "2027-02-30T00:00:00Z",
            "2027-13-01T00:00:00Z",
            "2027-03-01T24:00:00Z",
            "2027-03-01T00:00:00+24:00",
            "2027-03-01T00:00:00+01:60",
            "2027-03-01T00:00:00+0100",
            "2027-03-01T00:00:00Z+01:00",
            "2027-03-01T00:00:00+01:00Z",
            "1969-12-31T23:59:59Z",
            "next tuesday",
            "2027-03-01T00:00:00é",
            "2027-03-01T00:00:00+é:00",
        ] {
            assert_eq!(parse_expiry(bad), None, "{bad}");
        }
    }

    #[test]
    fn format_expiry_writes_what_parse_expiry_reads() {
        for text in ["2027-03-01T00:00:00Z", "2027-03-01T00:00:00.250000000Z"] {
            let expires = parse_expiry(text).unwrap();
            assert_eq!(format_expiry(expires), text);
        }
        let offset = parse_expiry("2027-03-01T01:00:00+01:00").unwrap();
        assert_eq!(format_expiry(offset), "2027-03-01T00:00:00Z");
    }
}
