//! Adapters a context computes with besides the model's own weights: LoRA adapters (upstream's
//! `llama_adapter_lora`, src/llama-adapter.cpp) and control vectors (`llama_adapter_cvec`).
//!
//! A LoRA adapter is a GGUF file with `general.type = "adapter"`, `adapter.type = "lora"`,
//! the model's `general.architecture`, an optional `adapter.lora.alpha` (f32) and pairs of
//! tensors `<model tensor>.lora_a` / `.lora_b`. For a model tensor `W` of shape `[k, n]`,
//! `A` is `[k, r]` and `B` `[r, n]`, and the graph computes `W x + s · B (A x)` with
//! `s = scale · alpha / r` (`s = scale` when alpha is 0). For `token_embd.weight` the pair is
//! stored the other way round (`A` `[r, n_vocab]`, `B` `[r, n_embd]`): the rows of `A` for the
//! tokens, times `B`. Parsing is pure (bytes in, adapter or error out) so that it can be fuzzed
//! without a model: the caller passes the model's architecture and a shape lookup.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::gguf::{GgmlType, Gguf, GgufValueType, Value};

/// An adapter tensor: its bytes as the file stores them (copied out of the file).
#[derive(Debug)]
pub struct AdapterTensor {
    pub name: String,
    pub ggml_type: GgmlType,
    pub ne: [i64; 4],
    pub bytes: Vec<u8>,
}

impl AdapterTensor {
    /// An F32 tensor of `values`, shaped `[values.len()]` (a control vector's layer).
    pub fn f32_vector(name: String, values: &[f32]) -> AdapterTensor {
        AdapterTensor {
            name,
            ggml_type: GgmlType::F32,
            ne: [values.len() as i64, 1, 1, 1],
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }
}

/// The two factors of one adapted weight.
#[derive(Clone, Debug)]
pub struct LoraWeight {
    pub a: Arc<AdapterTensor>,
    pub b: Arc<AdapterTensor>,
}

impl LoraWeight {
    /// Upstream's `get_scale`: `scale · alpha / rank` (rank = `B.ne[0]`), or `scale` when the
    /// adapter has no alpha.
    pub fn scale(&self, alpha: f32, adapter_scale: f32) -> f32 {
        let rank = self.b.ne[0] as f32;
        if alpha != 0.0 {
            adapter_scale * alpha / rank
        } else {
            adapter_scale
        }
    }
}

/// A loaded LoRA adapter.
#[derive(Debug, Default)]
pub struct LoraAdapter {
    /// `adapter.lora.alpha` (0 when absent).
    pub alpha: f32,
    /// The scalar metadata as strings (`gguf_kv_to_str`), in file order; arrays are left out
    /// as upstream does.
    pub meta: Vec<(String, String)>,
    /// `adapter.alora.invocation_tokens` (an activated LoRA's invocation sequence).
    pub alora_invocation_tokens: Vec<i32>,
    /// Model tensor name → its factors.
    pub weights: HashMap<String, LoraWeight>,
}

/// Why an adapter file was refused (upstream's messages where it has one).
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    #[error("failed to load lora adapter from file: {0}")]
    Gguf(#[from] crate::gguf::GgufError),
    #[error("expect general.type to be 'adapter', but got: {0}")]
    NotAdapter(String),
    #[error("model arch and LoRA arch mismatch (model '{model}', adapter '{adapter}')")]
    ArchMismatch { model: String, adapter: String },
    #[error("expect adapter.type to be 'lora', but got: {0}")]
    NotLora(String),
    #[error("key '{key}' has type {got}, expected {want}")]
    KeyType {
        key: &'static str,
        got: &'static str,
        want: &'static str,
    },
    #[error("LoRA tensor '{0}' has unexpected suffix")]
    Suffix(String),
    #[error("LoRA tensor pair for '{0}' is missing one component")]
    Unpaired(String),
    #[error("LoRA tensor '{0}' does not exist in base model (hint: maybe wrong base model?)")]
    NotInModel(String),
    #[error("tensor '{0}' has incorrect shape (hint: maybe wrong base model?)")]
    Shape(String),
    #[error("lora_a tensor is not transposed (hint: adapter from \"finetune\" example is no longer supported)")]
    NotTransposed,
    #[error(
        "LoRA tensor '{name}' has type {ty}, which llama-hotswap's kernels do not compute with"
    )]
    Type { name: String, ty: &'static str },
}

