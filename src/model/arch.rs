//! Per-architecture knowledge, as tables. Loading never depends on an entry being here: an
//! architecture missing from a table gets the documented default.

/// `enum llama_rope_type` values.
pub const ROPE_NONE: i32 = -1;
pub const ROPE_NORM: i32 = 0;
pub const ROPE_NEOX: i32 = 2;
pub const ROPE_MROPE: i32 = 8;
pub const ROPE_IMROPE: i32 = 40;

const ROPE_NONE_ARCHS: &[&str] = &[
    "clip",
    "gpt2",
    "gptj",
    "mpt",
    "refact",
    "bloom",
    "mamba",
    "mamba2",
    "jamba",
    "jina-bert-v2",
    "t5",
    "t5encoder",
    "jais",
    "rwkv6",
    "rwkv6qwen2",
    "rwkv7",
    "arwkv7",
    "wavtokenizer-dec",
    "nemotron_h",
    "nemotron_h_moe",
    "kimi-linear",
    "kimi-k3",
    "glm5-next",
];
const ROPE_NORM_ARCHS: &[&str] = &[
    "llama",
    "llada",
    "llama4",
    "deci",
    "baichuan",
    "starcoder",
    "internlm2",
    "minicpm",
    "xverse",
    "command-r",
    "cohere2",
    "cohere2moe",
    "olmo",
    "arctic",
    "deepseek",
    "deepseek2",
    "deepseek2-ocr",
    "deepseek32",
    "deepseek4",
    "muse-glimmer",
    "plm",
    "chatglm",
    "granite",
    "granitemoe",
    "granitehybrid",
    "graniteswitch",
    "granite_swa",
    "chameleon",
    "bailingmoe",
    "neo-bert",
    "smollm3",
    "arcee",
    "ernie4_5",
    "ernie4_5-moe",
    "mistral3",
    "eagle3",
    "mistral4",
    "llama-embed",
    "maincoder",
    "glm-dsa",
    "dots3note",
    "nanbeige",
    "pockettts",
    "hy_v4",
];
const ROPE_NEOX_ARCHS: &[&str] = &[
    "falcon",
    "falcon-h1",
    "grok",
    "dbrx",
    "bert",
    "jina-bert-v3",
    "modern-bert",
    "nomic-bert",
    "nomic-bert-moe",
    "eurobert",
    "stablelm",
    "bitnet",
    "qwen",
    "qwen2",
    "dream",
    "qwen2moe",
    "qwen3",
    "qwen3moe",
    "llada-moe",
    "rnd1",
    "olmo2",
    "olmoe",
    "phi2",
    "phi3",
    "phimoe",
    "plamo",
    "plamo2",
    "plamo3",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3n",
    "gemma4",
    "gemma4-assistant",
    "gemma-embedding",
    "starcoder2",
    "openelm",
    "gptneox",
    "codeshell",
    "orion",
    "nemotron",
    "exaone",
    "exaone4",
    "exaone-moe",
    "minicpm3",
    "bailingmoe2",
    "dots1",
    "hunyuan-moe",
    "jais2",
    "gpt-oss",
    "hunyuan-dense",
    "hy_v3",
    "lfm2",
    "lfm2moe",
    "smallthinker",
    "seed_oss",
    "grovemoe",
    "apertus",
    "minimax-01",
    "minimax-m2",
    "minimax-m3",
    "cogvlm",
    "pangu-embedded",
    "afmoe",
    "laguna",
    "qwen3next",
    "mimo2",
    "step35",
    "spark2_5",
    "talkie",
    "mellum",
    "maple",
    "hrm_text",
];
const ROPE_MROPE_ARCHS: &[&str] = &["dflash", "qwen2vl", "paddleocr"];
const ROPE_IMROPE_ARCHS: &[&str] = &[
    "qwen3vl",
    "qwen3vlmoe",
    "qwen35",
    "qwen35moe",
    "qwen4exp",
    "qwen3tts",
];

const RECURRENT_ARCHS: &[&str] = &["mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"];
const HYBRID_ARCHS: &[&str] = &[
    "jamba",
    "falcon-h1",
    "plamo2",
    "granitehybrid",
    "lfm2",
    "lfm2moe",
    "nemotron_h",
    "nemotron_h_moe",
    "qwen3next",
    "kimi-linear",
    "bailingmoe3",
    "kimi-k3",
    "glm5-next",
    "qwen35",
    "qwen35moe",
    "qwen4exp",
    "deepseek4",
    "minimax-01",
];
const DIFFUSION_ARCHS: &[&str] = &["dream", "llada", "llada-moe", "rnd1"];
const ENCODER_ARCHS: &[&str] = &["t5", "t5encoder", "eagle3", "dflash"];

