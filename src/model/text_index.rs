//! [`TextIndex`]: a map from byte strings to `i32` for the vocabulary's `token_to_id` and
//! `bpe_ranks`, packed for memory: every key's bytes in one arena, and an open-addressing
//! table of 8-byte slots (32 bits of hash, entry index). A `HashMap<Vec<u8>, i32>` spends
//! a 32-byte bucket and a heap allocation per key (~80 bytes for a 7-byte merge); this spends
//! ~20 bytes plus the key's bytes, which takes a 280k-merge BPE vocabulary from ~26 MB to ~9.
//! Lookups hash once (FNV-1a: keys come from the model file, not from the text being
//! tokenized, so SipHash's DoS resistance buys nothing) and compare bytes only on a 32-bit
//! tag match.

use std::collections::HashMap;

/// Byte string → i32; later inserts of the same key overwrite (`insert`) or are ignored
/// (`insert_if_absent`).
#[derive(Debug, Default, Clone)]
pub struct TextIndex {
    /// Every key's bytes, back to back.
    arena: Vec<u8>,
    /// Entry `i`'s key is `arena[ends[i - 1]..ends[i]]` (from 0 for the first).
    ends: Vec<u32>,
    values: Vec<i32>,
    /// 0 = empty, else `(tag << 32) | (entry + 1)` with `tag` the hash's high 32 bits.
    slots: Vec<u64>,
    /// Keys that would take the arena past `u32::MAX` bytes (never in a real vocabulary).
    overflow: HashMap<Vec<u8>, i32>,
}

fn hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    // Mix the high bits down: the slot index takes the low bits, the tag the high ones.
    h ^ (h >> 29) ^ (h << 17)
}

enum Probe {
    Found(usize),
    Vacant(usize),
}

impl TextIndex {
    pub fn new() -> TextIndex {
        TextIndex::default()
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.values.len() + self.overflow.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn key(&self, entry: usize) -> &[u8] {
        let start = if entry == 0 {
            0
        } else {
            self.ends[entry - 1] as usize
        };
        &self.arena[start..self.ends[entry] as usize]
    }

    /// Room for `additional` more keys without growing the table.
    pub fn reserve(&mut self, additional: usize) {
        self.ends.reserve(additional);
        self.values.reserve(additional);
        let want = self.values.len() + additional;
        if want * 4 > self.slots.len() * 3 {
            self.rehash(want);
        }
    }

    /// A table of at least 4/3 × `entries` slots (a power of two), every entry re-placed.
    fn rehash(&mut self, entries: usize) {
        let size = (entries * 4 / 3 + 1).next_power_of_two().max(16);
        let mut slots = vec![0u64; size];
        let mask = size - 1;
        for entry in 0..self.values.len() {
            let h = hash(self.key(entry));
            let mut i = h as usize & mask;
            while slots[i] != 0 {
                i = (i + 1) & mask;
            }
            slots[i] = ((h >> 32) << 32) | (entry as u64 + 1);
        }
        self.slots = slots;
    }

    fn probe(&self, key: &[u8], h: u64) -> Probe {
        let mask = self.slots.len() - 1;
        let tag = h >> 32;
        let mut i = h as usize & mask;
        loop {
            let slot = self.slots[i];
            if slot == 0 {
                return Probe::Vacant(i);
            }
            if slot >> 32 == tag {
                let entry = (slot & 0xFFFF_FFFF) as usize - 1;
                if self.key(entry) == key {
                    return Probe::Found(entry);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<i32> {
        if !self.slots.is_empty() {
            if let Probe::Found(entry) = self.probe(key, hash(key)) {
                return Some(self.values[entry]);
            }
        }
        if self.overflow.is_empty() {
            None
        } else {
            self.overflow.get(key).copied()
        }
    }

    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key` to `value`; the previous value, if any.
    pub fn insert(&mut self, key: &[u8], value: i32) -> Option<i32> {
        self.upsert(key, value, true)
    }

    /// Sets `key` to `value` unless it has one (`entry(key).or_insert(value)`); whether it
    /// was added.
    pub fn insert_if_absent(&mut self, key: &[u8], value: i32) -> bool {
        self.upsert(key, value, false).is_none()
    }

    fn upsert(&mut self, key: &[u8], value: i32, overwrite: bool) -> Option<i32> {
        if let Some(old) = self.overflow.get_mut(key) {
            let prev = *old;
            if overwrite {
                *old = value;
            }
            return Some(prev);
        }
        if (self.values.len() + 1) * 4 > self.slots.len() * 3 {
            self.rehash((self.values.len() + 1).max(self.values.len() * 2));
        }
        let h = hash(key);
        match self.probe(key, h) {
            Probe::Found(entry) => {
                let prev = self.values[entry];
                if overwrite {
                    self.values[entry] = value;
                }
                Some(prev)
            }
            Probe::Vacant(slot) => {
                let end = match u32::try_from(self.arena.len() + key.len()) {
                    Ok(end) if self.values.len() < u32::MAX as usize - 1 => end,
                    _ => {
                        self.overflow.insert(key.to_vec(), value);
                        return None;
                    }
                };
                self.arena.extend_from_slice(key);
                self.ends.push(end);
                self.values.push(value);
                self.slots[slot] = ((h >> 32) << 32) | self.values.len() as u64;
                None
            }
        }
    }

    /// Heap bytes held (for memory tests and reports).
    pub fn heap_bytes(&self) -> usize {
        self.arena.capacity()
            + self.ends.capacity() * 4
            + self.values.capacity() * 4
            + self.slots.capacity() * 8
            + self
                .overflow
                .keys()
                .map(|k| k.capacity() + 32)
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_a_hash_map() {
        let mut ours = TextIndex::new();
        let mut reference: HashMap<Vec<u8>, i32> = HashMap::new();
        let mut x: u64 = 0x1234_5678_9abc_def1;
        for i in 0..50_000i32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Short keys from a small alphabet: many repeats, the empty key too.
            let len = (x % 5) as usize;
            let key: Vec<u8> = (0..len)
                .map(|k| b"ab \xff"[(x >> (8 + 2 * k)) as usize % 4])
                .collect();
            if x & 0x100 != 0 {
                assert_eq!(ours.insert(&key, i), reference.insert(key.clone(), i));
            } else {
                let added = ours.insert_if_absent(&key, i);
                assert_eq!(added, !reference.contains_key(&key));
                reference.entry(key.clone()).or_insert(i);
            }
            assert_eq!(ours.len(), reference.len());
        }
        for (k, &v) in &reference {
            assert_eq!(ours.get(k), Some(v));
        }
        assert_eq!(ours.get(b"absent key"), None);
        assert!(!ours.contains_key(b"zz"));
        assert!(TextIndex::new().get(b"").is_none());
    }

    #[test]
    fn reserve_then_fill_keeps_every_key() {
        let mut t = TextIndex::new();
        t.reserve(1000);
        let slots = t.slots.len();
        for i in 0..1000 {
            assert!(t.insert_if_absent(format!("tok{i}").as_bytes(), i));
        }
        assert_eq!(t.slots.len(), slots, "no growth after reserve");
        for i in 0..1000 {
            assert_eq!(t.get(format!("tok{i}").as_bytes()), Some(i));
        }
        assert!(t.heap_bytes() < 1000 * 24 + slots * 8 + 8192);
    }
}
