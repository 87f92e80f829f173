//! What an architecture file declares ([`ArchDef`]) and the pieces its declarations share:
//! the rotary type, the memory, the metadata reader its `hparams` get ([`Keys`]). Every file
//! of this folder depends on this one; this one depends on no architecture, so the registry
//! in `mod.rs` can list them all without a loop.

use super::super::builder::{BuildError, Builder, Gating, Outputs};
use super::super::params::{ArchParams, Ssm};
use super::super::RopeMode;
use crate::model::meta::MetaArray;
use crate::model::Model;

/// The rotary embedding an architecture applies (upstream's `llama_rope_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rope {
    /// No rotary embedding (`LLAMA_ROPE_TYPE_NONE`).
    None,
    /// ggml's rope modes: adjacent pairs (`NORM`) or halves (`NEOX`).
    Mode(RopeMode),
    /// Multi-section rotary embeddings (`MROPE` 8, interleaved `IMROPE` 40) of
    /// vision-language models. On text, where the t/h/w positions are equal and the sections
    /// never reach the 4th (always 0), they rotate exactly as `NEOX`; the graph runs that
    /// text path (see [`mrope_text_is_neox`]).
    Multi(i32),
}

impl Rope {
    /// `enum llama_rope_type`'s value.
    pub fn raw(self) -> i32 {
        match self {
            Rope::None => -1,
            Rope::Mode(RopeMode::Norm) => 0,
            Rope::Mode(RopeMode::Neox) => 2,
            Rope::Mode(RopeMode::Mrope { .. }) => 8,
            Rope::Multi(raw) => raw,
        }
    }
}

/// The memory a context keeps for an architecture (upstream's `create_memory`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// A KV cache of `head_k * n_head_kv` K values and `head_v * n_head_kv` V values per
    /// token and layer (the hyperparameters say how many: MLA's compressed cache sets
    /// `n_head_kv` to 1 and the head sizes to the latent's).
    Kv,
    /// A K-only cache of one compressed head per token and layer (MLA's latent plus its
    /// rotary part, `head_k` values); attention reads V as the first `head_v` of them.
    KvLatent,
    /// Recurrent states only (upstream's `llama_memory_recurrent`): per sequence and layer
    /// a conv row of `n_embd_r` and an SSM row of `n_embd_s` values.
    Recurrent,
    /// A KV cache for the attention layers and recurrent states for the layers
    /// `ArchParams::is_recurrent` names (upstream's `llama_memory_hybrid`).
    Hybrid,
    /// [`Memory::Hybrid`] whose attention layers keep MLA's compressed K-only rows (as
    /// [`Memory::KvLatent`]: upstream's `build_inp_mem_hybrid_k`).
    HybridLatent,
    /// No memory (upstream's `create_memory` returns nullptr: the diffusion models). Every
    /// decode runs as upstream's `encode`: one micro-batch, every token an output,
    /// non-causal attention over the batch's own tokens of the same sequence; nothing is
    /// kept between calls and `llama_get_memory` gives NULL.
    None,
}

impl Memory {
    /// Whether the memory keeps recurrent states.
    pub fn recurrent(self) -> bool {
        matches!(
            self,
            Memory::Recurrent | Memory::Hybrid | Memory::HybridLatent
        )
    }

    /// Whether it keeps a KV cache beside recurrent states.
    pub fn hybrid(self) -> bool {
        matches!(self, Memory::Hybrid | Memory::HybridLatent)
    }

    /// Whether its attention rows are MLA's K-only latent ones.
    pub fn latent(self) -> bool {
        matches!(self, Memory::KvLatent | Memory::HybridLatent)
    }
}

/// Everything the engine knows about one architecture.
pub struct ArchDef {
    /// `general.architecture` values this definition runs.
    pub names: &'static [&'static str],
    pub rope: Rope,
    pub memory: Memory,
    /// Reads the hyperparameters beyond the common ones into `hp` (upstream's
    /// `load_arch_hparams`); the common ones (sizes, heads, norms' eps, rope base and
    /// scaling, expert counts) are read for every architecture by [`super::load_params`].
    pub hparams: fn(&Keys, &mut ArchParams) -> Result<(), String>,
    /// Builds the graph of one micro-batch.
    pub graph: fn(&mut Builder) -> Result<Outputs, BuildError>,
}

