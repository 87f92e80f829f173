//! `qwen3tts` (upstream's src/models/qwen3tts.cpp reuses qwen3vl's loader and graph): the
//! talker of Qwen3-TTS, run on its text/token path as qwen3vl's (interleaved M-RoPE, which
//! rotates text tokens as NEOX). Its `output.weight` is the codec head of a fixed 3072 rows;
//! upstream pads a larger vocabulary's logits with -inf in front of the head's (not done
//! here yet: such files are refused naming the tensor) and aborts on a smaller one.

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::def::{check_mrope_text, ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["qwen3tts"],
    rope: Rope::Multi(40),
    memory: Memory::Kv,
    hparams,
    graph,
};

/// The codec head's rows, hard-coded upstream ([TAG_LLAMA_N_VOCAB_OUT]).
const N_VOCAB_OUT: usize = 3072;

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    if k.u32("n_deepstack_layers", 0) > 0 {
        return Err("deepstack layers are not supported yet".into());
    }
    check_mrope_text(k, hp, 40)
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    let n_embd = b.hp.n_embd as i64;
    if b.hp.n_vocab != N_VOCAB_OUT {
        // a codec head beside another vocabulary: upstream pads (larger) or aborts (smaller)
        if b.weight_opt("output.weight", &[n_embd, N_VOCAB_OUT as i64])?
            .is_some()
        {
            return Err(BuildError::Invalid(format!(
                "output.weight: a codec head of {N_VOCAB_OUT} rows under a vocabulary of {} \
                 (upstream's -inf padded logits) is not supported yet",
                b.hp.n_vocab
            )));
        }
    }
    super::qwen3::graph_with(b, false)
}
