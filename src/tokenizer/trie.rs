//! A byte trie with upstream's `naive_trie` semantics (src/llama-vocab.cpp), used by the UGM
//! and RWKV tokenizers: inserting a key twice keeps the later value, and
//! [`ByteTrie::longest_path`] is upstream's `get_longest_prefix` (the depth the walk reaches,
//! whether or not a key ends there).
//!
//! Built once at model load, then frozen into flat arrays (children sorted by byte, found by
//! binary search) so lookups touch little memory.

/// Index of a trie node; the root is [`ByteTrie::ROOT`].
pub type NodeId = u32;

#[derive(Debug, Default)]
pub struct TrieBuilder {
    children: Vec<Vec<(u8, NodeId)>>,
    values: Vec<Option<i32>>,
}

impl TrieBuilder {
    pub fn new() -> Self {
        TrieBuilder {
            children: vec![Vec::new()],
            values: vec![None],
        }
    }

    /// Inserts `key` with `value` (a later insert of the same key replaces the value).
    pub fn insert(&mut self, key: &[u8], value: i32) {
        let mut node = 0usize;
        for &b in key {
            let kids = &self.children[node];
            node = match kids.binary_search_by_key(&b, |&(c, _)| c) {
                Ok(i) => kids[i].1 as usize,
                Err(i) => {
                    let new = self.values.len();
                    self.children[node].insert(i, (b, new as NodeId));
                    self.children.push(Vec::new());
                    self.values.push(None);
                    new
                }
            };
        }
        self.values[node] = Some(value);
    }

    pub fn build(self) -> ByteTrie {
        let n = self.values.len();
        let mut first = Vec::with_capacity(n + 1);
        let mut labels = Vec::new();
        let mut targets = Vec::new();
        for kids in &self.children {
            first.push(labels.len() as u32);
            for &(c, t) in kids {
                labels.push(c);
                targets.push(t);
            }
        }
        first.push(labels.len() as u32);
        ByteTrie {
            first,
            labels,
            targets,
            values: self.values,
        }
    }
}

#[derive(Debug)]
pub struct ByteTrie {
    /// Children of node `i` are `labels/targets[first[i]..first[i + 1]]`, sorted by label.
    first: Vec<u32>,
    labels: Vec<u8>,
    targets: Vec<NodeId>,
    values: Vec<Option<i32>>,
}

impl ByteTrie {
    pub const ROOT: NodeId = 0;

    /// The child of `node` along byte `c` (upstream's `traverse`).
    #[inline]
    pub fn child(&self, node: NodeId, c: u8) -> Option<NodeId> {
        let (a, b) = (
            self.first[node as usize] as usize,
            self.first[node as usize + 1] as usize,
        );
        let labels = &self.labels[a..b];
        labels.binary_search(&c).ok().map(|i| self.targets[a + i])
    }

    /// The value stored at `node`, if a key ends there (upstream's `has_value`/`value`).
    #[inline]
    pub fn value(&self, node: NodeId) -> Option<i32> {
        self.values[node as usize]
    }

    /// How many leading bytes of `key` the trie has a path for (upstream's
    /// `get_longest_prefix(...).second`: not necessarily a stored key).
    pub fn longest_path(&self, key: &[u8]) -> usize {
        let mut node = Self::ROOT;
        for (depth, &c) in key.iter().enumerate() {
            match self.child(node, c) {
                Some(next) => node = next,
                None => return depth,
            }
        }
        key.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_insert_wins_and_paths_are_not_keys() {
        let mut b = TrieBuilder::new();
        b.insert(b"abc", 1);
        b.insert(b"ab", 2);
        b.insert(b"abc", 3);
        let t = b.build();
        let a = t.child(ByteTrie::ROOT, b'a').unwrap();
        assert_eq!(t.value(a), None);
        let ab = t.child(a, b'b').unwrap();
        assert_eq!(t.value(ab), Some(2));
        let abc = t.child(ab, b'c').unwrap();
        assert_eq!(t.value(abc), Some(3));
        assert_eq!(t.child(abc, b'd'), None);
        // "a" is no key but the walk reaches depth 1; "abx" stops at 2.
        assert_eq!(t.longest_path(b"a"), 1);
        assert_eq!(t.longest_path(b"abx"), 2);
        assert_eq!(t.longest_path(b"abcd"), 3);
        assert_eq!(t.longest_path(b"x"), 0);
        assert_eq!(t.longest_path(b""), 0);
    }
}
