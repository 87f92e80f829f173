//! Graph construction helpers shared by the architectures, after upstream's
//! `llm_graph_context` (`build_norm`, `build_attn`, `build_ffn`, `build_moe_ffn`).

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
        }
    }

    /// Index of adapter tensor `t` in the graph's list (added once).
    fn adapter_tensor(&mut self, t: &Arc<AdapterTensor>) -> usize {
        if let Some(i) = self.adapter_tensors.iter().position(|x| Arc::ptr_eq(x, t)) {
            return i;
        }
        self.adapter_tensors.push(Arc::clone(t));
        self.adapter_tensors.len() - 1
    }

    /// MUL_MAT by an adapter tensor (`t` is [k, n], `x` [k, m] → [n, m]).
    fn mul_mat_adapter(&mut self, t: &Arc<AdapterTensor>, x: NodeId) -> NodeId {
        let n = t.ne[1] as usize;
        let m = self.ne1(x);
        let t = self.adapter_tensor(t);
        self.push("mul_mat", Op::MulMatAdapter { t, x }, n, m)
    }

    /// Adds each LoRA adapter's `scale · B (A x)` for weight `w` to `y` (upstream's loop in
    /// `build_lora_mm`).
    /// A pair that cannot multiply `x` is left out and recorded in `adapter_error`, which
    /// fails the build.
    fn add_lora(&mut self, w: WeightId, x: NodeId, mut y: NodeId) -> NodeId {
        let adapters = self.adapters;
        if adapters.loras.is_empty() {
            return y;
        }
        let name = self.weights[w.0].name.clone();
        for (lora, adapter_scale) in &adapters.loras {
            let Some(lw) = lora.weights.get(&name) else {
                continue;
            };
            if lw.a.ne[0] as usize != self.ne0(x) {
                // the tied output of a token-embedding adapter (upstream asserts here)
                self.adapter_error.get_or_insert(BuildError::Invalid(format!(
                    "the LoRA factors of '{name}' cannot multiply this input (a token-embedding adapter on a tied output)"
                )));
                continue;
            }
            let scale = lw.scale(lora.alpha, *adapter_scale);
            let ax = self.mul_mat_adapter(&lw.a, x);
            let bax = self.mul_mat_adapter(&lw.b, ax);
            let d = self.scale(bax, scale);
            y = self.add(y, Operand::Node(d));
        }
        y
    }

    /// The layer output with the control vector's direction for layer `il` added, when the
    /// context has one for it (upstream's `build_cvec`).
    pub fn cvec(&mut self, x: NodeId, il: usize) -> NodeId {
        let Some(t) = self.adapters.cvec.as_ref().and_then(|c| c.tensor_for(il)) else {
            return x;
        };
        let t = Arc::clone(t);
        let t = self.adapter_tensor(&t);
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        self.push("add", Op::AddAdapter { a: x, t }, n0, n1)
    }

    /// A weight by name, checked against the expected shape (trailing 1s may be omitted).
    pub fn weight(&mut self, name: &str, want: &[i64]) -> Result<WeightId, BuildError> {
        self.weight_opt(name, want)?
            .ok_or_else(|| BuildError::MissingTensor(name.to_string()))
    }

    /// An optional weight: None when the model has no tensor of that name.
    pub fn weight_opt(&mut self, name: &str, want: &[i64]) -> Result<Option<WeightId>, BuildError> {
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
        self.push("out_rows", Op::GetRowsOut { src }, ne0, self.n_outputs)
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

    /// MUL_MAT and the LoRA products, without the per-tensor scale (upstream's
    /// `build_lora_mm(w, cur)` where the architecture passes no `w_s`).
    pub fn mul_mat_lora(&mut self, w: WeightId, x: NodeId) -> NodeId {
        let y = self.mul_mat_raw(w, x);
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

    /// Q, K and V: separate projections (with optional biases) or a fused `attn_qkv`.
    pub fn qkv(&mut self, il: usize, x: NodeId) -> Result<(NodeId, NodeId, NodeId), BuildError> {
        let hp = self.hp;
        let n_embd = hp.n_embd as i64;
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let nk = hp.n_embd_k_gqa(il) as i64;
        let nv = hp.n_embd_v_gqa(il) as i64;
        if let Some(w) = self.lw_opt(il, "attn_qkv.weight", &[n_embd, nq + nk + nv])? {
            let bias = self.lw_opt(il, "attn_qkv.bias", &[nq + nk + nv])?;
            let mut qkv = self.linear(w, bias, x);
            if hp.ext.clamp_kqv > 0.0 {
                qkv = self.clamp(qkv, -hp.ext.clamp_kqv, hp.ext.clamp_kqv);
            }
            let q = self.view(qkv, 0, nq as usize);
            let k = self.view(qkv, nq as usize, nk as usize);
            let v = self.view(qkv, (nq + nk) as usize, nv as usize);
            return Ok((q, k, v));
        }
        let wq = self.lw(il, "attn_q.weight", &[n_embd, nq])?;
        let wk = self.lw(il, "attn_k.weight", &[n_embd, nk])?;
        let wv = self.lw(il, "attn_v.weight", &[n_embd, nv])?;
        let bq = self.lw_opt(il, "attn_q.bias", &[nq])?;
        let bk = self.lw_opt(il, "attn_k.bias", &[nk])?;
        let bv = self.lw_opt(il, "attn_v.bias", &[nv])?;
        let c = hp.ext.clamp_kqv;
        let mut proj = |w, b| {
            let y = self.linear(w, b, x);
            if c > 0.0 {
                self.clamp(y, -c, c)
            } else {
                y
            }
        };
        Ok((proj(wq, bq), proj(wk, bk), proj(wv, bv)))
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

    /// `build_ffn` without a gate (`LLM_FFN_SEQ`): `down(act(up x + up_b)) + down_b`, the
    /// per-tensor scales when `scaled`, the activation divided by `act_scales` when given
    /// (mpt's AWQ `ffn.act.scales`), the biases as `bias` says.
    pub fn ffn_seq(
        &mut self,
        il: usize,
        x: NodeId,
        act: Act,
        bias: Need,
        scaled: bool,
    ) -> Result<NodeId, BuildError> {
        let n_embd = self.hp.n_embd as i64;
        let n_ff = self.hp.n_ff[il] as i64;
        let up = self.lw(il, "ffn_up.weight", &[n_embd, n_ff])?;
        let down = self.lw(il, "ffn_down.weight", &[n_ff, n_embd])?;
        let up_b = self.lw_need(il, "ffn_up.bias", &[n_ff], bias)?;
        let down_b = self.lw_need(il, "ffn_down.bias", &[n_embd], bias)?;
        let act_scales = self.lw_opt(il, "ffn.act.scales", &[n_ff])?;
        let h = self.ffn_proj(up, up_b, x, scaled);
        let mut h = self.act(h, act);
        if let Some(s) = act_scales {
            let (n0, n1) = (self.ne0(h), self.ne1(h));
            h = self.push(
                "ffn_act",
                Op::Div {
                    a: h,
                    b: Operand::Weight(s),
                },
                n0,
                n1,
            );
        }
        Ok(self.ffn_proj(down, down_b, h, scaled))
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

    /// `build_norm` with LLM_NORM_RMS: RMS_NORM then MUL by the weight (and ADD of a bias).
    pub fn rms_norm(&mut self, x: NodeId, w: Option<WeightId>, eps: f32) -> NodeId {
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        let y = self.push("rms_norm", Op::RmsNorm { src: x, eps }, n0, n1);
        match w {
            Some(w) => self.mul(y, Operand::Weight(w)),
            None => y,
        }
    }

    /// `build_norm` with LLM_NORM: NORM, MUL by the weight, ADD of the bias.
    pub fn layer_norm(
        &mut self,
        x: NodeId,
        w: Option<WeightId>,
        b: Option<WeightId>,
        eps: f32,
    ) -> NodeId {
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        let mut y = self.push("norm", Op::Norm { src: x, eps }, n0, n1);
        if let Some(w) = w {
            y = self.mul(y, Operand::Weight(w));
        }
        if let Some(b) = b {
            y = self.add(y, Operand::Weight(b));
        }
        y
    }

    /// RMS_NORM of each head (`head_dim` values) of a [n_head*head_dim, T] node, times the
    /// weight (broadcast over heads): qwen3's and gemma3's q/k norms.
    pub fn head_rms_norm(&mut self, x: NodeId, head_dim: usize, w: WeightId, eps: f32) -> NodeId {
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        let heads = n0 / head_dim;
        // a reshape to [head_dim, heads*T] is free: the same values, rows of head_dim
        let y = self.push(
            "rms_norm",
            Op::RmsNorm { src: x, eps },
            head_dim,
            heads * n1,
        );
        let y = self.mul(y, Operand::Weight(w));
        // RESHAPE back to [n_head*head_dim, T]: same values (a weight operand broadcasts by
        // its own length, so the MUL is unaffected)
        self.nodes[y].ne0 = n0;
        self.nodes[y].ne1 = n1;
        y
    }

    /// RMS_NORM of each head (`head_dim` values) of a [n_head*head_dim, T] node, no weight
    /// (llama4's Q/K norms).
    pub fn head_rms_norm_plain(&mut self, x: NodeId, head_dim: usize, eps: f32) -> NodeId {
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        let y = self.push(
            "rms_norm",
            Op::RmsNorm { src: x, eps },
            head_dim,
            (n0 / head_dim) * n1,
        );
        // the RESHAPE back to [n_head*head_dim, T] (a copy: nodes carry their own shape;
        // times 1 leaves every value as it is)
        self.push("reshape", Op::Scale { src: y, s: 1.0 }, n0, n1)
    }

    /// NORM (LayerNorm without bias) of each head (`head_dim` values) of a
    /// [n_head*head_dim, T] node, times a weight of one value per head and position
    /// (`[head_dim, n_head]`, broadcast over tokens): stablelm's per-head q/k norms.
    pub fn head_layer_norm(&mut self, x: NodeId, head_dim: usize, w: WeightId, eps: f32) -> NodeId {
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        let heads = n0 / head_dim;
        // the reshape to [head_dim, heads*T] and back is free (the same values)
        let y = self.push("norm", Op::Norm { src: x, eps }, head_dim, heads * n1);
        // the weight covers a whole row of n_head*head_dim values: its chunks are tokens
        let y = self.mul(y, Operand::Weight(w));
        self.nodes[y].ne0 = n0;
        self.nodes[y].ne1 = n1;
        y
    }

    pub fn rope(
        &mut self,
        x: NodeId,
        head_dim: usize,
        mode: RopeMode,
        freq_factors: Option<WeightId>,
        swa: bool,
    ) -> NodeId {
        let mut params = self.rope_params(swa);
        params.mode = mode;
        self.rope_with(x, head_dim, params, freq_factors)
    }

    /// The rotation a layer gets by default: the context's rope values, with the
    /// sliding-window base and scale on `swa` layers, the architecture's mode.
    pub fn rope_params(&self, swa: bool) -> RopeParams {
        let r = self.rope;
        RopeParams {
            n_rot: self.hp.n_rot,
            mode: self.rope_mode,
            n_ctx_orig: r.n_ctx_orig,
            freq_base: if swa {
                self.hp.rope_freq_base_swa
            } else {
                r.freq_base
            },
            freq_scale: if swa {
                self.hp.rope_freq_scale_swa
            } else {
                r.freq_scale
            },
            ext_factor: r.ext_factor,
            attn_factor: r.attn_factor,
            beta_fast: r.beta_fast,
            beta_slow: r.beta_slow,
        }
    }

    /// ROPE with the caller's values (architectures that rotate some layers otherwise:
    /// their own rotary width, no YaRN).
    pub fn rope_with(
        &mut self,
        x: NodeId,
        head_dim: usize,
        params: RopeParams,
        freq_factors: Option<WeightId>,
    ) -> NodeId {
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        self.push(
            "rope",
            Op::Rope {
                src: x,
                head_dim,
                params,
                freq_factors,
            },
            n0,
            n1,
        )
    }

    /// RESHAPE to `[ne0, ne1]` (the same values in the same order; a copy here, as
    /// nodes carry their own shape: times 1 leaves every value as it is).
    pub fn reshape(&mut self, x: NodeId, ne0: usize, ne1: usize) -> NodeId {
        debug_assert_eq!(ne0 * ne1, self.ne0(x) * self.ne1(x));
        self.push("reshape", Op::Scale { src: x, s: 1.0 }, ne0, ne1)
    }

    /// `build_attn` with a KV cache: store K and V, FLASH_ATTN_EXT, output projection.
    #[allow(clippy::too_many_arguments)]
    pub fn attn(
        &mut self,
        il: usize,
        q: NodeId,
        k: NodeId,
        v: NodeId,
        wo: WeightId,
        wo_b: Option<WeightId>,
        scale: f32,
    ) -> NodeId {
        self.attn_sinks(il, q, k, v, wo, wo_b, scale, None)
    }

    /// [`Builder::attn`] with attention sinks (`[n_head]` logits joined to each softmax).
    #[allow(clippy::too_many_arguments)]
    pub fn attn_sinks(
        &mut self,
        il: usize,
        q: NodeId,
        k: NodeId,
        v: NodeId,
        wo: WeightId,
        wo_b: Option<WeightId>,
        scale: f32,
        sinks: Option<WeightId>,
    ) -> NodeId {
        let kqv = self.attn_kqv(il, q, k, v, scale, sinks);
        self.linear(wo, wo_b, kqv)
    }

    /// `build_attn` without the output projection (upstream's `wo` = nullptr): the heads'
    /// attention results `[n_head * head_v, T]`.
    pub fn attn_kqv(
        &mut self,
        il: usize,
        q: NodeId,
        k: NodeId,
        v: NodeId,
        scale: f32,
        sinks: Option<WeightId>,
    ) -> NodeId {
        let hp = self.hp;
        let n_head = hp.n_head[il];
        let n_head_kv = hp.n_head_kv[il];
        let (rot_k, rot_v) = self.kv_rot;
        let (q, k) = if rot_k > 0 {
            (self.hadamard(q, rot_k), self.hadamard(k, rot_k))
        } else {
            (q, k)
        };
        let v = if rot_v > 0 {
            self.hadamard(v, rot_v)
        } else {
            v
        };
        let ks = self.push(
            "k_set",
            Op::SetRows {
                src: k,
                layer: il,
                v: false,
            },
            0,
            0,
        );
        let vs = self.push(
            "v_set",
            Op::SetRows {
                src: v,
                layer: il,
                v: true,
            },
            0,
            0,
        );
        let n_swa = if hp.swa_layers[il] { hp.n_swa } else { 0 };
        let t = self.ne1(q);
        let kqv = self.push(
            "fattn",
            Op::FlashAttnExt {
                q,
                deps: [ks, vs],
                layer: il,
                n_head,
                n_head_kv,
                dk: hp.head_k,
                dv: hp.head_v,
                scale,
                softcap: hp.attn_logit_softcap,
                n_swa,
                v_in_k: false,
                sinks,
                max_bias: hp.ext.max_alibi_bias,
                sel: None,
            },
            n_head * hp.head_v,
            t,
        );
        if rot_v > 0 {
            self.hadamard(kqv, rot_v)
        } else {
            kqv
        }
    }

    /// `build_attn` over a compressed (latent) cache, as upstream's MLA: K (one head of the
    /// latent and the rotary part) stored, V read as the latent part of the cached K rows,
    /// FLASH_ATTN_EXT, each head's result decompressed by `wv_b` (`[latent, head_v,
    /// n_head]`), the output projection.
    #[allow(clippy::too_many_arguments)]
    pub fn attn_latent(
        &mut self,
        il: usize,
        q: NodeId,
        k: NodeId,
        wv_b: WeightId,
        wo: WeightId,
        scale: f32,
        sel: Option<NodeId>,
    ) -> NodeId {
        let kqv = self.attn_latent_heads(il, q, k, wv_b, scale, sel);
        self.linear(wo, None, kqv)
    }

    /// [`Builder::attn_latent`] without the output projection (`build_attn` with `wo`
    /// NULL: the graphs that gate the heads first).
    pub fn attn_latent_heads(
        &mut self,
        il: usize,
        q: NodeId,
        k: NodeId,
        wv_b: WeightId,
        scale: f32,
        sel: Option<NodeId>,
    ) -> NodeId {
        let hp = self.hp;
        let n_head = hp.n_head[il];
        let ks = self.push(
            "k_set",
            Op::SetRows {
                src: k,
                layer: il,
                v: false,
            },
            0,
            0,
        );
        // (the sliding-window layers of dots3note; none elsewhere)
        let n_swa = if hp.swa_layers.get(il).copied().unwrap_or(false) {
            hp.n_swa
        } else {
            0
        };
        let t = self.ne1(q);
        let kqv = self.push(
            "fattn",
            Op::FlashAttnExt {
                q,
                deps: [ks, ks],
                layer: il,
                n_head,
                n_head_kv: 1,
                dk: hp.head_k,
                dv: hp.head_v,
                scale,
                softcap: hp.attn_logit_softcap,
                n_swa,
                v_in_k: true,
                sinks: None,
                max_bias: 0.0,
                sel,
            },
            n_head * hp.head_v,
            t,
        );
        self.mul_mat_heads(wv_b, kqv, n_head)
    }

    /// DeepSeek's lightning indexer of layer `il`: stores the micro-batch's indexer keys `k`
    /// (`[head, T]`) in the indexer's cache (layer `n_layer + il` of the memory), then selects
    /// for each token the `top_k` cells whose keys score best against its queries `q`
    /// (`[head*n_head, T]`) weighted by `w` (`[n_head, T]`, pre-scaled): see
    /// [`Op::LightningIndexer`]. At most the context's cells are selected.
    pub fn lightning_indexer(&mut self, il: usize, q: NodeId, k: NodeId, w: NodeId) -> NodeId {
        let hp = self.hp;
        let ix = &hp.ext.indexer;
        let layer = hp.n_layer + il;
        let dep = self.push(
            "indexer_k_set",
            Op::SetRows {
                src: k,
                layer,
                v: false,
            },
            0,
            0,
        );
        // the node holds one row index per selected cell: never more than the cells
        let cells = if self.n_ctx_seq > 0 {
            self.n_ctx_seq as usize
        } else {
            ix.top_k
        };
        let k_sel = ix.top_k.min(cells).max(1);
        let t = self.ne1(q);
        let op = Op::LightningIndexer {
            q,
            w,
            dep,
            layer,
            head: ix.head,
            k: k_sel,
        };
        self.push("top_k", op, k_sel, t)
    }

    /// ADD_ID: each expert slot's row plus its expert's bias column.
    pub fn add_id(&mut self, src: NodeId, b: WeightId, ids: NodeId) -> NodeId {
        let (n0, n1) = (self.ne0(src), self.ne1(src));
        self.push("add_id", Op::AddId { src, b, ids }, n0, n1)
    }

    /// Of every head (`stride` values), the values `offset .. offset + len`.
    pub fn view_heads(&mut self, src: NodeId, stride: usize, offset: usize, len: usize) -> NodeId {
        let (n0, n1) = (self.ne0(src), self.ne1(src));
        let op = Op::ViewHeads {
            src,
            stride,
            offset,
            len,
        };
        self.push("view_heads", op, n0 / stride * len, n1)
    }

    /// Per head, `a`'s values then `b`'s.
    pub fn concat_heads(&mut self, a: NodeId, b: NodeId, n_head: usize) -> NodeId {
        let (n0, n1) = (self.ne0(a) + self.ne0(b), self.ne1(a));
        self.push("concat", Op::ConcatHeads { a, b, n_head }, n0, n1)
    }

    /// Head h of `x` times matrix h of `w` (`[k, n, n_head]`).
    pub fn mul_mat_heads(&mut self, w: WeightId, x: NodeId, n_head: usize) -> NodeId {
        let (n, t) = (self.wrows(w), self.ne1(x));
        self.push(
            "mul_mat_heads",
            Op::MulMatHeads { w, x, n_head },
            n * n_head,
            t,
        )
    }

    /// The Walsh-Hadamard rotation of every `n` values (see [`Op::Hadamard`]).
    pub fn hadamard(&mut self, src: NodeId, n: usize) -> NodeId {
        let (n0, n1) = (self.ne0(src), self.ne1(src));
        self.push(
            "hadamard",
            Op::Hadamard {
                src,
                n,
                dense: false,
            },
            n0,
            n1,
        )
    }

    /// MUL_MAT of every `n` values by the Walsh-Hadamard matrix as a plain product
    /// ([`Op::Hadamard`] with `dense`).
    pub fn hadamard_dense(&mut self, src: NodeId, n: usize) -> NodeId {
        let (n0, n1) = (self.ne0(src), self.ne1(src));
        self.push(
            "mul_mat",
            Op::Hadamard {
                src,
                n,
                dense: true,
            },
            n0,
            n1,
        )
    }

    /// `build_ffn` with PAR gating: `down(act(gate x) * up x)` (+ biases, and the per-tensor
    /// scales when `scaled`: some architectures pass none).
    #[allow(clippy::too_many_arguments)]
    pub fn ffn(
        &mut self,
        x: NodeId,
        up: WeightId,
        up_b: Option<WeightId>,
        gate: WeightId,
        gate_b: Option<WeightId>,
        down: WeightId,
        down_b: Option<WeightId>,
        kind: GluKind,
        scaled: bool,
    ) -> NodeId {
        let u = self.ffn_proj(up, up_b, x, scaled);
        let g = self.ffn_proj(gate, gate_b, x, scaled);
        let (n0, n1) = (self.ne0(g), self.ne1(g));
        let h = self.push(
            "glu",
            Op::Glu {
                gate: g,
                up: u,
                kind,
            },
            n0,
            n1,
        );
        self.ffn_proj(down, down_b, h, scaled)
    }

    /// `build_moe_ffn`: route (gating, selection bias, expert groups, top-k), weigh
    /// (normalise, scale), run the selected experts (GLU), sum.
    pub fn moe_ffn(&mut self, x: NodeId, w: MoeWeights, n_used: usize, m: Moe) -> NodeId {
        self.moe_ffn_with(x, w, n_used, m, false)
    }

    /// [`Builder::moe_ffn`], or with `weight_before` upstream's llama4 path: experts chosen
    /// by the router's logits, the input weighted per slot before the experts, and their
    /// outputs summed unweighted.
    pub fn moe_ffn_with(
        &mut self,
        x: NodeId,
        w: MoeWeights,
        n_used: usize,
        m: Moe,
        weight_before: bool,
    ) -> NodeId {
        let mut logits = self.mul_mat(w.gate_inp, x);
        if let Some(b) = w.gate_inp_b {
            logits = self.add(logits, Operand::Weight(b));
        }
        let route = MoeRoute {
            weight_before,
            ..MoeRoute::default()
        };
        self.moe_ffn_routed(x, logits, w, n_used, m, route)
    }

    /// [`Builder::moe_ffn_with`] routed by the given router `logits` (`[n_expert, T]`,
    /// upstream's `probs_in`: Kimi-K3 routes by the full-width input while its experts read a
    /// down-projected one); `w.gate_inp` and `w.gate_inp_b` are not read.
    pub fn moe_ffn_logits(
        &mut self,
        x: NodeId,
        logits: NodeId,
        w: MoeWeights,
        n_used: usize,
        m: Moe,
        weight_before: bool,
    ) -> NodeId {
        let route = MoeRoute {
            weight_before,
            ..MoeRoute::default()
        };
        self.moe_ffn_routed(x, logits, w, n_used, m, route)
    }

    /// [`Builder::moe_ffn`] from router logits the caller computed (upstream's `probs_in`;
    /// `w.gate_inp` is not read), with `route`'s choices.
    pub fn moe_ffn_routed(
        &mut self,
        x: NodeId,
        logits: NodeId,
        w: MoeWeights,
        n_used: usize,
        m: Moe,
        route: MoeRoute,
    ) -> NodeId {
        let weight_before = route.weight_before;
        let t = self.ne1(x);
        let n_expert = self.ne0(logits);
        let probs = match m.gating {
            Gating::Softmax => self.push("moe_probs", Op::SoftMax { src: logits }, n_expert, t),
            Gating::Sigmoid => self.push("moe_probs", Op::Sigmoid { src: logits }, n_expert, t),
            Gating::SoftmaxWeight => logits,
        };
        // the selection bias chooses the experts; their weights stay unbiased
        let mut selection = match w.probs_b {
            Some(bias) => self.add(probs, Operand::Weight(bias)),
            None => probs,
        };
        if weight_before {
            // llama4 selects by the logits (sigmoid comes after the top-k)
            selection = logits;
        }
        if route.select_sigmoid {
            selection = self.sigmoid(logits);
        }
        let (n_groups, n_group_used) = m.groups;
        if n_groups > 1 {
            let op = Op::GroupMask {
                src: selection,
                n_groups,
                n_group_used,
            };
            selection = self.push("moe_group_mask", op, n_expert, t);
        }
        let ids = self.push(
            "moe_topk",
            Op::TopK {
                src: selection,
                k: n_used,
            },
            n_used,
            t,
        );
        let ids = if route.id_div > 1 {
            // ids are f32 here and every consumer truncates them, as ggml's F32 -> I32
            // cast does: upstream's CAST(SCALE(CAST(ids), 1/n), I32)
            self.scale(ids, 1.0 / route.id_div as f32)
        } else {
            ids
        };
        let mut wts = self.push("moe_weights", Op::GetRowsIds { src: probs, ids }, n_used, t);
        if m.gating == Gating::SoftmaxWeight {
            wts = self.push("moe_weights_softmax", Op::SoftMax { src: wts }, n_used, t);
        }
        if m.norm_w {
            wts = self.push("moe_weights_norm", Op::DivSumRows { src: wts }, n_used, t);
        }
        if m.scale_w != 0.0 && m.scale_w != 1.0 {
            wts = self.scale(wts, m.scale_w);
        }
        let n_embd = self.weights[w.down.0].ne[1] as usize;
        let n_ff = self.weights[w.down.0].ne[0] as usize;
        let x = if weight_before {
            let op = Op::MulSlots {
                src: x,
                weights: wts,
                n_used,
            };
            self.push("moe_weighted", op, n_embd, n_used * t)
        } else {
            x
        };
        let n_exp = self.weights[w.down.0].ne[2];
        let scale = |b: &mut Self, e: Option<WeightId>| match (e, m.exp_scales) {
            (Some(e), true) => b.scale_of(e, n_exp),
            _ => None,
        };
        let (up_s, gate_s, down_s) = (
            scale(self, w.up.or(w.gate_up)),
            scale(self, w.gate),
            scale(self, Some(w.down)),
        );
        let mm_id = |b: &mut Self, name, e: WeightId, x: NodeId, s: Option<WeightId>| {
            let n = b.weights[e.0].ne[1] as usize;
            let op = Op::MulMatId {
                w: e,
                x,
                ids,
                n_used,
                scale: s,
            };
            b.push(name, op, n, n_used * t)
        };
        let (gate, up) = match (w.gate_up, w.up, w.gate) {
            (Some(gu), _, _) => {
                let both = mm_id(self, "moe_gate_up", gu, x, up_s);
                (self.view(both, 0, n_ff), self.view(both, n_ff, n_ff))
            }
            (None, Some(u), Some(g)) => {
                let mut up = mm_id(self, "moe_up", u, x, up_s);
                if let Some((ub, _, _)) = w.exp_b {
                    up = self.add_id(up, ub, ids);
                }
                let mut gate = mm_id(self, "moe_gate", g, x, gate_s);
                if let Some((_, gb, _)) = w.exp_b {
                    gate = self.add_id(gate, gb, ids);
                }
                (gate, up)
            }
            _ => unreachable!("moe_layer gives gate_up or both gate and up"),
        };
        let par = self.push(
            "moe_glu",
            Op::Glu {
                gate,
                up,
                kind: m.act,
            },
            n_ff,
            n_used * t,
        );
        let mut experts = mm_id(self, "moe_down", w.down, par, down_s);
        if let Some((_, _, db)) = w.exp_b {
            experts = self.add_id(experts, db, ids);
        }
        if weight_before {
            let op = Op::SumSlots {
                src: experts,
                n_used,
            };
            return self.push("moe_out", op, n_embd, t);
        }
        self.push(
            "moe_out",
            Op::WeightedSum {
                src: experts,
                weights: wts,
                n_used,
            },
            n_embd,
            t,
        )
    }

    /// `token_embd.weight` and the first layer's input (upstream's `build_inp_embd`).
    pub fn inp_embd(&mut self) -> Result<(WeightId, NodeId), BuildError> {
        let (n_embd, n_vocab) = (self.hp.n_embd as i64, self.hp.n_vocab as i64);
        let tok_embd = self.weight("token_embd.weight", &[n_embd, n_vocab])?;
        Ok((tok_embd, self.get_rows_tokens(tok_embd)))
    }

    /// `output.weight`, else the token embeddings (a tied output, upstream's
    /// `TENSOR_DUPLICATED`).
    pub fn output_weight(&mut self, tok_embd: WeightId) -> Result<WeightId, BuildError> {
        let (n_embd, n_vocab) = (self.hp.n_embd as i64, self.hp.n_vocab as i64);
        Ok(self
            .weight_opt("output.weight", &[n_embd, n_vocab])?
            .unwrap_or(tok_embd))
    }

    /// The attention scale: `attention.scale` when the file gives one, else
    /// 1/sqrt(head size).
    pub fn kq_scale(&self) -> f32 {
        if self.hp.attention_scale == 0.0 {
            1.0 / (self.hp.head_k as f32).sqrt()
        } else {
            self.hp.attention_scale
        }
    }

    /// Per-head RMS norms of Q and K (`attn_q_norm`, `attn_k_norm`: qwen3, gemma3, ...).
    pub fn qk_norm(
        &mut self,
        il: usize,
        q: NodeId,
        k: NodeId,
    ) -> Result<(NodeId, NodeId), BuildError> {
        let head = self.hp.head_k;
        let qn = self.lw(il, "attn_q_norm.weight", &[head as i64])?;
        let kn = self.lw(il, "attn_k_norm.weight", &[head as i64])?;
        let eps = self.hp.eps_rms;
        Ok((
            self.head_rms_norm(q, head, qn, eps),
            self.head_rms_norm(k, head, kn, eps),
        ))
    }

    /// ROPE of Q and K with the architecture's mode.
    pub fn rope_qk(
        &mut self,
        q: NodeId,
        k: NodeId,
        freq_factors: Option<WeightId>,
        swa: bool,
    ) -> (NodeId, NodeId) {
        let (head, mode) = (self.hp.head_k, self.rope_mode);
        (
            self.rope(q, head, mode, freq_factors, swa),
            self.rope(k, head, mode, freq_factors, swa),
        )
    }

    /// The layer's dense FFN from its `ffn_up`, `ffn_gate`, `ffn_down` weights (and their
    /// biases when `f.bias`): upstream's `build_ffn` with PAR gating.
    pub fn ffn_layer(&mut self, il: usize, x: NodeId, f: Ffn) -> Result<NodeId, BuildError> {
        let n_ff = self.hp.n_ff[il];
        self.ffn_named(il, x, "", n_ff, f)
    }

    /// A dense FFN of `n_ff` rows from `ffn_{up,gate,down}<suffix>` (`_shexp`: shared
    /// experts).
    pub fn ffn_named(
        &mut self,
        il: usize,
        x: NodeId,
        suffix: &str,
        n_ff: usize,
        f: Ffn,
    ) -> Result<NodeId, BuildError> {
        let n_embd = self.hp.n_embd as i64;
        let n_ff = n_ff as i64;
        let up = self.lw(il, &format!("ffn_up{suffix}.weight"), &[n_embd, n_ff])?;
        let gate = self.lw(il, &format!("ffn_gate{suffix}.weight"), &[n_embd, n_ff])?;
        let down = self.lw(il, &format!("ffn_down{suffix}.weight"), &[n_ff, n_embd])?;
        let (up_b, gate_b, down_b) = if f.bias {
            (
                self.lw_opt(il, &format!("ffn_up{suffix}.bias"), &[n_ff])?,
                self.lw_opt(il, &format!("ffn_gate{suffix}.bias"), &[n_ff])?,
                self.lw_opt(il, &format!("ffn_down{suffix}.bias"), &[n_embd])?,
            )
        } else {
            (None, None, None)
        };
        Ok(self.ffn(x, up, up_b, gate, gate_b, down, down_b, f.act, f.scaled))
    }

    /// The layer's mixture of experts from its `ffn_gate_inp` router and `ffn_*_exps`
    /// experts of `n_ff` rows (gate and up separate, or fused in `ffn_gate_up_exps`):
    /// upstream's `build_moe_ffn`.
    pub fn moe_layer(
        &mut self,
        il: usize,
        x: NodeId,
        n_ff: usize,
        m: Moe,
    ) -> Result<NodeId, BuildError> {
        self.moe_layer_with(il, x, n_ff, m, false)
    }

    /// [`Builder::moe_layer`] with [`Builder::moe_ffn_with`]'s `weight_before` (llama4).
    pub fn moe_layer_with(
        &mut self,
        il: usize,
        x: NodeId,
        n_ff: usize,
        m: Moe,
        weight_before: bool,
    ) -> Result<NodeId, BuildError> {
        let w = self.moe_weights(il, "exps", n_ff, self.hp.n_expert, m)?;
        Ok(self.moe_ffn_with(x, w, self.hp.n_expert_used, m, weight_before))
    }

    /// The layer's router (`ffn_gate_inp`, `[n_embd, n_expert]`), selection bias when
    /// `m.probs_bias`, and the `n_exp` experts `ffn_{up,gate,down}_<kind>` of `n_ff` rows
    /// (gate and up fused in `ffn_gate_up_<kind>` when the file has it), with their biases
    /// when `m.biases`.
    pub fn moe_weights(
        &mut self,
        il: usize,
        kind: &str,
        n_ff: usize,
        n_exp: usize,
        m: Moe,
    ) -> Result<MoeWeights, BuildError> {
        let n_embd = self.hp.n_embd as i64;
        let n_router = self.hp.n_expert as i64;
        let (n_ff, n_exp) = (n_ff as i64, n_exp as i64);
        let gate_inp = self.lw(il, "ffn_gate_inp.weight", &[n_embd, n_router])?;
        let probs_b = if m.probs_bias {
            self.lw_opt(il, "exp_probs_b.bias", &[n_router])?
        } else {
            None
        };
        let gate_up = self.lw_opt(
            il,
            &format!("ffn_gate_up_{kind}.weight"),
            &[n_embd, 2 * n_ff, n_exp],
        )?;
        let (up, gate) = match gate_up {
            Some(_) => (None, None),
            None => (
                Some(self.lw(il, &format!("ffn_up_{kind}.weight"), &[n_embd, n_ff, n_exp])?),
                Some(self.lw(
                    il,
                    &format!("ffn_gate_{kind}.weight"),
                    &[n_embd, n_ff, n_exp],
                )?),
            ),
        };
        let down = self.lw(
            il,
            &format!("ffn_down_{kind}.weight"),
            &[n_ff, n_embd, n_exp],
        )?;
        let (gate_inp_b, exp_b) = if m.biases {
            (
                Some(self.lw(il, "ffn_gate_inp.bias", &[n_router])?),
                Some((
                    self.lw(il, &format!("ffn_up_{kind}.bias"), &[n_ff, n_exp])?,
                    self.lw(il, &format!("ffn_gate_{kind}.bias"), &[n_ff, n_exp])?,
                    self.lw(il, &format!("ffn_down_{kind}.bias"), &[n_embd, n_exp])?,
                )),
            )
        } else {
            (None, None)
        };
        Ok(MoeWeights {
            gate_inp,
            gate_inp_b,
            exp_b,
            probs_b,
            up,
            gate,
            gate_up,
            down,
        })
    }

    /// The FFN of a mixture-of-experts layer with shared experts, as most MoE graphs build
    /// it: the routed experts ([`Builder::moe_layer`], `n_ff` rows each) plus the shared
    /// experts' dense FFN (`ffn_*_shexp`, `n_ff_shexp` rows, built as `shared`), summed.
    pub fn moe_shared_layer(
        &mut self,
        il: usize,
        x: NodeId,
        n_ff: usize,
        m: Moe,
        n_ff_shexp: usize,
        shared: Ffn,
    ) -> Result<NodeId, BuildError> {
        let moe_out = self.moe_layer(il, x, n_ff, m)?;
        let sh = self.ffn_named(il, x, "_shexp", n_ff_shexp, shared)?;
        Ok(self.add(moe_out, Operand::Node(sh)))
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
