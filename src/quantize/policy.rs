//! Which type each tensor gets: upstream's `llama-quant.cpp` rules (`tensor_allows_quantization`,
//! `llama_tensor_get_type_impl` with the `_S/_M/_L` mixes, the shape fallbacks) over tensor
//! names and a few hyperparameters, in the same order and with the same counters.

use crate::gguf::GgmlType;

/// `llama_ftype` values (`llama.h`).
pub mod ftype {
    pub const ALL_F32: i32 = 0;
    pub const F16: i32 = 1;
    pub const Q4_0: i32 = 2;
    pub const Q4_1: i32 = 3;
    pub const Q8_0: i32 = 7;
    pub const Q5_0: i32 = 8;
    pub const Q5_1: i32 = 9;
    pub const Q2_K: i32 = 10;
    pub const Q3_K_S: i32 = 11;
    pub const Q3_K_M: i32 = 12;
    pub const Q3_K_L: i32 = 13;
    pub const Q4_K_S: i32 = 14;
    pub const Q4_K_M: i32 = 15;
    pub const Q5_K_S: i32 = 16;
    pub const Q5_K_M: i32 = 17;
    pub const Q6_K: i32 = 18;
    pub const IQ2_XXS: i32 = 19;
    pub const IQ2_XS: i32 = 20;
    pub const Q2_K_S: i32 = 21;
    pub const IQ3_XS: i32 = 22;
    pub const IQ3_XXS: i32 = 23;
    pub const IQ1_S: i32 = 24;
    pub const IQ4_NL: i32 = 25;
    pub const IQ3_S: i32 = 26;
    pub const IQ3_M: i32 = 27;
    pub const IQ2_S: i32 = 28;
    pub const IQ2_M: i32 = 29;
    pub const IQ4_XS: i32 = 30;
    pub const IQ1_M: i32 = 31;
    pub const BF16: i32 = 32;
    pub const TQ1_0: i32 = 36;
    pub const TQ2_0: i32 = 37;
    pub const MXFP4_MOE: i32 = 38;
    pub const Q1_0: i32 = 40;
    pub const Q2_0: i32 = 41;
}

/// `llama_ftype_get_default_type`; `None` for ftypes upstream refuses ("invalid output file
/// type").
pub fn ftype_default_type(ft: i32) -> Option<GgmlType> {
    use ftype::*;
    Some(match ft {
        Q4_0 => GgmlType::Q4_0,
        Q4_1 => GgmlType::Q4_1,
        Q5_0 => GgmlType::Q5_0,
        Q5_1 => GgmlType::Q5_1,
        Q8_0 => GgmlType::Q8_0,
        F16 => GgmlType::F16,
        BF16 => GgmlType::BF16,
        ALL_F32 => GgmlType::F32,
        Q1_0 => GgmlType::Q1_0,
        Q2_0 => GgmlType::Q2_0,
        MXFP4_MOE => GgmlType::MXFP4,
        Q2_K_S | Q2_K => GgmlType::Q2_K,
        IQ3_XS => GgmlType::IQ3_S,
        Q3_K_S | Q3_K_M | Q3_K_L => GgmlType::Q3_K,
        Q4_K_S | Q4_K_M => GgmlType::Q4_K,
        Q5_K_S | Q5_K_M => GgmlType::Q5_K,
        Q6_K => GgmlType::Q6_K,
        TQ1_0 => GgmlType::TQ1_0,
        TQ2_0 => GgmlType::TQ2_0,
        IQ2_XXS => GgmlType::IQ2_XXS,
        IQ2_XS => GgmlType::IQ2_XS,
        IQ2_S => GgmlType::IQ2_XS,
        IQ2_M => GgmlType::IQ2_S,
        IQ3_XXS => GgmlType::IQ3_XXS,
        IQ1_S => GgmlType::IQ1_S,
        IQ1_M => GgmlType::IQ1_M,
        IQ4_NL => GgmlType::IQ4_NL,
        IQ4_XS => GgmlType::IQ4_XS,
        IQ3_S | IQ3_M => GgmlType::IQ3_S,
        _ => return None,
    })
}

/// `tensor_category`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    TokenEmbd,
    AttentionQ,
    AttentionV,
    AttentionK,
    AttentionQkv,
    AttentionKvB,
    AttentionOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

fn is_token_embd(name: &str) -> bool {
    name == "token_embd.weight" || name == "per_layer_token_embd.weight"
}

