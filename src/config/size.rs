//! Sizes in proxy.toml: a whole number of bytes (`1073741824`) or a text with a unit
//! (`"1GiB"`, `"512 MiB"`, `"500MB"`): `B`, decimal `KB` `MB` `GB` `TB`, binary `KiB` `MiB`
//! `GiB` `TiB`, in any case.

/// A size as written: a number of bytes, or a text with a unit.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(untagged)]
pub(super) enum WrittenSize {
    /// A whole number of bytes.
    Bytes(i64),
    /// A number with a unit.
    Text(String),
}

impl WrittenSize {
    /// The number of bytes, or why it is not a size.
    pub(super) fn bytes(&self) -> Result<u64, String> {
        match self {
            WrittenSize::Bytes(n) => u64::try_from(*n).map_err(|_| format!("{n} is negative")),
            WrittenSize::Text(text) => parse_size(text),
        }
    }
}

/// `"1GiB"` → 1073741824.
fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(split);
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number"))?;
    let unit = unit.trim().to_ascii_lowercase();
    let scale: u64 = match unit.as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "mb" => 1000_u64.pow(2),
        "gb" => 1000_u64.pow(3),
        "tb" => 1000_u64.pow(4),
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => {
            return Err(format!(
                "{text:?} has the unit {unit:?}; write B, KB, MB, GB, TB, KiB, MiB, GiB or TiB"
            ))
        }
    };
    number
        .checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_with_their_units() {
        let text = |t: &str| WrittenSize::Text(t.into()).bytes();
        assert_eq!(text("1GiB"), Ok(1 << 30));
        assert_eq!(text("512 MiB"), Ok(512 << 20));
        assert_eq!(text("500MB"), Ok(500_000_000));
        assert_eq!(text("4096"), Ok(4096));
        assert_eq!(text("2 gb"), Ok(2_000_000_000));
        assert_eq!(WrittenSize::Bytes(1024).bytes(), Ok(1024));
        for bad in ["", "GiB", "1.5GiB", "10 parsecs", "99999999999TiB"] {
            assert!(text(bad).is_err(), "{bad}");
        }
        assert!(WrittenSize::Bytes(-1).bytes().is_err());
    }
}
