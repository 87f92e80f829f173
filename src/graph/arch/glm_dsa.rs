//! `glm-dsa` (upstream's src/models/glm-dsa.cpp; GLM-5, 5.1, 5.2): DeepSeek-V3.2's sparse
//! attention graph (see `deepseek32`) with the indexer rotated in NORM mode, sigmoid gating
//! by default, and GLM-5.2's "shared" indexer layers, which reuse the selection of the
//! previous full layer (`attention.indexer.types`). The indexer key's LayerNorm has eps 0
//! (upstream never reads one for this architecture).

use super::super::builder::{BuildError, Builder, Outputs};
use super::super::params::ArchParams;
use super::super::RopeMode;
use super::deepseek2::{graph_with, Dsa};
use super::def::{ArchDef, Keys, Memory, Rope};

pub static DEF: ArchDef = ArchDef {
    names: &["glm-dsa"],
    rope: Rope::Mode(RopeMode::Norm),
    memory: Memory::KvLatent,
    hparams,
    graph,
};

fn hparams(k: &Keys, hp: &mut ArchParams) -> Result<(), String> {
    super::deepseek2::hparams(k, hp)?;
    // files without the key: sigmoid gating (GLM-4.5 and later)
    if k.u32("expert_gating_func", 0) == 0 {
        hp.ext.gating = super::super::builder::Gating::Sigmoid;
    }
    hp.eps_norm = 0.0;
    let mut ix = super::deepseek32::indexer_params(k, hp)?;
    let n_layer = hp.n_layer;
    let types = k
        .model
        .meta
        .get_u32_or_array(&k.key("attention.indexer.types"), n_layer);
    ix.full = if let Some(t) = types {
        t.iter().take(n_layer).map(|&v| v != 0).collect()
    } else if hp.n_ctx_train < 1_048_576 {
        // GLM-5 and 5.1 (before the key existed): every layer full
        vec![true; n_layer]
    } else {
        return Err(
            "GLM-5.2 files without attention.indexer.types (upstream's built-in default) are not supported yet".into(),
        );
    };
    if ix.full.first() == Some(&false) {
        return Err("attention.indexer.types: the first layer must be a full indexer layer".into());
    }
    hp.ext.indexer = ix;
    Ok(())
}

fn graph(b: &mut Builder) -> Result<Outputs, BuildError> {
    graph_with(
        b,
        Some(Dsa {
            rope: RopeMode::Norm,
            norm_optional: true,
        }),
    )
}
