//! One graph builder per architecture, as upstream's `src/models/*.cpp`.

pub mod gemma3;
pub mod llama;
pub mod phi3;

use super::builder::{BuildError, Builder};
use super::params::{ArchParams, RopeConfig};
use super::{Graph, GraphShape};
use crate::model::Model;

/// The architectures the engine runs.
pub const SUPPORTED: &[&str] = &[
    "llama", "mistral3", "qwen2", "qwen3", "qwen3moe", "gemma3", "phi3",
];

/// Whether the engine has a graph for `arch`.
pub fn is_supported(arch: &str) -> bool {
    SUPPORTED.contains(&arch)
}

/// Builds the graph of `model` for a micro-batch of `shape`.
pub fn build(
    model: &Model,
    hp: &ArchParams,
    rope: RopeConfig,
    shape: GraphShape,
    n_ctx_seq: u32,
    kv_rot: (usize, usize),
) -> Result<Graph, BuildError> {
    let mut b = Builder::new(model, hp, rope, shape.n_tokens, shape.n_outputs);
    b.embd_input = shape.embd_input;
    b.kv_rot = kv_rot;
    let (logits, embd) = match model.arch.as_str() {
        "gemma3" => gemma3::build(&mut b)?,
        "phi3" => phi3::build(&mut b, n_ctx_seq)?,
        arch => match llama::Variant::of(arch) {
            Some(v) => llama::build(&mut b, v)?,
            None => return Err(BuildError::UnsupportedArch(arch.to_string())),
        },
    };
    Ok(b.finish(shape, Some(logits), Some(embd)))
}
