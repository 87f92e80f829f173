//! Graph construction helpers shared by the architectures, after upstream's
//! `llm_graph_context` (`build_norm`, `build_attn`, `build_ffn`, `build_moe_ffn`).

mod adapters;
mod attn;
mod ffn;
mod hc;
mod hc_lowrank;
mod names;
mod norm;

use std::sync::Arc;

use super::params::{Adapters, ArchParams, RopeConfig};
use super::*;
use crate::model::adapter::AdapterTensor;
use crate::model::Model;

/// A dense FFN's choices (upstream's `build_ffn` arguments).
#[derive(Clone, Copy, Debug)]
pub struct Ffn {
    pub act: GluKind,
    /// Add `ffn_{up,gate,down}.bias` when the file has them.
    pub bias: bool,
    /// Multiply by the per-tensor scales (`<name>.scale`) when the file has them.
    pub scaled: bool,
}

impl Ffn {
    pub const SWIGLU: Ffn = Ffn {
        act: GluKind::Swiglu,
        bias: false,
        scaled: true,
    };
}

pub use super::params::Gating;

/// Whether a graph reads an optional tensor (biases): never, when the file has it, or
/// always (its absence fails the build, as upstream's `create_tensor` without
/// `TENSOR_NOT_REQUIRED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    Never,
    IfPresent,
    Required,
}

/// The activation of a dense FFN without a gate (upstream's `build_ffn` with
/// `LLM_FFN_SEQ` and no gate tensor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    Gelu,
    Relu,
    /// RELU then SQR (`LLM_FFN_RELU_SQR`).
    ReluSqr,
    Silu,
}

/// A mixture of experts' choices (upstream's `build_moe_ffn` arguments).
#[derive(Clone, Copy, Debug)]
pub struct Moe {
    pub gating: Gating,
    /// Divide the selected experts' weights by their sum.
    pub norm_w: bool,
    /// Multiply the weights by this (0 or 1: no scaling).
    pub scale_w: f32,
    /// Select by the scores plus `exp_probs_b.bias` when the file has it (DeepSeek V3).
    pub probs_bias: bool,
    /// Multiply the experts' products by their per-expert scales (`<name>.scale`) when the
    /// file has them (upstream passes them for some architectures only).
    pub exp_scales: bool,
    /// Expert groups and how many to keep (`n_expert_groups`, `n_group_used`; <= 1: none).
    pub groups: (usize, usize),
    /// The experts' gated activation.
    pub act: GluKind,
    /// The router's bias (`ffn_gate_inp.bias`) and the experts' (`ffn_*_exps.bias`,
    /// `[n, n_expert]`), required when set (gpt-oss).
    pub biases: bool,
}

impl Moe {
    /// Softmax gating, normalised weights, SwiGLU experts with their scales: llama's and
    /// qwen3moe's.
    pub const SOFTMAX: Moe = Moe {
        gating: Gating::Softmax,
        norm_w: true,
        scale_w: 0.0,
        probs_bias: false,
        exp_scales: true,
        groups: (0, 0),
        act: GluKind::Swiglu,
        biases: false,
    };
}

/// How a mixture of experts routes beyond [`Moe`]: upstream's per-architecture branches
/// in `build_moe_ffn`.
#[derive(Clone, Copy, Debug, Default)]
pub struct MoeRoute {
    /// llama4: select by the logits, weigh the input per slot before the experts, sum the
    /// experts' outputs unweighted.
    pub weight_before: bool,
    /// grovemoe: select by the sigmoid of the logits whatever the gating.
    pub select_sigmoid: bool,
    /// grovemoe's chunk experts: the selected ids divided by this (> 1), truncated.
    pub id_div: usize,
}

/// The weights of one mixture of experts.
#[derive(Clone, Copy, Debug)]
pub struct MoeWeights {
    pub gate_inp: WeightId,
    pub gate_inp_b: Option<WeightId>,
    /// The experts' biases (up, gate, down).
    pub exp_b: Option<(WeightId, WeightId, WeightId)>,
    pub probs_b: Option<WeightId>,
    pub up: Option<WeightId>,
    pub gate: Option<WeightId>,
    /// gate and up fused (`[n_embd, 2*n_ff, n_expert]`, gate first).
    pub gate_up: Option<WeightId>,
    pub down: WeightId,
}

