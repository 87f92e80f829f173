//! The registry of architectures: one file per architecture, as upstream's
//! `src/models/<arch>.cpp`, each declaring one [`ArchDef`] — the GGUF name(s), the rotary
//! type, the memory it needs, the hyperparameters it reads beyond the common ones
//! ([`ArchDef::hparams`], upstream's `load_arch_hparams`), and its graph ([`ArchDef::graph`],
//! upstream's `build_arch_graph`), which declares every tensor it uses with its shape as it
//! uses it (the builder checks each against the file: upstream's `create_tensor`).
//!
//! Adding an architecture is one file here, one line in [`REGISTRY`], and its row in the
//! engine's differential test (docs/adding-an-architecture.md). An architecture that is not
//! registered, or whose file lacks a tensor its graph needs, fails context creation with one
//! log line naming the architecture and the missing piece.

pub mod afmoe;
pub mod arcee;
pub mod arctic;
pub mod baichuan;
pub mod bailingmoe;
pub mod bailingmoe2;
pub mod bailingmoe3;
pub mod bloom;
pub mod chatglm;
pub mod codeshell;
pub mod cogvlm;
pub mod cohere2;
pub mod cohere2moe;
pub mod command_r;
pub mod creation_order;
pub mod dbrx;
pub mod deci;
pub mod deepseek;
pub mod deepseek2;
pub mod deepseek32;
pub mod deepseek4;
pub mod def;
pub mod dots1;
pub mod dots3note;
pub mod dream;
pub mod ernie4_5;
pub mod ernie4_5_moe;
pub mod exaone;
pub mod exaone4;
pub mod exaone_moe;
pub mod falcon;
pub mod falcon_h1;
pub mod gemma;
pub mod gemma2;
pub mod gemma3;
pub mod glm4;
pub mod glm4moe;
pub mod glm5_next;
pub mod glm_dsa;
pub mod gpt2;
pub mod gpt_oss;
pub mod gptneox;
pub mod granite;
pub mod granite_swa;
pub mod granitehybrid;
pub mod granitemoe;
pub mod grok;
pub mod grovemoe;
pub mod hrm_text;
pub mod hunyuan_dense;
pub mod hunyuan_moe;
pub mod hunyuan_vl;
pub mod hy_v3;
pub mod hy_v4;
pub mod internlm2;
pub mod jais;
pub mod jais2;
pub mod jamba;
pub mod kimi_k3;
pub mod kimi_linear;
pub mod laguna;
pub mod lfm2;
pub mod llada;
pub mod llada_moe;
pub mod llama;
pub mod llama4;
pub mod maincoder;
pub mod mamba;
pub mod mamba2;
pub mod maple;
pub mod mellum;
pub mod mimo2;
pub mod minicpm;
pub mod minicpm3;
pub mod minimax_01;
pub mod minimax_m2;
pub mod minimax_m3;
pub mod mistral3;
pub mod mistral4;
pub mod mpt;
pub mod muse_glimmer;
pub mod nanbeige;
pub mod nemotron;
pub mod nemotron_h;
pub mod olmo;
pub mod olmo2;
pub mod olmoe;
pub mod openelm;
pub mod orion;
pub mod paddleocr;
pub mod pangu_embedded;
pub mod phi2;
pub mod phi3;
pub mod phimoe;
pub mod plamo;
pub mod plamo2;
pub mod plamo3;
pub mod pockettts;
pub mod qwen;
pub mod qwen2;
pub mod qwen2moe;
pub mod qwen2vl;
pub mod qwen3;
pub mod qwen35;
pub mod qwen3moe;
pub mod qwen3next;
pub mod qwen3tts;
pub mod qwen3vl;
pub mod qwen3vlmoe;
pub mod qwen4exp;
pub mod refact;
pub mod rnd1;
pub mod seed_oss;
pub mod smallthinker;
pub mod smollm3;
pub mod spark2_5;
pub mod stablelm;
pub mod starcoder;
pub mod starcoder2;
pub mod talkie;
pub mod xverse;

