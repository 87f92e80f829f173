//! The executor trait: what a compute backend (the CPU executor in [`super::exec`], a CUDA
//! executor, a ggml-rpc client) offers the context, after ggml's backend interface.
//!
//! A [`Graph`] holds no backend: its nodes carry ggml's op names and semantics, its weights
//! are tensor indices read under the tensor's lock at run time. A backend answers two
//! questions before it is used, and then runs graphs:
//! * [`Executor::supports_weight`] (ggml's `supports_buft`): can it read this tensor where it
//!   lives now (host memory, a device buffer, row pieces), with this type?
//! * [`Executor::supports_op`] (ggml's `supports_op`): can it compute this node?
//! * [`Executor::compute`] (ggml's `graph_compute`): runs every node of a graph for one
//!   micro-batch, writing the KV rows of the batch's tokens, polling `abort` between nodes.
//! * [`Executor::output`] (ggml's `tensor_get` of an output): a node's values after
//!   `compute`, in host memory, for the logits and embeddings.
//!
//! A scheduler that splits one graph between backends (by the device each weight lives on)
//! asks `supports_op` per node; the context today picks one executor for the whole graph.

use super::{Graph, NodeId, Op};
use crate::gguf::GgmlType;
use crate::kv_cache::KvCache;
use crate::model::tensors::TensorState;
use crate::model::Model;

/// Why a graph could not run.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("aborted by the abort callback")]
    Aborted,
    #[error("tensor '{0}' is not in host memory (a CUDA device): CPU compute cannot read it (LLAMA_HOTSWAP_CUDA_COMPUTE=1 tries the CUDA executor, not yet verified on a GPU)")]
    NotOnHost(String),
    #[error("tensor '{name}' has type {ty}, which the {backend} engine does not support")]
    UnsupportedType {
        name: String,
        ty: GgmlType,
        backend: &'static str,
    },
    #[error("the {backend} executor cannot compute {op} ({why})")]
    UnsupportedOp {
        backend: &'static str,
        op: String,
        why: String,
    },
    /// A device operation failed (the device, the call and the driver's answer).
    #[error("{0}")]
    Device(String),
}

/// Per-micro-batch inputs.
pub struct Inputs<'a> {
    pub tokens: &'a [i32],
    /// The caller's input embeddings (n_tokens × n_embd), for [`Op::InputEmbd`].
    pub embd: &'a [f32],
    pub pos: &'a [i32],
    /// The first sequence id of each token (the one its attention mask uses).
    pub seq: &'a [usize],
    /// Indices of the tokens that produce outputs.
    pub out_ids: &'a [usize],
    /// The KV row (stream * size + cell) of each token.
    pub slots: &'a [u32],
    pub causal: bool,
    /// Flash attention is on in upstream's sense (`flash_attn_type` not disabled): its graph
    /// then casts an F32 K/V cache to F16 before FLASH_ATTN_EXT, and so does ours.
    pub flash_attn: bool,
}

/// A compute backend for graphs (see the module doc).
pub trait Executor: Send + std::fmt::Debug {
    /// The backend's name in messages ("CPU", "CUDA0").
    fn name(&self) -> &'static str;

    /// Whether this backend reads tensor `st` where it lives now with its current type
    /// (checked for every tensor when a context is made, and again after a hot-swap retypes
    /// or moves one).
    fn supports_weight(&self, st: &TensorState, name: &str) -> Result<(), ExecError>;

    /// Whether this backend computes op `op` of graph `g` (weights as placed in `model`).
    fn supports_op(&self, g: &Graph, op: &Op, model: &Model) -> bool;

    /// The number of host threads compute may use (a no-op where the backend uses none).
    fn set_n_threads(&mut self, n: usize);

    /// Copies every row of the KV caches this backend keeps in its own memory into the host
    /// cache (`to_host`) or back from it: state save and load read and write the host cache.
    fn sync_kv(&mut self, _kv: &mut KvCache, _to_host: bool) -> Result<(), ExecError> {
        Ok(())
    }

    /// Copies whole KV streams (source, destination), in order, in the caches this backend
    /// keeps in its own memory (`seq_cp` across streams; the host cache has copied its rows).
    fn copy_kv_streams(
        &mut self,
        _kv: &KvCache,
        _copies: &[(usize, usize)],
    ) -> Result<(), ExecError> {
        Ok(())
    }

    /// Copies rows `rows` of the K caches this backend keeps in its own memory into the host
    /// cache (`to_host`) or back from it: the K-shift re-rotates the host copy in between
    /// (upstream rotates on the device holding the rows; the rotation is the same). A backend
    /// whose K rows are the host cache's has nothing to copy.
    fn sync_k_rows(
        &mut self,
        _kv: &mut KvCache,
        _rows: &[usize],
        _to_host: bool,
    ) -> Result<(), ExecError> {
        Ok(())
    }

    /// Runs every node of `g` for one micro-batch. `abort` is polled between nodes.
    fn compute(
        &mut self,
        g: &Graph,
        model: &Model,
        kv: &mut KvCache,
        inp: &Inputs,
        abort: &mut dyn FnMut() -> bool,
    ) -> Result<(), ExecError>;

    /// The values of node `node` (`ne0 × ne1` f32, row-major) computed by the last
    /// [`Executor::compute`] of `g`, in host memory.
    fn output(&mut self, g: &Graph, node: NodeId) -> Result<&[f32], ExecError>;

    /// [`Executor::compute`] with an observer of the nodes (llama's `cb_eval`, ggml's
    /// scheduler `callback_eval`): before a node is computed the observer is asked whether it
    /// wants it; after a wanted node is computed it is shown the node's values and those of
    /// its sources. An observer that answers `false` stops the graph there, as upstream's
    /// scheduler stops the split (the rest is not computed; the run still succeeds). Backends
    /// that cannot show intermediate values refuse.
    fn compute_observed(
        &mut self,
        g: &Graph,
        model: &Model,
        kv: &mut KvCache,
        inp: &Inputs,
        abort: &mut dyn FnMut() -> bool,
        observer: &mut dyn NodeObserver,
    ) -> Result<(), ExecError> {
        let _ = (g, model, kv, inp, abort, observer);
        Err(ExecError::UnsupportedOp {
            backend: self.name(),
            op: "cb_eval".into(),
            why: "this backend does not show intermediate node values".into(),
        })
    }
}

/// Watches a graph's nodes as they are computed (see [`Executor::compute_observed`]).
pub trait NodeObserver {
    /// Whether the observer wants node `node` of `g` (ggml's `ask == true` call), asked once
    /// per node in execution order.
    fn wants(&mut self, g: &Graph, node: NodeId, model: &Model) -> bool;

    /// A wanted node has been computed: `values(n)` gives node `n`'s values (`ne0 × ne1`
    /// f32) for `node` and its sources, `kv` the cache as the node left it. Returns `false`
    /// to stop the graph.
    fn observe<'v>(
        &mut self,
        g: &Graph,
        node: NodeId,
        model: &Model,
        values: &dyn Fn(NodeId) -> &'v [f32],
        kv: &KvCache,
    ) -> bool;
}
