//! The ggml tensor type table of the pinned upstream (`ggml/include/ggml.h` and the
//! `type_traits` table in `ggml/src/ggml.c`), and the GGUF metadata value types.
//!
//! A [`GgmlType`] can only be built from an id that the pinned upstream accepts in a GGUF
//! file: ids of removed types (block size 0) and ids at or above [`GGML_TYPE_COUNT`] are
//! refused, so every `GgmlType` has a non-zero block and type size.

use std::fmt;

/// `GGML_TYPE_COUNT` of the pinned upstream header: ids at or above it are invalid.
pub const GGML_TYPE_COUNT: u32 = 43;

/// Upstream's `GGML_PAD(x, n)` for a power-of-two `n`, with overflow reported as `None`.
pub fn pad_to(x: u64, alignment: u64) -> Option<u64> {
    debug_assert!(alignment.is_power_of_two());
    Some(x.checked_add(alignment - 1)? & !(alignment - 1))
}

/// One row of the type table: (name, block size in elements, bytes per block, quantized).
struct TypeTraits {
    name: &'static str,
    block_size: u32,
    type_size: u32,
    is_quantized: bool,
}

const fn t(name: &'static str, block_size: u32, type_size: u32, is_quantized: bool) -> TypeTraits {
    TypeTraits {
        name,
        block_size,
        type_size,
        is_quantized,
    }
}

/// Removed ids keep a row so the table can be indexed by id; block size 0 marks them.
const REMOVED: TypeTraits = t("DEPRECATED", 0, 0, false);
const QK_K: u32 = 256;

/// Indexed by type id. Sizes are `sizeof(block_*)` from `ggml-common.h`.
const TYPE_TABLE: [TypeTraits; GGML_TYPE_COUNT as usize] = [
    t("f32", 1, 4, false),        // 0
    t("f16", 1, 2, false),        // 1
    t("q4_0", 32, 18, true),      // 2
    t("q4_1", 32, 20, true),      // 3
    REMOVED,                      // 4  Q4_2
    REMOVED,                      // 5  Q4_3
    t("q5_0", 32, 22, true),      // 6
    t("q5_1", 32, 24, true),      // 7
    t("q8_0", 32, 34, true),      // 8
    t("q8_1", 32, 36, true),      // 9
    t("q2_K", QK_K, 84, true),    // 10
    t("q3_K", QK_K, 110, true),   // 11
    t("q4_K", QK_K, 144, true),   // 12
    t("q5_K", QK_K, 176, true),   // 13
    t("q6_K", QK_K, 210, true),   // 14
    t("q8_K", QK_K, 292, true),   // 15
    t("iq2_xxs", QK_K, 66, true), // 16
    t("iq2_xs", QK_K, 74, true),  // 17
    t("iq3_xxs", QK_K, 98, true), // 18
    t("iq1_s", QK_K, 50, true),   // 19
    t("iq4_nl", 32, 18, true),    // 20
    t("iq3_s", QK_K, 110, true),  // 21
    t("iq2_s", QK_K, 82, true),   // 22
    t("iq4_xs", QK_K, 136, true), // 23
    t("i8", 1, 1, false),         // 24
    t("i16", 1, 2, false),        // 25
    t("i32", 1, 4, false),        // 26
    t("i64", 1, 8, false),        // 27
    t("f64", 1, 8, false),        // 28
    t("iq1_m", QK_K, 56, true),   // 29
    t("bf16", 1, 2, false),       // 30
    REMOVED,                      // 31 Q4_0_4_4
    REMOVED,                      // 32 Q4_0_4_8
    REMOVED,                      // 33 Q4_0_8_8
    t("tq1_0", QK_K, 54, true),   // 34
    t("tq2_0", QK_K, 66, true),   // 35
    REMOVED,                      // 36 IQ4_NL_4_4
    REMOVED,                      // 37 IQ4_NL_4_8
    REMOVED,                      // 38 IQ4_NL_8_8
    t("mxfp4", 32, 17, true),     // 39
    t("nvfp4", 64, 36, true),     // 40
    t("q1_0", 128, 18, true),     // 41
    t("q2_0", 64, 18, true),      // 42
];

/// A ggml tensor type id that the pinned upstream accepts in GGUF files.
///
/// Built only through [`GgmlType::from_id`] or the named constants, never transmuted from
/// input, so the accessors below cannot fail.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GgmlType(u32);

macro_rules! ggml_type_consts {
    ($($name:ident = $id:expr),* $(,)?) => {
        impl GgmlType {
            $(pub const $name: GgmlType = GgmlType($id);)*
        }
    };
}

ggml_type_consts! {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
    IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
    IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
    TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41, Q2_0 = 42,
}

impl GgmlType {
    /// The type for `id`, or `None` for negative ids, ids of removed types and ids at or
    /// above [`GGML_TYPE_COUNT`].
    pub fn from_id(id: i32) -> Option<GgmlType> {
        let index = usize::try_from(id).ok()?;
        let traits = TYPE_TABLE.get(index)?;
        (traits.block_size != 0).then_some(GgmlType(index as u32))
    }