pub use creation_order::creation_sequence;
pub use def::{check_mrope_text, mrope_text_is_neox, no_hparams, ArchDef, Keys, Memory, Rope};

use super::builder::BuildError;
use super::builder::Builder;
use super::params::{Adapters, ArchParams, RopeConfig};
use super::{Graph, GraphShape, RopeMode};
use crate::model::Model;

/// The registered architectures, in the order the docs list them.
pub static REGISTRY: &[&ArchDef] = &[
    &llama::DEF,
    &mistral3::DEF,
    &qwen2::DEF,
    &qwen3::DEF,
    &qwen3moe::DEF,
    &gemma3::DEF,
    &phi3::DEF,
    &deepseek2::DEF,
    &glm4moe::DEF,
    &gpt_oss::DEF,
    &gemma::DEF,
    &gemma2::DEF,
    &granite::DEF,
    &smollm3::DEF,
    &seed_oss::DEF,
    &nanbeige::DEF,
    &baichuan::DEF,
    &maincoder::DEF,
    &orion::DEF,
    &olmo2::DEF,
    &qwen::DEF,
    &command_r::DEF,
    &exaone4::DEF,
    &qwen2vl::DEF,
    &hunyuan_dense::DEF,
    &plamo::DEF,
    &xverse::DEF,
    &internlm2::DEF,
    &exaone::DEF,
    &qwen3vl::DEF,
    &deci::DEF,
    &glm4::DEF,
    &cohere2::DEF,
    &minicpm::DEF,
    &stablelm::DEF,
    &qwen3vlmoe::DEF,
    &dots1::DEF,
    &minimax_m2::DEF,
    &ernie4_5::DEF,
    &ernie4_5_moe::DEF,
    &mistral4::DEF,
    &olmoe::DEF,
    &hunyuan_moe::DEF,
    &bailingmoe2::DEF,
    &qwen2moe::DEF,
    &deepseek::DEF,
    &llama4::DEF,
    &phimoe::DEF,
    &granitemoe::DEF,
    &dbrx::DEF,
    &grok::DEF,
    &arctic::DEF,
    &bailingmoe::DEF,
    &gpt2::DEF,
    &gptneox::DEF,
    &falcon::DEF,
    &bloom::DEF,
    &mpt::DEF,
    &starcoder::DEF,
    &starcoder2::DEF,
    &codeshell::DEF,
    &phi2::DEF,
    &refact::DEF,
    &olmo::DEF,
    &arcee::DEF,
    &jais::DEF,
    &jais2::DEF,
    &nemotron::DEF,
    &openelm::DEF,
    &chatglm::DEF,
    &pangu_embedded::DEF,
    &hunyuan_vl::DEF,
    &cogvlm::DEF,
    &minicpm3::DEF,
    &granite_swa::DEF,
    &plamo2::DEF,
    &plamo3::DEF,
    &mamba::DEF,
    &mamba2::DEF,
    &granitehybrid::DEF,
    &jamba::DEF,
    &nemotron_h::DEF,
    &lfm2::DEF,
    &mellum::DEF,
    &talkie::DEF,
    &spark2_5::DEF,
    &falcon_h1::DEF,
    &deepseek32::DEF,
    &glm_dsa::DEF,
    &exaone_moe::DEF,
    &qwen35::DEF,
    &qwen3next::DEF,
    &bailingmoe3::DEF,
    &kimi_k3::DEF,
    &kimi_linear::DEF,
    &minimax_01::DEF,
    &glm5_next::DEF,
    &dream::DEF,
    &llada::DEF,
    &llada_moe::DEF,
    &rnd1::DEF,
    &dots3note::DEF,
    &afmoe::DEF,
    &cohere2moe::DEF,
    &smallthinker::DEF,
    &grovemoe::DEF,
    &hy_v3::DEF,
    &hy_v4::DEF,
    &laguna::DEF,
    &mimo2::DEF,
    &maple::DEF,
    &muse_glimmer::DEF,
    &paddleocr::DEF,
    &hrm_text::DEF,
    &pockettts::DEF,
    &qwen3tts::DEF,
    &deepseek4::DEF,
    &qwen4exp::DEF,
    &minimax_m3::DEF,
];

