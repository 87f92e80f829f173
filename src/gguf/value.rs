//! Metadata values as they lie in the file: scalars decoded, strings and arrays borrowed.

use std::borrow::Cow;
use std::fmt::Write as _;

use super::types::GgufValueType;

/// One metadata value. Strings are the raw bytes of the file (GGUF does not promise UTF-8).
#[derive(Clone, Debug, PartialEq)]
pub enum Value<'a> {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(&'a [u8]),
    Array(ArrayValue<'a>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl<'a> Value<'a> {
    pub fn value_type(&self) -> GgufValueType {
        match self {
            Value::U8(_) => GgufValueType::U8,
            Value::I8(_) => GgufValueType::I8,
            Value::U16(_) => GgufValueType::U16,
            Value::I16(_) => GgufValueType::I16,
            Value::U32(_) => GgufValueType::U32,
            Value::I32(_) => GgufValueType::I32,
            Value::F32(_) => GgufValueType::F32,
            Value::Bool(_) => GgufValueType::Bool,
            Value::Str(_) => GgufValueType::String,
            Value::Array(_) => GgufValueType::Array,
            Value::U64(_) => GgufValueType::U64,
            Value::I64(_) => GgufValueType::I64,
            Value::F64(_) => GgufValueType::F64,
        }
    }

    /// The `gguf_type` id (9 for arrays, like `gguf_get_kv_type`).
    pub fn gguf_type_id(&self) -> i32 {
        self.value_type().id()
    }

    /// Upstream's `gguf_type_name` of the value's type ("arr" for arrays).
    pub fn type_name(&self) -> &'static str {
        self.value_type().name()
    }

    /// The string, when the value is a string holding valid UTF-8.
    pub fn as_str(&self) -> Option<&'a str> {
        match self {
            Value::Str(bytes) => std::str::from_utf8(bytes).ok(),
            _ => None,
        }
    }

    /// The string, borrowed when it is UTF-8 and with replacement characters otherwise.
    pub fn to_str_lossy(&self) -> Option<Cow<'a, str>> {
        match self {
            Value::Str(bytes) => Some(String::from_utf8_lossy(bytes)),
            _ => None,
        }
    }

    /// The raw bytes of a string value.
    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match self {
            Value::Str(bytes) => Some(bytes),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&ArrayValue<'a>> {
        match self {
            Value::Array(array) => Some(array),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// Any integer type, converted when it fits in `i64` (a `u64` above `i64::MAX` gives `None`).
    pub fn to_i64(&self) -> Option<i64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::I8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::U64(v) => i64::try_from(v).ok(),
            Value::I64(v) => Some(v),
            _ => None,
        }
    }

    /// Any integer type, converted when it is non-negative.
    pub fn to_u64(&self) -> Option<u64> {
        match *self {
            Value::U64(v) => Some(v),
            _ => self.to_i64().and_then(|v| u64::try_from(v).ok()),
        }
    }

    /// `f32` or `f64`.
    pub fn to_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    /// Upstream's `gguf_kv_to_str` (src/llama-impl.cpp): strings verbatim (lossy when not
    /// UTF-8), integers in decimal, floats as C's `%f`, booleans as "true"/"false", arrays as
    /// `[a, b, ...]` with strings quoted and `\` and `"` escaped.
    pub fn to_upstream_string(&self) -> String {
        match self {
            Value::Str(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            Value::Array(array) => array.to_upstream_string(),
            scalar => {
                let mut out = String::new();
                scalar_to_upstream(scalar, &mut out);
                out
            }
        }
    }
}

/// Appends a non-string scalar the way `gguf_data_to_str` prints it.
fn scalar_to_upstream(value: &Value<'_>, out: &mut String) {
    // Writing to a String cannot fail.
    let _ = match *value {
        Value::U8(v) => write!(out, "{v}"),
        Value::I8(v) => write!(out, "{v}"),
        Value::U16(v) => write!(out, "{v}"),
        Value::I16(v) => write!(out, "{v}"),
        Value::U32(v) => write!(out, "{v}"),
        Value::I32(v) => write!(out, "{v}"),
        Value::U64(v) => write!(out, "{v}"),
        Value::I64(v) => write!(out, "{v}"),
        Value::F32(v) => write_c_percent_f(f64::from(v), out),
        Value::F64(v) => write_c_percent_f(v, out),
        Value::Bool(v) => write!(out, "{}", if v { "true" } else { "false" }),
        Value::Str(_) | Value::Array(_) => Ok(()),
    };
}

/// C's `printf("%f")` (what `std::to_string` of a float prints). Rust's fixed-precision
/// formatting rounds the exact binary value half-to-even like glibc; only the spelling of
/// non-finite values differs.
fn write_c_percent_f(v: f64, out: &mut String) -> std::fmt::Result {
    if v.is_nan() {
        out.push_str(if v.is_sign_negative() { "-nan" } else { "nan" });
        Ok(())
    } else if v.is_infinite() {
        out.push_str(if v < 0.0 { "-inf" } else { "inf" });
        Ok(())
    } else {
        write!(out, "{v:.6}")
    }
}

