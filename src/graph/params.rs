//! The hyperparameters a graph needs, read from the model's metadata as upstream's
//! `llama_model::load_hparams` and the per-arch `load_arch_hparams` do, and combined with
//! the context's overrides (rope, yarn) as upstream's `llama_context` constructor does.

use std::sync::Arc;

use crate::model::adapter::{ControlVector, LoraAdapter};
use crate::model::Model;

/// The adapters a context computes with: LoRA adapters with their scales (non-zero, in the
/// order set) and the control vector.
#[derive(Clone, Debug, Default)]
pub struct Adapters {
    pub loras: Vec<(Arc<LoraAdapter>, f32)>,
    pub cvec: Option<Arc<ControlVector>>,
}

/// `enum llama_rope_scaling_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeScaling {
    None = 0,
    Linear = 1,
    Yarn = 2,
    LongRope = 3,
}

impl RopeScaling {
    pub fn from_raw(v: i32) -> Option<RopeScaling> {
        Some(match v {
            0 => RopeScaling::None,
            1 => RopeScaling::Linear,
            2 => RopeScaling::Yarn,
            3 => RopeScaling::LongRope,
            _ => return None,
        })
    }

    fn from_name(s: &str) -> Option<RopeScaling> {
        Some(match s {
            "none" => RopeScaling::None,
            "linear" => RopeScaling::Linear,
            "yarn" => RopeScaling::Yarn,
            "longrope" => RopeScaling::LongRope,
            _ => return None,
        })
    }
}

/// Architecture hyperparameters (per model).
#[derive(Clone, Debug)]
pub struct ArchParams {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_vocab: usize,
    pub n_head: Vec<usize>,
    pub n_head_kv: Vec<usize>,
    pub n_ff: Vec<usize>,
    pub head_k: usize,
    pub head_v: usize,
    pub n_rot: usize,
    pub eps_rms: f32,
    pub eps_norm: f32,
    pub n_ctx_train: u32,
    pub n_ctx_orig_yarn: u32,
    pub rope_freq_base: f32,
    pub rope_freq_scale: f32,
    pub rope_scaling: RopeScaling,
    pub rope_attn_factor: f32,
    pub yarn_ext_factor: f32,
    pub yarn_attn_factor: f32,
    pub yarn_beta_fast: f32,
    pub yarn_beta_slow: f32,
    /// `attention.scale` (0 → 1/sqrt(head_k)).
    pub attention_scale: f32,
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub n_ff_exp: usize,
    pub expert_weights_scale: f32,
    pub expert_weights_norm: bool,
    pub n_swa: u32,
    /// Per layer: whether it uses the sliding window.
    pub swa_layers: Vec<bool>,
    pub rope_freq_base_swa: f32,
    pub rope_freq_scale_swa: f32,
    pub final_logit_softcap: f32,
    pub attn_logit_softcap: f32,
    pub causal: bool,
    /// mistral3's (llama 4's) attention temperature tuning: Q of a token at position p is
    /// scaled by `ln(floor(p / n_ctx_orig_yarn) + 1) * attn_temp_scale + 1` (0: off).
    pub attn_temp_scale: f32,
    /// `pooling_type` from the file (-1 when absent: the context's default is NONE).
    pub pooling_type: i32,
    /// Outputs of a classifier head (`classifier.output_labels`, else 1).
    pub n_cls_out: usize,
    /// What only some architectures read (their `hparams`); defaults elsewhere.
    pub ext: Extras,
}

/// Expert gating (`enum llama_expert_gating_func_type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Gating {
    #[default]
    Softmax,
    Sigmoid,
    /// The selected experts' logits soft-maxed (`SOFTMAX_WEIGHT`).
    SoftmaxWeight,
    /// `sqrt(softplus(logits))` (`SQRT_SOFTPLUS`: DeepSeek-V4).
    SqrtSoftplus,
}

