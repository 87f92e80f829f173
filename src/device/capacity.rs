//! The `LLAMA_VIRTUAL_GPUS` grammar: byte capacities such as `24GiB` (see the module docs of
//! [`crate::device`] for the full grammar).

use thiserror::Error;

/// A malformed entry of `LLAMA_VIRTUAL_GPUS` (the device it would have described is skipped).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid virtual GPU capacity {entry:?}: {reason}")]
pub struct CapacityError {
    /// The entry as written (without surrounding whitespace).
    pub entry: String,
    /// What is wrong with it.
    pub reason: String,
}

impl CapacityError {
    fn new(entry: &str, reason: impl Into<String>) -> Self {
        CapacityError {
            entry: entry.to_string(),
            reason: reason.into(),
        }
    }
}

/// The unit suffixes, lower-case, with their multipliers.
const UNITS: [(&str, u64); 10] = [
    ("b", 1),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
    ("", 1),
];

/// Parses one capacity: `<number> [<unit>]` with optional whitespace around and between.
/// `<number>` is decimal digits with an optional `.` and fraction digits (the product with the
/// unit is rounded down to whole bytes); `<unit>` is one of `B KiB MiB GiB TiB KB MB GB TB`,
/// case-insensitive; no unit means bytes. The result must be at least one byte and fit in
/// both `u64` and `usize`.
pub fn parse_capacity(entry: &str) -> Result<u64, CapacityError> {
    let text = entry.trim();
    if text.is_empty() {
        return Err(CapacityError::new(text, "empty entry"));
    }
    let number_len = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, rest) = text.split_at(number_len);
    if number.is_empty() {
        return Err(CapacityError::new(text, "missing number"));
    }
    let unit = rest.trim().to_ascii_lowercase();
    let multiplier = UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, m)| *m)
        .ok_or_else(|| {
            CapacityError::new(
                text,
                format!(
                    "unknown unit {:?} (expected B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)",
                    rest.trim()
                ),
            )
        })?;

    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(CapacityError::new(text, "missing digits"));
    }
    if frac_part.contains('.') {
        return Err(CapacityError::new(text, "more than one decimal point"));
    }
    let too_large = || CapacityError::new(text, "capacity too large");
    // value = (int_part.frac_part) * multiplier, computed exactly in u128 then rounded down.
    let digits = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(too_large());
    }
    let mantissa: u128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| too_large())?
    };
    let scale = 10u128
        .checked_pow(u32::try_from(frac_part.len()).map_err(|_| too_large())?)
        .ok_or_else(too_large)?;
    let bytes = mantissa
        .checked_mul(u128::from(multiplier))
        .ok_or_else(too_large)?
        / scale;
    let bytes = u64::try_from(bytes).map_err(|_| too_large())?;
    if usize::try_from(bytes).is_err() {
        return Err(too_large());
    }
    if bytes == 0 {
        return Err(CapacityError::new(text, "capacity must be at least 1 byte"));
    }
    Ok(bytes)
}

/// Parses the whole `LLAMA_VIRTUAL_GPUS` value: comma-separated capacities. Returns the valid
/// capacities in order and one error per malformed entry. An empty (or all-whitespace) value
/// means no virtual GPUs and no errors; otherwise every entry, even an empty one between two
/// commas, is parsed.
pub fn parse_virtual_gpus(spec: &str) -> (Vec<u64>, Vec<CapacityError>) {
    let mut capacities = Vec::new();
    let mut errors = Vec::new();
    if spec.trim().is_empty() {
        return (capacities, errors);
    }
    for entry in spec.split(',') {
        match parse_capacity(entry) {
            Ok(bytes) => capacities.push(bytes),
            Err(e) => errors.push(e),
        }
    }
    (capacities, errors)
}

/// A capacity for humans: the largest binary unit that divides it exactly ("24 GiB",
/// "512 MiB"), else bytes ("1000000 B").
pub fn format_capacity(bytes: u64) -> String {
    const NAMES: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, unit) in NAMES {
        if bytes >= unit && bytes % unit == 0 {
            return format!("{} {name}", bytes / unit);
        }
    }
    format!("{bytes} B")
}
