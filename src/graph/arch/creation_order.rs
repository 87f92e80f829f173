//! The order in which upstream's loader creates an architecture's tensors from metadata
//! (`llama_model_init_from_user`: its `load_tensors` for the architecture, then the generic
//! pass of per-projection scales), and so the order and count of its `set_tensor_data`
//! calls: it fills every tensor of its one CPU buffer in creation order, and a tensor it
//! creates more than once (a global created again in each layer, as llama's `rope_freqs`,
//! or the token table created again as the output) is filled once per creation.
//!
//! Each [`CreationOrder`] lists, for a few architectures whose orders agree, the tensors in
//! that order; an architecture's sequence is the entries its table holds
//! ([`creation_sequence`]). The differential test (`make test-programs`,
//! ffi-tests/dropin/init_from_user.c `stream`) compares the sequence with upstream's on every
//! fixture of the architectures built from metadata.

use super::super::WeightRef;

/// Upstream's creation order for the architectures in `archs`.
struct CreationOrder {
    archs: &'static [&'static str],
    /// Global tensors created before the first layer. `(as output) <name>`: the token table
    /// created again as the output, where the architecture has no `output.weight`.
    head: &'static [&'static str],
    /// One layer's tensors (`blk.<il>.` + the entry), layer after layer; `global <name>`: a
    /// global tensor created again in every layer.
    layer: &'static [&'static str],
    /// Global tensors created after the last layer.
    tail: &'static [&'static str],
}

/// The projections of upstream's generic pass (after every architecture's own tensors):
/// for each layer, their optional `.scale` in this order, then their `.input_scale`.
#[rustfmt::skip]
const SCALE_ORDER: [&str; 21] = [
    "attn_q", "attn_k", "attn_v", "attn_output", "attn_qkv", "attn_gate", "ffn_gate",
    "ffn_down", "ffn_up", "ffn_gate_shexp", "ffn_down_shexp", "ffn_up_shexp",
    "ffn_gate_exps", "ffn_down_exps", "ffn_up_exps", "ssm_in", "ssm_out", "ssm_alpha",
    "ssm_beta", "nextn.eh_proj", "nextn.shared_head_head",
];
/// The `.input_scale` order: the experts' before the shared experts'.
#[rustfmt::skip]
const INPUT_SCALE_ORDER: [&str; 21] = [
    "attn_q", "attn_k", "attn_v", "attn_output", "attn_qkv", "attn_gate", "ffn_gate",
    "ffn_down", "ffn_up", "ffn_gate_exps", "ffn_down_exps", "ffn_up_exps",
    "ffn_gate_shexp", "ffn_down_shexp", "ffn_up_shexp", "ssm_in", "ssm_out", "ssm_alpha",
    "ssm_beta", "nextn.eh_proj", "nextn.shared_head_head",
];

/// Layer index, pass (0 scale, 1 input scale) and position of a generic-pass tensor.
fn generic_pass_key(name: &str) -> Option<(usize, u8, usize)> {
    let rest = name.strip_prefix("blk.")?;
    let (il, rest) = rest.split_once('.')?;
    let il: usize = il.parse().ok()?;
    let (pass, base, order) = if let Some(base) = rest.strip_suffix(".input_scale") {
        (1, base, &INPUT_SCALE_ORDER)
    } else {
        (0, rest.strip_suffix(".scale")?, &SCALE_ORDER)
    };
    let at = order.iter().position(|p| *p == base)?;
    Some((il, pass, at))
}

/// The layer index of `blk.<il>.…`.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split_once('.')?.0.parse().ok()
}