/// Hyperparameters of some architectures only (multi-head latent attention, expert
/// groups and shared experts, ...), zero / off by default.
#[derive(Clone, Debug, Default)]
pub struct Extras {
    /// Q's low rank (0: a full `attn_q`), the K/V latent's rank (MLA).
    pub n_lora_q: usize,
    pub n_lora_kv: usize,
    /// MLA's per-head Q/K and V sizes once decompressed (`key_length_mla`, `value_length_mla`).
    pub head_k_mla: usize,
    pub head_v_mla: usize,
    /// Where the rotary part of a cached K row starts (MLA: after the latent); 0: at the start.
    pub k_rope_offset: usize,
    /// Layers before the first mixture of experts (`leading_dense_block_count`).
    pub n_layer_dense_lead: usize,
    pub n_expert_shared: usize,
    /// Shared experts' rows when given apart (`expert_shared_feed_forward_length`).
    pub n_ff_shexp: usize,
    /// Every how many layers a mixture of experts comes (`interleave_moe_layer_step`).
    pub n_moe_layer_step: usize,
    pub gating: Gating,
    /// Expert groups and how many the router keeps (`expert_group_count`, `_used_count`).
    pub n_expert_groups: usize,
    pub n_group_used: usize,
    /// `rope.scaling.yarn_log_multiplier` (upstream's `rope_yarn_log_mul`).
    pub rope_yarn_log_mul: f32,
    /// deepseek2's special case of the YaRN attention factor (its `mscale` is the log
    /// multiplier, upstream's llama_context constructor).
    pub yarn_mscale_from_log_mul: bool,
    /// The position divisor of the attention temperature tuning (`temperature_length`).
    pub attn_temp_floor: f32,
    /// Chunked attention's chunk (llama4: 8192 positions; 0: none): a token sees only the
    /// keys of its own chunk on the layers `swa_layers` marks.
    pub n_chunk: u32,
    /// Every how many layers one goes without RoPE (llama4's `n_no_rope_layer_step`).
    pub n_no_rope_layer_step: usize,
    /// M-RoPE's sections, when the file has them (text positions: see `RopeMode::Mrope`).
    pub mrope_sections: Option<[u32; 4]>,
    /// ALiBi's maximum bias (`attention.max_alibi_bias`, or fixed by the architecture:
    /// upstream's `f_max_alibi_bias`); 0: no ALiBi.
    pub max_alibi_bias: f32,
    /// Q, K and V clamped to `[-clamp_kqv, clamp_kqv]` after their projections
    /// (`attention.clamp_kqv`, upstream's `f_clamp_kqv`); 0: no clamp.
    pub clamp_kqv: f32,
    /// Attention and FFN read the same input and their outputs are summed with it
    /// (`use_parallel_residual`, gptneox).
    pub parallel_residual: bool,
    /// State-space sizes (`ssm.*`) of recurrent and hybrid architectures.
    pub ssm: Ssm,
    /// Per layer: whether it keeps a recurrent state instead of KV rows (upstream's
    /// `is_recr`); empty: none does.
    pub recurrent_layers: Vec<bool>,
    /// The recurrent layers keep KV rows too (falcon-h1: attention and a Mamba-2 mixer in
    /// every layer; upstream's hybrid memory with both layer filters true).
    pub recurrent_with_attn: bool,
    /// The sparse attention's lightning indexer (DeepSeek-V3.2, GLM-5); `head` 0: none.
    pub indexer: Indexer,
    /// Values per head of Kimi's delta attention layers (`kda.head_dim`; 0: none).
    pub kda_head: usize,
    /// `kda.gate_lower_bound` when the file gives one.
    pub kda_lower_bound: Option<f32>,
    /// Per layer: the SwiGLU limit of the experts and of the dense / shared-expert FFNs
    /// (`swiglu_clamp_exp`, `swiglu_clamp_shexp`; empty or 0: none).
    pub swiglu_limit_exp: Vec<f32>,
    pub swiglu_limit_shexp: Vec<f32>,
    /// The routed experts' latent width (`expert_latent_length`; 0: `n_embd`).
    pub n_expert_latent: usize,
    /// Cross-layer residual attention's block (`attn_res.block_size`; 0: none).
    pub attn_res_block: usize,
    /// SiTU's `(beta, linear_beta)` (`activation.situ_beta`, `situ_linear_beta`).
    pub situ: (f32, f32),
    /// DeepSeek-V4 hyper-connections' Sinkhorn iterations and epsilon
    /// (`hyper_connection.sinkhorn_iterations`, `.epsilon`).
    pub hc_sinkhorn_iters: usize,
    pub hc_eps: f32,
    /// The hyper-connections' residual streams (`hyper_connection.count`) and HY-V4's
    /// post-weight magnitude (`hyper_connection.magnitude`).
    pub hc: usize,
    pub hc_magnitude: f32,
    /// A k-pool lightning indexer's sizes (GLM5-Next: `indexer.kpool` cells pooled per
    /// key); kept apart from `indexer`, whose keys the memory caches.
    pub kpool_indexer: Indexer,
    /// Its cells pooled into one key (`indexer.kpool`).
    pub kpool: usize,
    /// The hyper-connections' low rank (Qwen4-exp's `hyper_connection.low_rank`).
    pub hc_low_rank: usize,
    /// Per layer: the sparse attention's block of cells (`attention.compress_ratios`).
    pub compress_ratios: Vec<usize>,
    /// Qwen4-exp's PLE n-gram hash embedding (`ple.*`), when the file has one.
    pub ple: Option<std::sync::Arc<PleHash>>,
    /// DeepSeek-V4's compressed attention (ratio per layer, ...); empty ratios: none.
    pub dsv4: Dsv4,
    /// The indexer cache of a hybrid memory (upstream's `llama_memory_hybrid_idx`:
    /// GLM5-Next's key | gate | pooled key rows, Qwen4-exp's raw keys): K-only memory layers
    /// `n_layer + il`, never rotated; per layer the row width (0: none). Empty: no such cache.
    pub idx_rows: Vec<usize>,
    /// K-only memory layers after the indexer's (`n_layer + ..`): the row width of each
    /// (0: the layer keeps nothing). DeepSeek-V4's compressor inputs and compressed keys.
    pub mem_extra: Vec<usize>,
}