/// The definition that runs `arch`, if any.
pub fn lookup(arch: &str) -> Option<&'static ArchDef> {
    REGISTRY.iter().copied().find(|d| d.names.contains(&arch))
}

/// What an upstream architecture the registry lacks still needs, where that is known: the
/// refusal at context creation names it.
pub fn missing_pieces(arch: &str) -> Option<&'static str> {
    // every attention architecture upstream's test-llama-archs writes is registered now;
    // an entry goes here when one is known to lack a piece
    let _ = arch;
    None
}

/// Whether the engine has a graph for `arch`.
pub fn is_supported(arch: &str) -> bool {
    lookup(arch).is_some()
}

/// Every GGUF name the engine runs.
pub fn supported_names() -> Vec<&'static str> {
    REGISTRY
        .iter()
        .flat_map(|d| d.names.iter().copied())
        .collect()
}

/// The rotary mode of a model: its architecture's, or M-RoPE where the file gives rope
/// sections (`ArchParams::ext.mrope_sections`, vision-language conversions).
pub fn rope_mode(def: &ArchDef, hp: &ArchParams) -> RopeMode {
    match (hp.ext.mrope_sections, def.rope) {
        (Some(sections), _) => RopeMode::Mrope { sections },
        (None, Rope::Mode(m)) => m,
        (None, Rope::None) => RopeMode::Norm,
        (None, Rope::Multi(_)) => RopeMode::Neox,
    }
}

/// Builds the graph of `model` for a micro-batch of `shape`.
pub fn build(
    model: &Model,
    hp: &ArchParams,
    rope: RopeConfig,
    shape: GraphShape,
    n_ctx_seq: u32,
    kv_rot: (usize, usize),
    adapters: &Adapters,
) -> Result<Graph, BuildError> {
    let def = lookup(&model.arch).ok_or_else(|| BuildError::UnsupportedArch(model.arch.clone()))?;
    let mut b = Builder::new(model, hp, rope, shape.n_tokens, shape.n_outputs);
    b.embd_input = shape.embd_input;
    b.kv_rot = kv_rot;
    b.n_ctx_seq = n_ctx_seq;
    b.rope_mode = rope_mode(def, hp);
    b.adapters = adapters;
    let out = (def.graph)(&mut b)?;
    if let Some(err) = b.adapter_error.take() {
        return Err(err);
    }
    Ok(b.finish(shape, Some(out.logits), Some(out.embd)))
}

/// The architectures whose declared tensors ([`declared_tensors`]) are upstream's for
/// test-llama-archs' metadata, dense and mixture-of-experts alike (tests/init_from_user.rs
/// checks the list both ways against upstream's fixtures): `llama_model_init_from_user`
/// builds these and refuses the others by name.
pub static DECLARES_TENSORS: &[&str] = &[
    "afmoe",
    "arcee",
    "arctic",
    "baichuan",
    "bailingmoe",
    "bailingmoe2",
    "bailingmoe3",
    "bloom",
    "chatglm",
    "codeshell",
    "cogvlm",
    "cohere2",
    "cohere2moe",
    "command-r",
    "dbrx",
    "deci",
    "deepseek",
    "deepseek2",
    "deepseek32",
    "deepseek4",
    "dots1",
    "dots3note",
    "dream",
    "ernie4_5",
    "ernie4_5-moe",
    "exaone",
    "exaone-moe",
    "exaone4",
    "falcon",
    "falcon-h1",
    "gemma",
    "gemma2",
    "gemma3",
    "glm-dsa",
    "glm4",
    "glm4moe",
    "glm5-next",
    "gpt-oss",
    "gpt2",
    "gptneox",
    "granite",
    "granite_swa",
    "granitehybrid",
    "granitemoe",
    "grok",
    "grovemoe",
    "hrm_text",
    "hunyuan-dense",
    "hunyuan-moe",
    "hunyuan_vl",
    "hy_v3",
    "hy_v4",
    "internlm2",
    "jais",
    "jais2",
    "jamba",
    "kimi-k3",
    "kimi-linear",
    "laguna",
    "lfm2",
    "lfm2moe",
    "llada",
    "llada-moe",
    "llama",
    "llama4",
    "maincoder",
    "mamba",
    "mamba2",
    "maple",
    "mellum",
    "mimo2",
    "minicpm",
    "minicpm3",
    "minimax-01",
    "minimax-m2",
    "minimax-m3",
    "mistral3",
    "mistral4",
    "mpt",
    "muse-glimmer",
    "nanbeige",
    "nemotron",
    "nemotron_h",
    "nemotron_h_moe",
    "olmo",
    "olmo2",
    "olmoe",
    "openelm",
    "orion",
    "paddleocr",
    "pangu-embedded",
    "phi2",
    "phi3",
    "phimoe",
    "plamo",
    "plamo2",
    "plamo3",
    "pockettts",
    "qwen",
    "qwen2",
    "qwen2moe",
    "qwen2vl",
    "qwen3",
    "qwen35",
    "qwen35moe",
    "qwen3moe",
    "qwen3next",
    "qwen3tts",
    "qwen3vl",
    "qwen3vlmoe",
    "refact",
    "rnd1",
    "seed_oss",
    "smallthinker",
    "smollm3",
    "spark2_5",
    "stablelm",
    "starcoder",
    "starcoder2",
    "talkie",
    "xverse",
];