/// Why a graph cannot be built for a model.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("architecture '{0}' is not supported by llama-hotswap's engine yet")]
    UnsupportedArch(String),
    #[error("tensor '{0}' is missing")]
    MissingTensor(String),
    #[error("tensor '{name}' has shape {got:?}, expected {want:?}")]
    BadShape {
        name: String,
        got: Vec<i64>,
        want: Vec<i64>,
    },
    #[error("{0}")]
    Invalid(String),
}

/// The outputs of a graph: the logits `[n_vocab, n_outputs]` and the final normed hidden
/// state `[n_embd, n_outputs]`.
pub struct Outputs {
    pub logits: NodeId,
    pub embd: NodeId,
}

/// Builds the node list of one graph.
pub struct Builder<'m> {
    pub model: &'m Model,
    pub hp: &'m ArchParams,
    pub rope: RopeConfig,
    pub n_tokens: usize,
    pub n_outputs: usize,
    /// The micro-batch carries input embeddings (no GET_ROWS of the token table).
    pub embd_input: bool,
    /// Hadamard rotation sizes for a quantized K / V cache (0: none), upstream's
    /// `attn_rot_k` / `attn_rot_v`.
    pub kv_rot: (usize, usize),
    /// The context's per-sequence size (phi3 picks its long or short rope factors by it).
    pub n_ctx_seq: u32,
    /// The architecture's rotary mode (upstream's `rope_type`).
    pub rope_mode: RopeMode,
    pub nodes: Vec<Node>,
    pub weights: Vec<WeightRef>,
    /// The context's LoRA adapters and control vector.
    pub adapters: &'m Adapters,
    /// Adapter tensors the graph reads ([`Graph::adapter_tensors`]).
    pub adapter_tensors: Vec<Arc<AdapterTensor>>,
    /// An adapter that did not fit the graph (the build fails with it).
    pub adapter_error: Option<BuildError>,
    /// Declaring instead of checking ([`Builder::recording`]): every weight the graph asks
    /// for exists with the shape it asks for, as upstream's loader creates a model's
    /// tensors from hyperparameters alone (`llama_model_init_from_user`).
    pub record: bool,
    /// In a recording build, the architecture's optional tensors upstream does not create
    /// from metadata (a layer suffix such as `attn_output.bias`, which also names a global
    /// tensor, or `blk.*.<suffix>` for the layers' tensor alone).
    pub record_skips: &'static [&'static str],
    /// In a recording build, the architecture's optional tensors upstream does create from
    /// metadata although [`skipped_when_declaring`] leaves them out for the others (the fused
    /// `attn_qkv` of an architecture whose loader creates no separate Q, K, V).
    pub record_creates: &'static [&'static str],
}

/// Whether `list` (layer suffixes such as `attn_output.bias`, which also name a global
/// tensor, or `blk.*.<suffix>` for the layers' tensor alone) names tensor `name`.
fn names_any(list: &[&str], name: &str) -> bool {
    list.iter().any(|s| {
        let (s, layers_only) = match s.strip_prefix("blk.*.") {
            Some(suffix) => (suffix, true),
            None => (*s, false),
        };
        (name == s && !layers_only)
            || name
                .strip_suffix(s)
                .is_some_and(|head| head.starts_with("blk.") && head.ends_with('.'))
    })
}

/// The optional tensors upstream's loader does not create from metadata for most
/// architectures although our graphs read them when a file has them: fused alternatives of
/// tensors it creates separately (`TENSOR_SKIP_IF_VIRTUAL`), scales it creates for NVFP4
/// weights only or for few architectures (`output.scale`, gemma4's router scale, mpt's
/// activation scales), and the token table's scale. An architecture whose loader does
/// create one names it in its `record_creates` (`graph::arch::metadata_creates`).
fn skipped_when_declaring(name: &str) -> bool {
    const SKIPPED: [&str; 6] = [
        ".attn_qkv.weight",
        ".attn_qkv.bias",
        ".ffn_gate_up_exps.weight",
        ".attn_kv_b.weight",
        ".ffn_gate_inp.scale",
        ".ffn.act.scales",
    ];
    // the global names exactly: a layer's `attn_output.scale` is upstream's
    name == "token_embd.scale"
        || name == "output.scale"
        || SKIPPED.iter().any(|s| name.ends_with(s))
}

/// No adapters (a graph built outside a context).
static NO_ADAPTERS: Adapters = Adapters {
    loras: Vec::new(),
    cvec: None,
};

