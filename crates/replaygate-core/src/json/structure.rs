//! Finding a body's structure without reading its values: where a top-level member's value
//! starts ([`member_value`]), where an array's first elements lie ([`leading_objects`]), and
//! whether an array goes on after an element ([`continues_after`]). Incremental judging probes
//! a body with them before reading it (docs/incremental-judging.md).
//!
//! Sixty-four bytes are classified at a time: a bit mask each for quotes, backslashes and
//! brackets (`{`, `}`, `[`, `]`), from SSE2 compares on x86-64 (through `safe_arch`'s safe
//! wrappers) and byte by byte elsewhere. Escaped quotes are told apart with carry arithmetic on
//! the backslash mask, the inside of strings with a prefix XOR of the quote mask, and only the
//! brackets outside strings are then visited one by one, to find where an object or array ends
//! (a member's value passed over, an element found); the commas between elements are checked
//! where they must be, in the whitespace between one element's end and the next one's start.
//!
//! The scan does not check the grammar. Its answers are exact for valid JSON; for any other text
//! they are only where the scan thinks things are, so a caller uses them to find text it
//! already knows (an item judged before, compared by its bytes), and reads everything else with
//! the JSON reader.

use std::ops::Range;

use super::scan::is_whitespace;

/// Bytes classified together.
const BLOCK: usize = 64;

/// The masks of one block: bit `i` is byte `i`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Masks {
    quotes: u64,
    backslashes: u64,
    brackets: u64,
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn classify(block: &[u8; BLOCK]) -> Masks {
    use safe_arch::{
        bitor_m128i, cmp_eq_mask_i8_m128i, load_unaligned_m128i, move_mask_i8_m128i, set_splat_i8_m128i,
    };
    let quote = set_splat_i8_m128i(b'"' as i8);
    let backslash = set_splat_i8_m128i(b'\\' as i8);
    // `[` and `]` are `{` and `}` with bit 5 clear: one compare each finds both of a kind.
    let lower = set_splat_i8_m128i(0x20);
    let open = set_splat_i8_m128i(b'{' as i8);
    let close = set_splat_i8_m128i(b'}' as i8);
    let mut masks = Masks::default();
    for lane in 0..BLOCK / 16 {
        let chunk: &[u8; 16] = block[16 * lane..16 * lane + 16].try_into().unwrap_or(&[b' '; 16]);
        let bytes = load_unaligned_m128i(chunk);
        let folded = bitor_m128i(bytes, lower);
        let brackets = bitor_m128i(
            cmp_eq_mask_i8_m128i(folded, open),
            cmp_eq_mask_i8_m128i(folded, close),
        );
        let shift = 16 * lane as u32;
        let mask = |m| u64::from(move_mask_i8_m128i(m) as u16) << shift;
        masks.quotes |= mask(cmp_eq_mask_i8_m128i(bytes, quote));
        masks.backslashes |= mask(cmp_eq_mask_i8_m128i(bytes, backslash));
        masks.brackets |= mask(brackets);
    }
    masks
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
fn classify(block: &[u8; BLOCK]) -> Masks {
    classify_bytes(block)
}

/// [`classify`] one byte at a time: the reference the SIMD classification is tested against.
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
fn classify_bytes(block: &[u8; BLOCK]) -> Masks {
    let mut masks = Masks::default();
    for (i, &b) in block.iter().enumerate() {
        let bit = 1u64 << i;
        match b {
            b'"' => masks.quotes |= bit,
            b'\\' => masks.backslashes |= bit,
            b'{' | b'}' | b'[' | b']' => masks.brackets |= bit,
            _ => {}
        }
    }
    masks
}

/// Bit `i` set when byte `i` is escaped by an odd run of backslashes before it; `carry` says
/// whether the previous block's last byte escapes this block's first, and is updated.
#[inline(always)]
fn escaped(backslashes: u64, carry: &mut u64) -> u64 {
    if backslashes | *carry == 0 {
        return 0;
    }
    const EVEN: u64 = 0x5555_5555_5555_5555;
    let backslashes = backslashes & !*carry;
    let follows_backslash = (backslashes << 1) | *carry;
    let odd_starts = backslashes & !EVEN & !follows_backslash;
    let (even_runs, overflow) = odd_starts.overflowing_add(backslashes);
    *carry = u64::from(overflow);
    (EVEN ^ (even_runs << 1)) & follows_backslash
}

/// Bit `i` set when an odd number of the bits `0..=i` of `x` are set.
#[inline(always)]
fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

/// The brackets outside strings of `text` from `from` on, in order.
struct Structure<'t> {
    text: &'t [u8],
    /// Where the current block starts.
    block: usize,
    /// The current block's brackets not yet given out.
    pending: u64,
    /// Whether the previous block ended inside a string (all ones) or not (zero).
    in_string: u64,
    /// Whether the previous block's last byte escapes the next one.
    escape_carry: u64,
}

