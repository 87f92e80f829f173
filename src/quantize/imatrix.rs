//! Importance-matrix files as upstream's `llama-imatrix` writes them and `llama-quantize
//! --imatrix` reads them (common/imatrix-loader.cpp, tools/quantize/quantize.cpp
//! `load_imatrix`): the GGUF format (per weight `<name>.in_sum2`, F32 `[n_per_row, n_mat]`
//! sums of squared activations, and `<name>.counts`, F32 `[1, n_mat]` token counts; metadata
//! `imatrix.datasets`, `imatrix.chunk_count`, `imatrix.chunk_size`) and the legacy binary
//! format. Read into the values `llama-quantize` hands `llama_model_quantize`: sums divided
//! by their counts (a matrix that saw no token gets 1s), per weight name.
//!
//! Upstream divides by zero on an entry with no counts, allocates whatever a legacy name
//! length says and accepts NaN sums; here every such file is refused with the entry and the
//! reason, and nothing is read past the end of the input.

use std::collections::BTreeMap;
use std::path::Path;

use crate::gguf::{GgmlType, Gguf};

/// A parsed importance matrix.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Imatrix {
    /// Per weight name: `n_per_row * n_mat` values, as `llama-quantize` normalises them.
    pub entries: BTreeMap<String, Vec<f32>>,
    /// The calibration texts (`imatrix.datasets`).
    pub datasets: Vec<String>,
    pub chunk_count: i32,
    pub chunk_size: i32,
    /// The legacy binary format (no GGUF).
    pub legacy: bool,
}

/// Why an imatrix file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ImatrixError {
    #[error("cannot read '{path}': {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("not a valid GGUF imatrix: {0}")]
    Gguf(String),
    #[error("legacy imatrix: {0}")]
    Legacy(String),
    #[error("imatrix entry '{name}': {why}")]
    Entry { name: String, why: String },
}