/// A metadata array: the element type, the element count and the raw element bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct ArrayValue<'a> {
    elem_type: GgufValueType,
    len: usize,
    /// The element bytes as stored; for strings, each element's u64 length and its bytes.
    raw: &'a [u8],
    /// For string arrays only: where each element's bytes start within `raw`, so that
    /// `get_str` is O(1). Costs 8 bytes per element, and each element used 8 input bytes.
    str_starts: Vec<usize>,
}

impl<'a> ArrayValue<'a> {
    /// Built by the reader, which has checked that `raw` holds `len` elements.
    pub(crate) fn new(
        elem_type: GgufValueType,
        len: usize,
        raw: &'a [u8],
        str_starts: Vec<usize>,
    ) -> Self {
        ArrayValue {
            elem_type,
            len,
            raw,
            str_starts,
        }
    }

    pub fn elem_type(&self) -> GgufValueType {
        self.elem_type
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes of the elements as they are stored in the file.
    pub fn raw_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// The elements as `T`, when `T` is exactly the element type.
    pub fn iter<T: ArrayElement>(&self) -> Option<impl ExactSizeIterator<Item = T> + 'a> {
        (self.elem_type == T::TYPE).then(|| self.raw.chunks_exact(T::SIZE).map(T::decode))
    }

    /// The elements of any integer type (and bool, as 0 or 1) as `i64`; `u64` elements are
    /// reinterpreted as a C cast would (values above `i64::MAX` become negative).
    pub fn iter_i64(&self) -> Option<impl ExactSizeIterator<Item = i64> + 'a> {
        let decode: fn(&[u8]) -> i64 = match self.elem_type {
            GgufValueType::U8 => |b| u8::decode(b).into(),
            GgufValueType::I8 => |b| i8::decode(b).into(),
            GgufValueType::U16 => |b| u16::decode(b).into(),
            GgufValueType::I16 => |b| i16::decode(b).into(),
            GgufValueType::U32 => |b| u32::decode(b).into(),
            GgufValueType::I32 => |b| i32::decode(b).into(),
            GgufValueType::U64 => |b| u64::decode(b) as i64,
            GgufValueType::I64 => i64::decode,
            GgufValueType::Bool => |b| bool::decode(b).into(),
            _ => return None,
        };
        let size = self.elem_type.fixed_size()?;
        Some(self.raw.chunks_exact(size).map(decode))
    }

    /// The elements of an `f32` or `f64` array as `f64`.
    pub fn iter_f64(&self) -> Option<impl ExactSizeIterator<Item = f64> + 'a> {
        let decode: fn(&[u8]) -> f64 = match self.elem_type {
            GgufValueType::F32 => |b| f32::decode(b).into(),
            GgufValueType::F64 => f64::decode,
            _ => return None,
        };
        let size = self.elem_type.fixed_size()?;
        Some(self.raw.chunks_exact(size).map(decode))
    }

    /// Element `index` of a string array, as raw bytes.
    pub fn get_str(&self, index: usize) -> Option<&'a [u8]> {
        let start = *self.str_starts.get(index)?;
        let len_bytes = self.raw.get(start.checked_sub(8)?..start)?;
        let len = usize::try_from(u64::decode(len_bytes)).ok()?;
        self.raw.get(start..start.checked_add(len)?)
    }

    /// The elements of a string array, as raw bytes.
    pub fn iter_str(&self) -> Option<impl ExactSizeIterator<Item = &'a [u8]> + '_> {
        (self.elem_type == GgufValueType::String)
            .then(|| (0..self.str_starts.len()).map(|i| self.get_str(i).unwrap_or_default()))
    }

    /// One element as a [`Value`] (strings borrowed); `None` past the end.
    pub fn get(&self, index: usize) -> Option<Value<'a>> {
        if index >= self.len {
            return None;
        }
        if self.elem_type == GgufValueType::String {
            return self.get_str(index).map(Value::Str);
        }
        let size = self.elem_type.fixed_size()?;
        let bytes = self.raw.get(index * size..(index + 1) * size)?;
        decode_scalar(self.elem_type, bytes)
    }

    /// Upstream's `gguf_kv_to_str` for an array.
    pub fn to_upstream_string(&self) -> String {
        let mut out = String::from("[");
        for index in 0..self.len {
            match self.get(index) {
                Some(Value::Str(bytes)) => {
                    let text = String::from_utf8_lossy(bytes);
                    out.push('"');
                    out.push_str(&text.replace('\\', "\\\\").replace('"', "\\\""));
                    out.push('"');
                }
                Some(scalar) => scalar_to_upstream(&scalar, &mut out),
                None => {}
            }
            if index + 1 < self.len {
                out.push_str(", ");
            }
        }
        out.push(']');
        out
    }
}