impl<'t> Structure<'t> {
    /// Starts at `from`, which must be outside any string.
    fn new(text: &'t [u8], from: usize) -> Self {
        let mut structure = Structure {
            text,
            block: from,
            pending: 0,
            in_string: 0,
            escape_carry: 0,
        };
        structure.load();
        structure
    }

    #[inline(always)]
    fn load(&mut self) {
        let rest = &self.text[self.block.min(self.text.len())..];
        let masks = match rest.get(..BLOCK) {
            Some(block) => classify(block.try_into().unwrap_or(&[b' '; BLOCK])),
            None => {
                let mut block = [b' '; BLOCK];
                block[..rest.len()].copy_from_slice(rest);
                classify(&block)
            }
        };
        let quotes = masks.quotes & !escaped(masks.backslashes, &mut self.escape_carry);
        let inside = prefix_xor(quotes) ^ self.in_string;
        self.in_string = ((inside as i64) >> 63) as u64;
        self.pending = masks.brackets & !inside;
    }

    /// The position of the next bracket outside strings.
    #[inline(always)]
    fn next(&mut self) -> Option<usize> {
        loop {
            if self.pending != 0 {
                let bit = self.pending.trailing_zeros() as usize;
                self.pending &= self.pending - 1;
                return Some(self.block + bit);
            }
            self.block += BLOCK;
            if self.block >= self.text.len() {
                return None;
            }
            self.load();
        }
    }
}