const KEY_GENERAL_TYPE: &str = "general.type";
const KEY_ARCH: &str = "general.architecture";
const KEY_ADAPTER_TYPE: &str = "adapter.type";
const KEY_ALPHA: &str = "adapter.lora.alpha";
const KEY_ALORA_TOKENS: &str = "adapter.alora.invocation_tokens";

/// A string key, "" when absent (upstream's `get_kv_str`; upstream asserts on another type).
fn kv_str(g: &Gguf<'_>, key: &'static str) -> Result<String, AdapterError> {
    match g.get(key) {
        None => Ok(String::new()),
        Some(Value::Str(s)) => Ok(String::from_utf8_lossy(s).into_owned()),
        Some(v) => Err(AdapterError::KeyType {
            key,
            got: v.type_name(),
            want: "str",
        }),
    }
}

/// Parses a LoRA adapter file held in `bytes` for a model of architecture `arch`.
/// `model_shape` gives the shape of a model tensor by name (None: no such tensor);
/// `type_ok` says whether the engine computes with a tensor type. Checks run in upstream's
/// order, so the first complaint is upstream's.
pub fn parse_lora(
    bytes: &[u8],
    arch: &str,
    model_shape: &dyn Fn(&str) -> Option<[i64; 4]>,
    type_ok: &dyn Fn(GgmlType) -> bool,
) -> Result<LoraAdapter, AdapterError> {
    let g = Gguf::parse(bytes)?;
    let mut adapter = LoraAdapter::default();
    for kv in g.kvs() {
        if !matches!(kv.value, Value::Array(_)) {
            let key = String::from_utf8_lossy(kv.key).into_owned();
            adapter.meta.push((key, kv.value.to_upstream_string()));
        }
    }
    let general_type = kv_str(&g, KEY_GENERAL_TYPE)?;
    if general_type != "adapter" {
        return Err(AdapterError::NotAdapter(general_type));
    }
    let adapter_arch = kv_str(&g, KEY_ARCH)?;
    if adapter_arch != arch {
        return Err(AdapterError::ArchMismatch {
            model: arch.to_string(),
            adapter: adapter_arch,
        });
    }
    let adapter_type = kv_str(&g, KEY_ADAPTER_TYPE)?;
    if adapter_type != "lora" {
        return Err(AdapterError::NotLora(adapter_type));
    }
    adapter.alpha = match g.get(KEY_ALPHA) {
        None => 0.0,
        Some(Value::F32(v)) => *v,
        Some(v) => {
            return Err(AdapterError::KeyType {
                key: KEY_ALPHA,
                got: v.type_name(),
                want: "f32",
            })
        }
    };
    if let Some(v) = g.get(KEY_ALORA_TOKENS) {
        let arr = v.as_array().ok_or(AdapterError::KeyType {
            key: KEY_ALORA_TOKENS,
            got: v.type_name(),
            want: "arr[u32]",
        })?;
        let ids = arr
            .iter::<u32>()
            .filter(|_| arr.elem_type() == GgufValueType::U32)
            .ok_or(AdapterError::KeyType {
                key: KEY_ALORA_TOKENS,
                got: arr.elem_type().name(),
                want: "arr[u32]",
            })?;
        // upstream copies the u32 values into llama_token (i32) as they are
        adapter.alora_invocation_tokens = ids.map(|t| t as i32).collect();
    }

    // pair the factors by model tensor name (upstream walks a std::map: sorted by name)
    let mut pairs: BTreeMap<String, (Option<usize>, Option<usize>)> = BTreeMap::new();
    for (i, t) in g.tensors().iter().enumerate() {
        let name = t.name;
        if name.ends_with(".lora_a") {
            pairs.entry(name.replace(".lora_a", "")).or_default().0 = Some(i);
        } else if name.ends_with(".lora_b") {
            pairs.entry(name.replace(".lora_b", "")).or_default().1 = Some(i);
        } else if name.ends_with("_norm.weight") {
            // upstream skips norm vectors ("most adapters still work fine without it")
            continue;
        } else {
            return Err(AdapterError::Suffix(name.to_string()));
        }
    }
    for (name, pair) in &pairs {
        let (Some(ia), Some(ib)) = *pair else {
            return Err(AdapterError::Unpaired(name.clone()));
        };
        let (a, b) = (&g.tensors()[ia], &g.tensors()[ib]);
        let model_ne = model_shape(name).ok_or_else(|| AdapterError::NotInModel(name.clone()))?;
        if name.ends_with("token_embd.weight") {
            // B is not transposed: A [r, n_vocab], B [r, n_embd] (upstream's build_inp_embd)
            if model_ne[0] != b.ne[1] || model_ne[1] != a.ne[1] || a.ne[0] != b.ne[0] {
                return Err(AdapterError::Shape(name.clone()));
            }
        } else {
            if model_ne[0] != a.ne[0] || model_ne[1] != b.ne[1] {
                return Err(AdapterError::Shape(name.clone()));
            }
            if a.ne[1] != b.ne[0] {
                return Err(AdapterError::NotTransposed);
            }
        }
        // Upstream checks two dimensions only. An expert weight's factors carry one matrix
        // per expert (`build_lora_mm_id`); a third dimension other than the weight's would
        // abort upstream's MUL_MAT_ID at the first decode, so it is refused here, as is a
        // fourth.
        let n_expert = model_ne[2];
        if model_ne[3] != 1 || a.ne[2..] != [n_expert, 1] || b.ne[2..] != [n_expert, 1] {
            return Err(AdapterError::Shape(name.clone()));
        }
        let copy = |t: &crate::gguf::TensorInfo<'_>| -> Result<Arc<AdapterTensor>, AdapterError> {
            if !type_ok(t.ggml_type) {
                return Err(AdapterError::Type {
                    name: t.name.to_string(),
                    ty: t.ggml_type.name(),
                });
            }
            // the parser checked that every tensor's data lies within the bytes
            let data = g.tensor_data(t).unwrap_or_default();
            Ok(Arc::new(AdapterTensor {
                name: t.name.to_string(),
                ggml_type: t.ggml_type,
                ne: t.ne,
                bytes: data.to_vec(),
            }))
        };
        let w = LoraWeight {
            a: copy(a)?,
            b: copy(b)?,
        };
        adapter.weights.insert(name.clone(), w);
    }
    Ok(adapter)
}