/// The optional tensors an architecture's graph reads when a file has them but upstream's
/// loader does not create from metadata for that architecture (its `load_tensors` lacks
/// them): layer suffixes or global names ([`Builder::record_skips`]).
fn metadata_skips(arch: &str) -> &'static [&'static str] {
    const WO_B: &[&str] = &["attn_output.bias"];
    const WO_B_ROPE: &[&str] = &["attn_output.bias", "rope_freqs.weight"];
    const BIASES: &[&str] = &[
        "attn_output.bias",
        "ffn_down.bias",
        "ffn_gate.bias",
        "ffn_up.bias",
    ];
    match arch {
        "arcee" | "bailingmoe" | "command-r" | "deepseek" | "dots1" | "exaone" | "grok"
        | "maincoder" | "mellum" | "qwen2" | "qwen2moe" | "qwen3moe" | "qwen3vlmoe" | "rnd1"
        | "bailingmoe2" => WO_B,
        "cohere2" | "hunyuan-dense" | "hunyuan-moe" | "hunyuan_vl" | "internlm2" | "xverse" => {
            WO_B_ROPE
        }
        "smollm3" | "nanbeige" => BIASES,
        "jamba" => &["ssm_dt.scale", "ssm_x.scale"],
        "mamba" => &[
            "ssm_dt.scale",
            "ssm_x.scale",
            // Falcon-Mamba's norms: upstream's mamba loader has none
            "ssm_dt_norm.weight",
            "ssm_b_norm.weight",
            "ssm_c_norm.weight",
        ],
        "dream" | "qwen2vl" | "qwen3" | "qwen3vl" | "qwen3tts" => WO_B,
        "llama4" => &[
            // upstream's rope_freqs is the global one; the graph also asks for a layer's
            "blk.*.rope_freqs.weight",
            "attn_output.bias",
            "ffn_down.bias",
            "ffn_gate.bias",
            "ffn_up.bias",
        ],
        "phimoe" => &["rope_freqs.weight"],
        // the shortconv projections are no fields of upstream's generic scale pass
        "lfm2" | "lfm2moe" => &["shortconv.in_proj.scale", "shortconv.out_proj.scale"],
        // upstream's gate projection here is `wg`, not the `wqkv_gate` its pass scales
        "minimax-01" => &["attn_gate.scale", "attn_gate.input_scale"],
        "mpt" => &["attn_q_norm.weight", "attn_q_norm.bias"],
        "grovemoe" => &["ffn_gate_up_chexps.weight"],
        // (the fused experts' scale: upstream's generic pass gives the fused ones none)
        "cohere2moe" | "hy_v3" | "qwen35moe" | "qwen3next" => &["ffn_gate_up_exps.scale"],
        "kimi-linear" => &["attn_gate.weight"],
        "openelm" => &["output.weight"],
        "phi3" => &[
            "rope_freqs.weight",
            "output_norm.bias",
            "output.bias",
            "attn_norm.bias",
            "attn_output.bias",
            "ffn_norm.bias",
        ],
        _ => &[],
    }
}