impl Imatrix {
    /// Reads the file at `path` (GGUF when it starts with the GGUF magic, else legacy).
    pub fn read(path: &Path) -> Result<Imatrix, ImatrixError> {
        let bytes = std::fs::read(path).map_err(|source| ImatrixError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Imatrix::parse(&bytes)
    }

    /// Parses a whole file held in memory.
    pub fn parse(bytes: &[u8]) -> Result<Imatrix, ImatrixError> {
        let m = if bytes.starts_with(b"GGUF") {
            parse_gguf(bytes)?
        } else {
            parse_legacy(bytes)?
        };
        for (name, values) in &m.entries {
            if let Some(bad) = values.iter().find(|v| !v.is_finite()) {
                return Err(entry(name, format!("non-finite value {bad}")));
            }
        }
        Ok(m)
    }

    /// The values of weight `name` for a tensor of shape `ne` (`ne[0] * ne[2]` values: one
    /// row per expert), as `llama_model_quantize` checks them; `None` when the file has no
    /// entry for it.
    pub fn for_tensor(&self, name: &str, ne: [i64; 4]) -> Result<Option<&[f32]>, ImatrixError> {
        let Some(v) = self.entries.get(name) else {
            return Ok(None);
        };
        let want = (ne[0].max(0) as u64).saturating_mul(ne[2].max(1) as u64);
        if v.len() as u64 != want {
            return Err(entry(
                name,
                format!(
                    "{} values, the tensor (shape {:?}) needs {want}: the imatrix was made for another model",
                    v.len(),
                    &ne[..]
                ),
            ));
        }
        Ok(Some(v))
    }
}

fn entry(name: &str, why: String) -> ImatrixError {
    ImatrixError::Entry {
        name: name.to_string(),
        why,
    }
}

fn parse_gguf(bytes: &[u8]) -> Result<Imatrix, ImatrixError> {
    let g = Gguf::parse(bytes).map_err(|e| ImatrixError::Gguf(e.to_string()))?;
    if g.tensors().is_empty() {
        return Err(ImatrixError::Gguf("no data (no tensors)".into()));
    }
    let u32_of = |key: &str| g.get(key).and_then(|v| v.to_u64()).map(|v| v as u32 as i32);
    let datasets_value = g.get("imatrix.datasets");
    let mut m = Imatrix {
        chunk_count: u32_of("imatrix.chunk_count").unwrap_or(0),
        chunk_size: u32_of("imatrix.chunk_size").unwrap_or(0),
        ..Imatrix::default()
    };
    if let Some(arr) = datasets_value.and_then(|v| v.as_array()) {
        for i in 0..arr.len() {
            if let Some(s) = arr.get_str(i) {
                m.datasets.push(String::from_utf8_lossy(s).into_owned());
            }
        }
    }
    // upstream's llama-quantize refuses a GGUF imatrix without its metadata
    if datasets_value.is_none()
        || g.get("imatrix.chunk_count").is_none()
        || g.get("imatrix.chunk_size").is_none()
    {
        return Err(ImatrixError::Gguf(
            "missing imatrix metadata (imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size)"
                .into(),
        ));
    }
    let mut pairs: BTreeMap<&str, (Option<usize>, Option<usize>)> = BTreeMap::new();
    for (i, t) in g.tensors().iter().enumerate() {
        if let Some(n) = t.name.strip_suffix(".in_sum2") {
            pairs.entry(n).or_default().0 = Some(i);
        } else if let Some(n) = t.name.strip_suffix(".counts") {
            pairs.entry(n).or_default().1 = Some(i);
        }
    }
    for (name, pair) in pairs {
        let (Some(s), Some(c)) = pair else {
            return Err(entry(name, "mismatched sums and counts".into()));
        };
        let (st, ct) = (&g.tensors()[s], &g.tensors()[c]);
        if st.ggml_type != GgmlType::F32 || ct.ggml_type != GgmlType::F32 {
            return Err(entry(name, "sums and counts must be F32".into()));
        }
        let floats = |t| -> Result<Vec<f32>, ImatrixError> {
            let data = g
                .tensor_data(t)
                .ok_or_else(|| entry(name, "data outside the file".into()))?;
            Ok(data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect())
        };
        let sums = floats(st)?;
        // upstream: std::lround of each stored count
        let counts: Vec<i64> = floats(ct)?.iter().map(|&c| c.round() as i64).collect();
        if counts.is_empty() || sums.is_empty() || sums.len() % counts.len() != 0 {
            return Err(entry(
                name,
                format!(
                    "{} sums do not split into {} matrices",
                    sums.len(),
                    counts.len()
                ),
            ));
        }
        let ne0 = sums.len() / counts.len();
        let mut values = vec![0f32; sums.len()];
        for (j, &count) in counts.iter().enumerate() {
            let count = count as f32;
            for i in 0..ne0 {
                values[j * ne0 + i] = if count > 0.0 {
                    sums[j * ne0 + i] / count
                } else {
                    1.0
                };
            }
        }
        m.entries.insert(name.to_string(), values);
    }
    if m.entries.is_empty() {
        return Err(ImatrixError::Gguf(
            "no '<name>.in_sum2' / '<name>.counts' entries".into(),
        ));
    }
    Ok(m)
}

/// A little-endian cursor that never reads past the end.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], ImatrixError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                ImatrixError::Legacy(format!(
                    "truncated: {what} needs {n} bytes at offset {}, the file has {}",
                    self.at,
                    self.bytes.len()
                ))
            })?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn i32(&mut self, what: &str) -> Result<i32, ImatrixError> {
        let b = self.take(4, what)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

fn parse_legacy(bytes: &[u8]) -> Result<Imatrix, ImatrixError> {
    let mut c = Cursor { bytes, at: 0 };
    let n_entries = c.i32("the entry count")?;
    if n_entries < 1 {
        return Err(ImatrixError::Legacy(format!(
            "no data ({n_entries} entries)"
        )));
    }
    let mut m = Imatrix {
        legacy: true,
        ..Imatrix::default()
    };
    for i in 0..n_entries {
        let len = c.i32("a name length")?;
        let len = usize::try_from(len)
            .map_err(|_| ImatrixError::Legacy(format!("entry {}: name length {len}", i + 1)))?;
        let raw = c.take(len, "a name")?;
        // upstream keeps the name up to its first NUL
        let raw = raw.split(|&b| b == 0).next().unwrap_or(raw);
        let name = String::from_utf8_lossy(raw).into_owned();
        let ncall = c.i32("a call count")?;
        let nval = c.i32("a value count")?;
        if nval < 1 {
            return Err(entry(&name, format!("{nval} values")));
        }
        let data = c.take(nval as usize * 4, "the values")?;
        let sums = data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        // sums hold (raw / count) * ncall: divided by ncall, as llama-quantize does
        let values: Vec<f32> = if ncall > 0 {
            sums.map(|s| s / ncall as f32).collect()
        } else {
            sums.collect()
        };
        m.entries.insert(name, values);
    }
    // optional trailer: chunk count, then the dataset name
    if c.at < bytes.len() {
        if let Ok(n) = c.i32("the chunk count") {
            m.chunk_count = n;
            if let Ok(len) = c.i32("the dataset name length") {
                if len > 0 {
                    if let Ok(s) = c.take(len as usize, "the dataset name") {
                        let s = s.split(|&b| b == 0).next().unwrap_or(s);
                        m.datasets.push(String::from_utf8_lossy(s).into_owned());
                    }
                }
            }
        }
    }
    Ok(m)
}

/// The fuzz harness (fuzz/fuzz_targets/imatrix_reader.rs; `cargo test` replays a few
/// hundred mutations of valid files): any bytes are refused with an error or accepted, and
/// an accepted matrix holds only finite values in non-empty entries.
pub fn fuzz_check(data: &[u8]) {
    if let Ok(m) = Imatrix::parse(data) {
        for (name, v) in &m.entries {
            assert!(!v.is_empty(), "accepted an empty entry '{name}'");
            assert!(
                v.iter().all(|x| x.is_finite()),
                "accepted a non-finite value in '{name}'"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn legacy(entries: &[(&str, i32, &[f32])], trailer: Option<(i32, &str)>) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend((entries.len() as i32).to_le_bytes());
        for (name, ncall, vals) in entries {
            b.extend((name.len() as i32).to_le_bytes());
            b.extend(name.as_bytes());
            b.extend(ncall.to_le_bytes());
            b.extend((vals.len() as i32).to_le_bytes());
            for v in *vals {
                b.extend(v.to_le_bytes());
            }
        }
        if let Some((n, ds)) = trailer {
            b.extend(n.to_le_bytes());
            b.extend((ds.len() as i32).to_le_bytes());
            b.extend(ds.as_bytes());
        }
        b
    }

    #[test]
    fn legacy_values_are_divided_by_their_call_count() {
        let b = legacy(
            &[
                ("blk.0.ffn_up.weight", 4, &[4.0, 8.0]),
                ("output.weight", 0, &[3.0]),
            ],
            Some((10, "wiki.txt")),
        );
        let m = Imatrix::parse(&b).unwrap();
        assert!(m.legacy);
        assert_eq!(m.entries["blk.0.ffn_up.weight"], vec![1.0, 2.0]);
        assert_eq!(m.entries["output.weight"], vec![3.0]);
        assert_eq!(
            (m.chunk_count, m.datasets.clone()),
            (10, vec!["wiki.txt".to_string()])
        );
        let ne = [2, 7, 1, 1];
        assert_eq!(
            m.for_tensor("blk.0.ffn_up.weight", ne).unwrap(),
            Some(&[1.0, 2.0][..])
        );
        assert!(m.for_tensor("blk.0.ffn_up.weight", [4, 7, 1, 1]).is_err());
        assert_eq!(m.for_tensor("blk.1.ffn_up.weight", ne).unwrap(), None);
    }

    #[test]
    fn hostile_legacy_files_are_refused() {
        let good = legacy(&[("a.weight", 1, &[1.0, 2.0])], None);
        for cut in 0..good.len() {
            assert!(
                Imatrix::parse(&good[..cut]).is_err(),
                "accepted a file cut at {cut}"
            );
        }
        let mut huge_name = good.clone();
        huge_name[4..8].copy_from_slice(&i32::MAX.to_le_bytes());
        assert!(Imatrix::parse(&huge_name).is_err());
        let mut negative = good.clone();
        negative[4..8].copy_from_slice(&(-5i32).to_le_bytes());
        assert!(Imatrix::parse(&negative).is_err());
        let nan = legacy(&[("a.weight", 1, &[f32::NAN])], None);
        let err = Imatrix::parse(&nan).unwrap_err().to_string();
        assert!(
            err.contains("a.weight") && err.contains("non-finite"),
            "{err}"
        );
    }

    #[test]
    fn fuzz_replay_of_mutated_files() {
        let good = legacy(
            &[("a.weight", 2, &[1.0, 2.0, 3.0]), ("b", 1, &[5.0])],
            Some((3, "x")),
        );
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..500 {
            let mut b = good.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() as usize) % b.len();
                b[at] = next() as u8;
            }
            fuzz_check(&b);
            let cut = (next() as usize) % b.len();
            fuzz_check(&b[..cut]);
        }
    }
}
