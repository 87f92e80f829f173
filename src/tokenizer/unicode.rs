//! Upstream's Unicode helpers (src/unicode.cpp) over its own tables (`unicode_data.rs`,
//! generated from the pinned llama.cpp by scripts/gen-unicode-tables.py): lax UTF-8 decoding,
//! code-point flags, case maps, NFD. Code points are `u32`, not `char`: upstream's decoder
//! yields surrogates and values above U+10FFFF, and they must survive to behave the same.

use std::sync::OnceLock;

#[allow(clippy::unreadable_literal)]
mod unicode_data;
pub use unicode_data::{MAP_LOWERCASE, MAP_UPPERCASE, RANGES_NFD};

// `unicode_cpt_flags` bits.
pub const UNDEFINED: u16 = 0x0001;
pub const NUMBER: u16 = 0x0002;
pub const LETTER: u16 = 0x0004;
pub const SEPARATOR: u16 = 0x0008;
pub const ACCENT_MARK: u16 = 0x0010;
pub const PUNCTUATION: u16 = 0x0020;
pub const SYMBOL: u16 = 0x0040;
pub const CONTROL: u16 = 0x0080;
pub const MASK_CATEGORIES: u16 = 0x00FF;
pub const WHITESPACE: u16 = 0x0100;
pub const LOWERCASE: u16 = 0x0200;
pub const UPPERCASE: u16 = 0x0400;
pub const NFD: u16 = 0x0800;

/// The code point one past the last (`MAX_CODEPOINTS`).
pub const MAX_CODEPOINTS: u32 = 0x110000;