/// DeepSeek-V4's compressed attention (upstream's `dsv4_*` hyperparameters).
#[derive(Clone, Debug, Default)]
pub struct Dsv4 {
    /// Per layer: 0 (the sliding window only), 4 (CSA: overlapping blocks of 4 tokens, keys
    /// picked by the lightning indexer) or 128 (HCA: blocks of 128 tokens).
    pub ratios: Vec<u32>,
    /// The rotary base of the compressed layers (`attention.compress_rope_freq_base`).
    pub rope_base: f32,
    /// The grouped output projection: groups and rank per group
    /// (`attention.output_group_count`, `attention.output_lora_rank`).
    pub o_groups: usize,
    pub o_rank: usize,
}

/// Qwen4-exp's PLE n-gram hash embedding (`<arch>.ple.*`): on layer `layer`, each token's
/// n-grams of 2..=`ngram` tokens (it and its predecessors) hash to `heads_per_ngram` rows
/// each of `per_layer_token_embd`; a dilated causal conv (`conv_kernel` taps, `ngram`
/// apart) over the `hc * n_embd` gated values keeps its history in the layer's recurrent
/// conv row, after the delta net's.
#[derive(Clone, Debug, Default)]
pub struct PleHash {
    pub layer: usize,
    pub ngram: usize,
    pub heads_per_ngram: usize,
    pub conv_kernel: usize,
    pub eos: i64,
    /// The token an input embedding stands for (`ple.image_token_id`, else EOS).
    pub image_token: i64,
    /// Values per row (`embedding_length_per_layer_input`).
    pub head_dim: usize,
    pub multipliers: Vec<u64>,
    pub offsets: Vec<u64>,
    pub vocab_sizes: Vec<u64>,
    /// The conv's channels (`hc * n_embd`).
    pub channels: usize,
}

impl PleHash {
    pub fn n_heads(&self) -> usize {
        (self.ngram - 1) * self.heads_per_ngram
    }

    /// Inputs the conv history keeps per channel.
    pub fn conv_history(&self) -> usize {
        (self.conv_kernel - 1) * self.ngram
    }

    /// Values the PLE layer adds to its conv row: the conv history (upstream's second
    /// recurrent row of the layer, `ple_conv_state`).
    pub fn row_values(&self) -> usize {
        self.conv_history() * self.channels
    }

    /// The token an input embedding stands for in the hash and in its KV cell
    /// (`ple.image_token_id`, else EOS).
    pub fn stand_in(&self) -> i64 {
        if self.image_token != 0 {
            self.image_token
        } else {
            self.eos
        }
    }

    /// The table rows of one token (`n_heads` values, upstream's `set_input`): `tok` the
    /// token, `prev` its predecessors oldest first (negative: none).
    pub fn rows(&self, tok: i64, prev: &[i64], out: &mut [u64]) {
        let n = self.ngram;
        let mut ctx = vec![tok; n];
        let mut cut = false;
        for (s, c) in ctx.iter_mut().enumerate().skip(1) {
            let t = if cut { -1 } else { prev[prev.len() - s] };
            cut = cut || t < 0 || t == self.eos;
            *c = if cut { self.eos } else { t };
        }
        for g in 2..=n {
            let mut mixed = (ctx[0] as u64).wrapping_mul(self.multipliers[0]);
            for j in 1..g {
                mixed ^= (ctx[j] as u64).wrapping_mul(self.multipliers[j]);
            }
            let base = (g - 2) * self.heads_per_ngram;
            for h in base..base + self.heads_per_ngram {
                out[h] = mixed % self.vocab_sizes[h] + self.offsets[h];
            }
        }
    }
}

