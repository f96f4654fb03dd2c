//! Finding where a string's plain run ends, sixteen bytes at a time.
//!
//! Most of a request body is string contents the gate never looks at. A run of plain bytes ends
//! at a quote, a backslash or a control byte. On x86-64 each block of 16 bytes is tested for
//! all three with SSE2 compares (part of every x86-64 CPU, so no CPU-specific build), through
//! `safe_arch`'s safe wrappers, and the first stop is the lowest bit of the block's byte mask;
//! elsewhere the block is tested byte by byte.

/// Bytes tested together.
const BLOCK: usize = 16;

/// Whether `b` ends a run of plain string bytes.
#[inline(always)]
fn stops(b: u8) -> bool {
    (b == b'"') | (b == b'\\') | (b < 0x20)
}

/// The offset in `block` of its first byte that [`stops`] a run (`None`: none does).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn first_stop(block: &[u8; BLOCK]) -> Option<usize> {
    use safe_arch::{
        cmp_eq_mask_i8_m128i, load_unaligned_m128i, max_u8_m128i, move_mask_i8_m128i, set_splat_i8_m128i,
    };
    let bytes = load_unaligned_m128i(block);
    let quotes = cmp_eq_mask_i8_m128i(bytes, set_splat_i8_m128i(b'"' as i8));
    let backslashes = cmp_eq_mask_i8_m128i(bytes, set_splat_i8_m128i(b'\\' as i8));
    // A byte is below 0x20 exactly when its unsigned maximum with 0x1f is 0x1f.
    let below = set_splat_i8_m128i(0x1f);
    let controls = cmp_eq_mask_i8_m128i(max_u8_m128i(bytes, below), below);
    let mask = move_mask_i8_m128i(quotes | backslashes | controls);
    (mask != 0).then(|| mask.trailing_zeros() as usize)
}

/// The offset in `block` of its first byte that [`stops`] a run (`None`: none does).
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn first_stop(block: &[u8; BLOCK]) -> Option<usize> {
    block.iter().position(|&b| stops(b))
}

/// The index of the first quote, backslash or control byte of `bytes` at or after `from`
/// (`bytes.len()` when there is none).
#[inline]
pub(crate) fn string_stop(bytes: &[u8], from: usize) -> usize {
    let mut at = from;
    while let Some(block) = bytes.get(at..at + BLOCK) {
        let block: &[u8; BLOCK] = block.try_into().unwrap_or(&[0; BLOCK]);
        if let Some(offset) = first_stop(block) {
            return at + offset;
        }
        at += BLOCK;
    }
    bytes[at.min(bytes.len())..]
        .iter()
        .position(|&b| stops(b))
        .map_or(bytes.len(), |i| at + i)
}

/// Whether `b` is JSON whitespace.
#[inline(always)]
pub(crate) fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\t' | b'\r')
}

/// The end of the JSON number starting at `from` (a `-` or a digit), and whether it is an
/// integer (no fraction, no exponent); `Err(at)` with the index of the first byte that breaks
/// the grammar (`bytes.len()` when the text ends inside the number).
pub(crate) fn number_end(bytes: &[u8], from: usize) -> Result<(usize, bool), usize> {
    let digits_from = |at: usize| {
        bytes[at.min(bytes.len())..]
            .iter()
            .position(|b| !b.is_ascii_digit())
            .map_or(bytes.len(), |n| at + n)
    };
    let mut at = from;
    if bytes.get(at) == Some(&b'-') {
        at += 1;
    }
    match bytes.get(at) {
        Some(b'0') => {
            at += 1;
            // A leading zero stands alone.
            if bytes.get(at).is_some_and(u8::is_ascii_digit) {
                return Err(at);
            }
        }
        Some(b'1'..=b'9') => at = digits_from(at + 1),
        _ => return Err(at),
    }
    let mut integer = true;
    if bytes.get(at) == Some(&b'.') {
        integer = false;
        let end = digits_from(at + 1);
        if end == at + 1 {
            return Err(end);
        }
        at = end;
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        integer = false;
        at += 1;
        if matches!(bytes.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        let end = digits_from(at);
        if end == at {
            return Err(end);
        }
        at = end;
    }
    Ok((at, integer))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(bytes: &[u8], from: usize) -> usize {
        bytes[from..]
            .iter()
            .position(|&b| stops(b))
            .map_or(bytes.len(), |i| from + i)
    }

    #[test]
    fn string_stop_finds_the_first_stop_at_every_offset_and_length() {
        for len in 0..70 {
            for stop_at in 0..=len {
                for stop in [b'"', b'\\', 0x00, 0x1f, b'\n'] {
                    let mut bytes = vec![b'a'; len];
                    if stop_at < len {
                        bytes[stop_at] = stop;
                    }
                    for from in 0..=len {
                        assert_eq!(
                            string_stop(&bytes, from),
                            naive(&bytes, from),
                            "{len} {stop_at} {from}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn every_byte_value_stops_a_run_exactly_when_it_should() {
        for value in 0..=255u8 {
            for at in [0, 7, 15, 16, 31, 40] {
                let mut bytes = vec![b'x'; 48];
                bytes[at] = value;
                let expected = if stops(value) { at } else { 48 };
                assert_eq!(string_stop(&bytes, 0), expected, "{value:#x} at {at}");
            }
        }
    }

    #[test]
    fn bytes_above_ascii_and_delete_do_not_stop_a_run() {
        let text = "é€😀\u{7f} plain ".repeat(5);
        assert_eq!(string_stop(text.as_bytes(), 0), text.len());
    }

    #[test]
    fn numbers_follow_the_json_grammar() {
        for (text, end) in [
            ("0", Ok((1, true))),
            ("-0", Ok((2, true))),
            ("12,", Ok((2, true))),
            ("1.5]", Ok((3, false))),
            ("1e5", Ok((3, false))),
            ("1E+5", Ok((4, false))),
            ("-1.25e-10 ", Ok((9, false))),
            ("01", Err(1)),
            ("-", Err(1)),
            ("-a", Err(1)),
            ("1.", Err(2)),
            ("1.e5", Err(2)),
            ("1e", Err(2)),
            ("1e+", Err(3)),
        ] {
            assert_eq!(number_end(text.as_bytes(), 0), end, "{text}");
        }
    }
}