/// `table` (each tensor once) in upstream's creation order for `arch`, a tensor created
/// more than once repeated at each creation. A tensor the architecture's order does not
/// list (none on the fixtures) follows the one before it in `table`; an architecture without
/// an order keeps `table`'s, its generic-pass scales last.
pub fn creation_sequence(arch: &str, table: &[WeightRef]) -> Vec<WeightRef> {
    let index: std::collections::HashMap<&str, usize> = table
        .iter()
        .enumerate()
        .map(|(i, w)| (w.name.as_str(), i))
        .collect();
    let (body, mut generic): (Vec<usize>, Vec<usize>) =
        (0..table.len()).partition(|&i| generic_pass_key(&table[i].name).is_none());
    let mut seq: Vec<usize> = Vec::with_capacity(table.len());
    if let Some(order) = ORDERS.iter().find(|o| o.archs.contains(&arch)) {
        let push = |name: &str, seq: &mut Vec<usize>| {
            if let Some(&i) = index.get(name) {
                seq.push(i);
            }
        };
        for entry in order.head {
            match entry.strip_prefix("(as output) ") {
                Some(name) if !index.contains_key("output.weight") => push(name, &mut seq),
                Some(_) => {}
                None => push(entry, &mut seq),
            }
        }
        let mut layers: Vec<usize> = body
            .iter()
            .filter_map(|&i| layer_of(&table[i].name))
            .collect();
        layers.sort_unstable();
        layers.dedup();
        for il in layers {
            for entry in order.layer {
                match entry.strip_prefix("global ") {
                    Some(name) => push(name, &mut seq),
                    None => push(&format!("blk.{il}.{entry}"), &mut seq),
                }
            }
        }
        for entry in order.tail {
            push(entry, &mut seq);
        }
    }
    // what the order does not list: after the tensor before it in `table`
    let mut last: Option<usize> = None;
    for &i in &body {
        match seq.iter().position(|&s| s == i) {
            Some(at) => last = Some(at),
            None => {
                let at = last.map_or(0, |l| l + 1);
                seq.insert(at, i);
                last = Some(at);
            }
        }
    }
    generic.sort_by_key(|&i| generic_pass_key(&table[i].name));
    seq.extend(generic);
    seq.into_iter().map(|i| table[i].clone()).collect()
}