/// Whether M-RoPE of `raw` type (8: sections in order, 40: interleaved) with `sections`
/// rotates text tokens as NEOX: every one of the `n_rot / 2` rotated pairs takes its angle
/// from the t, h or w position (equal on text), never from the 4th, as ggml's
/// `rope_multi` picks them.
pub fn mrope_text_is_neox(raw: i32, sections: [i32; 4], n_rot: usize) -> bool {
    let [t, h, w, e] = sections.map(|s| s.max(0) as usize);
    let sect_dims = (t + h + w + e).max(1);
    (0..n_rot / 2).all(|pair| {
        let sector = pair % sect_dims;
        if raw == 40 {
            (sector % 3 == 0 && sector < 3 * t)
                || (sector % 3 == 1 && sector < 3 * h)
                || (sector % 3 == 2 && sector < 3 * w)
        } else {
            sector < t + h + w
        }
    })
}

/// The M-RoPE check of an architecture's `hparams`: the text path must be NEOX.
pub fn check_mrope_text(k: &Keys, hp: &ArchParams, raw: i32) -> Result<(), String> {
    let sections = k.model.hparams.rope_sections;
    if mrope_text_is_neox(raw, sections, hp.n_rot) {
        Ok(())
    } else {
        Err(format!(
            "rope sections {sections:?} use the 4th position on text: not supported yet"
        ))
    }
}

/// No hyperparameters beyond the common ones.
pub fn no_hparams(_: &Keys, _: &mut ArchParams) -> Result<(), String> {
    Ok(())
}

/// The metadata of a model under its architecture's prefix (`<arch>.<key>`), for the
/// [`ArchDef::hparams`] readers.
pub struct Keys<'m> {
    pub model: &'m Model,
    pub arch: &'m str,
}

