//! A small map from names to values, for the item profiles' tables: looked up once for every
//! member of every item, so a name costs one multiply to find its slot and one compare of a
//! packed key (its length and first sixteen bytes), not a hash of its bytes and a `memcmp`.

/// Names and their values, in insertion order.
#[derive(Debug, Clone)]
pub(crate) struct NameTable<V> {
    keys: Vec<Key>,
    names: Vec<Box<str>>,
    values: Vec<V>,
    /// Open addressing over `keys`: each slot holds a position plus one (0: empty); a power of
    /// two at least four times the names, so probes are short.
    slots: Vec<u32>,
}

/// A name's length and its first sixteen bytes (zero-padded): equal keys make equal names up
/// to sixteen bytes; longer names compare the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    len: usize,
    head: [u64; 2],
}

impl Key {
    fn of(name: &str) -> Key {
        let bytes = name.as_bytes();
        let len = bytes.len();
        // Overlapping loads cover every length without copying the name: each byte lands at
        // its own position, and the bytes past the name stay zero.
        let head = match len {
            16.. => [load8(bytes, 0), load8(bytes, 8)],
            9..=15 => [load8(bytes, 0), load8(bytes, len - 8) >> (8 * (16 - len))],
            8 => [load8(bytes, 0), 0],
            4..=7 => [load4(bytes, 0) | load4(bytes, len - 4) << (8 * (len - 4)), 0],
            _ => [bytes.iter().rev().fold(0, |acc, &b| acc << 8 | u64::from(b)), 0],
        };
        Key { len, head }
    }

    /// The key's slot among `mask + 1`.
    fn slot(&self, mask: usize) -> usize {
        let mixed = (self.head[0] ^ self.head[1].rotate_left(29) ^ self.len as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (mixed >> 32) as usize & mask
    }
}

/// Eight bytes from `at`, little-endian (the caller keeps `at + 8` within `bytes`).
fn load8(bytes: &[u8], at: usize) -> u64 {
    <[u8; 8]>::try_from(&bytes[at..at + 8]).map_or(0, u64::from_le_bytes)
}

/// Four bytes from `at`, little-endian.
fn load4(bytes: &[u8], at: usize) -> u64 {
    <[u8; 4]>::try_from(&bytes[at..at + 4]).map_or(0, |b| u64::from(u32::from_le_bytes(b)))
}

impl<V> Default for NameTable<V> {
    fn default() -> Self {
        NameTable {
            keys: Vec::new(),
            names: Vec::new(),
            values: Vec::new(),
            slots: Vec::new(),
        }
    }
}

impl<V: PartialEq> PartialEq for NameTable<V> {
    fn eq(&self, other: &Self) -> bool {
        self.names == other.names && self.values == other.values
    }
}

impl<V: Eq> Eq for NameTable<V> {}

impl<V> NameTable<V> {
    /// The value of `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&V> {
        self.position(name).map(|i| &self.values[i])
    }

    /// The value at a position [`NameTable::find`] gave.
    pub(crate) fn value_at(&self, at: usize) -> &V {
        &self.values[at]
    }

    /// The position of `name` (in insertion order) and its value.
    pub(crate) fn find(&self, name: &str) -> Option<(usize, &V)> {
        self.position(name).map(|i| (i, &self.values[i]))
    }

    /// Whether `name` is in the table.
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.position(name).is_some()
    }

    /// Sets `name`'s value (a name already there keeps its place).
    pub(crate) fn insert(&mut self, name: &str, value: V) {
        if let Some(i) = self.position(name) {
            self.values[i] = value;
            return;
        }
        self.keys.push(Key::of(name));
        self.names.push(name.into());
        self.values.push(value);
        let wanted = (4 * self.keys.len()).next_power_of_two();
        if wanted > self.slots.len() {
            self.slots = vec![0; wanted];
            for i in 0..self.keys.len() {
                self.place(i);
            }
        } else {
            self.place(self.keys.len() - 1);
        }
    }

    /// The values, in insertion order, to change.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.values.iter_mut()
    }

    /// The names and values, in insertion order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.names.iter().map(|n| &**n).zip(&self.values)
    }

    fn place(&mut self, i: usize) {
        let mask = self.slots.len() - 1;
        let mut slot = self.keys[i].slot(mask);
        while self.slots[slot] != 0 {
            slot = (slot + 1) & mask;
        }
        self.slots[slot] = i as u32 + 1;
    }

    fn position(&self, name: &str) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let key = Key::of(name);
        let mask = self.slots.len() - 1;
        let mut slot = key.slot(mask);
        loop {
            let i = (self.slots[slot] as usize).checked_sub(1)?;
            if self.keys[i] == key
                && (key.len <= 16 || self.names[i].as_bytes()[16..] == name.as_bytes()[16..])
            {
                return Some(i);
            }
            slot = (slot + 1) & mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_told_apart_by_every_byte() {
        let mut table = NameTable::default();
        for name in [
            "",
            "a",
            "ab",
            "type",
            "content",
            "call_id",
            "callid",
            "encrypted_content",
            "encrypted_contenu",
            "prompt_cache_breakpoint",
            "a\0",
            "\u{e9}t\u{e9}",
        ] {
            table.insert(name, name.len());
        }
        assert_eq!(table.get("encrypted_content"), Some(&17));
        assert_eq!(table.get("encrypted_contenu"), Some(&17));
        assert_eq!(table.get("encrypted_contenx"), None);
        assert_eq!(table.get("a\0"), Some(&2));
        assert_eq!(table.get("a"), Some(&1));
        assert_eq!(table.get(""), Some(&0));
        assert_eq!(table.get("\u{e9}t\u{e9}"), Some(&5));
        assert!(!table.contains("typ"));
        assert!(!table.contains("types"));
        table.insert("type", 99);
        assert_eq!(table.get("type"), Some(&99));
        assert_eq!(table.iter().count(), 12, "a name set twice keeps one place");
    }

    #[test]
    fn keys_hold_each_byte_at_its_place_and_zeros_after() {
        for len in 0..=24 {
            let name: String = (0..len).map(|i| char::from(b'a' + i as u8)).collect();
            let mut head = [0u8; 16];
            let n = len.min(16);
            head[..n].copy_from_slice(&name.as_bytes()[..n]);
            let expected = [
                u64::from_le_bytes(head[..8].try_into().unwrap()),
                u64::from_le_bytes(head[8..].try_into().unwrap()),
            ];
            assert_eq!(Key::of(&name), Key { len, head: expected }, "{name:?}");
        }
    }

    #[test]
    fn many_names_are_found_the_same() {
        let mut table = NameTable::default();
        let names: Vec<String> = (0..100).map(|i| format!("member_number_{i}")).collect();
        for (i, name) in names.iter().enumerate() {
            table.insert(name, i);
        }
        assert!(table.slots.len() >= 400);
        for (i, name) in names.iter().enumerate() {
            assert_eq!(table.get(name), Some(&i));
        }
        assert_eq!(table.get("member_number_100"), None);
        table.insert("member_number_7", 700);
        assert_eq!(table.get("member_number_7"), Some(&700));
    }
}