/// `tensor_get_category`.
pub fn category(name: &str) -> Category {
    if name == "output.weight" {
        return Category::Output;
    }
    if is_token_embd(name) {
        return Category::TokenEmbd;
    }
    let table = [
        ("attn_qkv.weight", Category::AttentionQkv),
        ("attn_kv_b.weight", Category::AttentionKvB),
        ("attn_v.weight", Category::AttentionV),
        ("attn_k.weight", Category::AttentionK),
        ("attn_q.weight", Category::AttentionQ),
        ("attn_output.weight", Category::AttentionOutput),
        ("ffn_up", Category::FfnUp),
        ("ffn_gate", Category::FfnGate),
        ("ffn_down", Category::FfnDown),
    ];
    table
        .iter()
        .find(|(pat, _)| name.contains(pat))
        .map_or(Category::Other, |&(_, c)| c)
}

fn is_attn_v_like(c: Category) -> bool {
    matches!(
        c,
        Category::AttentionV | Category::AttentionQkv | Category::AttentionKvB
    )
}

/// `tensor_requires_imatrix`.
pub fn tensor_requires_imatrix(name: &str, dst: GgmlType, ft: i32) -> bool {
    if is_token_embd(name) || name == "output.weight" {
        return false;
    }
    match dst {
        GgmlType::IQ3_XXS
        | GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ2_S
        | GgmlType::IQ1_M
        | GgmlType::IQ1_S => true,
        GgmlType::Q2_K => ft == ftype::Q2_K_S,
        _ => false,
    }
}

/// The parts of the parameters the type choice reads.
pub struct Choice<'a> {
    pub ftype: i32,
    pub output_tensor_type: Option<GgmlType>,
    pub token_embedding_type: Option<GgmlType>,
    pub quantize_output_tensor: bool,
    pub only_copy: bool,
    pub pure: bool,
    pub overrides: &'a [(regex::Regex, GgmlType)],
}

/// The model facts the rules use: architecture name and a few hyperparameters.
pub struct ModelFacts {
    pub arch: String,
    pub n_expert: u32,
    /// `n_head(0) / n_head_kv(0)`, 0 when `n_head_kv(0)` is 0.
    pub n_gqa: u32,
    pub n_layer_all: u32,
    /// Upstream's `LLM_TYPE_70B` for this model.
    pub is_70b: bool,
}

/// `tensor_allows_quantization`.
pub fn allows_quantization(p: &Choice<'_>, arch: &str, name: &str, n_dims: usize) -> bool {
    if p.only_copy || n_dims < 2 {
        return false;
    }
    let has = |s: &str| name.contains(s);
    let mut q = name.ends_with("weight");
    q &= !has("_norm.weight");
    q &= p.quantize_output_tensor || name != "output.weight";
    for s in [
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
    ] {
        q &= !has(s);
    }
    q &= name != "position_embd.weight";
    q &= name != "token_types.weight";
    if arch == "glm5-next" {
        for s in [
            "hc_",
            "indexer.attn_q_b",
            "indexer.attn_k",
            "indexer.proj",
            "indexer_compressor_gate",
            "indexer_compressor_ape",
            "ssm_f_a.weight",
            "ssm_f_b.weight",
            "ssm_g_a.weight",
            "ssm_g_b.weight",
            "ssm_beta.weight",
            "attn_kv_a_mqa.weight",
            "attn_k_b.weight",
            "attn_v_b.weight",
        ] {
            q &= !has(s);
        }
    }
    for s in [
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
        ".position_embd",
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        "a.rvq.codebook",
        "mm.a.code_embd",
    ] {
        q &= !has(s);
    }
    q
}

/// The running state of one quantization (`quantize_state_impl`).
pub struct State {
    pub n_attention_wv: i32,
    pub n_ffn_down: i32,
    pub n_ffn_gate: i32,
    pub n_ffn_up: i32,
    pub i_attention_wv: i32,
    pub i_ffn_down: i32,
    pub i_ffn_gate: i32,
    pub i_ffn_up: i32,
    pub n_fallback: i32,
    pub has_imatrix: bool,
    pub has_tied_embeddings: bool,
}