/// Decodes a fixed-size scalar of type `ty` from exactly its bytes.
pub(crate) fn decode_scalar(ty: GgufValueType, bytes: &[u8]) -> Option<Value<'static>> {
    if Some(bytes.len()) != ty.fixed_size() {
        return None;
    }
    Some(match ty {
        GgufValueType::U8 => Value::U8(u8::decode(bytes)),
        GgufValueType::I8 => Value::I8(i8::decode(bytes)),
        GgufValueType::U16 => Value::U16(u16::decode(bytes)),
        GgufValueType::I16 => Value::I16(i16::decode(bytes)),
        GgufValueType::U32 => Value::U32(u32::decode(bytes)),
        GgufValueType::I32 => Value::I32(i32::decode(bytes)),
        GgufValueType::F32 => Value::F32(f32::decode(bytes)),
        GgufValueType::Bool => Value::Bool(bool::decode(bytes)),
        GgufValueType::U64 => Value::U64(u64::decode(bytes)),
        GgufValueType::I64 => Value::I64(i64::decode(bytes)),
        GgufValueType::F64 => Value::F64(f64::decode(bytes)),
        GgufValueType::String | GgufValueType::Array => return None,
    })
}

mod sealed {
    pub trait Sealed {}
}

/// A fixed-size type that can be an array element: `u8`, `i8`, `u16`, `i16`, `u32`, `i32`,
/// `f32`, `bool`, `u64`, `i64`, `f64`.
pub trait ArrayElement: sealed::Sealed + Sized + 'static {
    const TYPE: GgufValueType;
    const SIZE: usize;
    /// Decodes one little-endian element from exactly `SIZE` bytes.
    fn decode(bytes: &[u8]) -> Self;
}

macro_rules! array_element {
    ($($t:ty => $variant:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl ArrayElement for $t {
            const TYPE: GgufValueType = GgufValueType::$variant;
            const SIZE: usize = std::mem::size_of::<$t>();
            fn decode(bytes: &[u8]) -> Self {
                let mut buf = [0u8; std::mem::size_of::<$t>()];
                buf.copy_from_slice(&bytes[..Self::SIZE]);
                <$t>::from_le_bytes(buf)
            }
        }
    )*};
}

array_element!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
               f32 => F32, u64 => U64, i64 => I64, f64 => F64);

impl sealed::Sealed for bool {}
impl ArrayElement for bool {
    const TYPE: GgufValueType = GgufValueType::Bool;
    const SIZE: usize = 1;
    /// GGUF stores bools as int8; any non-zero byte is true, as upstream reads them.
    fn decode(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_c() {
        assert_eq!(Value::F32(1.5).to_upstream_string(), "1.500000");
        assert_eq!(Value::F64(0.0078125).to_upstream_string(), "0.007812");
        assert_eq!(Value::F32(f32::INFINITY).to_upstream_string(), "inf");
        assert_eq!(Value::F64(-f64::INFINITY).to_upstream_string(), "-inf");
        assert_eq!(Value::F32(f32::NAN).to_upstream_string(), "nan");
        assert_eq!(Value::F32(1e-5).to_upstream_string(), "0.000010");
    }

    #[test]
    fn scalars_print_like_upstream() {
        assert_eq!(Value::Bool(true).to_upstream_string(), "true");
        assert_eq!(Value::I8(-5).to_upstream_string(), "-5");
        assert_eq!(
            Value::U64(u64::MAX).to_upstream_string(),
            "18446744073709551615"
        );
        assert_eq!(Value::Str(b"a\"b").to_upstream_string(), "a\"b");
    }

    #[test]
    fn array_of_strings_prints_quoted_and_escaped() {
        // Two strings: "a\"b" and "c\\".
        let mut raw = Vec::new();
        raw.extend_from_slice(&3u64.to_le_bytes());
        raw.extend_from_slice(b"a\"b");
        raw.extend_from_slice(&2u64.to_le_bytes());
        raw.extend_from_slice(b"c\\");
        let array = ArrayValue::new(GgufValueType::String, 2, &raw, vec![8, 19]);
        assert_eq!(array.get_str(1), Some(&b"c\\"[..]));
        assert_eq!(array.to_upstream_string(), r#"["a\"b", "c\\"]"#);
    }

    #[test]
    fn integer_arrays_iterate_as_i64() {
        let raw: Vec<u8> = [1i16, -2, 300]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let array = ArrayValue::new(GgufValueType::I16, 3, &raw, Vec::new());
        assert_eq!(
            array.iter_i64().unwrap().collect::<Vec<_>>(),
            vec![1, -2, 300]
        );
        assert!(array.iter::<i32>().is_none());
        assert_eq!(array.to_upstream_string(), "[1, -2, 300]");
        assert!(array.iter_f64().is_none());
    }
}
