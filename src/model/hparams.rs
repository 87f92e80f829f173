//! Hyperparameters read generically from the `<arch>.` keys, so any architecture loads.

use super::meta::{MetaArray, Metadata};

#[derive(Debug, Clone)]
pub struct HParams {
    pub n_ctx_train: u32,
    pub n_embd: u32,
    pub n_embd_out: u32,
    pub n_layer_all: u32,
    pub n_layer_nextn: u32,
    pub n_head: Vec<u32>,
    pub n_head_kv: Vec<u32>,
    pub n_ff: Vec<u32>,
    pub n_expert: u32,
    pub n_expert_used: u32,
    pub n_swa: u32,
    pub rope_freq_base_train: f32,
    pub rope_freq_scale_train: f32,
    pub n_cls_out: u32,
    pub dec_start_token: i32,
    /// `<arch>.rope.dimension_sections` (M-RoPE), as upstream's `get_key_or_arr(.., 4)`:
    /// an array fills the first entries, a scalar all four; absent → zeros.
    pub rope_sections: [i32; 4],
}

impl Default for HParams {
    /// Upstream's defaults, which a vocab-only model keeps.
    fn default() -> Self {
        HParams {
            n_ctx_train: 0,
            n_embd: 0,
            n_embd_out: 0,
            n_layer_all: 0,
            n_layer_nextn: 0,
            n_head: Vec::new(),
            n_head_kv: Vec::new(),
            n_ff: Vec::new(),
            n_expert: 0,
            n_expert_used: 0,
            n_swa: 0,
            rope_freq_base_train: 0.0,
            rope_freq_scale_train: 0.0,
            n_cls_out: 1,
            dec_start_token: -1,
            rope_sections: [0; 4],
        }
    }
}

/// Upstream's `get_key_or_arr(key, rope_sections, 4)`: longer arrays are an error.
fn rope_sections(meta: &Metadata, key: &str) -> Result<[i32; 4], String> {
    let mut sections = [0i32; 4];
    match meta.get_array(key) {
        Some(MetaArray::Ints(values)) => {
            if values.len() > sections.len() {
                return Err(format!(
                    "array length {} for key {key} exceeds max 4",
                    values.len()
                ));
            }
            for (slot, &v) in sections.iter_mut().zip(values) {
                *slot = v as i32;
            }
        }
        Some(_) => {
            return Err(format!(
                "key {key} has wrong array type (expected integers)"
            ))
        }
        None => {
            if let Some(v) = meta.get_int(key) {
                sections = [v as i32; 4];
            }
        }
    }
    Ok(sections)
}

impl HParams {
    /// Reads the hyperparameters of architecture `arch`. Required keys (context and
    /// embedding length, block count) are errors when missing, as upstream.
    pub fn load(meta: &Metadata, arch: &str) -> Result<HParams, String> {
        let key = |suffix: &str| format!("{arch}.{suffix}");
        let required = |suffix: &str| {
            meta.get_u32(&key(suffix))
                .ok_or_else(|| format!("key not found in model: {}", key(suffix)))
        };
        let n_layer_all = required("block_count")?;
        if n_layer_all == 0 || n_layer_all > 512 {
            return Err(format!("invalid {}: {n_layer_all}", key("block_count")));
        }
        let n_layer_nextn = meta.get_u32(&key("nextn_predict_layers")).unwrap_or(0);
        if n_layer_nextn > n_layer_all {
            return Err(format!(
                "{} = {n_layer_nextn} exceeds block_count",
                key("nextn_predict_layers")
            ));
        }
        let layers = n_layer_all as usize;
        let n_head = meta
            .get_u32_or_array(&key("attention.head_count"), layers)
            .unwrap_or_else(|| vec![0; layers]);
        let n_head_kv = meta
            .get_u32_or_array(&key("attention.head_count_kv"), layers)
            .unwrap_or_else(|| n_head.clone());
        let n_ff = meta
            .get_u32_or_array(&key("feed_forward_length"), layers)
            .unwrap_or_else(|| vec![0; layers]);
        let n_embd = required("embedding_length")?;
        let rope_scale = meta
            .get_f64(&key("rope.scaling.factor"))
            .or_else(|| meta.get_f64(&key("rope.scale_linear")))
            .unwrap_or(0.0) as f32;
        let n_cls_out = match meta.get_array(&key("classifier.output_labels")) {
            Some(labels) if !labels.is_empty() => labels.len() as u32,
            _ => 1,
        };
        Ok(HParams {
            n_ctx_train: required("context_length")?,
            n_embd,
            n_embd_out: meta
                .get_u32(&key("embedding_length_out"))
                .filter(|&v| v > 0)
                .unwrap_or(n_embd),
            n_layer_all,
            n_layer_nextn,
            n_head,
            n_head_kv,
            n_ff,
            n_expert: meta.get_u32(&key("expert_count")).unwrap_or(0),
            n_expert_used: meta.get_u32(&key("expert_used_count")).unwrap_or(0),
            n_swa: meta.get_u32(&key("attention.sliding_window")).unwrap_or(0),
            rope_freq_base_train: meta.get_f64(&key("rope.freq_base")).unwrap_or(10000.0) as f32,
            rope_freq_scale_train: if rope_scale == 0.0 {
                1.0
            } else {
                1.0 / rope_scale
            },
            n_cls_out,
            dec_start_token: meta
                .get_u32(&key("decoder_start_token_id"))
                .map_or(-1, |v| v as i32),
            rope_sections: rope_sections(meta, &key("rope.dimension_sections"))?,
        })
    }

    pub fn n_layer(&self) -> u32 {
        self.n_layer_all - self.n_layer_nextn
    }

    /// Heads of layer 0, as upstream's getters report; 0 for a vocab-only model (upstream
    /// aborts there).
    pub fn n_head0(&self) -> u32 {
        self.n_head.first().copied().unwrap_or(0)
    }

    pub fn n_head_kv0(&self) -> u32 {
        self.n_head_kv.first().copied().unwrap_or(0)
    }
}

/// The classifier labels (`<arch>.classifier.output_labels`).
pub fn classifier_labels(meta: &Metadata, arch: &str) -> Vec<String> {
    match meta.get_array(&format!("{arch}.classifier.output_labels")) {
        Some(MetaArray::Strs(labels)) => labels.clone(),
        _ => Vec::new(),
    }
}