/// A control vector (upstream's `llama_adapter_cvec`): one direction per layer, added to the
/// layer's output for layers `layer_start ..= layer_end`. Layer 0 never has one.
#[derive(Debug, Default)]
pub struct ControlVector {
    pub layer_start: i32,
    pub layer_end: i32,
    /// Per layer (index = layer); None for layer 0.
    pub layers: Vec<Option<Arc<AdapterTensor>>>,
}

impl ControlVector {
    /// Upstream's `llama_adapter_cvec::apply` with data: layer `il` (1 ≤ il < n_layer) gets
    /// `data[n_embd·(il-1) ..][..n_embd]` when `data` holds it, else keeps `previous`'s
    /// direction for that layer (zeros at first), as upstream keeps its tensors.
    pub fn new(
        previous: Option<&ControlVector>,
        data: &[f32],
        n_embd: usize,
        n_layer: usize,
        il_start: i32,
        il_end: i32,
    ) -> ControlVector {
        let mut layers = Vec::with_capacity(n_layer);
        layers.push(None);
        for il in 1..n_layer {
            let off = n_embd * (il - 1);
            let t = match data.get(off..off + n_embd) {
                Some(v) => Arc::new(AdapterTensor::f32_vector(format!("cvec.{il}"), v)),
                None => match previous.and_then(|p| p.layers.get(il).cloned().flatten()) {
                    Some(t) => t,
                    None => Arc::new(AdapterTensor::f32_vector(
                        format!("cvec.{il}"),
                        &vec![0.0; n_embd],
                    )),
                },
            };
            layers.push(Some(t));
        }
        ControlVector {
            layer_start: il_start,
            layer_end: il_end,
            layers,
        }
    }

