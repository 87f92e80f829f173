//! One graph builder per architecture, as upstream's `src/models/*.cpp`.

pub mod llama;

use super::builder::{BuildError, Builder};
use super::params::{ArchParams, RopeConfig};
use super::{Graph, GraphShape};
use crate::model::Model;

/// The architectures the engine runs.
pub const SUPPORTED: &[&str] = &["llama"];

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
) -> Result<Graph, BuildError> {
    let mut b = Builder::new(model, hp, rope, shape.n_tokens, shape.n_outputs);
    let (logits, embd) = match model.arch.as_str() {
        "llama" => llama::build(&mut b)?,
        other => return Err(BuildError::UnsupportedArch(other.to_string())),
    };
    Ok(b.finish(shape, Some(logits), Some(embd)))
}