    /// Whether `id` names a type that existed but was removed (block size 0 upstream).
    pub fn is_removed_id(id: i32) -> bool {
        usize::try_from(id)
            .ok()
            .and_then(|i| TYPE_TABLE.get(i))
            .is_some_and(|traits| traits.block_size == 0)
    }

    /// Every accepted type, in id order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        (0..GGML_TYPE_COUNT as i32).filter_map(GgmlType::from_id)
    }

    pub fn id(self) -> u32 {
        self.0
    }

    fn traits(self) -> &'static TypeTraits {
        &TYPE_TABLE[self.0 as usize]
    }

    /// Upstream's `ggml_type_name`: "f32", "q4_0", "q4_K", "bf16", ...
    pub fn name(self) -> &'static str {
        self.traits().name
    }

    /// Elements per block (1 for plain types).
    pub fn block_size(self) -> u64 {
        u64::from(self.traits().block_size)
    }

    /// Bytes per block.
    pub fn type_size(self) -> u64 {
        u64::from(self.traits().type_size)
    }

    pub fn is_quantized(self) -> bool {
        self.traits().is_quantized
    }

    /// Bytes of one row of `ne0` elements, or `None` when `ne0` is negative, not a multiple
    /// of the block size, or the size overflows.
    pub fn row_size(self, ne0: i64) -> Option<u64> {
        let ne0 = u64::try_from(ne0).ok()?;
        if ne0 % self.block_size() != 0 {
            return None;
        }
        (ne0 / self.block_size()).checked_mul(self.type_size())
    }

    /// Bytes of a contiguous tensor of shape `ne`, or `None` when a dimension is negative,
    /// `ne[0]` is not a multiple of the block size, or the size overflows.
    pub fn nbytes(self, ne: [i64; 4]) -> Option<u64> {
        let row = self.row_size(ne[0])?;
        ne[1..]
            .iter()
            .try_fold(row, |acc, &n| acc.checked_mul(u64::try_from(n).ok()?))
    }
}

impl fmt::Debug for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GgmlType({}={})", self.0, self.name())
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `enum gguf_type`: the type of a metadata value or of an array's elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgufValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

/// `GGUF_TYPE_COUNT`.
pub const GGUF_TYPE_COUNT: u32 = 13;

impl GgufValueType {
    pub fn from_id(id: i32) -> Option<GgufValueType> {
        use GgufValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    pub fn id(self) -> i32 {
        self as i32
    }

    /// Upstream's `gguf_type_name`: "u8", "i8", ..., "str", "arr", ..., "f64".
    pub fn name(self) -> &'static str {
        use GgufValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "str",
            Array => "arr",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }

    /// Bytes of one fixed-size value; `None` for strings and arrays (upstream's size 0).
    pub fn fixed_size(self) -> Option<usize> {
        use GgufValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }
}

impl fmt::Display for GgufValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_and_out_of_range_ids_are_rejected() {
        for id in [4, 5, 31, 32, 33, 36, 37, 38, 43, 44, -1, i32::MIN, i32::MAX] {
            assert_eq!(GgmlType::from_id(id), None, "id {id}");
        }
        for id in [4, 5, 31, 32, 33, 36, 37, 38] {
            assert!(GgmlType::is_removed_id(id));
        }
        assert_eq!(GgmlType::all().count(), 43 - 8);
    }

    #[test]
    fn table_matches_upstream_sizes() {
        assert_eq!(GgmlType::Q4_0.type_size(), 18);
        assert_eq!(GgmlType::Q8_0.type_size(), 34);
        assert_eq!(GgmlType::Q4_K.block_size(), 256);
        assert_eq!(GgmlType::Q4_K.type_size(), 144);
        assert_eq!(GgmlType::Q4_K.name(), "q4_K");
        assert_eq!(GgmlType::BF16.name(), "bf16");
        assert_eq!(GgmlType::Q2_0.block_size(), 64);
        assert!(GgmlType::Q8_0.is_quantized());
        assert!(!GgmlType::BF16.is_quantized());
        for ty in GgmlType::all() {
            assert!(ty.block_size() > 0 && ty.type_size() > 0);
            assert_eq!(GgmlType::from_id(ty.id() as i32), Some(ty));
        }
    }

    #[test]
    fn sizes_use_checked_arithmetic() {
        assert_eq!(GgmlType::Q8_0.row_size(64), Some(68));
        assert_eq!(GgmlType::Q8_0.row_size(33), None);
        assert_eq!(GgmlType::F32.row_size(-1), None);
        assert_eq!(GgmlType::F16.nbytes([4, 3, 2, 1]), Some(48));
        assert_eq!(GgmlType::F64.nbytes([i64::MAX, 2, 1, 1]), None);
        assert_eq!(GgmlType::F32.nbytes([8, 0, 1, 1]), Some(0));
    }

    #[test]
    fn pad_to_matches_ggml_pad() {
        assert_eq!(pad_to(0, 32), Some(0));
        assert_eq!(pad_to(1, 32), Some(32));
        assert_eq!(pad_to(64, 32), Some(64));
        assert_eq!(pad_to(u64::MAX, 32), None);
    }
}