/// Upstream's creation orders, by groups of architectures whose orders agree.
#[rustfmt::skip]
static ORDERS: &[CreationOrder] = &[
    CreationOrder {
        archs: &[
            "cohere2", "cohere2moe", "command-r", "dbrx", "falcon", "glm4moe", "glm5-next",
            "hrm_text", "kimi-k3", "olmo", "phi2", "plamo",
        ],
        head: &[
            "token_embd.weight", "output_norm.weight", "output_norm.bias", "output.weight",
            "output_res_score.weight", "output.bias", "(as output) token_embd.weight",
            "hrm.z_l_init",
        ],
        layer: &[
            "attn_norm.weight", "ffn_norm.weight", "hc_attn_fn.weight", "hc_attn_base.weight",
            "hc_attn_scale.weight", "hc_ffn_fn.weight", "hc_ffn_base.weight",
            "hc_ffn_scale.weight", "attn_res_score.weight", "ffn_res_score.weight",
            "attn_q_a_norm.weight", "attn_kv_a_norm.weight", "attn_q_a.weight", "attn_q_b.weight",
            "attn_kv_a_mqa.weight", "attn_k_b.weight", "attn_v_b.weight", "ssm_conv1d_q.weight",
            "ssm_conv1d_k.weight", "ssm_conv1d_v.weight", "attn_norm.bias", "attn_q.weight",
            "attn_k.weight", "attn_v.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias",
            "ssm_f_a.weight", "ssm_f_b.weight", "ssm_beta.weight", "ssm_a", "ssm_dt.bias",
            "ssm_g_a.weight", "ssm_g_b.weight", "attn_gate.weight", "ssm_g.weight",
            "ssm_norm.weight", "attn_norm_2.weight", "attn_norm_2.bias", "attn_qkv.weight",
            "attn_output.weight", "indexer.k_norm.weight", "indexer.k_norm.bias",
            "indexer.proj.weight", "indexer.attn_k.weight", "indexer.attn_q_b.weight",
            "indexer_compressor_gate.weight", "indexer_compressor_ape.weight",
            "attn_q_norm.weight", "attn_k_norm.weight", "post_attention_norm.weight",
            "ffn_gate.weight", "attn_output.bias", "ffn_down.weight", "ffn_down.bias",
            "ffn_up.weight", "ffn_up.bias", "attn_output_norm.weight", "ffn_gate_inp.weight",
            "exp_probs_b.bias", "ffn_gate_exps.weight", "ffn_down_exps.weight",
            "ffn_up_exps.weight", "ffn_routed_down.weight", "ffn_routed_up.weight",
            "ffn_routed_norm.weight", "ffn_gate_up_exps.weight", "ffn_gate_shexp.weight",
            "ffn_down_shexp.weight", "ffn_up_shexp.weight",
        ],
        tail: &[],
    },
    CreationOrder {
        archs: &[
            "falcon-h1", "qwen4exp",
        ],
        head: &[
            "token_embd.weight", "output_hc_norm.weight", "output_hc_down.weight",
            "output_hc_up.weight", "output.weight", "per_layer_token_embd.weight",
            "output_norm.weight",
        ],
        layer: &[
            "hc_attn_norm.weight", "hc_attn_down.weight", "hc_attn_up.weight",
            "hc_attn_inject.weight", "hc_ffn_norm.weight", "hc_ffn_down.weight",
            "hc_ffn_up.weight", "hc_ffn_inject.weight", "attn_qkv.weight", "attn_gate.weight",
            "ssm_in.weight", "ssm_conv1d.weight", "ssm_conv1d.bias", "ssm_dt.bias", "ssm_a",
            "ssm_beta.weight", "ssm_alpha.weight", "ssm_d", "ssm_norm.weight", "ssm_out.weight",
            "ple_key.weight", "ple_value.weight", "ple_norm_key.weight", "ple_norm_query.weight",
            "ple_norm_conv.weight", "ple_conv1d.weight", "attn_q.weight", "attn_k.weight",
            "attn_v.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.weight",
            "attn_q_norm.weight", "attn_k_norm.weight", "indexer.q_proj.weight",
            "indexer.k_proj.weight", "indexer.q_norm.weight", "indexer.k_norm.weight",
            "ffn_gate_inp.weight", "ffn_down_exps.weight", "ffn_gate_up_exps.weight",
            "ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight",
            "ffn_down_shexp.weight", "attn_output.bias", "attn_norm.weight", "ffn_norm",
            "global rope_freqs.weight", "ffn_gate.weight", "ffn_down.weight", "ffn_up.weight",
            "ffn_gate.bias", "ffn_down.bias", "ffn_up.bias",
        ],
        tail: &[],
    },
    CreationOrder {
        archs: &[
            "arcee", "baichuan", "deci", "deepseek4", "dream", "ernie4_5", "exaone",
            "granite_swa", "granitehybrid", "internlm2", "jamba", "llada", "mamba", "mamba2",
            "muse-glimmer", "nemotron", "nemotron_h", "nemotron_h_moe", "orion", "paddleocr",
            "pangu-embedded", "phi3", "pockettts", "qwen", "qwen2", "qwen2vl", "qwen35",
            "smollm3", "starcoder2", "xverse",
        ],
        head: &[
            "token_embd.weight", "output_norm.weight", "output_norm.bias", "output.weight",
            "output_hc_fn.weight", "output_hc_base.weight", "output_hc_scale.weight",
            "(as output) token_embd.weight", "output.bias",
        ],
        layer: &[
            "attn_norm.weight", "ssm_in.weight", "post_attention_norm.weight", "attn_qkv.weight",
            "attn_norm.bias", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias",
            "attn_k.bias", "attn_v.bias", "attn_qkv.bias", "attn_output.weight",
            "attn_output.bias", "attn_sinks.weight", "attn_q_a.weight", "attn_q_a_norm.weight",
            "attn_q_b.weight", "attn_kv.weight", "attn_kv_a_norm.weight", "attn_output_a.weight",
            "attn_output_b.weight", "hc_attn_fn.weight", "hc_attn_base.weight",
            "hc_attn_scale.weight", "hc_ffn_fn.weight", "hc_ffn_base.weight",
            "hc_ffn_scale.weight", "attn_compressor_kv.weight", "attn_compressor_gate.weight",
            "attn_compressor_ape.weight", "attn_compressor_norm.weight", "indexer.proj.weight",
            "indexer.attn_q_b.weight", "indexer_compressor_kv.weight",
            "indexer_compressor_gate.weight", "indexer_compressor_ape.weight",
            "indexer_compressor_norm.weight", "ffn_gate_inp.weight", "exp_probs_b.bias",
            "exp_probs_b_vl.bias", "attn_q_norm.weight", "attn_k_norm.weight", "attn_gate.weight",
            "ssm_conv1d.weight", "ssm_conv1d.bias", "ssm_x.weight", "ssm_dt_norm.weight",
            "ssm_dt.weight", "ssm_dt.bias", "ssm_b_norm.weight", "ssm_c_norm.weight", "ssm_a",
            "ssm_d", "ssm_beta.weight", "ssm_alpha.weight", "ssm_norm.weight", "ssm_out.weight",
            "ffn_norm.weight", "ffn_gate_exps.weight", "ffn_down_exps.weight",
            "ffn_up_exps.weight", "ffn_gate_shexp.weight", "ffn_down_shexp.weight",
            "ffn_up_shexp.weight", "global rope_freqs.weight", "post_ffw_norm.weight",
            "ffn_norm.bias", "ffn_gate.weight", "ffn_down.weight", "ffn_up.weight",
            "ffn_gate.bias", "ffn_down.bias", "ffn_up.bias", "global rope_factors_long.weight",
            "global rope_factors_short.weight",
        ],
        tail: &[],
    },
    CreationOrder {
        archs: &[
            "bloom", "codeshell", "cogvlm", "glm4", "gpt2", "gptneox", "hy_v4", "nanbeige",
            "openelm", "plamo2", "starcoder",
        ],
        head: &[
            "token_embd.weight", "token_embd_norm.weight", "token_embd_norm.bias",
            "position_embd.weight", "output_norm.weight", "output_norm.bias", "output.weight",
            "output_hc_fn.weight", "output_hc_base.weight", "output_hc_scale.weight",
            "(as output) token_embd.weight",
        ],
        layer: &[
            "attn_norm.weight", "attn_sinks.weight", "attn_q_a.weight", "attn_q_a_norm.weight",
            "attn_q_b.weight", "attn_kv_a_mqa.weight", "attn_kv_a_norm.weight", "attn_k_b.weight",
            "attn_v_b.weight", "ssm_in.weight", "ssm_conv1d.weight", "ssm_x.weight",
            "ssm_dt.weight", "ssm_dt.bias", "ssm_a", "ssm_d", "ssm_out.weight", "ssm_dt_norm",
            "ssm_b_norm", "ssm_c_norm", "attn_norm.bias", "attn_qkv.weight", "attn_q_norm.weight",
            "attn_k_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
            "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_qkv.bias", "attn_output.weight",
            "attn_gate.weight", "indexer.attn_q_b.weight", "indexer.attn_k.weight",
            "indexer.k_norm.weight", "indexer.k_norm.bias", "indexer.proj.weight",
            "hc_attn_fn.weight", "hc_attn_base.weight", "hc_attn_scale.weight",
            "hc_ffn_fn.weight", "hc_ffn_base.weight", "hc_ffn_scale.weight",
            "post_attention_norm", "attn_output.bias", "vis_attn_qkv.weight",
            "vis_attn_output.weight", "global rope_freqs.weight", "post_attention_norm.weight",
            "ffn_norm.weight", "ffn_gate.weight", "ffn_gate_inp.weight", "exp_probs_b.bias",
            "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
            "ffn_gate_shexp.weight", "ffn_down_shexp.weight", "ffn_up_shexp.weight",
            "ffn_norm.bias", "ffn_down.weight", "ffn_down.bias", "ffn_up.weight", "post_ffw_norm",
            "ffn_up.bias", "vis_gate.weight", "vis_down.weight", "vis_up.weight",
            "post_ffw_norm.weight",
        ],
        tail: &[],
    },
    CreationOrder {
        archs: &[
            "arctic", "bailingmoe", "deepseek", "grok", "grovemoe", "hunyuan-dense", "hunyuan_vl",
            "kimi-linear", "llama", "llama4", "maincoder", "mellum", "minicpm", "minicpm3",
            "minimax-01", "mistral3", "phimoe", "qwen2moe", "qwen3", "qwen3moe", "qwen3tts",
            "qwen3vl", "qwen3vlmoe", "refact", "rnd1", "smallthinker",
        ],
        head: &[
            "token_embd.weight", "output_norm.weight", "output_norm.bias", "output.weight",
            "output.bias", "cls.output.weight",
        ],
        layer: &[
            "attn_norm.weight", "ssm_conv1d_q.weight", "ssm_conv1d_k.weight",
            "ssm_conv1d_v.weight", "attn_norm.bias", "attn_norm_2.weight", "attn_qkv.weight",
            "attn_gate.weight", "attn_q_a_norm.weight", "attn_kv_a_norm.weight", "attn_q.weight",
            "attn_k.weight", "attn_v.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias",
            "ssm_f_a.weight", "ssm_f_b.weight", "ssm_beta.weight", "ssm_a", "ssm_dt.bias",
            "ssm_g_a.weight", "ssm_g_b.weight", "ssm_norm.weight", "attn_q_a.weight",
            "attn_q_b.weight", "attn_kv_a_mqa.weight", "attn_k_b.weight", "attn_v_b.weight",
            "attn_kv_b.weight", "attn_output.weight", "attn_output.bias",
            "attn_output_norm.weight", "attn_k_norm.weight", "attn_q_norm.weight",
            "ffn_norm.weight", "global rope_freqs.weight", "ffn_gate.weight", "ffn_down.weight",
            "ffn_up.weight", "ffn_gate.bias", "ffn_down.bias", "ffn_up.bias", "ffn_norm.bias",
            "ffn_gate_inp.weight", "ffn_norm_exps.weight", "ffn_gate_exps.weight",
            "ffn_down_exps.weight", "ffn_up_exps.weight", "global rope_factors_long.weight",
            "global rope_factors_short.weight", "layer_output_norm.weight",
            "ffn_gate_chexps.weight", "ffn_down_chexps.weight", "ffn_up_chexps.weight",
            "ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight", "ffn_down_shexp.weight",
            "ffn_up_shexp.weight", "exp_probs_b.bias",
        ],
        tail: &[],
    },
    CreationOrder {
        archs: &[
            "bailingmoe3", "chatglm", "gemma", "gemma2", "gemma3", "jais2", "spark2_5", "talkie",
        ],
        head: &[
            "token_embd.weight", "output_norm.weight", "output_norm.bias", "output.weight",
            "(as output) token_embd.weight",
        ],
        layer: &[
            "attn_norm.weight", "attn_q_a.weight", "attn_q_a_norm.weight", "attn_q_b.weight",
            "attn_kv_a_mqa.weight", "attn_kv_a_norm.weight", "attn_k_b.weight", "attn_v_b.weight",
            "ssm_conv1d_q.weight", "ssm_conv1d_k.weight", "ssm_conv1d_v.weight", "attn_norm.bias",
            "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias", "attn_k.bias",
            "attn_v.bias", "attn_gate.weight", "ssm_f_a.weight", "ssm_beta.weight", "ssm_a",
            "ssm_dt.bias", "ssm_g_a.weight", "ssm_norm.weight", "attn_output.weight",
            "attn_output.bias", "post_attention_norm.weight", "attn_k_norm.weight",
            "attn_q_norm.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_gate_inp.weight",
            "exp_probs_b.bias", "ffn_gate_exps.weight", "ffn_up_exps.weight",
            "ffn_down_exps.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight",
            "ffn_down_shexp.weight", "ffn_norm.bias", "ffn_up.weight", "ffn_up.bias",
            "ffn_down.weight", "ffn_down.bias", "post_ffw_norm.weight",
            "layer_output_scale.weight",
        ],
        tail: &[],
    },
    CreationOrder {
        archs: &[
            "deepseek2", "deepseek32", "dots3note", "ernie4_5-moe", "glm-dsa", "mistral4",
        ],
        head: &[
            "token_embd.weight", "output_norm.weight", "output.weight",
        ],
        layer: &[
            "attn_norm.weight", "attn_q_a_norm.weight", "attn_kv_a_norm.weight",
            "attn_k_norm.weight", "attn_q_a.weight", "attn_q_b.weight", "attn_kv_a_mqa.weight",
            "attn_k_b.weight", "attn_v_b.weight", "attn_q.weight", "attn_k.weight",
            "attn_v.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.weight",
            "attn_gate.weight", "attn_output.bias", "ffn_norm.weight", "indexer.k_norm.weight",
            "indexer.k_norm.bias", "indexer.proj.weight", "indexer.attn_k.weight",
            "indexer.attn_q_b.weight", "ffn_gate.weight", "ffn_down.weight", "ffn_up.weight",
            "ffn_gate_inp.weight", "exp_probs_b.bias", "ffn_gate_exps.weight",
            "ffn_down_exps.weight", "ffn_up_exps.weight", "ffn_gate_up_exps.weight",
            "ffn_gate_shexp.weight", "ffn_down_shexp.weight", "ffn_up_shexp.weight",
        ],
        tail: &[],
    },
    CreationOrder {
        archs: &[
            "exaone-moe", "exaone4", "minimax-m3",
        ],
        head: &[
            "token_embd.weight", "output_norm.weight", "output.weight",
        ],
        layer: &[
            "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias", "attn_k.bias",
            "attn_v.bias", "attn_output.weight", "global rope_freqs.weight", "attn_norm.weight",
            "post_attention_norm.weight", "attn_q_norm.weight", "attn_k_norm.weight",
            "ffn_norm.weight", "ffn_gate.weight", "ffn_down.weight", "ffn_up.weight",
            "ffn_gate_inp.weight", "exp_probs_b.bias", "ffn_gate_exps.weight",
            "ffn_down_exps.weight", "ffn_up_exps.weight", "ffn_gate_shexp.weight",
            "ffn_down_shexp.weight", "ffn_up_shexp.weight", "indexer.q_proj.weight",
            "indexer.k_proj.weight", "indexer.q_norm.weight", "indexer.k_norm.weight",
            "post_ffw_norm.weight",
        ],
        tail: &[],
    },
    CreationOrder {
        archs: &[
            "afmoe", "bailingmoe2", "gpt-oss", "llada-moe", "maple", "olmoe", "stablelm",
        ],
        head: &[
            "token_embd.weight", "output_norm.bias", "output_norm.weight", "output.weight",
        ],
        layer: &[
            "attn_norm.weight", "post_attention_norm.weight", "attn_norm.bias", "attn_q.weight",
            "attn_k.weight", "attn_v.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias",
            "attn_qkv.weight", "attn_output.weight", "attn_q_norm.weight", "attn_k_norm.weight",
            "attn_gate.weight", "ffn_norm.weight", "post_ffw_norm.weight", "attn_sinks.weight",
            "ffn_gate_inp.weight", "exp_probs_b.bias", "ffn_gate_exps.weight",
            "ffn_down_exps.weight", "ffn_up_exps.weight", "ffn_gate_shexp.weight",
            "ffn_down_shexp.weight", "ffn_up_shexp.weight", "attn_output.bias",
            "ffn_gate_inp.bias", "ffn_gate_exps.bias", "ffn_down_exps.bias", "ffn_up_exps.bias",
            "ffn_norm.bias", "ffn_gate.weight", "ffn_down.weight", "ffn_up.weight",
        ],
        tail: &[],
    },
    CreationOrder {
        archs: &[
            "granite", "granitemoe", "hy_v3", "qwen35moe", "qwen3next",
        ],
        head: &[
            "token_embd.weight", "output_norm.weight", "output.weight",
        ],
        layer: &[
            "attn_norm.weight", "post_attention_norm.weight", "attn_q.weight", "attn_k.weight",
            "attn_v.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.weight",
            "attn_q_norm.weight", "attn_k_norm.weight", "ssm_in.weight", "attn_qkv.weight",
            "attn_gate.weight", "ssm_conv1d.weight", "ssm_dt.bias", "ssm_a", "ssm_beta.weight",
            "ssm_alpha.weight", "ssm_ba.weight", "ssm_norm.weight", "ssm_out.weight",
            "attn_output.bias", "ffn_norm.weight", "global rope_freqs.weight", "ffn_gate.weight",
            "ffn_down.weight", "ffn_up.weight", "ffn_gate_inp.weight", "ffn_gate.bias",
            "ffn_down.bias", "ffn_up.bias", "ffn_gate_exps.weight", "exp_probs_b",
            "ffn_down_exps.weight", "ffn_gate_up_exps.weight", "ffn_gate_inp_shexp.weight",
            "ffn_up_exps.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight",
            "ffn_down_shexp.weight",
        ],
        tail: &[],
    },
    CreationOrder {
        archs: &[
            "laguna", "olmo2",
        ],
        head: &[
            "token_embd.weight", "output_norm.weight", "output.weight",
        ],
        layer: &[
            "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias",
            "attn_k.bias", "attn_v.bias", "attn_output.weight", "attn_q_norm.weight",
            "attn_k_norm.weight", "attn_gate.weight", "ffn_norm.weight", "ffn_gate_inp.weight",
            "exp_probs_b.bias", "ffn_gate_exps.weight", "ffn_up_exps.weight",
            "ffn_down_exps.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight",
            "ffn_down_shexp.weight", "post_attention_norm.weight", "ffn_gate.weight",
            "ffn_up.weight", "ffn_down.weight", "post_ffw_norm.weight",
        ],
        tail: &[],
    },
    CreationOrder {
        archs: &[
            "dots1",
        ],
        head: &[
            "token_embd.weight", "output_norm.weight", "output.weight",
        ],
        layer: &[
            "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias",
            "attn_k.bias", "attn_v.bias", "attn_output.weight", "attn_k_norm.weight",
            "attn_q_norm.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_down.weight",
            "ffn_up.weight", "ffn_gate_inp.weight", "exp_probs_b.bias", "ffn_gate_exps.weight",
            "ffn_down_exps.weight", "ffn_up_exps.weight", "ffn_gate_shexp.weight",
            "ffn_down_shexp.weight", "ffn_up_shexp.weight",
        ],
        tail: &[],
    },
    CreationOrder {
        archs: &[
            "hunyuan-moe", "jais",
        ],
        head: &[
            "token_embd.weight", "output_norm.weight", "output_norm.bias", "output.weight",
        ],
        layer: &[
            "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias",
            "attn_k.bias", "attn_v.bias", "attn_norm.bias", "attn_qkv.weight", "attn_qkv.bias",
            "attn_output.weight", "attn_k_norm.weight", "attn_q_norm.weight", "attn_output.bias",
            "ffn_norm.weight", "ffn_gate_inp.weight", "ffn_gate_exps.weight",
            "ffn_down_exps.weight", "ffn_up_exps.weight", "ffn_gate_shexp.weight",
            "ffn_up_shexp.weight", "ffn_down_shexp.weight", "ffn_norm.bias", "ffn_down.weight",
            "ffn_down.bias", "ffn_gate.weight", "ffn_gate.bias", "ffn_up.weight", "ffn_up.bias",
        ],
        tail: &[],
    },
    CreationOrder {
        archs: &[
            "mimo2", "minimax-m2",
        ],
        head: &[
            "token_embd.weight", "output_norm.weight", "output.weight",
        ],
        layer: &[
            "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias", "attn_k.bias",
            "attn_v.bias", "attn_output.weight", "attn_norm.weight", "attn_sinks.weight",
            "attn_q_norm.weight", "attn_k_norm.weight", "ffn_norm.weight", "ffn_gate.weight",
            "ffn_down.weight", "ffn_up.weight", "ffn_gate_inp.weight", "ffn_gate_exps.weight",
            "ffn_down_exps.weight", "ffn_up_exps.weight", "exp_probs_b.bias",
        ],
        tail: &[],
    },
    CreationOrder {
        archs: &[
            "lfm2", "lfm2moe",
        ],
        head: &[
            "token_embd.weight", "token_embd_norm.weight", "output.weight",
        ],
        layer: &[
            "ffn_norm.weight", "ffn_gate.weight", "ffn_down.weight", "ffn_up.weight",
            "ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_down_exps.weight",
            "ffn_up_exps.weight", "exp_probs_b.bias", "attn_norm.weight", "attn_q_norm.weight",
            "attn_k_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
            "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.weight",
            "shortconv.conv.weight", "shortconv.in_proj.weight", "shortconv.out_proj.weight",
        ],
        tail: &["dense_2.weight", "dense_2.bias"],
    },
    CreationOrder {
        archs: &[
            "mpt",
        ],
        head: &[
            "token_embd.weight", "position_embd.weight", "output_norm.weight", "output_norm.bias",
            "output.weight",
        ],
        layer: &[
            "attn_norm.weight", "attn_norm.bias", "attn_qkv.weight", "attn_qkv.bias",
            "attn_output.weight", "attn_output.bias", "ffn_norm.weight", "ffn_norm.bias",
            "ffn_down.weight", "ffn_down.bias", "ffn_up.weight", "ffn_up.bias",
            "attn_k_norm.weight", "attn_k_norm.bias", "ffn.act.scales",
        ],
        tail: &[],
    },
    CreationOrder {
        archs: &[
            "seed_oss",
        ],
        head: &[
            "token_embd.weight", "output_norm.weight", "output.weight",
        ],
        layer: &[
            "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias", "attn_k.bias",
            "attn_v.bias", "attn_output.weight", "attn_norm.weight", "post_attention_norm.weight",
            "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
        ],
        tail: &[],
    },
    CreationOrder {
        archs: &[
            "plamo3",
        ],
        head: &[
            "token_embd.weight", "output_norm.weight", "output.weight",
        ],
        layer: &[
            "attn_norm.weight", "attn_qkv.weight", "attn_q_norm.weight", "attn_k_norm.weight",
            "attn_output.weight", "post_attention_norm", "ffn_norm.weight", "post_ffw_norm",
            "ffn_up.weight", "ffn_down.weight",
        ],
        tail: &[],
    },
];