/// The optional tensors upstream's loader creates from metadata for an architecture although
/// the builder leaves them out for the others (`skipped_when_declaring`: the fused `attn_qkv`
/// where the loader creates it and no separate Q, K, V): layer suffixes or global names
/// ([`Builder::record_creates`]).
fn metadata_creates(arch: &str) -> &'static [&'static str] {
    match arch {
        // (bailingmoe2's only Q/K/V projection; the qwen35 family's gated delta net input)
        "bailingmoe2" | "qwen35" => &["attn_qkv.weight"],
        // (create_tensor_gate_up_exps: without a file the fused experts' gate and up)
        "qwen35moe" | "qwen3next" => &["attn_qkv.weight", "ffn_gate_up_exps.weight"],
        "cohere2moe" | "deepseek2" | "hy_v3" | "mistral4" => &["ffn_gate_up_exps.weight"],
        "mpt" => &["attn_qkv.weight", "attn_qkv.bias", "ffn.act.scales"],
        _ => &[],
    }
}

/// A tensor upstream's loader creates from metadata for an architecture (an optional one
/// its `load_arch_tensors` lists) although neither its graph nor ours reads it: the
/// declared table gains it so the model holds upstream's tensors and the caller's
/// callback fills the same set.
#[derive(Clone, Copy)]
struct AlsoCreated {
    /// `blk.<il>.<name>` for every layer, else the global `name`.
    each_layer: bool,
    /// Created only without experts (`expert_count` 0).
    dense_only: bool,
    /// Left out of the files upstream's `llama_model_save_to_file` writes (a model field its
    /// saver does not list), so absent from the test-llama-archs fixtures.
    unsaved: bool,
    name: &'static str,
    dims: &'static [Dim],
}

/// A dimension of an [`AlsoCreated`] tensor, from the hyperparameters.
#[derive(Clone, Copy)]
enum Dim {
    Embd,
    Vocab,
    /// `n_rot / 2`: rotary frequency factors.
    HalfRot,
    /// The classifier head's outputs (`n_cls_out`).
    ClsOut,
    /// The layer's feed-forward width.
    Ff,
}

impl Dim {
    fn size(self, hp: &ArchParams, il: usize) -> i64 {
        (match self {
            Dim::Embd => hp.n_embd,
            Dim::Vocab => hp.n_vocab,
            Dim::HalfRot => hp.n_rot / 2,
            Dim::ClsOut => hp.n_cls_out,
            Dim::Ff => hp.n_ff.get(il).copied().unwrap_or(0),
        }) as i64
    }
}

const fn global(name: &'static str, dims: &'static [Dim]) -> AlsoCreated {
    AlsoCreated {
        each_layer: false,
        dense_only: false,
        unsaved: false,
        name,
        dims,
    }
}

const fn per_layer(name: &'static str, dims: &'static [Dim]) -> AlsoCreated {
    AlsoCreated {
        each_layer: true,
        dense_only: false,
        unsaved: false,
        name,
        dims,
    }
}

/// `extra`, created only without experts.
const fn dense_only(extra: AlsoCreated) -> AlsoCreated {
    AlsoCreated {
        dense_only: true,
        ..extra
    }
}

/// `extra`, which upstream's saver leaves out of its files.
const fn unsaved(extra: AlsoCreated) -> AlsoCreated {
    AlsoCreated {
        unsaved: true,
        ..extra
    }
}

/// The global tensors `llama_model_init_from_user` creates for `arch` (as upstream's does)
/// that upstream's `llama_model_save_to_file` leaves out of its files: absent from the
/// test-llama-archs fixtures although both libraries create and fill them.
pub fn unsaved_by_upstream(arch: &str) -> Vec<&'static str> {
    metadata_also_created(arch)
        .iter()
        .filter(|e| e.unsaved && !e.each_layer)
        .map(|e| e.name)
        .collect()
}