impl<'m> Builder<'m> {
    pub fn new(
        model: &'m Model,
        hp: &'m ArchParams,
        rope: RopeConfig,
        n_tokens: usize,
        n_outputs: usize,
    ) -> Self {
        Builder {
            model,
            hp,
            rope,
            n_tokens,
            n_outputs,
            embd_input: false,
            kv_rot: (0, 0),
            n_ctx_seq: 0,
            rope_mode: RopeMode::Norm,
            nodes: Vec::new(),
            weights: Vec::new(),
            adapters: &NO_ADAPTERS,
            adapter_tensors: Vec::new(),
            adapter_error: None,
            record: false,
            record_skips: &[],
            record_creates: &[],
        }
    }

    /// Whether the model has tensor `name`: in a recording build, whether the graph's
    /// request for it would be granted (see [`Builder::weight_opt`]).
    pub fn has(&self, name: &str) -> bool {
        if self.record {
            return !self.skipped(name);
        }
        self.model.tensors.index_of(name).is_some()
    }

    /// Whether the model has tensor `name`, for the choices our graphs make by what a file
    /// holds where upstream's loader makes them by the hyperparameters (dense or MoE
    /// layer, fused or split projection): a recording build answers `created_from_metadata`
    /// (what upstream's `load_arch_tensors` creates), any other build looks at the file.
    pub fn has_else_metadata(&self, name: &str, created_from_metadata: bool) -> bool {
        if self.record {
            return created_from_metadata;
        }
        self.model.tensors.index_of(name).is_some()
    }

    /// Declares a tensor upstream's loader creates from metadata although the graph never
    /// reads it (phi3's rope factors of the other context length, mpt's K norm without a Q
    /// norm): a recording build lists it, any other build ignores it.
    pub fn declare_unread(&mut self, name: &str, want: &[i64]) {
        if self.record {
            self.declare(name, want, false);
        }
    }

    /// Whether this build records the tensors it asks for rather than reading a file.
    pub fn recording(&self) -> bool {
        self.record
    }

    /// Whether a recording build leaves optional tensor `name` out (upstream's loader does
    /// not create it from metadata).
    pub fn skips_when_declaring(&self, name: &str) -> bool {
        self.skipped(name)
    }

    /// Whether a recording build leaves optional tensor `name` out.
    fn skipped(&self, name: &str) -> bool {
        (skipped_when_declaring(name) && !names_any(self.record_creates, name))
            || names_any(self.record_skips, name)
    }

    /// A recording build's answer for weight `name` of shape `want`: the weight as asked
    /// for; None for an optional one upstream's loader does not create from metadata (a
    /// fused alternative, or a dimension <= 0) and for a dimension <= 0.
    fn declare(&mut self, name: &str, want: &[i64], optional: bool) -> Option<WeightId> {
        if let Some(pos) = self.weights.iter().position(|w| w.name == name) {
            return Some(WeightId(pos));
        }
        if (optional && self.skipped(name)) || want.iter().any(|&d| d <= 0) {
            return None;
        }
        let mut ne = [1i64; 4];
        ne[..want.len()].copy_from_slice(want);
        self.weights.push(WeightRef {
            tensor: usize::MAX,
            name: name.to_string(),
            ne,
        });
        Some(WeightId(self.weights.len() - 1))
    }

    /// A weight by name, checked against the expected shape (trailing 1s may be omitted).
    pub fn weight(&mut self, name: &str, want: &[i64]) -> Result<WeightId, BuildError> {
        if self.record {
            return self
                .declare(name, want, false)
                .ok_or_else(|| BuildError::MissingTensor(name.to_string()));
        }
        self.weight_opt(name, want)?
            .ok_or_else(|| BuildError::MissingTensor(name.to_string()))
    }

    /// An optional weight: None when the model has no tensor of that name.
    pub fn weight_opt(&mut self, name: &str, want: &[i64]) -> Result<Option<WeightId>, BuildError> {
        if self.record {
            return Ok(self.declare(name, want, true));
        }
        let Some(index) = self.model.tensors.index_of(name) else {
            return Ok(None);
        };
        if let Some(pos) = self.weights.iter().position(|w| w.tensor == index) {
            return Ok(Some(WeightId(pos)));
        }
        let ne = self.model.tensors.at(index).read().layout.ne;
        let mut want4 = [1i64; 4];
        want4[..want.len()].copy_from_slice(want);
        if ne != want4 {
            return Err(BuildError::BadShape {
                name: name.to_string(),
                got: ne.to_vec(),
                want: want.to_vec(),
            });
        }
        self.weights.push(WeightRef {
            tensor: index,
            name: name.to_string(),
            ne,
        });
        Ok(Some(WeightId(self.weights.len() - 1)))
    }