/// The lightning indexer of DeepSeek's sparse attention (`attention.indexer.*`): per token
/// `n_head` heads of `head` values score every cached position, and attention reads only the
/// `top_k` best. The indexer's keys live in a cache of their own (upstream's
/// `llama_kv_cache_dsa`: one `head`-wide row per token and layer, beside the MLA cache).
#[derive(Clone, Debug, Default)]
pub struct Indexer {
    pub n_head: usize,
    pub head: usize,
    pub top_k: usize,
    /// Per layer: whether it computes its own selection ("full"); a "shared" layer reuses the
    /// previous full layer's (GLM-5.2's `indexer.types`). Empty: every layer is full.
    pub full: Vec<bool>,
    /// MiniMax-M3's block-sparse attention (`indexer.block_size`, 0: none): positions are
    /// scored in blocks of this many, `top_k` counts blocks.
    pub block: usize,
    /// The latest blocks always selected (`indexer.local_blocks`).
    pub local: usize,
}

/// The state-space hyperparameters (`<arch>.ssm.*`, upstream's `ssm_*`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Ssm {
    pub d_conv: usize,
    pub d_inner: usize,
    pub d_state: usize,
    pub dt_rank: usize,
    pub n_group: usize,
    /// RMS norms of dt, B and C without weights (FalconMamba: `ssm.dt_b_c_rms`).
    pub dt_b_c_rms: bool,
}

impl ArchParams {
    /// The hyperparameters every architecture reads (sizes, heads, norms' eps, rope base
    /// and scaling, expert counts); `graph::arch::load_params` adds the architecture's own.
    pub fn load_common(model: &Model) -> Result<ArchParams, String> {
        let m = &model.meta;
        let arch = model.arch.as_str();
        let key = |s: &str| format!("{arch}.{s}");
        let f = |s: &str, d: f32| m.get_f64(&key(s)).map_or(d, |v| v as f32);
        let u = |s: &str, d: u32| m.get_u32(&key(s)).unwrap_or(d);
        let hp = &model.hparams;
        let n_layer = hp.n_layer() as usize;
        let n_embd = hp.n_embd as usize;
        let n_head: Vec<usize> = hp.n_head.iter().map(|&v| v as usize).collect();
        let n_head_kv: Vec<usize> = hp.n_head_kv.iter().map(|&v| v as usize).collect();
        let n_ff: Vec<usize> = hp.n_ff.iter().map(|&v| v as usize).collect();
        let h0 = n_head.first().copied().unwrap_or(0);
        // recurrent models (Mamba) have no attention: their files give no head count
        if h0 == 0 && !crate::model::arch::is_recurrent(arch) {
            return Err(format!("{arch}: attention.head_count is missing or 0"));
        }
        let head_k = u("attention.key_length", (n_embd / h0.max(1)) as u32) as usize;
        let head_v = u("attention.value_length", (n_embd / h0.max(1)) as u32) as usize;
        let n_rot = u("rope.dimension_count", head_k as u32) as usize;
        let scaling_name = m
            .get_str(&key("rope.scaling.type"))
            .unwrap_or_else(|| "linear".into());
        let rope_scaling = RopeScaling::from_name(&scaling_name)
            .ok_or_else(|| format!("{arch}: unknown rope.scaling.type '{scaling_name}'"))?;
        let n_vocab = model.vocab.tokens.len();
        let n_ctx_orig_yarn = u("rope.scaling.original_context_length", hp.n_ctx_train);
        Ok(ArchParams {
            n_layer,
            n_embd,
            n_vocab,
            n_head,
            n_head_kv,
            n_ff,
            head_k,
            head_v,
            n_rot,
            eps_rms: f("attention.layer_norm_rms_epsilon", 0.0),
            eps_norm: f("attention.layer_norm_epsilon", 0.0),
            n_ctx_train: hp.n_ctx_train,
            n_ctx_orig_yarn,
            attn_temp_scale: 0.0,
            rope_freq_base: hp.rope_freq_base_train,
            rope_freq_scale: hp.rope_freq_scale_train,
            rope_scaling,
            rope_attn_factor: f("rope.scaling.attn_factor", 1.0),
            // upstream's defaults (an architecture that reads the yarn betas or
            // attention.scale from the file does so in its `hparams`)
            yarn_ext_factor: -1.0,
            yarn_attn_factor: 1.0,
            yarn_beta_fast: 32.0,
            yarn_beta_slow: 1.0,
            attention_scale: 0.0,
            n_expert: hp.n_expert as usize,
            n_expert_used: hp.n_expert_used as usize,
            n_ff_exp: 0,
            // upstream's defaults (scale 0: none; norm: always)
            expert_weights_scale: 0.0,
            expert_weights_norm: true,
            // no sliding window unless the architecture's `hparams` reads one
            n_swa: 0,
            swa_layers: vec![false; n_layer],
            rope_freq_base_swa: f("rope.freq_base_swa", 10000.0),
            rope_freq_scale_swa: 1.0,
            final_logit_softcap: 0.0,
            attn_logit_softcap: 0.0,
            causal: m.get_bool(&key("attention.causal")).unwrap_or(true),
            pooling_type: m.get_u32(&key("pooling_type")).map_or(-1, |v| v as i32),
            n_cls_out: hp.n_cls_out.max(1) as usize,
            ext: Extras {
                n_expert_groups: u("expert_group_count", 0) as usize,
                n_group_used: u("expert_group_used_count", 0) as usize,
                ..Extras::default()
            },
        })
    }