/// The tensors upstream's loader creates from metadata for `arch` that no graph reads
/// ([`AlsoCreated`]), in its order.
fn metadata_also_created(arch: &str) -> &'static [AlsoCreated] {
    use Dim::*;
    const ROPE_FREQS: AlsoCreated = global("rope_freqs.weight", &[HalfRot]);
    const OUTPUT_BIAS: AlsoCreated = global("output.bias", &[Vocab]);
    const CLS_OUT: AlsoCreated = global("cls.output.weight", &[Embd, ClsOut]);
    const WO_B: AlsoCreated = per_layer("attn_output.bias", &[Embd]);
    const FFN_BIASES: [AlsoCreated; 3] = [
        per_layer("ffn_gate.bias", &[Ff]),
        per_layer("ffn_down.bias", &[Embd]),
        per_layer("ffn_up.bias", &[Ff]),
    ];
    const LONG: AlsoCreated = global("rope_factors_long.weight", &[HalfRot]);
    const SHORT: AlsoCreated = global("rope_factors_short.weight", &[HalfRot]);
    const LLADA: [AlsoCreated; 5] = [
        ROPE_FREQS,
        WO_B,
        FFN_BIASES[0],
        FFN_BIASES[1],
        FFN_BIASES[2],
    ];
    const REFACT: [AlsoCreated; 5] = [
        ROPE_FREQS,
        WO_B,
        dense_only(FFN_BIASES[0]),
        dense_only(FFN_BIASES[1]),
        dense_only(FFN_BIASES[2]),
    ];
    // LFM2-ColBert's projection (`dense_2_out_layers`, not among the saver's tensors)
    const DENSE_2: [AlsoCreated; 2] = [
        unsaved(global("dense_2.weight", &[Embd, Embd])),
        unsaved(global("dense_2.bias", &[Embd])),
    ];
    match arch {
        "cogvlm" | "pangu-embedded" => &[ROPE_FREQS],
        "falcon-h1" => &[ROPE_FREQS, WO_B],
        "minicpm3" => &[LONG],
        "phimoe" => &[LONG, SHORT],
        "ernie4_5" | "ernie4_5-moe" => &[WO_B],
        "lfm2" | "lfm2moe" => &DENSE_2,
        "llada" => &LLADA,
        "refact" => &REFACT,
        "dream" | "qwen2vl" => &[OUTPUT_BIAS],
        "qwen3" | "qwen3vl" | "qwen3tts" => &[CLS_OUT],
        _ => &[],
    }
}

/// Architectures whose declared table equals upstream's (tests/init_from_user.rs) but whose
/// model from metadata still answers differently, with why: refused by name all the same.
/// (None today; cogvlm's difference from upstream, the rows of its logits when fewer
/// outputs than tokens are asked for, is the graph's, files and metadata alike: see
/// docs/dropin.md.)
pub static METADATA_REFUSED: &[(&str, &str)] = &[];

/// Whether `llama_model_init_from_user` builds `arch` ([`DECLARES_TENSORS`]).
pub fn declares_tensors(arch: &str) -> bool {
    DECLARES_TENSORS.contains(&arch)
}