/// Architectures whose rope type depends on the file: M-RoPE when the metadata carries rope
/// dimension sections (`<arch>.rope.dimension_sections`, first two > 0; vision-language
/// files), else the rope type given here (upstream's `llama_model_rope_type`).
const ROPE_MROPE_IF_SECTIONS: &[(&str, i32)] = &[
    ("glm4", ROPE_NORM),
    ("glm4moe", ROPE_NEOX),
    ("hunyuan_vl", ROPE_NEOX),
    ("bailingmoe3", ROPE_NORM),
];

/// Upstream's rope type for an architecture and its rope sections (from the metadata);
/// unknown architectures report NONE.
pub fn rope_type(arch: &str, rope_sections: [i32; 4]) -> i32 {
    if let Some(&(_, without_sections)) = ROPE_MROPE_IF_SECTIONS.iter().find(|(a, _)| *a == arch) {
        let use_mrope = rope_sections[0] > 0 && rope_sections[1] > 0;
        return if use_mrope {
            ROPE_MROPE
        } else {
            without_sections
        };
    }
    let tables = [
        (ROPE_NORM_ARCHS, ROPE_NORM),
        (ROPE_NEOX_ARCHS, ROPE_NEOX),
        (ROPE_MROPE_ARCHS, ROPE_MROPE),
        (ROPE_IMROPE_ARCHS, ROPE_IMROPE),
        (ROPE_NONE_ARCHS, ROPE_NONE),
    ];
    tables
        .iter()
        .find(|(archs, _)| archs.contains(&arch))
        .map_or(ROPE_NONE, |&(_, rope)| rope)
}

pub fn is_recurrent(arch: &str) -> bool {
    RECURRENT_ARCHS.contains(&arch)
}
pub fn is_hybrid(arch: &str) -> bool {
    HYBRID_ARCHS.contains(&arch)
}
pub fn is_diffusion(arch: &str) -> bool {
    DIFFUSION_ARCHS.contains(&arch)
}
pub fn has_encoder(arch: &str) -> bool {
    ENCODER_ARCHS.contains(&arch)
}
pub fn has_decoder(arch: &str) -> bool {
    arch != "t5encoder"
}

/// The size label upstream prints in `llama_model_desc` ("7B", "8x7B", …); "?B" where the
/// table has no entry (upstream's LLM_TYPE_UNKNOWN).
pub fn size_label(
    arch: &str,
    n_layer: u32,
    n_expert: u32,
    n_vocab: u32,
    n_head: u32,
    n_head_kv: u32,
) -> &'static str {
    match arch {
        "llama" if n_expert == 8 => match n_layer {
            32 => "8x7B",
            56 => "8x22B",
            _ => "?B",
        },
        "llama" => match n_layer {
            16 | 22 => "1B",
            26 | 28 => "3B",
            30 => "256M",
            32 if n_vocab == 49152 => "3B",
            32 if n_vocab < 40000 => "7B",
            32 => "8B",
            36 => "8B",
            40 => "13B",
            48 => "34B",
            60 => "30B",
            80 if n_head == n_head_kv => "65B",
            80 => "70B",
            _ => "?B",
        },
        _ => "?B",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_answer_known_and_unknown_archs() {
        assert_eq!(rope_type("llama", [0; 4]), ROPE_NORM);
        assert_eq!(rope_type("qwen2", [0; 4]), ROPE_NEOX);
        assert_eq!(rope_type("made-up", [0; 4]), ROPE_NONE);
        // Metadata decides for these four (upstream's use_mrope()).
        assert_eq!(rope_type("glm4", [0; 4]), ROPE_NORM);
        assert_eq!(rope_type("glm4", [8, 12, 12, 0]), ROPE_MROPE);
        assert_eq!(rope_type("glm4", [8, 0, 12, 0]), ROPE_NORM);
        assert_eq!(rope_type("glm4moe", [0; 4]), ROPE_NEOX);
        assert_eq!(rope_type("glm4moe", [16, 24, 24, 0]), ROPE_MROPE);
        assert_eq!(rope_type("hunyuan_vl", [0; 4]), ROPE_NEOX);
        assert_eq!(rope_type("hunyuan_vl", [1, 1, 0, 0]), ROPE_MROPE);
        assert_eq!(rope_type("bailingmoe3", [0; 4]), ROPE_NORM);
        assert_eq!(rope_type("bailingmoe3", [4, 4, 4, 4]), ROPE_MROPE);
        assert!(is_recurrent("mamba") && !is_recurrent("llama"));
        assert_eq!(size_label("llama", 32, 0, 32000, 32, 32), "7B");
        assert_eq!(size_label("llama", 2, 0, 32000, 4, 4), "?B");
        assert_eq!(size_label("made-up", 32, 0, 32000, 32, 32), "?B");
    }
}