    /// The parameters of a `vocab_only` model: no layers (upstream loads no hyperparameters
    /// then); the vocabulary size and embedding width for the getters.
    pub fn vocab_only(model: &Model) -> ArchParams {
        ArchParams {
            n_layer: 0,
            n_embd: model.hparams.n_embd as usize,
            n_vocab: model.vocab.tokens.len(),
            n_head: Vec::new(),
            n_head_kv: Vec::new(),
            n_ff: Vec::new(),
            head_k: 0,
            head_v: 0,
            n_rot: 0,
            eps_rms: 0.0,
            eps_norm: 0.0,
            n_ctx_train: 0,
            n_ctx_orig_yarn: 0,
            attn_temp_scale: 0.0,
            rope_freq_base: 0.0,
            rope_freq_scale: 1.0,
            rope_scaling: RopeScaling::None,
            rope_attn_factor: 1.0,
            yarn_ext_factor: -1.0,
            yarn_attn_factor: 1.0,
            yarn_beta_fast: 32.0,
            yarn_beta_slow: 1.0,
            attention_scale: 0.0,
            n_expert: 0,
            n_expert_used: 0,
            n_ff_exp: 0,
            expert_weights_scale: 0.0,
            expert_weights_norm: true,
            n_swa: 0,
            swa_layers: Vec::new(),
            rope_freq_base_swa: 10000.0,
            rope_freq_scale_swa: 1.0,
            final_logit_softcap: 0.0,
            attn_logit_softcap: 0.0,
            causal: true,
            pooling_type: -1,
            n_cls_out: 1,
            ext: Extras::default(),
        }
    }

    /// Whether layer `il` keeps a recurrent state (upstream's `is_recr`).
    pub fn is_recurrent(&self, il: usize) -> bool {
        self.ext.recurrent_layers.get(il).copied().unwrap_or(false)
    }

    /// Whether layer `il` of a hybrid model keeps KV rows (upstream's `filter_attn`).
    pub fn has_kv(&self, il: usize) -> bool {
        !self.is_recurrent(il) || self.ext.recurrent_with_attn
    }

    /// Values of one recurrent conv state row (upstream's `n_embd_r`): the last
    /// `d_conv - 1` inputs of every conv channel.
    pub fn n_embd_r(&self) -> usize {
        let s = &self.ext.ssm;
        if self.ext.kda_head > 0 {
            // Kimi's delta attention: Q, K and V conv states of n_head * head values each
            let d_inner = self.n_head.first().copied().unwrap_or(0) * self.ext.kda_head;
            return 3 * s.d_conv.saturating_sub(1) * d_inner;
        }
        s.d_conv.saturating_sub(1) * (s.d_inner + 2 * s.n_group * s.d_state)
    }

    /// Values of layer `il`'s recurrent conv row: [`ArchParams::n_embd_r`], plus Qwen4-exp's
    /// PLE history on its PLE layer.
    pub fn n_embd_r_at(&self, il: usize) -> usize {
        let ple = self.ext.ple.as_ref().filter(|p| p.layer == il);
        self.n_embd_r() + ple.map_or(0, |p| p.row_values())
    }