impl State {
    /// `init_quantize_state_counters` over the names in processing order.
    pub fn new<'n>(
        names: impl Iterator<Item = &'n str>,
        facts: &ModelFacts,
        has_imatrix: bool,
    ) -> State {
        let mut s = State {
            n_attention_wv: 0,
            n_ffn_down: facts.n_layer_all as i32,
            n_ffn_gate: facts.n_layer_all as i32,
            n_ffn_up: facts.n_layer_all as i32,
            i_attention_wv: 0,
            i_ffn_down: 0,
            i_ffn_gate: 0,
            i_ffn_up: 0,
            n_fallback: 0,
            has_imatrix,
            has_tied_embeddings: true,
        };
        for name in names {
            let c = category(name);
            if is_attn_v_like(c) {
                s.n_attention_wv += 1;
            }
            if c == Category::Output {
                s.has_tied_embeddings = false;
            }
        }
        s
    }
}

/// A tensor as the rules see it.
pub struct TensorView<'a> {
    pub name: &'a str,
    pub ty: GgmlType,
    pub ne: [i64; 4],
    pub n_dims: usize,
}

fn use_more_bits(i_layer: i32, n_layers: i32) -> bool {
    i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2
}

/// `sscanf(name, "blk.%d.", &i)`.
pub fn leading_layer(name: &str) -> Option<i32> {
    let rest = name.strip_prefix("blk.")?;
    let rest = rest.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (sign, digits_from) = match rest.as_bytes().first() {
        Some(b'-') => (-1i64, 1),
        Some(b'+') => (1, 1),
        _ => (1, 0),
    };
    let digits: String = rest[digits_from..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    if digits.is_empty() {
        return None;
    }
    let v: i64 = digits.parse().unwrap_or(i64::MAX);
    Some((sign * v).clamp(i32::MIN as i64, i32::MAX as i64) as i32)
}

/// `llama_tensor_get_type_impl`: the mix rules.
fn get_type_impl(
    qs: &mut State,
    facts: &ModelFacts,
    p: &Choice<'_>,
    mut new_type: GgmlType,
    t: &TensorView<'_>,
    cat: Category,
) -> Result<GgmlType, String> {
    use ftype::*;
    let ft = p.ftype;
    let name = t.name;
    let arch = facts.arch.as_str();
    let n_expert = facts.n_expert.max(1) as i32;
    let n_gqa = facts.n_gqa;
    let layer_info = |i_layer: i32, n_layer: i32| -> Result<(i32, i32), String> {
        if n_expert > 1 {
            let i = leading_layer(name)
                .ok_or_else(|| format!("Failed to determine layer for tensor {name}"))?;
            if i < 0 || i >= n_layer {
                return Err(format!(
                    "Bad layer {i} for tensor {name}. Must be in [0, {n_layer})"
                ));
            }
            return Ok((i, n_layer));
        }
        Ok((i_layer, n_layer))
    };

    if arch == "glm5-next"
        && (name.contains("attn_q_a")
            || name.contains("attn_q_b")
            || name.contains("nextn.eh_proj"))
        && !matches!(new_type, GgmlType::F32 | GgmlType::BF16 | GgmlType::F16)
    {
        return Ok(GgmlType::Q8_0);
    }

    let low_iq = [IQ2_XXS, IQ2_XS, IQ1_S, IQ2_S, IQ2_M, IQ1_M].contains(&ft);
    if cat == Category::Output || (qs.has_tied_embeddings && cat == Category::TokenEmbd) {
        if let Some(ty) = p.output_tensor_type {
            new_type = ty;
        } else {
            let nx = t.ne[0];
            let qk_k = new_type.block_size() as i64;
            if ft == MXFP4_MOE || arch == "falcon" || nx % qk_k != 0 {
                new_type = GgmlType::Q8_0;
            } else if [IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ2_S, IQ2_M, IQ1_M].contains(&ft) {
                new_type = GgmlType::Q5_K;
            } else if new_type != GgmlType::Q8_0 {
                new_type = GgmlType::Q6_K;
            }
        }
    } else if ft == MXFP4_MOE {
        let expert_role = matches!(cat, Category::FfnUp | Category::FfnGate | Category::FfnDown);
        if t.ne[2] > 1 && (arch != "bailingmoe3" || expert_role) {
            new_type = GgmlType::MXFP4;
        } else {
            new_type = GgmlType::Q8_0;
        }
    } else if cat == Category::TokenEmbd {
        if let Some(ty) = p.token_embedding_type {
            new_type = ty;
        } else if [IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M].contains(&ft) {
            new_type = GgmlType::Q2_K;
        } else if [IQ2_S, IQ2_M, IQ3_XXS].contains(&ft) {
            new_type = GgmlType::IQ3_S;
        } else if [TQ1_0, TQ2_0, Q2_0].contains(&ft) {
            new_type = GgmlType::Q4_K;
        }
    } else if low_iq {
        let s_or_m = ft == IQ2_S || ft == IQ2_M;
        if is_attn_v_like(cat) {
            new_type = if n_gqa >= 4 || facts.n_expert >= 4 {
                GgmlType::Q4_K
            } else if s_or_m {
                GgmlType::IQ3_S
            } else {
                GgmlType::Q2_K
            };
            qs.i_attention_wv += 1;
        } else if facts.n_expert == 8 && cat == Category::AttentionK {
            new_type = GgmlType::Q4_K;
        } else if cat == Category::FfnDown {
            if qs.i_ffn_down < qs.n_ffn_down / 8 {
                new_type = if s_or_m {
                    GgmlType::IQ3_S
                } else {
                    GgmlType::Q2_K
                };
            }
            qs.i_ffn_down += 1;
        } else if cat == Category::AttentionOutput {
            if facts.n_expert == 8 {
                new_type = GgmlType::Q5_K;
            } else if ft == IQ1_S || ft == IQ1_M {
                new_type = GgmlType::IQ2_XXS;
            } else if s_or_m {
                new_type = GgmlType::IQ3_S;
            }
        }
    } else if is_attn_v_like(cat) {
        if ft == Q2_K {
            new_type = if n_gqa >= 4 {
                GgmlType::Q4_K
            } else {
                GgmlType::Q3_K
            };
        } else if ft == Q2_K_S && n_gqa >= 4 {
            new_type = GgmlType::Q4_K;
        } else if ft == IQ3_XXS {
            new_type = if n_gqa >= 4 {
                GgmlType::Q4_K
            } else if !qs.has_imatrix {
                GgmlType::IQ3_S
            } else {
                GgmlType::IQ3_XXS
            };
        } else if (ft == IQ3_XS || ft == IQ3_S) && n_gqa >= 4 {
            new_type = GgmlType::Q4_K;
        } else if ft == IQ3_M {
            new_type = GgmlType::Q4_K;
        } else if ft == Q3_K_M {
            new_type = if qs.i_attention_wv < 2 {
                GgmlType::Q5_K
            } else {
                GgmlType::Q4_K
            };
        } else if ft == Q3_K_L {
            new_type = GgmlType::Q5_K;
        } else if (ft == IQ4_NL || ft == IQ4_XS) && n_gqa >= 4 {
            new_type = GgmlType::Q5_K;
        } else if (ft == Q4_K_M || ft == Q5_K_M)
            && use_more_bits(qs.i_attention_wv, qs.n_attention_wv)
        {
            new_type = GgmlType::Q6_K;
        } else if ft == Q4_K_S && qs.i_attention_wv < 4 {
            new_type = GgmlType::Q5_K;
        }
        if facts.is_70b && (new_type == GgmlType::Q3_K || new_type == GgmlType::Q4_K) {
            new_type = GgmlType::Q5_K;
        }
        if facts.n_expert == 8 {
            new_type = GgmlType::Q8_0;
        }
        qs.i_attention_wv += 1;
    } else if cat == Category::AttentionK {
        if facts.n_expert == 8 {
            new_type = GgmlType::Q8_0;
        } else if ft == IQ3_XS {
            new_type = GgmlType::IQ3_XXS;
        } else if ft == IQ3_XXS {
            new_type = GgmlType::IQ2_S;
        }
    } else if cat == Category::AttentionQ {
        if ft == IQ3_XS {
            new_type = GgmlType::IQ3_XXS;
        } else if ft == IQ3_XXS {
            new_type = GgmlType::IQ2_S;
        }
    } else if cat == Category::FfnDown {
        let (i_layer, n_layer) = layer_info(qs.i_ffn_down, qs.n_ffn_down)?;
        let falcon = arch == "falcon";
        if ft == Q2_K {
            new_type = GgmlType::Q3_K;
        } else if ft == Q2_K_S {
            if i_layer < n_layer / 8 {
                new_type = GgmlType::Q4_K;
            }
        } else if ft == IQ3_XXS && !qs.has_imatrix {
            new_type = if i_layer < n_layer / 8 {
                GgmlType::Q4_K
            } else {
                GgmlType::Q3_K
            };
        } else if ft == Q3_K_M {
            new_type = if i_layer < n_layer / 16 {
                GgmlType::Q5_K
            } else if !falcon || use_more_bits(i_layer, n_layer) {
                GgmlType::Q4_K
            } else {
                GgmlType::Q3_K
            };
        } else if ft == IQ3_M
            && (i_layer < n_layer / 8 || (facts.n_expert == 8 && use_more_bits(i_layer, n_layer)))
        {
            new_type = GgmlType::Q4_K;
        } else if ft == Q3_K_L {
            new_type = if falcon {
                GgmlType::Q4_K
            } else {
                GgmlType::Q5_K
            };
        } else if ft == Q4_K_M {
            if falcon {
                new_type = if i_layer < n_layer / 16 {
                    GgmlType::Q6_K
                } else if use_more_bits(i_layer, n_layer) {
                    GgmlType::Q5_K
                } else {
                    GgmlType::Q4_K
                };
            } else if use_more_bits(i_layer, n_layer) {
                new_type = GgmlType::Q6_K;
            }
        } else if i_layer < n_layer / 8 && (ft == IQ4_NL || ft == IQ4_XS) && !qs.has_imatrix {
            new_type = GgmlType::Q5_K;
        } else if ft == Q5_K_M && use_more_bits(i_layer, n_layer) {
            new_type = GgmlType::Q6_K;
        } else if ft == Q4_K_S && !falcon && i_layer < n_layer / 8 {
            new_type = GgmlType::Q5_K;
        } else if (ft == Q4_0 || ft == Q5_0) && qs.has_imatrix && i_layer < n_layer / 8 {
            new_type = if ft == Q4_0 {
                GgmlType::Q4_1
            } else {
                GgmlType::Q5_1
            };
        }
        qs.i_ffn_down += 1;
    } else if cat == Category::AttentionOutput {
        if arch != "falcon" {
            if facts.n_expert == 8 {
                if [
                    Q2_K, IQ3_XS, IQ3_XXS, Q3_K_S, Q3_K_M, IQ4_NL, Q4_K_S, Q4_K_M, IQ3_S, IQ3_M,
                    IQ4_XS,
                ]
                .contains(&ft)
                {
                    new_type = GgmlType::Q5_K;
                }
            } else if ft == Q2_K {
                new_type = GgmlType::Q3_K;
            } else if ft == IQ3_XXS {
                new_type = GgmlType::IQ3_S;
            } else if ft == Q3_K_M {
                new_type = GgmlType::Q4_K;
            } else if ft == Q3_K_L {
                new_type = GgmlType::Q5_K;
            } else if ft == IQ3_M {
                new_type = GgmlType::Q4_K;
            }
        } else if ft == Q3_K_L {
            new_type = GgmlType::Q4_K;
        }
    } else if cat == Category::AttentionQkv {
        if ft == Q3_K_M || ft == Q3_K_L || ft == IQ3_M {
            new_type = GgmlType::Q4_K;
        } else if ft == Q4_K_M {
            new_type = GgmlType::Q5_K;
        } else if ft == Q5_K_M {
            new_type = GgmlType::Q6_K;
        }
    } else if cat == Category::FfnGate || cat == Category::FfnUp {
        let (i, n) = if cat == Category::FfnGate {
            (qs.i_ffn_gate, qs.n_ffn_gate)
        } else {
            (qs.i_ffn_up, qs.n_ffn_up)
        };
        let (i_layer, n_layer) = layer_info(i, n)?;
        if ft == IQ3_XS && i_layer >= n_layer / 8 && i_layer < 7 * n_layer / 8 {
            new_type = GgmlType::IQ3_XXS;
        }
        if cat == Category::FfnGate {
            qs.i_ffn_gate += 1;
        } else {
            qs.i_ffn_up += 1;
        }
    }
    Ok(new_type)
}

/// `tensor_type_fallback`: a 256-block type a row length cannot hold falls back to a
/// 32-block one, and to F16 when even that does not fit.
fn fallback(qs: &mut State, t: &TensorView<'_>, target: GgmlType) -> Result<GgmlType, String> {
    let ncols = t.ne[0];
    let qk = target.block_size() as i64;
    if ncols % qk == 0 {
        return Ok(target);
    }
    let mut msg = format!(
        "warning: {:<36} - ncols {:6} not divisible by {:3} (required for type {:>7}) ",
        t.name,
        ncols,
        qk,
        target.name()
    );
    qs.n_fallback += 1;
    let mut ty = match target {
        GgmlType::IQ1_S
        | GgmlType::IQ1_M
        | GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ2_S
        | GgmlType::IQ3_XXS
        | GgmlType::IQ3_S
        | GgmlType::IQ4_XS => GgmlType::IQ4_NL,
        GgmlType::Q2_0 | GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::TQ1_0 | GgmlType::TQ2_0 => {
            GgmlType::Q4_0
        }
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        other if qk <= 32 => other,
        other => {
            return Err(format!(
                "no tensor type fallback is defined for type {}",
                other.name()
            ))
        }
    };
    if ncols % ty.block_size() as i64 != 0 {
        msg.push_str("(WARNING: must use F16 due to unusual shape) ");
        ty = GgmlType::F16;
    }
    crate::log_warn!("{msg}-> falling back to {:>7}", ty.name());
    Ok(ty)
}

/// `llama_tensor_get_type`: the type `t` is written as.
pub fn tensor_type(
    qs: &mut State,
    facts: &ModelFacts,
    p: &Choice<'_>,
    t: &TensorView<'_>,
    default_type: GgmlType,
) -> Result<GgmlType, String> {
    if !allows_quantization(p, &facts.arch, t.name, t.n_dims) {
        return Ok(t.ty);
    }
    let cat = category(t.name);
    if let (Some(ty), Category::TokenEmbd) = (p.token_embedding_type, cat) {
        let named = t.name == "per_layer_token_embd.weight"
            && p.overrides.iter().any(|(re, _)| re.is_match(t.name));
        if !named {
            return Ok(ty);
        }
    }
    if let (Some(ty), Category::Output) = (p.output_tensor_type, cat) {
        return Ok(ty);
    }
    let mut new_type = default_type;
    if default_type.is_quantized() {
        let mut manual = false;
        for (re, qtype) in p.overrides {
            if re.is_match(t.name) {
                if *qtype != new_type {
                    crate::log_warn!(
                        "llama_tensor_get_type: {:<36} - applying manual override: {} -> {}",
                        t.name,
                        new_type.name(),
                        qtype.name()
                    );
                    new_type = *qtype;
                }
                manual = true;
                break;
            }
        }
        if !manual && !p.pure {
            new_type = get_type_impl(qs, facts, p, new_type, t, cat)?;
        }
        new_type = fallback(qs, t, new_type)?;
    }
    Ok(new_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_and_layers_follow_upstream_names() {
        assert_eq!(category("blk.3.attn_v.weight"), Category::AttentionV);
        assert_eq!(category("blk.3.ffn_down_exps.weight"), Category::FfnDown);
        assert_eq!(category("per_layer_token_embd.weight"), Category::TokenEmbd);
        assert_eq!(category("blk.0.attn_norm.weight"), Category::Other);
        assert_eq!(leading_layer("blk.12.ffn_up.weight"), Some(12));
        assert_eq!(leading_layer("output.weight"), None);
    }

    #[test]
    fn q4_k_m_gives_more_bits_to_the_outer_ffn_down_layers() {
        let facts = ModelFacts {
            arch: "llama".into(),
            n_expert: 0,
            n_gqa: 3,
            n_layer_all: 16,
            is_70b: false,
        };
        let choice = Choice {
            ftype: ftype::Q4_K_M,
            output_tensor_type: None,
            token_embedding_type: None,
            quantize_output_tensor: true,
            only_copy: false,
            pure: false,
            overrides: &[],
        };
        let names: Vec<String> = (0..16)
            .map(|i| format!("blk.{i}.ffn_down.weight"))
            .collect();
        let mut qs = State::new(names.iter().map(String::as_str), &facts, false);
        let types: Vec<GgmlType> = names
            .iter()
            .map(|n| {
                let t = TensorView {
                    name: n,
                    ty: GgmlType::F16,
                    ne: [256, 64, 1, 1],
                    n_dims: 2,
                };
                tensor_type(&mut qs, &facts, &choice, &t, GgmlType::Q4_K).unwrap()
            })
            .collect();
        // use_more_bits(i, 16): i < 2, i >= 14, or (i - 2) % 3 == 2.
        for (i, ty) in types.iter().enumerate() {
            let more = i < 2 || i >= 14 || (i as i32 - 2) % 3 == 2;
            assert_eq!(
                *ty,
                if more { GgmlType::Q6_K } else { GgmlType::Q4_K },
                "layer {i}"
            );
        }
        // A row of 96 cannot hold Q4_K blocks: falls back to Q5_0.
        let t = TensorView {
            name: "blk.0.attn_q.weight",
            ty: GgmlType::F16,
            ne: [96, 8, 1, 1],
            n_dims: 2,
        };
        assert_eq!(
            tensor_type(&mut qs, &facts, &choice, &t, GgmlType::Q4_K).unwrap(),
            GgmlType::Q5_0
        );
        assert_eq!(qs.n_fallback, 1);
    }
}