    /// Upstream's `tensor_for`: the direction of layer `il`, if it is in range.
    pub fn tensor_for(&self, il: usize) -> Option<&Arc<AdapterTensor>> {
        let il_i = i32::try_from(il).ok()?;
        if il_i < self.layer_start || il_i > self.layer_end {
            return None;
        }
        self.layers.get(il)?.as_ref()
    }
}

/// The LoRA parser's fuzz harness (fuzz/fuzz_targets/lora_reader.rs) and its seed, shared
/// with the replay in tests/adapter.rs.
pub mod harness {
    use super::*;
    use crate::gguf::{GgufWriter, MetaArray, MetaValue};

    /// The fake model the harness validates against: a token table, two 2-D weights and an
    /// expert tensor.
    pub fn model_shape(name: &str) -> Option<[i64; 4]> {
        match name {
            "token_embd.weight" => Some([8, 16, 1, 1]),
            "blk.0.attn_q.weight" => Some([8, 8, 1, 1]),
            "blk.0.ffn_up.weight" => Some([8, 12, 1, 1]),
            "blk.0.ffn_up_exps.weight" => Some([8, 12, 4, 1]),
            _ => None,
        }
    }

    /// The types the harness's engine computes with.
    pub fn type_ok(t: GgmlType) -> bool {
        t == GgmlType::F32 || t == GgmlType::F16
    }

    /// A valid adapter for [`model_shape`]: rank 2, alpha 4, F32 factors for the token table
    /// and the two weights, three invocation tokens; `edit` changes the writer first.
    pub fn sample(edit: impl FnOnce(&mut GgufWriter)) -> Vec<u8> {
        let mut w = GgufWriter::new();
        w.set("general.architecture", "llama");
        w.set("general.type", "adapter");
        w.set("adapter.type", "lora");
        w.set("adapter.lora.alpha", MetaValue::F32(4.0));
        w.set(
            "adapter.alora.invocation_tokens",
            MetaValue::Array(MetaArray::U32(vec![7, 11, 13])),
        );
        let pairs: [(&str, [i64; 2], [i64; 2]); 3] = [
            ("token_embd.weight", [2, 16], [2, 8]),
            ("blk.0.attn_q.weight", [8, 2], [2, 8]),
            ("blk.0.ffn_up.weight", [8, 2], [2, 12]),
        ];
        for (name, a, b) in pairs {
            let va: Vec<f32> = (0..a[0] * a[1]).map(|i| i as f32 * 0.01).collect();
            let vb: Vec<f32> = (0..b[0] * b[1]).map(|i| 0.5 - i as f32 * 0.02).collect();
            w.add_tensor_f32(&format!("{name}.lora_a"), &a, GgmlType::F32, &va)
                .expect("valid tensor");
            w.add_tensor_f32(&format!("{name}.lora_b"), &b, GgmlType::F32, &vb)
                .expect("valid tensor");
        }
        edit(&mut w);
        w.to_bytes().expect("valid file")
    }

    /// Parses `data` as an adapter of the fake model: any input may be refused, none may
    /// panic; an accepted adapter's factors hold exactly their shapes' bytes and chain as
    /// the graph multiplies them.
    pub fn check_lora(data: &[u8]) {
        let Ok(a) = parse_lora(data, "llama", &model_shape, &type_ok) else {
            return;
        };
        assert!(a.alora_invocation_tokens.len() <= data.len() / 4);
        for (name, w) in &a.weights {
            let model = model_shape(name).expect("validated against the model");
            for t in [&w.a, &w.b] {
                assert_eq!(
                    Some(t.bytes.len() as u64),
                    t.ggml_type.nbytes(t.ne),
                    "{}",
                    t.name
                );
            }
            if name == "token_embd.weight" {
                assert_eq!(
                    (w.a.ne[1], w.b.ne[1], w.a.ne[0]),
                    (model[1], model[0], w.b.ne[0])
                );
            } else {
                assert_eq!(
                    (w.a.ne[0], w.a.ne[1], w.b.ne[1]),
                    (model[0], w.b.ne[0], model[1])
                );
            }
        }
    }
}
