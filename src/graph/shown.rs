//! What a graph callback (`cb_eval`) is told about a node: upstream's name for the tensor
//! (its `cb(cur, name, il)`, the last call winning as in upstream), the 3-D shape upstream's
//! tensor has where ours is a 2-D node of the same values, and the RESHAPE upstream's graph
//! computes right after it (a no-op on the same values: shown, not computed). Unnamed nodes
//! are shown as ggml names unnamed nodes, `node_<index>`.

/// A name upstream's graph gives a tensor: `name-<il>` for a layer's tensor (`#` in `name`
/// stands for the layer where upstream formats it otherwise: `cache_k_l#`), `name` alone
/// for the others; `""` for a tensor upstream leaves unnamed (shown as `node_<index>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CbName {
    pub name: &'static str,
    pub layer: Option<u32>,
}

impl CbName {
    pub fn new(name: &'static str, il: Option<usize>) -> CbName {
        CbName {
            name,
            layer: il.map(|l| l as u32),
        }
    }

    /// The name as upstream's `llm_graph_context::cb` formats it.
    pub fn render(&self) -> String {
        match self.layer {
            None => self.name.to_string(),
            Some(il) if self.name.contains('#') => self.name.replace('#', &il.to_string()),
            Some(il) => format!("{}-{il}", self.name),
        }
    }
}

/// How a node is shown to a graph callback (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shown {
    pub name: Option<CbName>,
    /// Upstream's `[ne0, ne1, ne2]` for the node's `ne0 * ne1` values.
    pub ne: Option<[usize; 3]>,
    /// A RESHAPE upstream's graph has right after this tensor: its name and shape.
    pub then_reshape: Option<(CbName, [usize; 3])>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_formatted_as_upstream_cb_formats_them() {
        assert_eq!(CbName::new("Qcur", Some(3)).render(), "Qcur-3");
        assert_eq!(CbName::new("result_norm", None).render(), "result_norm");
        assert_eq!(
            CbName::new("cache_k_l# (view)", Some(12)).render(),
            "cache_k_l12 (view)"
        );
    }
}