/// Upstream's `unicode_len_utf8`: the length a lead byte announces (1 for continuation
/// bytes).
pub fn len_utf8(lead: u8) -> usize {
    const LOOKUP: [u8; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
    LOOKUP[usize::from(lead >> 4)] as usize
}

/// `unicode_cpt_from_utf8`: one code point at `*offset`, advancing it; None (offset
/// unchanged) where upstream throws. Overlong forms and surrogates are accepted, as upstream.
pub fn cpt_from_utf8(s: &[u8], offset: &mut usize) -> Option<u32> {
    let i = *offset;
    let b0 = u32::from(*s.get(i)?);
    let cont = |k: usize| {
        s.get(i + k)
            .filter(|&&b| b & 0xC0 == 0x80)
            .map(|&b| u32::from(b) & 0x3F)
    };
    let (cpt, n) = if b0 & 0x80 == 0 {
        (b0, 1)
    } else if b0 & 0x40 == 0 {
        return None;
    } else if b0 & 0x20 == 0 {
        (((b0 & 0x1F) << 6) | cont(1)?, 2)
    } else if b0 & 0x10 == 0 {
        (((b0 & 0x0F) << 12) | (cont(1)? << 6) | cont(2)?, 3)
    } else if b0 & 0x08 == 0 {
        (
            ((b0 & 0x07) << 18) | (cont(1)? << 12) | (cont(2)? << 6) | cont(3)?,
            4,
        )
    } else {
        return None;
    };
    *offset = i + n;
    Some(cpt)
}

/// `unicode_cpts_from_utf8`: every invalid byte becomes U+FFFD and decoding goes on at the
/// next byte.
pub fn cpts_from_utf8(s: &[u8]) -> Vec<u32> {
    let mut out = Vec::with_capacity(s.len());
    let mut offset = 0;
    while offset < s.len() {
        match cpt_from_utf8(s, &mut offset) {
            Some(c) => out.push(c),
            None => {
                offset += 1;
                out.push(0xFFFD);
            }
        }
    }
    out
}

/// `unicode_cpt_to_utf8` appended to `out`; false (nothing appended) above U+10FFFF, where
/// upstream throws.
pub fn push_utf8(cpt: u32, out: &mut Vec<u8>) -> bool {
    if cpt <= 0x7F {
        out.push(cpt as u8);
    } else if cpt <= 0x7FF {
        out.extend_from_slice(&[0xC0 | ((cpt >> 6) & 0x1F) as u8, 0x80 | (cpt & 0x3F) as u8]);
    } else if cpt <= 0xFFFF {
        out.extend_from_slice(&[
            0xE0 | ((cpt >> 12) & 0x0F) as u8,
            0x80 | ((cpt >> 6) & 0x3F) as u8,
            0x80 | (cpt & 0x3F) as u8,
        ]);
    } else if cpt <= 0x10FFFF {
        out.extend_from_slice(&[
            0xF0 | ((cpt >> 18) & 0x07) as u8,
            0x80 | ((cpt >> 12) & 0x3F) as u8,
            0x80 | ((cpt >> 6) & 0x3F) as u8,
            0x80 | (cpt & 0x3F) as u8,
        ]);
    } else {
        return false;
    }
    true
}

/// `unicode_cpt_to_utf8`; None above U+10FFFF.
pub fn cpt_to_utf8(cpt: u32) -> Option<Vec<u8>> {
    let mut v = Vec::with_capacity(4);
    push_utf8(cpt, &mut v).then_some(v)
}

/// Code points per block of the two-level flags table.
const BLOCK: usize = 256;

/// Upstream's per-code-point flags (`unicode_cpt_flags_array`), as a two-level table: the
/// 4,352 blocks of 256 code points index into the distinct blocks (a few hundred), 100 kB or
/// so where a flat table takes 2.2 MB. Built on first use, block by block (the flat table is
/// never materialised).
struct FlagsTable {
    block_of: Vec<u16>,
    blocks: Vec<[u16; BLOCK]>,
}

fn flags_table() -> &'static FlagsTable {
    static TABLE: OnceLock<FlagsTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        // The per-code-point bits, in code point order.
        let mut extra: Vec<(u32, u16)> = Vec::new();
        extra.extend(unicode_data::WHITESPACE.iter().map(|&c| (c, WHITESPACE)));
        extra.extend(MAP_LOWERCASE.iter().map(|&(_, lower)| (lower, LOWERCASE)));
        extra.extend(MAP_UPPERCASE.iter().map(|&(_, upper)| (upper, UPPERCASE)));
        extra.extend(RANGES_NFD.iter().map(|&(_, _, nfd)| (nfd, NFD)));
        extra.sort_unstable_by_key(|&(c, _)| c);
        let ranges = unicode_data::RANGES_FLAGS;
        let n_blocks = MAX_CODEPOINTS as usize / BLOCK;
        let mut block_of = Vec::with_capacity(n_blocks);
        let mut blocks: Vec<[u16; BLOCK]> = Vec::new();
        let mut seen: std::collections::HashMap<[u16; BLOCK], u16> = Default::default();
        let (mut r, mut e) = (0, 0);
        for b in 0..n_blocks {
            let base = (b * BLOCK) as u32;
            let mut block = [UNDEFINED; BLOCK];
            for (k, f) in block.iter_mut().enumerate() {
                let cpt = base + k as u32;
                // RANGES_FLAGS: (start, flags) sorted; a range runs to the next start, and
                // code points past the last start keep UNDEFINED.
                while r + 1 < ranges.len() && ranges[r + 1].0 <= cpt {
                    r += 1;
                }
                if r + 1 < ranges.len() && ranges[r].0 <= cpt {
                    *f = ranges[r].1;
                }
                while e < extra.len() && extra[e].0 == cpt {
                    *f |= extra[e].1;
                    e += 1;
                }
            }
            let next = blocks.len() as u16;
            let index = *seen.entry(block).or_insert_with(|| {
                blocks.push(block);
                next
            });
            block_of.push(index);
        }
        blocks.shrink_to_fit();
        FlagsTable { block_of, blocks }
    })
}