    /// A per-layer weight `blk.<il>.<suffix>`.
    pub fn lw(&mut self, il: usize, suffix: &str, want: &[i64]) -> Result<WeightId, BuildError> {
        self.weight(&format!("blk.{il}.{suffix}"), want)
    }

    pub fn lw_opt(
        &mut self,
        il: usize,
        suffix: &str,
        want: &[i64],
    ) -> Result<Option<WeightId>, BuildError> {
        self.weight_opt(&format!("blk.{il}.{suffix}"), want)
    }

    pub fn push(&mut self, name: &'static str, op: Op, ne0: usize, ne1: usize) -> NodeId {
        self.nodes.push(Node {
            op,
            ne0,
            ne1,
            offset: 0,
            name,
            shown: Default::default(),
        });
        self.nodes.len() - 1
    }

    pub fn ne0(&self, n: NodeId) -> usize {
        self.nodes[n].ne0
    }

    pub fn ne1(&self, n: NodeId) -> usize {
        self.nodes[n].ne1
    }

    fn wrows(&self, w: WeightId) -> usize {
        self.weights[w.0].ne[1] as usize
    }

    /// The input of the first layer: the token table's rows, or the caller's embeddings
    /// (upstream's `build_inp_embd`).
    pub fn get_rows_tokens(&mut self, table: WeightId) -> NodeId {
        let n = self.weights[table.0].ne[0] as usize;
        if self.embd_input {
            return self.push("inp_embd", Op::InputEmbd, n, self.n_tokens);
        }
        let mut cur = self.push("inp_embd", Op::GetRowsTokens { table }, n, self.n_tokens);
        let adapters = self.adapters;
        let name = self.weights[table.0].name.clone();
        for (lora, adapter_scale) in &adapters.loras {
            let Some(lw) = lora.weights.get(&name) else {
                continue;
            };
            let scale = lw.scale(lora.alpha, *adapter_scale);
            let rank = lw.a.ne[0] as usize;
            let a = self.adapter_tensor(&lw.a);
            let rows = self.push("get_rows", Op::GetRowsAdapter { t: a }, rank, self.n_tokens);
            let d = self.mul_mat_adapter(&lw.b, rows);
            let d = self.scale(d, scale);
            cur = self.add(cur, Operand::Node(d));
        }
        cur
    }

    pub fn get_rows_out(&mut self, src: NodeId) -> NodeId {
        if self.n_outputs == self.n_tokens {
            // every token is an output: upstream skips the selection too
            return src;
        }
        let ne0 = self.ne0(src);
        let rows = self.push("out_rows", Op::GetRowsOut { src }, ne0, self.n_outputs);
        self.cb(rows, "", None);
        rows
    }

    /// MUL_MAT, then MUL by the weight's per-tensor scale (`<name>.scale`, shape `[1]`) when
    /// the model has one, as upstream's `build_lora_mm`.
    pub fn mul_mat(&mut self, w: WeightId, x: NodeId) -> NodeId {
        let y = self.mul_mat_raw(w, x);
        let y = match self.scale_of(w, 1) {
            Some(s) => self.mul(y, Operand::Weight(s)),
            None => y,
        };
        self.add_lora(w, x, y)
    }

    /// `build_lora_mm(w, x, w_s)` with the scale the caller names (hrm_text's layers share
    /// weights but each reads the scale of its own slot).
    pub fn mul_mat_scaled(&mut self, w: WeightId, x: NodeId, s: Option<WeightId>) -> NodeId {
        let y = self.mul_mat_raw(w, x);
        let y = match s {
            Some(s) => self.mul(y, Operand::Weight(s)),
            None => y,
        };
        self.add_lora(w, x, y)
    }

    /// MUL_MAT alone.
    pub fn mul_mat_raw(&mut self, w: WeightId, x: NodeId) -> NodeId {
        let (n, m) = (self.wrows(w), self.ne1(x));
        self.push("mul_mat", Op::MulMat { w, x }, n, m)
    }

