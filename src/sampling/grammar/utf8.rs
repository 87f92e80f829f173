//! Upstream's incremental UTF-8 decoding of token pieces (`decode_utf8` with a
//! `llama_partial_utf8` carried between tokens), byte for byte: a token may end in the middle
//! of a code point and the next token completes it.

/// `llama_partial_utf8`: the bits of an unfinished code point and how many continuation bytes
/// it still needs; `n_remain == -1` marks an invalid sequence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartialUtf8 {
    pub value: u32,
    pub n_remain: i32,
}

/// Decodes `src` (up to its first NUL, C-string semantics) continuing `partial_start`.
/// Returns the complete code points followed by a terminating 0, and the unfinished tail.
/// On an invalid sequence the code points are cut (as upstream) and `n_remain` is -1.
pub fn decode_utf8(src: &[u8], partial_start: PartialUtf8) -> (Vec<u32>, PartialUtf8) {
    const LOOKUP: [i32; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4];
    let end = src.iter().position(|&b| b == 0).unwrap_or(src.len());
    let src = &src[..end];
    let mut code_points = Vec::with_capacity(src.len() + 1);
    let mut value = partial_start.value;
    let mut n_remain = partial_start.n_remain;
    let mut pos = 0usize;

    // continue the previous code point, if any
    while pos < src.len() && n_remain > 0 {
        let next_byte = src[pos];
        if next_byte >> 6 != 2 {
            // invalid sequence: abort (upstream keeps what it decoded so far, i.e. nothing)
            code_points.push(0);
            return (
                code_points,
                PartialUtf8 {
                    value: 0,
                    n_remain: -1,
                },
            );
        }
        value = (value << 6) + u32::from(next_byte & 0x3F);
        pos += 1;
        n_remain -= 1;
    }
    if partial_start.n_remain > 0 && n_remain == 0 {
        code_points.push(value);
    }

    // the following code points, the last of which may be incomplete
    while pos < src.len() {
        let first_byte = src[pos];
        n_remain = LOOKUP[usize::from(first_byte >> 4)] - 1;
        if n_remain < 0 {
            // invalid sequence: abort
            code_points.clear();
            code_points.push(0);
            return (code_points, PartialUtf8 { value: 0, n_remain });
        }
        let mask = (1u32 << (7 - n_remain)) - 1;
        value = u32::from(first_byte) & mask;
        pos += 1;
        while pos < src.len() && n_remain > 0 {
            value = (value << 6) + u32::from(src[pos] & 0x3F);
            pos += 1;
            n_remain -= 1;
        }
        if n_remain == 0 {
            code_points.push(value);
        }
    }
    code_points.push(0);
    (code_points, PartialUtf8 { value, n_remain })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRESH: PartialUtf8 = PartialUtf8 {
        value: 0,
        n_remain: 0,
    };

    #[test]
    fn whole_and_split_code_points() {
        let (cps, p) = decode_utf8("aé€😀".as_bytes(), FRESH);
        assert_eq!(cps, vec![0x61, 0xE9, 0x20AC, 0x1F600, 0]);
        assert_eq!(p.n_remain, 0);

        let bytes = "😀".as_bytes();
        let (cps, p) = decode_utf8(&bytes[..1], FRESH);
        assert_eq!(cps, vec![0]);
        assert_eq!(p.n_remain, 3);
        let (cps, p) = decode_utf8(&bytes[1..3], p);
        assert_eq!(cps, vec![0]);
        assert_eq!(p.n_remain, 1);
        let (cps, p) = decode_utf8(&bytes[3..], p);
        assert_eq!(cps, vec![0x1F600, 0]);
        assert_eq!(p.n_remain, 0);
    }

    #[test]
    fn invalid_sequences() {
        // a lone continuation byte cuts everything decoded so far
        let (cps, p) = decode_utf8(b"ab\x80", FRESH);
        assert_eq!(cps, vec![0]);
        assert_eq!(p.n_remain, -1);
        // a pending code point followed by a non-continuation byte
        let (_, p) = decode_utf8(b"\xE2", FRESH);
        let (cps, p) = decode_utf8(b"a", p);
        assert_eq!(cps, vec![0]);
        assert_eq!(
            p,
            PartialUtf8 {
                value: 0,
                n_remain: -1
            }
        );
        // NUL ends the input
        let (cps, _) = decode_utf8(b"a\0b", FRESH);
        assert_eq!(cps, vec![0x61, 0]);
    }
}