    /// Values of one recurrent SSM state row (upstream's `n_embd_s`).
    pub fn n_embd_s(&self) -> usize {
        if self.ext.kda_head > 0 {
            return self.ext.kda_head
                * self.ext.kda_head
                * self.n_head.first().copied().unwrap_or(0);
        }
        self.ext.ssm.d_state * self.ext.ssm.d_inner
    }

    pub fn n_embd_k_gqa(&self, il: usize) -> usize {
        self.head_k * self.n_head_kv[il]
    }

    pub fn n_embd_v_gqa(&self, il: usize) -> usize {
        self.head_v * self.n_head_kv[il]
    }
}

/// The context's rope/yarn values (`llama_cparams`), resolved as upstream's constructor.
#[derive(Clone, Copy, Debug)]
pub struct RopeConfig {
    pub freq_base: f32,
    pub freq_scale: f32,
    pub n_ctx_orig: u32,
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
}

/// The context parameters that change the rope (0 / negative / UNSPECIFIED = model's).
#[derive(Clone, Copy, Debug)]
pub struct RopeOverrides {
    pub rope_scaling_type: i32,
    pub freq_base: f32,
    pub freq_scale: f32,
    pub yarn_ext_factor: f32,
    pub yarn_attn_factor: f32,
    pub yarn_beta_fast: f32,
    pub yarn_beta_slow: f32,
    pub yarn_orig_ctx: u32,
}

impl RopeOverrides {
    /// No overrides: the model's own rope (a graph built outside a context).
    pub fn model_defaults() -> RopeOverrides {
        RopeOverrides {
            rope_scaling_type: -1,
            freq_base: 0.0,
            freq_scale: 0.0,
            yarn_ext_factor: -1.0,
            yarn_attn_factor: -1.0,
            yarn_beta_fast: -1.0,
            yarn_beta_slow: -1.0,
            yarn_orig_ctx: 0,
        }
    }
}

impl RopeConfig {
    pub fn resolve(hp: &ArchParams, o: &RopeOverrides) -> RopeConfig {
        let mut freq_base = if o.freq_base == 0.0 {
            hp.rope_freq_base
        } else {
            o.freq_base
        };
        if freq_base == 0.0 {
            freq_base = 10000.0;
        }
        let mut freq_scale = if o.freq_scale == 0.0 {
            hp.rope_freq_scale
        } else {
            o.freq_scale
        };
        let scaling = RopeScaling::from_raw(o.rope_scaling_type).unwrap_or(hp.rope_scaling);
        if scaling == RopeScaling::None {
            freq_scale = 1.0;
        }
        let mut ext_factor = if o.yarn_ext_factor >= 0.0 {
            o.yarn_ext_factor
        } else {
            hp.yarn_ext_factor
        };
        let mut attn_factor = if o.yarn_attn_factor >= 0.0 {
            o.yarn_attn_factor
        } else {
            hp.yarn_attn_factor
        };
        if ext_factor < 0.0 {
            ext_factor = if scaling == RopeScaling::Yarn {
                1.0
            } else {
                0.0
            };
        }
        if ext_factor != 0.0 {
            let factor = 1.0 / freq_scale;
            // upstream's get_mscale
            let get_mscale = |scale: f32, mscale: f32| {
                if scale <= 1.0 {
                    1.0
                } else {
                    0.1 * mscale * scale.ln() + 1.0
                }
            };
            let log_mul = hp.ext.rope_yarn_log_mul;
            attn_factor = if log_mul != 0.0 {
                let mscale = if hp.ext.yarn_mscale_from_log_mul && log_mul != 1.0 {
                    log_mul
                } else {
                    1.0
                };
                get_mscale(factor, mscale) / get_mscale(factor, log_mul)
            } else {
                get_mscale(factor, 1.0)
            };
            attn_factor *= 1.0 / (1.0 + 0.1 * factor.ln());
        }
        attn_factor *= hp.rope_attn_factor;
        RopeConfig {
            freq_base,
            freq_scale,
            n_ctx_orig: if o.yarn_orig_ctx != 0 {
                o.yarn_orig_ctx
            } else {
                hp.n_ctx_orig_yarn
            },
            ext_factor,
            attn_factor,
            beta_fast: if o.yarn_beta_fast >= 0.0 {
                o.yarn_beta_fast
            } else {
                hp.yarn_beta_fast
            },
            beta_slow: if o.yarn_beta_slow >= 0.0 {
                o.yarn_beta_slow
            } else {
                hp.yarn_beta_slow
            },
        }
    }
}