/// The tensors `model`'s architecture declares for its hyperparameters `hp` alone, in the
/// order its graph first asks for them (name and shape; `WeightRef::tensor` unused): the
/// graph of one token built in recording mode, every optional tensor present except the
/// fused alternatives upstream's loader skips. This is the model upstream's
/// `llama_model_init_from_user` creates, for the architectures whose graph reads every
/// tensor upstream creates (tests/init_from_user.rs checks each fixture architecture).
pub fn declared_tensors(
    model: &Model,
    hp: &ArchParams,
) -> Result<Vec<super::WeightRef>, BuildError> {
    let def = lookup(&model.arch).ok_or_else(|| BuildError::UnsupportedArch(model.arch.clone()))?;
    let rope = RopeConfig::resolve(hp, &super::params::RopeOverrides::model_defaults());
    let mut b = Builder::new(model, hp, rope, 1, 1);
    b.record = true;
    b.record_skips = metadata_skips(&model.arch);
    b.record_creates = metadata_creates(&model.arch);
    b.rope_mode = rope_mode(def, hp);
    (def.graph)(&mut b)?;
    let mut table = std::mem::take(&mut b.weights);
    // tensors upstream's loader creates for this architecture that no graph reads
    for extra in metadata_also_created(&model.arch) {
        let layers: Vec<Option<usize>> = if extra.each_layer {
            (0..hp.n_layer).map(Some).collect()
        } else {
            vec![None]
        };
        for il in layers {
            let name = match il {
                Some(il) => format!("blk.{il}.{}", extra.name),
                None => extra.name.to_string(),
            };
            if extra.dense_only && hp.n_expert > 0 {
                continue;
            }
            let mut ne = [1i64; 4];
            for (d, dim) in extra.dims.iter().enumerate() {
                ne[d] = dim.size(hp, il.unwrap_or(0));
            }
            // a dimension <= 0 (no such tensor for these hyperparameters), as upstream's
            // optional tensors
            if ne.iter().all(|&n| n > 0) && !table.iter().any(|w| w.name == name) {
                table.push(super::WeightRef {
                    tensor: usize::MAX,
                    name,
                    ne,
                });
            }
        }
    }
    // upstream's generic pass after every architecture's tensors: the optional per-tensor
    // scales of each layer's projections, then their input scales (read by no graph); a
    // layer slot that aliases another block's weights (hrm_text) gets scales of its own
    for il in 0..hp.n_layer {
        let block = weights_block(model, il);
        for suffix in ["scale", "input_scale"] {
            for (base, per_expert) in SCALED_PROJECTIONS {
                let has = |n: &str| table.iter().any(|w| w.name == n);
                let name = format!("blk.{il}.{base}.{suffix}");
                if has(&format!("blk.{block}.{base}.weight"))
                    && !has(&name)
                    && !b.skips_when_declaring(&name)
                {
                    let n = if per_expert { hp.n_expert.max(1) } else { 1 };
                    table.push(super::WeightRef {
                        tensor: usize::MAX,
                        name,
                        ne: [n as i64, 1, 1, 1],
                    });
                }
            }
        }
    }
    Ok(table)
}

/// The block whose weights layer slot `il` holds: itself, except in looped architectures
/// whose slots alias a few physical blocks (hrm_text).
fn weights_block(model: &Model, il: usize) -> usize {
    match model.arch.as_str() {
        "hrm_text" => hrm_text::block_of_slot(model, il).unwrap_or(il),
        _ => il,
    }
}

/// The layer projections upstream's loader gives optional `.scale` and `.input_scale`
/// tensors (`[n_expert]` for the experts', else `[1]`), in its order.
const SCALED_PROJECTIONS: [(&str, bool); 21] = [
    ("attn_q", false),
    ("attn_k", false),
    ("attn_v", false),
    ("attn_output", false),
    ("attn_qkv", false),
    ("attn_gate", false),
    ("ffn_gate", false),
    ("ffn_down", false),
    ("ffn_up", false),
    ("ffn_gate_shexp", false),
    ("ffn_down_shexp", false),
    ("ffn_up_shexp", false),
    ("ffn_gate_exps", true),
    ("ffn_down_exps", true),
    ("ffn_up_exps", true),
    ("ssm_in", false),
    ("ssm_out", false),
    ("ssm_alpha", false),
    ("ssm_beta", false),
    ("nextn.eh_proj", false),
    ("nextn.shared_head_head", false),
];

/// The common hyperparameters ([`ArchParams::load_common`]), then the architecture's own
/// (its registry entry's `hparams`; an unregistered architecture gets the common ones only).
pub fn load_params(model: &Model) -> Result<ArchParams, String> {
    let mut hp = ArchParams::load_common(model)?;
    if let Some(def) = lookup(&model.arch) {
        let keys = Keys {
            model,
            arch: &model.arch,
        };
        (def.hparams)(&keys, &mut hp).map_err(|e| format!("{}: {e}", model.arch))?;
    }
    Ok(hp)
}