/// The end (one past the closing bracket) of the object or array that opens at `open`.
fn container_end(text: &[u8], open: usize) -> Option<usize> {
    let mut structure = Structure::new(text, open);
    let mut depth = 0usize;
    while let Some(at) = structure.next() {
        match text[at] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(at + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The end of the string whose opening quote is at `open` (one past its closing quote).
fn string_end(text: &[u8], open: usize) -> Option<usize> {
    let mut at = open + 1;
    loop {
        at = super::scan::string_stop(text, at);
        match text.get(at)? {
            b'"' => return Some(at + 1),
            b'\\' => at += 2,
            _ => at += 1,
        }
    }
}

/// The end of the value starting at `from` (its first byte), as the scan reads it.
pub fn value_end(text: &[u8], from: usize) -> Option<usize> {
    match text.get(from)? {
        b'{' | b'[' => container_end(text, from),
        b'"' => string_end(text, from),
        _ => {
            let len = text[from..]
                .iter()
                .position(|&b| matches!(b, b',' | b'}' | b']') || is_whitespace(b))
                .unwrap_or(text.len() - from);
            (len > 0).then_some(from + len)
        }
    }
}

fn skip_whitespace(text: &[u8], mut at: usize) -> usize {
    while text.get(at).is_some_and(|&b| is_whitespace(b)) {
        at += 1;
    }
    at
}

/// Calls `member` for each top-level member of the object `text` holds, in order, with the
/// member's name (as written, no escapes) and where its value starts; `member` returns where
/// the value ends ([`value_end`] finds it). `None` when the text is not an object as the scan
/// reads it, a member's name has an escape (the scan does not decode names), or `member`
/// returns `None`.
pub fn members<'t>(text: &'t [u8], mut member: impl FnMut(&'t [u8], usize) -> Option<usize>) -> Option<()> {
    let mut at = skip_whitespace(text, 0);
    if text.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_whitespace(text, at + 1);
    if text.get(at) == Some(&b'}') {
        return (skip_whitespace(text, at + 1) == text.len()).then_some(());
    }
    loop {
        if text.get(at) != Some(&b'"') {
            return None;
        }
        let name_end = super::scan::string_stop(text, at + 1);
        if text.get(name_end) != Some(&b'"') {
            return None;
        }
        let name = &text[at + 1..name_end];
        at = skip_whitespace(text, name_end + 1);
        if text.get(at) != Some(&b':') {
            return None;
        }
        let start = skip_whitespace(text, at + 1);
        let end = member(name, start)?;
        at = skip_whitespace(text, end);
        match text.get(at)? {
            b',' => at = skip_whitespace(text, at + 1),
            b'}' => return (skip_whitespace(text, at + 1) == text.len()).then_some(()),
            _ => return None,
        }
    }
}

/// Where the value of the top-level member `name` of the object `text` holds starts, passing
/// over the members before it ([`value_end`]). `None` when the text is not an object as the
/// scan reads it, a member before it has an escape in its name, or there is no such member.
pub fn member_value(text: &[u8], name: &[u8]) -> Option<usize> {
    let mut found = None;
    let walked = members(text, |member, start| {
        if member == name {
            found = Some(start);
            return None;
        }
        value_end(text, start)
    });
    match (walked, found) {
        (_, Some(start)) => Some(start),
        _ => None,
    }
}

/// Where each of the first `count` elements of the array that opens at `open` lies, when they
/// are objects with only whitespace and single commas between them. `None` otherwise, or when
/// the array has fewer.
pub fn leading_objects(text: &[u8], open: usize, count: usize) -> Option<Vec<Range<usize>>> {
    if text.get(open) != Some(&b'[') {
        return None;
    }
    let mut elements: Vec<Range<usize>> = Vec::with_capacity(count);
    let mut at = open + 1;
    while elements.len() < count {
        at = skip_whitespace(text, at);
        if !elements.is_empty() {
            if text.get(at) != Some(&b',') {
                return None;
            }
            at = skip_whitespace(text, at + 1);
        }
        if text.get(at) != Some(&b'{') {
            return None;
        }
        let end = container_end(text, at)?;
        elements.push(at..end);
        at = end;
    }
    Some(elements)
}

/// Whether the array whose element ends just before `at` goes on with another element: only
/// whitespace, then a comma.
pub fn continues_after(text: &[u8], at: usize) -> bool {
    text.get(skip_whitespace(text, at)) == Some(&b',')
}

/// Whether the array whose element ends just before `at` goes on with another element or ends
/// there: only whitespace, then a comma or its `]`.
pub fn continues_or_closes_after(text: &[u8], at: usize) -> bool {
    matches!(text.get(skip_whitespace(text, at)), Some(b',' | b']'))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;

    // A whole array cut into its elements with the bracket scan: the reference the scan is
    // held to against serde_json on any array of objects.
    /// The elements of an array of objects ([`object_elements`]) and where the array ends.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct ObjectElements {
        /// Where each element lies.
        elements: Vec<Range<usize>>,
        /// Just after the array's `]`.
        end: usize,
    }

    /// Where each element of the array that opens at `open` lies, when every element is an object
    /// and only whitespace and single commas lie between them. `None` otherwise, or when the text
    /// ends first.
    fn object_elements(text: &[u8], open: usize) -> Option<ObjectElements> {
        if text.get(open) != Some(&b'[') {
            return None;
        }
        let mut elements = Vec::new();
        let mut structure = Structure::new(text, open);
        structure.next()?; // the `[` itself
        let mut depth = 0usize;
        // Where the text between elements begins: whitespace, then a comma unless it is the first.
        let mut gap_from = open + 1;
        let mut start = 0;
        while let Some(at) = structure.next() {
            let b = text[at];
            if depth == 0 {
                let first = elements.is_empty();
                let gap = &text[gap_from..at];
                match b {
                    b'{' if separates(gap, !first) => {
                        start = at;
                        depth = 1;
                    }
                    b']' if separates(gap, false) => {
                        return Some(ObjectElements {
                            elements,
                            end: at + 1,
                        })
                    }
                    _ => return None,
                }
                continue;
            }
            match b {
                b'{' | b'[' => depth += 1,
                _ => {
                    depth -= 1;
                    if depth == 0 {
                        if b != b'}' {
                            return None;
                        }
                        elements.push(start..at + 1);
                        gap_from = at + 1;
                    }
                }
            }
        }
        None
    }

    /// Whether `gap` is whitespace, with one comma in it when `comma`.
    #[inline]
    fn separates(gap: &[u8], comma: bool) -> bool {
        let mut commas = 0;
        for &b in gap {
            match b {
                b',' => commas += 1,
                b if is_whitespace(b) => {}
                _ => return false,
            }
        }
        commas == usize::from(comma)
    }

    /// The escaped bytes, one at a time.
    fn escaped_naive(text: &[u8]) -> Vec<bool> {
        let mut out = vec![false; text.len()];
        let mut escape = false;
        for (i, &b) in text.iter().enumerate() {
            if escape {
                out[i] = true;
                escape = false;
            } else if b == b'\\' {
                escape = true;
            }
        }
        out
    }

    #[test]
    fn the_simd_classification_is_the_byte_by_byte_one() {
        let text: Vec<u8> = (0..=255u8).cycle().take(BLOCK * 4).collect();
        for block in text.chunks_exact(BLOCK) {
            let block: &[u8; BLOCK] = block.try_into().unwrap();
            assert_eq!(classify(block), classify_bytes(block));
        }
    }

    proptest! {
        #[test]
        fn escapes_are_found_across_blocks(text in proptest::collection::vec(
            prop_oneof![Just(b'\\'), Just(b'"'), Just(b'a')], 0..300)) {
            let naive = escaped_naive(&text);
            let mut carry = 0;
            for (n, block) in text.chunks(BLOCK).enumerate() {
                let mut padded = [b' '; BLOCK];
                padded[..block.len()].copy_from_slice(block);
                let mask = escaped(classify_bytes(&padded).backslashes, &mut carry);
                for i in 0..block.len() {
                    prop_assert_eq!(mask >> i & 1 == 1, naive[n * BLOCK + i], "byte {}", n * BLOCK + i);
                }
            }
        }
    }

    /// Each element's text, as serde_json writes them back, against the scan's.
    fn elements_agree(text: &str) {
        let value: Value = serde_json::from_str(text).unwrap();
        let open = text.find('[').unwrap();
        let scanned = object_elements(text.as_bytes(), open).expect("an array of objects");
        assert_eq!(scanned.end, text.trim_end().len());
        let spans = scanned.elements;
        let expected = value.as_array().unwrap();
        assert_eq!(spans.len(), expected.len(), "{text}");
        for (span, element) in spans.iter().zip(expected) {
            let read: Value = serde_json::from_str(&text[span.clone()]).unwrap();
            assert_eq!(&read, element);
        }
    }

    #[test]
    fn elements_of_arrays_of_objects_are_found() {
        elements_agree("[]");
        elements_agree(" [ ] ");
        elements_agree(r#"[{}]"#);
        elements_agree(r#"[ {"a":1} , {"b":[1,{"c":"}]"}]}, {"d":"\"{\\"} ]"#);
        let long = format!(
            r#"[{{"s":"{}"}},{{"t":"{}\\\\"}}]"#,
            "x".repeat(200),
            "\\\"".repeat(70)
        );
        elements_agree(&long);
    }

    #[test]
    fn other_arrays_are_not_taken_for_arrays_of_objects() {
        for text in [
            r#"[1]"#,
            r#"["a",{}]"#,
            r#"[{},1]"#,
            r#"[{}{}]"#,
            r#"[{},,{}]"#,
            r#"[,{}]"#,
            r#"[{}"#,
            r#"[{"a":"]"#,
            r#"[[]]"#,
        ] {
            assert_eq!(object_elements(text.as_bytes(), 0), None, "{text}");
        }
    }

    #[test]
    fn a_member_and_the_leading_elements_are_found_without_reading_the_rest() {
        let text = br#"{"model":"m","tools":[{"a":"}"}] , "input" : [ {"x":[1]} , {"y":"]"},{} ,"broken"#;
        let open = member_value(text, b"input").unwrap();
        assert_eq!(text[open], b'[');
        let leading = leading_objects(text, open, 2).unwrap();
        assert_eq!(&text[leading[0].clone()], br#"{"x":[1]}"#);
        assert_eq!(&text[leading[1].clone()], br#"{"y":"]"}"#);
        assert!(continues_after(text, leading[1].end));
        assert!(leading_objects(text, open, 4).is_none());
        assert!(member_value(text, b"absent").is_none());
        assert!(member_value(br#"{"input":[{},{}]}"#, b"input").is_some());
        assert!(member_value(br#"{"a\"":1,"input":[]}"#, b"input").is_none());
        assert!(!continues_after(b"{} ]", 2));
    }

    #[test]
    fn members_are_found_with_their_values() {
        let text = br#" {"model":"m", "tools" : [{"a":"}"}], "n":-1.5e3,"input":[{}],"x":null} "#;
        let mut found = Vec::new();
        members(text, |name, start| {
            let end = value_end(text, start)?;
            found.push((String::from_utf8(name.to_vec()).unwrap(), start..end));
            Some(end)
        })
        .unwrap();
        let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["model", "tools", "n", "input", "x"]);
        let value = |i: usize| std::str::from_utf8(&text[found[i].1.clone()]).unwrap();
        assert_eq!(value(0), r#""m""#);
        assert_eq!(value(1), r#"[{"a":"}"}]"#);
        assert_eq!(value(2), "-1.5e3");
        assert_eq!(value(3), "[{}]");
        assert_eq!(value(4), "null");
        let skip = |text: &'static [u8]| members(text, |_, start| value_end(text, start));
        assert!(skip(br#"{"a\"b":1}"#).is_none());
        assert!(skip(br#"[1]"#).is_none());
        assert!(skip(br#"{"a":1} x"#).is_none());
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(Value::from),
            "[a-z{}\\[\\],:\"\\\\ ]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 40, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z\"\\\\]{0,4}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_array_of_objects_is_cut_where_serde_json_reads_it(
            objects in proptest::collection::vec(
                proptest::collection::btree_map("[a-z]{1,3}", json_value(), 0..4), 0..6),
            pretty in any::<bool>(),
        ) {
            let array = Value::Array(objects.into_iter().map(|m| Value::Object(m.into_iter().collect())).collect());
            let text = match pretty {
                true => serde_json::to_string_pretty(&array).unwrap(),
                false => serde_json::to_string(&array).unwrap(),
            };
            elements_agree(&text);
        }

        #[test]
        fn any_object_has_its_members_where_serde_json_reads_them(value in json_value(), pretty in any::<bool>()) {
            let object = Value::Object([("a".to_owned(), value.clone()), ("b".to_owned(), Value::Null)].into_iter().collect());
            let text = match pretty {
                true => serde_json::to_string_pretty(&object).unwrap(),
                false => serde_json::to_string(&object).unwrap(),
            };
            let mut values = Vec::new();
            let bytes = text.as_bytes();
            members(bytes, |_, start| { let end = value_end(bytes, start)?; values.push(start..end); Some(end) }).unwrap();
            prop_assert_eq!(values.len(), 2);
            let read: Value = serde_json::from_str(&text[values[0].clone()]).unwrap();
            prop_assert_eq!(read, value);
        }
    }
}