impl Keys<'_> {
    pub fn key(&self, s: &str) -> String {
        format!("{}.{s}", self.arch)
    }

    pub fn f32(&self, s: &str, default: f32) -> f32 {
        self.model
            .meta
            .get_f64(&self.key(s))
            .map_or(default, |v| v as f32)
    }

    pub fn u32(&self, s: &str, default: u32) -> u32 {
        self.model.meta.get_u32(&self.key(s)).unwrap_or(default)
    }

    pub fn f32_opt(&self, s: &str) -> Option<f32> {
        self.model.meta.get_f64(&self.key(s)).map(|v| v as f32)
    }

    /// A key upstream requires: its absence fails context creation naming it.
    pub fn u32_required(&self, s: &str) -> Result<u32, String> {
        let key = self.key(s);
        self.model
            .meta
            .get_u32(&key)
            .ok_or_else(|| format!("key not found in model: {key}"))
    }

    /// `rope.dimension_sections` when its first two are > 0 (upstream's `use_mrope`).
    pub fn mrope_sections(&self) -> Option<[u32; 4]> {
        let v = self
            .model
            .meta
            .get_u32_or_array(&self.key("rope.dimension_sections"), 4)?;
        let s = [v[0], v[1], v[2], v[3]];
        (s[0] > 0 && s[1] > 0).then_some(s)
    }

    /// An integer array key's values (None: absent or not an integer array).
    pub fn ints(&self, s: &str) -> Option<Vec<i128>> {
        match self.model.meta.get_array(&self.key(s))? {
            MetaArray::Ints(v) => Some(v.clone()),
            _ => None,
        }
    }

    /// Per-layer flags from an array key (integers: `!= 0`; layers past its end:
    /// `default`), or `default` for every layer when the key is absent or not an array.
    pub fn layer_flags(&self, s: &str, n_layer: usize, default: bool) -> Vec<bool> {
        let key = self.key(s);
        (0..n_layer)
            .map(|il| match self.model.meta.get_array(&key) {
                Some(MetaArray::Ints(v)) => v.get(il).map_or(default, |&x| x != 0),
                Some(MetaArray::Bools(v)) => v.get(il).copied().unwrap_or(default),
                _ => default,
            })
            .collect()
    }

    /// The state-space hyperparameters upstream's Mamba loaders read (`ssm.conv_kernel`,
    /// `ssm.inner_size`, `ssm.state_size`, `ssm.time_step_rank` required; `ssm.group_count`,
    /// `ssm.dt_b_c_rms` optional).
    pub fn ssm(&self) -> Result<Ssm, String> {
        Ok(Ssm {
            d_conv: self.u32_required("ssm.conv_kernel")? as usize,
            d_inner: self.u32_required("ssm.inner_size")? as usize,
            d_state: self.u32_required("ssm.state_size")? as usize,
            dt_rank: self.u32_required("ssm.time_step_rank")? as usize,
            n_group: self.u32("ssm.group_count", 0) as usize,
            dt_b_c_rms: self.bool("ssm.dt_b_c_rms", false),
        })
    }

    /// A required per-layer float (upstream's `get_key_or_arr`): one number for every layer,
    /// or an array of exactly `n` (every layer including MTP ones).
    pub fn f32_per_layer(&self, s: &str, n: usize) -> Result<Vec<f32>, String> {
        let key = self.key(s);
        match self.model.meta.get_array(&key) {
            Some(MetaArray::Floats(v)) if v.len() == n => Ok(v.iter().map(|&x| x as f32).collect()),
            Some(a) => Err(format!(
                "key {key} has wrong array length or type; expected {n} floats, got {}",
                a.len()
            )),
            None => self
                .f32_opt(s)
                .map(|x| vec![x; n])
                .ok_or_else(|| format!("key not found in model: {key}")),
        }
    }

    /// A float per layer from a float array (layers past its end: 0) or one float for
    /// every layer (upstream's `get_key_or_arr`); absent: empty.
    pub fn f32_layers(&self, s: &str, n_layer: usize) -> Vec<f32> {
        match self.model.meta.get_array(&self.key(s)) {
            Some(MetaArray::Floats(v)) => (0..n_layer)
                .map(|il| v.get(il).map_or(0.0, |&x| x as f32))
                .collect(),
            _ => self.f32_opt(s).map_or_else(Vec::new, |v| vec![v; n_layer]),
        }
    }

    pub fn bool(&self, s: &str, default: bool) -> bool {
        self.model.meta.get_bool(&self.key(s)).unwrap_or(default)
    }

    /// Which layers use the sliding window, as upstream's `load_swa_pattern`:
    /// `attention.sliding_window_pattern` as an array gives each layer's flag (layers past
    /// its end: full attention), as a number the period (every layer but each period-th);
    /// absent, `default_period` (0: every layer).
    pub fn swa_layers(&self, n_layer: usize, default_period: u32) -> Result<Vec<bool>, String> {
        let key = self.key("attention.sliding_window_pattern");
        let period = match self.model.meta.get_array(&key) {
            Some(MetaArray::Bools(v)) => {
                return Ok((0..n_layer)
                    .map(|il| v.get(il).copied().unwrap_or(false))
                    .collect())
            }
            Some(MetaArray::Ints(v)) => {
                return Ok((0..n_layer)
                    .map(|il| v.get(il).is_some_and(|&x| x != 0))
                    .collect())
            }
            Some(_) => return Err(format!("{key} has an unexpected array type")),
            None => self.model.meta.get_u32(&key).unwrap_or(default_period) as usize,
        };
        Ok((0..n_layer)
            .map(|il| period == 0 || il % period < period - 1)
            .collect())
    }
}

/// `expert_gating_func` (absent: 0, "none") as the architectures that default "none" to
/// `none_is` read it; values the engine has no gating for are refused.
pub fn gating_or(k: &Keys, none_is: Gating) -> Result<Gating, String> {
    match k.u32("expert_gating_func", 0) {
        0 => Ok(none_is),
        1 => Ok(Gating::Softmax),
        2 => Ok(Gating::Sigmoid),
        3 => Ok(Gating::SoftmaxWeight),
        4 => Ok(Gating::SqrtSoftplus),
        g => Err(format!("expert_gating_func {g} is not supported yet")),
    }
}

/// The sliding-window flags of `load_swa_pattern(ml, period, dense_first)`: the per-layer
/// array when the file has one, else the period (`attention.sliding_window_pattern` as a
/// number, or `period`), with the full-attention layer first in each period when
/// `dense_first` (else last).
pub fn swa_pattern(
    k: &Keys,
    n_layer: usize,
    period: u32,
    dense_first: bool,
) -> Result<Vec<bool>, String> {
    let key = k.key("attention.sliding_window_pattern");
    if !dense_first || k.model.meta.get_array(&key).is_some() {
        return k.swa_layers(n_layer, period);
    }
    let n = k.model.meta.get_u32(&key).unwrap_or(period) as usize;
    Ok((0..n_layer).map(|il| n == 0 || il % n != 0).collect())
}
