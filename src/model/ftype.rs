//! `llama_ftype` names, as upstream's `llama_ftype_name` prints them.

use std::ffi::CStr;

/// Bit set when the file type was guessed from the tensor types (no `general.file_type`).
pub const FTYPE_GUESSED: i32 = 1024;

/// Upstream's name for a file type; guessed types get the "(guessed) " prefix.
pub fn ftype_name(ftype: i32) -> &'static CStr {
    let guessed = ftype & FTYPE_GUESSED != 0;
    let (plain, prefixed): (&CStr, &CStr) = match ftype & !FTYPE_GUESSED {
        0 => (c"all F32", c"(guessed) all F32"),
        1 => (c"F16", c"(guessed) F16"),
        32 => (c"BF16", c"(guessed) BF16"),
        40 => (c"Q1_0", c"(guessed) Q1_0"),
        41 => (c"Q2_0", c"(guessed) Q2_0"),
        2 => (c"Q4_0", c"(guessed) Q4_0"),
        3 => (c"Q4_1", c"(guessed) Q4_1"),
        8 => (c"Q5_0", c"(guessed) Q5_0"),
        9 => (c"Q5_1", c"(guessed) Q5_1"),
        7 => (c"Q8_0", c"(guessed) Q8_0"),
        38 => (c"MXFP4 MoE", c"(guessed) MXFP4 MoE"),
        39 => (c"NVFP4", c"(guessed) NVFP4"),
        10 => (c"Q2_K - Medium", c"(guessed) Q2_K - Medium"),
        21 => (c"Q2_K - Small", c"(guessed) Q2_K - Small"),
        11 => (c"Q3_K - Small", c"(guessed) Q3_K - Small"),
        12 => (c"Q3_K - Medium", c"(guessed) Q3_K - Medium"),
        13 => (c"Q3_K - Large", c"(guessed) Q3_K - Large"),
        14 => (c"Q4_K - Small", c"(guessed) Q4_K - Small"),
        15 => (c"Q4_K - Medium", c"(guessed) Q4_K - Medium"),
        16 => (c"Q5_K - Small", c"(guessed) Q5_K - Small"),
        17 => (c"Q5_K - Medium", c"(guessed) Q5_K - Medium"),
        18 => (c"Q6_K", c"(guessed) Q6_K"),
        36 => (
            c"TQ1_0 - 1.69 bpw ternary",
            c"(guessed) TQ1_0 - 1.69 bpw ternary",
        ),
        37 => (
            c"TQ2_0 - 2.06 bpw ternary",
            c"(guessed) TQ2_0 - 2.06 bpw ternary",
        ),
        19 => (c"IQ2_XXS - 2.0625 bpw", c"(guessed) IQ2_XXS - 2.0625 bpw"),
        20 => (c"IQ2_XS - 2.3125 bpw", c"(guessed) IQ2_XS - 2.3125 bpw"),
        28 => (c"IQ2_S - 2.5 bpw", c"(guessed) IQ2_S - 2.5 bpw"),
        29 => (c"IQ2_M - 2.7 bpw", c"(guessed) IQ2_M - 2.7 bpw"),
        22 => (c"IQ3_XS - 3.3 bpw", c"(guessed) IQ3_XS - 3.3 bpw"),
        23 => (c"IQ3_XXS - 3.0625 bpw", c"(guessed) IQ3_XXS - 3.0625 bpw"),
        24 => (c"IQ1_S - 1.5625 bpw", c"(guessed) IQ1_S - 1.5625 bpw"),
        31 => (c"IQ1_M - 1.75 bpw", c"(guessed) IQ1_M - 1.75 bpw"),
        25 => (c"IQ4_NL - 4.5 bpw", c"(guessed) IQ4_NL - 4.5 bpw"),
        30 => (c"IQ4_XS - 4.25 bpw", c"(guessed) IQ4_XS - 4.25 bpw"),
        26 => (c"IQ3_S - 3.4375 bpw", c"(guessed) IQ3_S - 3.4375 bpw"),
        27 => (c"IQ3_S mix - 3.66 bpw", c"(guessed) IQ3_S mix - 3.66 bpw"),
        _ => (c"unknown, may not work", c"(guessed) unknown, may not work"),
    };
    if guessed {
        prefixed
    } else {
        plain
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_upstream_spelling() {
        assert_eq!(ftype_name(15).to_str().unwrap(), "Q4_K - Medium");
        assert_eq!(ftype_name(1024 | 1).to_str().unwrap(), "(guessed) F16");
        assert_eq!(ftype_name(999).to_str().unwrap(), "unknown, may not work");
        assert_eq!(ftype_name(0).to_str().unwrap(), "all F32");
    }
}