    /// An FFN projection as upstream's `build_ffn`: MUL_MAT, ADD of the bias, then MUL by the
    /// per-tensor scale when `scaled` (the reverse order of `build_lora_mm`).
    fn ffn_proj(&mut self, w: WeightId, b: Option<WeightId>, x: NodeId, scaled: bool) -> NodeId {
        let mut y = self.mul_mat_raw(w, x);
        y = self.add_lora(w, x, y);
        if let Some(b) = b {
            y = self.add(y, Operand::Weight(b));
        }
        if scaled {
            if let Some(s) = self.scale_of(w, 1) {
                y = self.mul(y, Operand::Weight(s));
            }
        }
        y
    }

    /// The `<base>.scale` tensor of weight `<base>.weight` with `len` values, if any.
    fn scale_of(&mut self, w: WeightId, len: i64) -> Option<WeightId> {
        let name = self.weights[w.0].name.strip_suffix(".weight")?.to_string();
        self.weight_opt(&format!("{name}.scale"), &[len])
            .ok()
            .flatten()
    }

    /// `w x + b` (b optional).
    pub fn linear(&mut self, w: WeightId, b: Option<WeightId>, x: NodeId) -> NodeId {
        let y = self.mul_mat(w, x);
        match b {
            Some(b) => self.add(y, Operand::Weight(b)),
            None => y,
        }
    }

    /// Values `offset .. offset + len` of every row.
    pub fn view(&mut self, src: NodeId, offset: usize, len: usize) -> NodeId {
        let n1 = self.ne1(src);
        self.push("view", Op::View { src, offset }, len, n1)
    }

    /// CLAMP to `[min, max]`.
    pub fn clamp(&mut self, src: NodeId, min: f32, max: f32) -> NodeId {
        let (n0, n1) = (self.ne0(src), self.ne1(src));
        self.push("clamp", Op::Clamp { src, min, max }, n0, n1)
    }

    /// The unary activation `act` (RELU_SQR: RELU then SQR).
    pub fn act(&mut self, src: NodeId, act: Act) -> NodeId {
        let (n0, n1) = (self.ne0(src), self.ne1(src));
        match act {
            Act::Gelu => self.push("gelu", Op::Gelu { src }, n0, n1),
            Act::Relu => self.push("relu", Op::Relu { src }, n0, n1),
            Act::Silu => self.push("silu", Op::Silu { src }, n0, n1),
            Act::ReluSqr => {
                let r = self.push("relu", Op::Relu { src }, n0, n1);
                self.push("sqr", Op::Sqr { src: r }, n0, n1)
            }
        }
    }

    /// The input embeddings plus the learned positions' rows (`position_embd`, `[n_embd,
    /// n_ctx_train]`): gpt2's and starcoder's `inpL + GET_ROWS(pos_embd, inp_pos)`.
    pub fn add_pos_embd(&mut self, inp: NodeId, pos_embd: WeightId) -> NodeId {
        let (n0, n1) = (self.ne0(inp), self.ne1(inp));
        let pos = self.push("pos_embd", Op::GetRowsPos { table: pos_embd }, n0, n1);
        self.add(inp, Operand::Node(pos))
    }

    /// A per-layer tensor read as `need` says.
    pub fn lw_need(
        &mut self,
        il: usize,
        suffix: &str,
        want: &[i64],
        need: Need,
    ) -> Result<Option<WeightId>, BuildError> {
        match need {
            Need::Never => Ok(None),
            Need::IfPresent => self.lw_opt(il, suffix, want),
            Need::Required => self.lw(il, suffix, want).map(Some),
        }
    }

    /// The final LayerNorm (`output_norm` weight, its bias as `bias` says) and the output
    /// projection (`output.weight` or the tied embeddings, with `output.scale` when present).
    pub fn ln_output(
        &mut self,
        x: NodeId,
        tok_embd: WeightId,
        bias: Need,
    ) -> Result<Outputs, BuildError> {
        let n_embd = self.hp.n_embd as i64;
        let norm = self.weight("output_norm.weight", &[n_embd])?;
        let norm_b = match bias {
            Need::Never => None,
            Need::IfPresent => self.weight_opt("output_norm.bias", &[n_embd])?,
            Need::Required => Some(self.weight("output_norm.bias", &[n_embd])?),
        };
        let output = self.output_weight(tok_embd)?;
        let embd = self.layer_norm(x, Some(norm), norm_b, self.hp.eps_norm);
        let logits = self.mul_mat(output, embd);
        self.cb_norm(embd, "result_norm", None);
        self.cb(logits, "result_output", None);
        Ok(Outputs { logits, embd })
    }

