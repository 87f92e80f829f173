//! A model's GGUF metadata, owned, in file order, with kv overrides applied the way upstream
//! applies them: only to typed scalar reads, never to arrays nor to the `meta_*` listing.

use std::collections::HashMap;

/// One metadata value, decoded from the file.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    Int(i128),
    Float(f64, FloatWidth),
    Bool(bool),
    Str(String),
    Array(MetaArray),
}

/// f32 and f64 print the same ("%f") but are distinct GGUF types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloatWidth {
    F32,
    F64,
}

/// An array value. Element types are collapsed to what the model reads.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaArray {
    Ints(Vec<i128>),
    Floats(Vec<f64>),
    Bools(Vec<bool>),
    Strs(Vec<String>),
}

impl MetaArray {
    pub fn len(&self) -> usize {
        match self {
            MetaArray::Ints(v) => v.len(),
            MetaArray::Floats(v) => v.len(),
            MetaArray::Bools(v) => v.len(),
            MetaArray::Strs(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl MetaValue {
    /// Upstream's `gguf_kv_to_str` for scalars: strings raw, integers in decimal, floats as
    /// C's `%f`, bools as true/false. Arrays have no string form here (upstream skips them).
    pub fn to_upstream_string(&self) -> Option<String> {
        Some(match self {
            MetaValue::Int(v) => v.to_string(),
            MetaValue::Float(v, _) => format_c_f(*v),
            MetaValue::Bool(b) => b.to_string(),
            MetaValue::Str(s) => s.clone(),
            MetaValue::Array(_) => return None,
        })
    }
}

/// C's `%f` (std::to_string) for a double.
pub fn format_c_f(v: f64) -> String {
    if v.is_nan() {
        if v.is_sign_negative() {
            "-nan".into()
        } else {
            "nan".into()
        }
    } else if v.is_infinite() {
        if v < 0.0 {
            "-inf".into()
        } else {
            "inf".into()
        }
    } else {
        format!("{v:.6}")
    }
}

/// A kv override from `llama_model_params.kv_overrides`.
#[derive(Clone, Debug, PartialEq)]
pub enum OverrideValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct KvOverride {
    pub key: String,
    pub value: OverrideValue,
}

/// The metadata of the main file plus the overrides.
#[derive(Debug, Default)]
pub struct Metadata {
    entries: Vec<(String, MetaValue)>,
    index: HashMap<String, usize>,
    overrides: HashMap<String, OverrideValue>,
    /// The non-array entries as upstream lists them (`llama_model_meta_*`), in file order.
    listing: Vec<(String, String)>,
}

impl Metadata {
    /// Builds the store. For duplicate override keys the first one wins, as upstream.
    pub fn new(entries: Vec<(String, MetaValue)>, overrides: Vec<KvOverride>) -> Metadata {
        let index = entries
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        let mut override_map = HashMap::new();
        for o in overrides {
            override_map.entry(o.key).or_insert(o.value);
        }
        let listing = entries
            .iter()
            .filter_map(|(k, v)| v.to_upstream_string().map(|s| (k.clone(), s)))
            .collect();
        Metadata {
            entries,
            index,
            overrides: override_map,
            listing,
        }
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// The `meta_*` listing (file order; upstream's is hash order).
    pub fn listing(&self) -> &[(String, String)] {
        &self.listing
    }

    pub fn listing_value(&self, key: &str) -> Option<&str> {
        self.listing
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// An override for `key` if its tag matches `wanted`; a mismatching tag is a warning and
    /// the file's value is used, as upstream.
    fn override_for(&self, key: &str, wanted: &str) -> Option<&OverrideValue> {
        let value = self.overrides.get(key)?;
        let tag = match value {
            OverrideValue::Int(_) => "int",
            OverrideValue::Float(_) => "float",
            OverrideValue::Bool(_) => "bool",
            OverrideValue::Str(_) => "str",
        };
        if tag != wanted {
            crate::log_warn!(
                "Bad metadata override type for key '{key}': expected {wanted} but got {tag}; using the file's value"
            );
            return None;
        }
        crate::log_info!(
            "Using metadata override ({tag:>5}) '{key}' = {}",
            describe(value)
        );
        Some(value)
    }

    /// An integer key (any GGUF integer type), with overrides applied.
    pub fn get_int(&self, key: &str) -> Option<i128> {
        if let Some(OverrideValue::Int(v)) = self.override_for(key, "int") {
            return Some(i128::from(*v));
        }
        match self.get(key)? {
            MetaValue::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub fn get_u32(&self, key: &str) -> Option<u32> {
        self.get_int(key).map(|v| v as u32)
    }

    /// A float key (f32 or f64), with overrides applied.
    pub fn get_f64(&self, key: &str) -> Option<f64> {
        if let Some(OverrideValue::Float(v)) = self.override_for(key, "float") {
            return Some(*v);
        }
        match self.get(key)? {
            MetaValue::Float(v, _) => Some(*v),
            _ => None,
        }
    }

    pub fn get_bool(&self, key: &str) -> Option<bool> {
        if let Some(OverrideValue::Bool(v)) = self.override_for(key, "bool") {
            return Some(*v);
        }
        match self.get(key)? {
            MetaValue::Bool(v) => Some(*v),
            _ => None,
        }
    }

    pub fn get_str(&self, key: &str) -> Option<String> {
        if let Some(OverrideValue::Str(v)) = self.override_for(key, "str") {
            return Some(v.clone());
        }
        match self.get(key)? {
            MetaValue::Str(v) => Some(v.clone()),
            _ => None,
        }
    }

    /// A per-layer value given either as a scalar or as an array (upstream's
    /// `get_key_or_arr`); arrays are read without overrides.
    pub fn get_u32_or_array(&self, key: &str, n_layer: usize) -> Option<Vec<u32>> {
        match self.get(key) {
            Some(MetaValue::Array(MetaArray::Ints(values))) => {
                let mut out: Vec<u32> = values.iter().map(|&v| v as u32).collect();
                out.resize(n_layer.max(out.len()), 0);
                Some(out)
            }
            _ => self.get_u32(key).map(|v| vec![v; n_layer.max(1)]),
        }
    }

    pub fn get_array(&self, key: &str) -> Option<&MetaArray> {
        match self.get(key)? {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

fn describe(value: &OverrideValue) -> String {
    match value {
        OverrideValue::Int(v) => v.to_string(),
        OverrideValue::Float(v) => format_c_f(*v),
        OverrideValue::Bool(v) => v.to_string(),
        OverrideValue::Str(v) => v.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(overrides: Vec<KvOverride>) -> Metadata {
        Metadata::new(
            vec![
                ("a.int".into(), MetaValue::Int(7)),
                ("a.float".into(), MetaValue::Float(10000.0, FloatWidth::F32)),
                (
                    "a.arr".into(),
                    MetaValue::Array(MetaArray::Ints(vec![1, 2])),
                ),
            ],
            overrides,
        )
    }

    #[test]
    fn listing_excludes_arrays_and_formats_like_upstream() {
        let m = meta(vec![]);
        assert_eq!(m.listing().len(), 2);
        assert_eq!(m.listing_value("a.float"), Some("10000.000000"));
    }

    #[test]
    fn overrides_apply_to_reads_but_not_listing_first_wins_mismatch_ignored() {
        let m = meta(vec![
            KvOverride {
                key: "a.int".into(),
                value: OverrideValue::Int(9),
            },
            KvOverride {
                key: "a.int".into(),
                value: OverrideValue::Int(11),
            },
            KvOverride {
                key: "a.float".into(),
                value: OverrideValue::Str("x".into()),
            },
        ]);
        assert_eq!(m.get_int("a.int"), Some(9));
        assert_eq!(m.listing_value("a.int"), Some("7"));
        assert_eq!(m.get_f64("a.float"), Some(10000.0));
    }
}