/// `unicode_cpt_flags_from_cpt(cpt).as_uint()`: UNDEFINED beyond the table.
pub fn flags(cpt: u32) -> u16 {
    let t = flags_table();
    match t.block_of.get(cpt as usize / BLOCK) {
        Some(&b) => t.blocks[usize::from(b)][cpt as usize % BLOCK],
        None => UNDEFINED,
    }
}

/// Flags at `pos` of a fragment, or 0 outside it (the splitters' `_get_flags`).
pub fn is_whitespace(cpt: u32) -> bool {
    flags(cpt) & WHITESPACE != 0
}

/// `unicode_tolower`.
pub fn tolower(cpt: u32) -> u32 {
    match MAP_LOWERCASE.binary_search_by_key(&cpt, |&(from, _)| from) {
        Ok(i) => MAP_LOWERCASE[i].1,
        Err(_) => cpt,
    }
}

/// `unicode_cpts_normalize_nfd` for one code point (upstream maps each to its first
/// decomposed code point).
pub fn nfd(cpt: u32) -> u32 {
    let i = RANGES_NFD.partition_point(|&(first, _, _)| first <= cpt);
    match i.checked_sub(1).map(|i| RANGES_NFD[i]) {
        Some((first, last, to)) if first <= cpt && cpt <= last => to,
        _ => cpt,
    }
}

/// `unicode_cpt_is_han`.
pub fn is_han(cpt: u32) -> bool {
    matches!(cpt,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B820..=0x2CEAF | 0x2CEB0..=0x2EBEF | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lax_decoding_matches_upstream() {
        assert_eq!(cpts_from_utf8(b"a\xC3\xA9"), vec![0x61, 0xE9]);
        // A lone continuation byte and a truncated sequence each become U+FFFD.
        assert_eq!(
            cpts_from_utf8(b"\x80\xE2\x82"),
            vec![0xFFFD, 0xFFFD, 0xFFFD]
        );
        // Surrogates and overlong forms decode, as upstream's decoder does.
        assert_eq!(cpts_from_utf8(b"\xED\xA0\x80"), vec![0xD800]);
        assert_eq!(cpts_from_utf8(b"\xC0\x80"), vec![0]);
        assert_eq!(cpts_from_utf8(b"\xF7\xBF\xBF\xBF"), vec![0x1FFFFF]);
        assert_eq!(cpt_to_utf8(0x1FFFFF), None);
    }

    /// The two-level table equals the flat table built the way upstream builds its array.
    #[test]
    fn two_level_flags_equal_the_flat_table() {
        let mut flat = vec![UNDEFINED; MAX_CODEPOINTS as usize];
        for w in unicode_data::RANGES_FLAGS.windows(2) {
            flat[w[0].0 as usize..w[1].0 as usize].fill(w[0].1);
        }
        for &c in unicode_data::WHITESPACE {
            flat[c as usize] |= WHITESPACE;
        }
        for &(_, lower) in MAP_LOWERCASE {
            flat[lower as usize] |= LOWERCASE;
        }
        for &(_, upper) in MAP_UPPERCASE {
            flat[upper as usize] |= UPPERCASE;
        }
        for &(_, _, nfd) in RANGES_NFD {
            flat[nfd as usize] |= NFD;
        }
        for (cpt, &f) in flat.iter().enumerate() {
            assert_eq!(flags(cpt as u32), f, "U+{cpt:04X}");
        }
        assert!(
            flags_table().blocks.len() < 1024,
            "{} distinct blocks",
            flags_table().blocks.len()
        );
    }

    #[test]
    fn flags_follow_upstream_tables() {
        assert_ne!(flags('a' as u32) & LETTER, 0);
        assert_ne!(flags('5' as u32) & NUMBER, 0);
        assert_ne!(flags(0x85) & WHITESPACE, 0);
        assert_ne!(flags(0x0301) & ACCENT_MARK, 0);
        assert_eq!(flags(0x110000), UNDEFINED);
        assert_eq!(tolower('A' as u32), 'a' as u32);
        assert_eq!(nfd(0xE9), 'e' as u32);
    }
}