    pub fn add(&mut self, a: NodeId, b: Operand) -> NodeId {
        let (n0, n1) = (self.ne0(a), self.ne1(a));
        self.push("add", Op::Add { a, b }, n0, n1)
    }

    pub fn mul(&mut self, a: NodeId, b: Operand) -> NodeId {
        let (n0, n1) = (self.ne0(a), self.ne1(a));
        self.push("mul", Op::Mul { a, b }, n0, n1)
    }

    pub fn scale(&mut self, src: NodeId, s: f32) -> NodeId {
        let (n0, n1) = (self.ne0(src), self.ne1(src));
        self.push("scale", Op::Scale { src, s }, n0, n1)
    }

    /// DIV, elementwise.
    pub fn div(&mut self, a: NodeId, b: NodeId) -> NodeId {
        let (n0, n1) = (self.ne0(a), self.ne1(a));
        self.push(
            "div",
            Op::Div {
                a,
                b: Operand::Node(b),
            },
            n0,
            n1,
        )
    }

    pub fn sigmoid(&mut self, src: NodeId) -> NodeId {
        let (n0, n1) = (self.ne0(src), self.ne1(src));
        self.push("sigmoid", Op::Sigmoid { src }, n0, n1)
    }

    pub fn tanh(&mut self, src: NodeId) -> NodeId {
        let (n0, n1) = (self.ne0(src), self.ne1(src));
        self.push("tanh", Op::Tanh { src }, n0, n1)
    }

    /// RESHAPE to `[ne0, ne1]` (the same values in the same order; a copy here, as
    /// nodes carry their own shape: times 1 leaves every value as it is).
    pub fn reshape(&mut self, x: NodeId, ne0: usize, ne1: usize) -> NodeId {
        debug_assert_eq!(ne0 * ne1, self.ne0(x) * self.ne1(x));
        self.push("reshape", Op::Scale { src: x, s: 1.0 }, ne0, ne1)
    }

    /// `token_embd.weight` and the first layer's input (upstream's `build_inp_embd`).
    pub fn inp_embd(&mut self) -> Result<(WeightId, NodeId), BuildError> {
        let (n_embd, n_vocab) = (self.hp.n_embd as i64, self.hp.n_vocab as i64);
        let tok_embd = self.weight("token_embd.weight", &[n_embd, n_vocab])?;
        let embd = self.get_rows_tokens(tok_embd);
        self.cb(embd, "embd", None);
        Ok((tok_embd, embd))
    }

    /// `output.weight`, else the token embeddings (a tied output, upstream's
    /// `TENSOR_DUPLICATED`).
    pub fn output_weight(&mut self, tok_embd: WeightId) -> Result<WeightId, BuildError> {
        let (n_embd, n_vocab) = (self.hp.n_embd as i64, self.hp.n_vocab as i64);
        Ok(self
            .weight_opt("output.weight", &[n_embd, n_vocab])?
            .unwrap_or(tok_embd))
    }

    /// The final norm (`output_norm`, RMS) and the output projection (`output.weight` or
    /// the tied embeddings, plus `output.bias` when `bias`).
    pub fn rms_output(
        &mut self,
        x: NodeId,
        tok_embd: WeightId,
        bias: bool,
    ) -> Result<Outputs, BuildError> {
        let n_embd = self.hp.n_embd as i64;
        let norm = self.weight("output_norm.weight", &[n_embd])?;
        let output = self.output_weight(tok_embd)?;
        let embd = self.rms_norm(x, Some(norm), self.hp.eps_rms);
        let b = if bias {
            self.weight_opt("output.bias", &[self.hp.n_vocab as i64])?
        } else {
            None
        };
        let logits = self.linear(output, b, embd);
        self.cb_norm(embd, "result_norm", None);
        self.cb_output(logits, "result_output", None);
        Ok(Outputs { logits, embd })
    }

    /// Finishes the graph: plans the arena.
    pub fn finish(
        mut self,
        shape: GraphShape,
        logits: Option<NodeId>,
        embd: Option<NodeId>,
    ) -> Graph {
        let keep: Vec<NodeId> = logits.into_iter().chain(embd).collect();
        let arena_len = plan_arena(&mut self.nodes, &keep);
        Graph {
            shape,
            nodes: self.nodes,
            weights: self.weights,
            adapter_tensors: self.adapter_tensors,
            logits,
            embd,
            arena_len,
        }
    }
}
