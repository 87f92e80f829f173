//! The op graph: per architecture, a builder ([`arch`]) turns the model and the shape of a
//! micro-batch into a list of nodes with ggml's op names and semantics (GET_ROWS, MUL_MAT,
//! MUL_MAT_ID, RMS_NORM, ROPE, SET_ROWS, FLASH_ATTN_EXT, GLU, ...), and an executor runs it:
//! every backend implements [`backend::Executor`]; the CPU executor ([`exec`]) runs a graph
//! over one arena of f32 activations planned at build time.
//!
//! Activations are 2-D: `ne0` values per row, `ne1` rows (tokens, or token × expert slot).
//! Weights are referenced by tensor index and read at execution time under the tensor's
//! lock, so a hot-swapped tensor's new bytes and type are used by the next decode; the
//! context still rebuilds the graph when the model's generation changes.

pub mod arch;
pub mod backend;
pub mod blocks;
pub mod builder;
pub mod delta_net;
pub mod exec;
pub mod exec_cuda;
pub mod exec_rpc;
pub mod kda;
pub mod kernel_api;
pub mod params;
pub mod shown;
pub mod ssm;

pub use crate::kernels::cpu::ops::{GdnShape, HcMixKind, RopeMode, RopeParams, ScanShape};

/// Index of a node in [`Graph::nodes`].
pub type NodeId = usize;

/// Index into [`Graph::weights`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeightId(pub usize);

/// A weight used by the graph: the tensor's index in the model's store and its shape.
#[derive(Clone, Debug)]
pub struct WeightRef {
    pub tensor: usize,
    pub name: String,
    pub ne: [i64; 4],
}

/// Second operand of a binary op: an activation or a weight (broadcast over rows).
#[derive(Clone, Copy, Debug)]
pub enum Operand {
    Node(NodeId),
    Weight(WeightId),
}

/// Gated linear unit kinds (`GGML_GLU_OP_*`), applied as `act(gate) * up`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GluKind {
    Swiglu,
    Geglu,
    /// `ggml_swiglu_oai` (gpt-oss): `min(g, 7) * sigmoid(1.702 * min(g, 7)) * (clamp(u, -7, 7) + 1)`.
    SwigluOai,
    /// `ggml_reglu`: `g > 0 ? g * u : 0`.
    Reglu,
    /// SwiGLU with a limit, as upstream's `build_ffn`/`build_moe_ffn` split it where
    /// `swiglu_clamp_(sh)exp` is set: `min(silu(g), l) * clamp(u, -l, l)` (SILU, two CLAMPs
    /// and MUL, one value at a time).
    SwigluLimit(f32),
    /// `ggml_swiglu_clamp` (DeepSeek-V4's, GLM5-Next's): `silu(min(g, l)) * clamp(u, -l, l)`.
    SwigluClamp(f32),
    /// Kimi's SiTU (`LLM_FFN_SITU`): `beta*tanh(g/beta) * sigmoid(g)` times
    /// `lb*tanh(u/lb)` (`u` itself when `lb <= 0`), fields `(beta, lb)`; ggml's SCALE, TANH,
    /// SIGMOID and MUL one value at a time.
    Situ(f32, f32),
}

impl GluKind {
    /// SwiGLU with layer `il`'s limit from `limits` as `ggml_swiglu_clamp` (upstream applies
    /// one only above 1e-6), plain SwiGLU otherwise.
    pub fn swiglu_clamp_for(limits: &[f32], il: usize) -> GluKind {
        match limits.get(il) {
            Some(&l) if l > 1e-6 => GluKind::SwigluClamp(l),
            _ => GluKind::Swiglu,
        }
    }
}

/// Graph operations, named after ggml's.
#[derive(Clone, Debug)]
pub enum Op {
    /// GET_ROWS(table, inp_tokens): the embedding rows of the micro-batch's tokens.
    GetRowsTokens { table: WeightId },
    /// The caller's input embeddings (`llama_batch.embd`) instead of GET_ROWS: upstream's
    /// `inp_embd` input tensor.
    InputEmbd,
    /// VIEW + CONT: values `offset .. offset + ne0` of every row of `src` (a fused QKV or
    /// gate-up projection cut into its parts).
    View { src: NodeId, offset: usize },
    /// GET_ROWS(src, inp_out_ids): the rows of the tokens that produce outputs.
    GetRowsOut { src: NodeId },
    /// RMS_NORM.
    RmsNorm { src: NodeId, eps: f32 },
    /// NORM (layer norm without affine part).
    Norm { src: NodeId, eps: f32 },
    /// MUL, `b` broadcast over rows (a node operand of one value per row, `[1, T]`,
    /// broadcasts along the row instead).
    Mul { a: NodeId, b: Operand },
    /// ADD, `b` broadcast over rows.
    Add { a: NodeId, b: Operand },
    /// DIV, `b` broadcast over rows (mpt's FFN activation scales).
    Div { a: NodeId, b: Operand },
    /// SCALE.
    Scale { src: NodeId, s: f32 },
    /// UNARY(TANH).
    Tanh { src: NodeId },
    /// UNARY(GELU): ggml's tanh approximation through its F16 table (`ggml_vec_gelu_f32`).
    Gelu { src: NodeId },
    /// UNARY(RELU).
    Relu { src: NodeId },
    /// SQR.
    Sqr { src: NodeId },
    /// CLAMP to `[min, max]`.
    Clamp { src: NodeId, min: f32, max: f32 },
    /// REPEAT of each row `n` times (`[len, T] → [len*n, T]`; ggml_repeat_4d of one head over
    /// `n` heads: minicpm3's shared rotary K part).
    Repeat { src: NodeId, n: usize },
    /// REPEAT of a `[1, m, T]` tensor to `[n, m, T]`: each value repeated `n` times
    /// (`[m, T] → [m*n, T]`; spark2_5's per-head attention gate broadcast over the head).
    RepeatEach { src: NodeId, n: usize },
    /// GET_ROWS(table, inp_pos): the rows of a learned position table at the micro-batch's
    /// positions (gpt2's and starcoder's `position_embd`).
    GetRowsPos { table: WeightId },
    /// MUL_MAT(w, x): `w` is [k, n] (n rows of k), `x` [k, m] → [n, m].
    MulMat { w: WeightId, x: NodeId },
    /// MUL_MAT(t, x) by adapter tensor `t` ([`Graph::adapter_tensors`], `[k, n]`), `x`
    /// `[k, m]` → `[n, m]`: the LoRA factors of `build_lora_mm`.
    MulMatAdapter { t: usize, x: NodeId },
    /// MUL_MAT_ID by adapter tensor `t` ([k, n, n_expert]: an expert weight's LoRA factor),
    /// with [`Op::MulMatId`]'s shapes and broadcast: `ids` [n_used, T], `x` [k, T] or
    /// [k, n_used*T] → [n, n_used*T] (upstream's `build_lora_mm_id`).
    MulMatIdAdapter {
        t: usize,
        x: NodeId,
        ids: NodeId,
        n_used: usize,
    },
    /// GET_ROWS(t, inp_tokens) of adapter tensor `t`: a token-embedding adapter's rows of A.
    GetRowsAdapter { t: usize },
    /// ADD of adapter vector `t` to every row of `a`: a control vector's layer direction.
    AddAdapter { a: NodeId, t: usize },
    /// MUL_MAT_ID(w, x, ids): `w` is [k, n, n_expert]; `ids` [n_used, T] expert ids; `x` is
    /// [k, T] (broadcast to every slot) or [k, n_used*T] → [n, n_used*T]; each expert's
    /// rows times its per-expert scale when `scale` (`[n_expert]`) is given.
    MulMatId {
        w: WeightId,
        x: NodeId,
        ids: NodeId,
        n_used: usize,
        scale: Option<WeightId>,
    },
    /// ROPE (`ggml_rope_ext`) of each head (`head_dim` values) at the tokens' positions.
    Rope {
        src: NodeId,
        head_dim: usize,
        params: RopeParams,
        freq_factors: Option<WeightId>,
    },
    /// ROPE_BACK (`ggml_rope_ext_back`): ROPE with every angle's sine negated, the inverse
    /// rotation (DeepSeek-V4 turns its attention output back from the query's position).
    RopeBack {
        src: NodeId,
        head_dim: usize,
        params: RopeParams,
    },
    /// SET_ROWS into the layer's K (or V) cache at the micro-batch's slots.
    SetRows { src: NodeId, layer: usize, v: bool },
    /// GLM5-Next's k-pool indexer cache (what upstream's `build_kpool_select` writes): per
    /// token the row `[key | gate | 0]` (`k`, `g` `[head, T]`) at its slot in memory layer
    /// `layer`; then every pool of `kpool` consecutive positions of a sequence that holds a
    /// token of the micro-batch (or that an edit regrouped) is pooled into the third part of
    /// its last member's row: per value, SOFT_MAX over the members of gate + `ape`
    /// (`[head, kpool]`), MUL by their keys, SUM_ROWS.
    KpoolIndexSet {
        k: NodeId,
        g: NodeId,
        ape: WeightId,
        layer: usize,
        kpool: usize,
    },
    /// DeepSeek-V4's compressor state (upstream's GET_ROWS of `ape` at `pos % ratio`, ADD,
    /// SET_ROWS into the F32 state): per token the row `[kv | score + ape[pos % ratio]]`
    /// (`kv` and `score` `[w, T]`, `ape` `[w, ratio]`) kept exactly in memory layer `layer`
    /// at its slot, for the blocks it belongs to.
    Dsv4StateSet {
        kv: NodeId,
        score: NodeId,
        ape: WeightId,
        ratio: usize,
        layer: usize,
    },
    /// DeepSeek-V4's compression (upstream's `build_{overlap,hca}_compressed_kv_from_state`,
    /// then SET_ROWS into the compressed cache): each token of the micro-batch whose position
    /// `p` closes a block of `ratio` (`(p + 1) % ratio == 0`) compresses the block's state
    /// rows (`src_layer`) into one `head`-wide key — per value, SOFT_MAX of the scores over
    /// the block's rows, MUL by the values, SUM_ROWS; with `overlap` (CSA) the previous
    /// block's rows join with the first half of each row (zero / -inf before position 0),
    /// the block's own with the second half — then RMS_NORM times `norm`, ROPE of the last
    /// `rope.n_rot` values at the block's first position, stored in `dst_layer` at the
    /// token's slot. `dep` is the state update of the micro-batch.
    Dsv4Compress {
        dep: NodeId,
        norm: WeightId,
        src_layer: usize,
        dst_layer: usize,
        ratio: usize,
        overlap: bool,
        head: usize,
        eps: f32,
        rope: RopeParams,
        /// The Walsh-Hadamard rotation of every `hadamard` values of the key before it is
        /// stored (`llama_mul_mat_hadamard`, the fast transform; 0: none): the indexer's keys.
        hadamard: usize,
    },
    /// DeepSeek-V4's lightning indexer over compressed keys (LIGHTNING_INDEXER, TOP_K): per
    /// token the score `Σ_h relu(q_h · k_b) · w_h` of each compressed indexer key `b` of its
    /// sequence (layer `layer`, rows at the cells of the tokens closing the blocks) in
    /// upstream's view of the compressed cache (at least 256, padded to 256; -inf where the
    /// block is not closed at the token's position `p`: `b >= (p + 1) / ratio`), and the
    /// best `k` block indices as ggml's TOP_K picks them (`[k, T]` as f32; -1 past the view).
    /// `q` `[head*n_head, T]`, `w` `[n_head, T]` pre-scaled; `dep` the keys' compression.
    Dsv4LidTopK {
        q: NodeId,
        w: NodeId,
        dep: NodeId,
        layer: usize,
        ratio: usize,
        head: usize,
        k: usize,
    },
    /// FLASH_ATTN_EXT of DeepSeek-V4's compressed layers: K (= V) is upstream's CONCAT of the
    /// raw rows of `layer` (its stream's view, the sliding-window mask) and the compressed
    /// rows of `comp_layer` in block order (a view of at least 256, padded to 256, as
    /// upstream's), a token at position `p` seeing the first `(p + 1) / ratio` of them.
    /// One K head; sinks. `deps`: the raw keys' SET_ROWS and the compression.
    FlashAttnComp {
        q: NodeId,
        deps: [NodeId; 2],
        layer: usize,
        comp_layer: usize,
        ratio: usize,
        n_head: usize,
        dk: usize,
        scale: f32,
        n_swa: u32,
        sinks: Option<WeightId>,
        /// The CSA layers' selection ([`Op::Dsv4LidTopK`]): only the compressed keys it
        /// picked for a token are seen.
        sel: Option<NodeId>,
    },
    /// FLASH_ATTN_EXT over the layer's cache with the KQ mask (causal, sequence, window).
    FlashAttnExt {
        q: NodeId,
        deps: [NodeId; 2],
        layer: usize,
        n_head: usize,
        n_head_kv: usize,
        dk: usize,
        dv: usize,
        scale: f32,
        softcap: f32,
        n_swa: u32,
        /// V is the first `dv` values of each cached K row (MLA's compressed cache, upstream's
        /// K-only memory): nothing is stored in the V cache.
        v_in_k: bool,
        /// Per-head attention sinks (`[n_head]`, `ggml_flash_attn_ext_add_sinks`).
        sinks: Option<WeightId>,
        /// ALiBi's maximum bias (`f_max_alibi_bias`, 0: none): each head adds its slope
        /// times `-|pos(token) - pos(cell)|` to the scaled scores.
        max_bias: f32,
        /// Sparse attention: each token reads only the cells this node selected for it
        /// ([`Op::LightningIndexer`]; upstream's KQ mask with every other cell at -inf).
        sel: Option<NodeId>,
    },
    /// DeepSeek's lightning indexer (LIGHTNING_INDEXER, then TOP_K): per token the score of
    /// every cell of its stream's view (upstream's `n_kv`) over the indexer keys cached in
    /// `layer` (`Σ_h relu(q_h · k) · w_h`, `-inf` where the token does not see the cell), and
    /// the `min(k, n_kv)` best cells as libstdc++'s `partial_sort` picks them: `[k, T]` cache
    /// rows (as f32; -1 past the selection). `q` is `[head*n_head, T]`, `w` `[n_head, T]`
    /// (pre-scaled); `dep` is the SET_ROWS of the micro-batch's keys.
    LightningIndexer {
        q: NodeId,
        w: NodeId,
        dep: NodeId,
        layer: usize,
        head: usize,
        k: usize,
    },
    /// MiniMax-M3's block selection (MSA; upstream composes it from GET_ROWS, MUL_MAT,
    /// POOL_2D(MAX), ADD and TOP_K over the position axis): per token and indexer head (one
    /// per KV head) the score of every position its sequence holds (`q_h · k`, F32, the keys
    /// cached in `layer` gathered through the position → cell map; `-inf` where the token does
    /// not see it), the max of each block of `block` positions, `+1e30` on the token's
    /// `local` latest blocks, and the `min(top_k, blocks)` best blocks in TOP_K's order. The
    /// node holds no values: the executor keeps the selection for the FLASH_ATTN_EXT whose
    /// `sel` it is, which reads the chosen blocks' cells (gathered in that order when each
    /// stream has one token, upstream's decode; masked in cell order otherwise). `q` is
    /// `[head*n_head, T]`; `dep` is the SET_ROWS of the micro-batch's indexer keys.
    MsaSelect {
        q: NodeId,
        dep: NodeId,
        layer: usize,
        head: usize,
        block: usize,
        top_k: usize,
        local: usize,
    },
    /// ADD_ID: each slot's row plus the bias column of its expert (`b` is `[n, n_expert]`,
    /// `ids` `[n_used, T]`, `src` `[n, n_used*T]`): per-expert biases.
    AddId {
        src: NodeId,
        b: WeightId,
        ids: NodeId,
    },
    /// GLU with split inputs: `act(gate) * up`.
    Glu {
        gate: NodeId,
        up: NodeId,
        kind: GluKind,
    },
    /// MUL_MAT by the orthonormal Walsh-Hadamard matrix of size `n` (upstream's
    /// `llama_mul_mat_hadamard`) of every `n` consecutive values, computed as the CPU
    /// backend's fast transform does (`ggml_compute_forward_fwht`): scale by 1/sqrt(n), then
    /// the butterflies. Applied to Q, K, V and the attention output when the KV cache is
    /// quantized. `dense`: a plain MUL_MAT by the matrix instead (tinyBLAS's float order;
    /// DeepSeek-V3.2's lightning indexer, whose graph multiplies without the hint that turns
    /// the product into the transform). `one_row`: that product's activations are one row per
    /// batch (the indexer's key, `[n, 1, T]`), which ggml multiplies with its vec_dot
    /// instead of tinyBLAS (another float order).
    Hadamard {
        src: NodeId,
        n: usize,
        dense: bool,
        one_row: bool,
    },
    /// MUL by upstream's `inp_attn_scale` input: each token's row times
    /// `ln(floor(pos / floor_scale) + 1) * scale + 1` (attention temperature tuning).
    AttnTempScale {
        src: NodeId,
        floor_scale: f32,
        scale: f32,
        /// Added to the position first (upstream's `f_attn_temp_offset`; llama4: 1).
        offset: f32,
    },
    /// REPEAT + MUL of `build_moe_ffn`'s weights-before-the-experts path (llama4): each
    /// token's row `[n, T]` repeated into its `n_used` slots, each slot times its weight
    /// (`weights` `[n_used, T]`) → `[n, n_used*T]`.
    MulSlots {
        src: NodeId,
        weights: NodeId,
        n_used: usize,
    },
    /// The VIEW + ADD chain that sums the experts' slots: `[n, n_used*T] → [n, T]`, slot 0
    /// plus slot 1 plus ... in order.
    SumSlots { src: NodeId, n_used: usize },
    /// UNARY(SILU).
    Silu { src: NodeId },
    /// UNARY(SIGMOID).
    Sigmoid { src: NodeId },
    /// VIEW_3D + CONT: of every head (`stride` values of a row), the values
    /// `offset .. offset + len`; `[stride*n_head, T] → [len*n_head, T]`.
    ViewHeads {
        src: NodeId,
        stride: usize,
        offset: usize,
        len: usize,
    },
    /// CONCAT along dim 0 per head: `[la*n_head, T] ++ [lb*n_head, T] → [(la+lb)*n_head, T]`.
    ConcatHeads { a: NodeId, b: NodeId, n_head: usize },
    /// MUL_MAT broadcast over heads (dim 2, the permutes around it only reinterpret):
    /// `w` is `[k, n, n_head]`, `x` `[k*n_head, T]` → `[n*n_head, T]`, head h times its
    /// matrix h (MLA's `attn_k_b` absorption and `attn_v_b` decompression).
    MulMatHeads {
        w: WeightId,
        x: NodeId,
        n_head: usize,
    },
    /// The expert-group selection of `build_moe_ffn` (ARGSORT_TOP_K(2) + GET_ROWS + SUM_ROWS
    /// per group, ARGSORT_TOP_K(n_group_used) of the groups' scores, FILL(-inf) + SET_ROWS of
    /// the kept groups): the scores of experts outside the kept groups become -inf.
    GroupMask {
        src: NodeId,
        n_groups: usize,
        n_group_used: usize,
    },
    /// SOFT_MAX of each row.
    SoftMax { src: NodeId },
    /// ARGSORT (descending) + VIEW of the first `k`: the indices of the k largest per row
    /// (stored as f32).
    TopK { src: NodeId, k: usize },
    /// GET_ROWS(src, ids) per token: for each row t, the values `src[t][ids[t][i]]`.
    GetRowsIds { src: NodeId, ids: NodeId },
    /// DIV of each row by its SUM_ROWS (expert weight normalisation).
    DivSumRows { src: NodeId },
    /// MUL by per-slot weights then the sum over slots: `[n, n_used*T] × [n_used, T] → [n, T]`.
    WeightedSum {
        src: NodeId,
        weights: NodeId,
        n_used: usize,
    },
    /// MUL by a weight of one value per `rep` consecutive values of a row (ggml's broadcast
    /// of a `[1, n]` operand over `[rep, n]`: Mamba-2's per-head D).
    MulRep { a: NodeId, b: WeightId, rep: usize },
    /// SSM_CONV with its state: each token's row `x` (`[channels]`) is convolved with the
    /// last `d_conv - 1` inputs of its sequence (the recurrent memory's conv row of `layer`,
    /// upstream's CONCAT of the state and the inputs) by `w` (`[d_conv, channels]`), and
    /// shifted into the state (upstream's copy of the last columns back to the cache).
    SsmConv {
        x: NodeId,
        w: WeightId,
        layer: usize,
        d_conv: usize,
        /// The first value of the conv row this convolution's state owns (0 but for Kimi's
        /// delta attention, whose Q, K and V convolutions share one row, upstream's views
        /// of `conv_states_all` at `qkv * conv_state_size`, and Qwen4-exp's PLE layer, whose
        /// conv history follows the delta net's: upstream's second recurrent row).
        row0: usize,
        /// The taps' spacing (1: ggml's SSM_CONV). Above 1, upstream's dilated depthwise
        /// conv (Qwen4-exp's PLE: VIEWs of the history CONCAT input at `(d_conv-1-k) *
        /// dilation` back, MUL by tap k, ADDs in tap order); the state keeps `(d_conv - 1)
        /// * dilation` inputs per channel.
        dilation: usize,
    },
    /// SSM_SCAN with its state: the selective scan of each token over its sequence's SSM
    /// state (`[d_state, head_dim, n_head]`, the recurrent memory's row of `layer`, updated
    /// in place as upstream's copy of the final states back to the cache); `x`
    /// `[head_dim*n_head, T]`, `dt` `[n_head, T]`, `b`/`c` `[d_state*n_group, T]`, `a`
    /// `[d_state, n_head]` (Mamba-1) or `[1, n_head]` (Mamba-2). Output: y, like `x`.
    SsmScan {
        x: NodeId,
        dt: NodeId,
        b: NodeId,
        c: NodeId,
        a: WeightId,
        layer: usize,
        shape: ScanShape,
    },
    /// UNARY(SOFTPLUS): `x > 20 ? x : log(1 + exp(x))`.
    Softplus { src: NodeId },
    /// SQRT: `sqrtf` of each value (`ggml_vec_sqrt_f32`).
    Sqrt { src: NodeId },
    /// SUM_ROWS: each row's sum (accumulated in f64, as ggml's `ggml_vec_sum_f32`).
    SumRows { src: NodeId },
    /// DSV4_HC_PRE (`ggml_dsv4_hc_pre`, ungated): `x` holds per token `hc` streams of `n`
    /// values side by side (`[n, hc, T]`), `w` `[hc, T]` their weights; the output `[n, T]`
    /// is each value's weighted sum over the streams, in stream order (ggml-cpu's loop,
    /// multiply-adds contracted to FMA).
    /// Gated (`ggml_dsv4_hc_pre_gated`, Qwen4-exp): `w` is `[n, hc, T]` and each value's
    /// weight is `sigmoid(w)` of its own position (`1 / (1 + expf(-g))`); the sum is then
    /// scaled by `scale` (1 ungated).
    HcPre {
        x: NodeId,
        w: NodeId,
        n: usize,
        gated: bool,
        scale: f32,
    },
    /// The mixes of DeepSeek-V4's hyper-connections, per token `[pre | post | comb]`
    /// (`hc + hc + hc*hc` values) from `mixes` (`[(2 + hc) * hc, T]`), the three scales and
    /// the bases: `pre = sigmoid(m * scale[0] + base) + eps`, `post = 2 * sigmoid(m *
    /// scale[1] + base)` (ggml's MUL, ADD, SIGMOID, SCALE one value at a time) and `comb`
    /// as `ggml_dsv4_hc_comb` (ggml-cpu's fused kernel: softmax over the destinations of
    /// each source, plus eps, then `iters` Sinkhorn normalisations, columns first; its
    /// multiply-adds contracted to FMA), destinations fastest. HY-V4's independent
    /// hyper-connections (`kind` [`HcMixKind::Independent`]) make `[pre | post]` only, `post
    /// = magnitude * sigmoid(..) + eps`; an output head ([`HcMixKind::Head`]) `pre` only.
    HcMix {
        mixes: NodeId,
        scale: WeightId,
        base: WeightId,
        hc: usize,
        eps: f32,
        kind: HcMixKind,
    },
    /// DSV4_HC_POST (`ggml_dsv4_hc_post`): from a block's output `x` (`[n, T]`), the
    /// streams `res` (`[n, hc, T]`), `post` (`[hc, T]`) and `comb` (`[hc, hc, T]`,
    /// destinations fastest), every stream `dst` becomes `x * post[dst] + sum over src of
    /// res[src] * comb[dst, src]` (in source order, FMA-contracted as ggml-cpu's loop).
    HcPost {
        x: NodeId,
        res: NodeId,
        post: NodeId,
        /// None: the identity comb (Qwen4-exp), every stream `dst` becomes `x * post[dst] +
        /// res[dst]`.
        comb: Option<NodeId>,
    },
    /// UNARY(ABS).
    Abs { src: NodeId },
    /// UNARY(SGN): -1, 0 or 1.
    Sgn { src: NodeId },
    /// Qwen4-exp's PLE n-gram hash embedding (upstream's `llm_graph_input_qwen4exp_ple`, the
    /// hash computed on the host, then GET_ROWS of `table`): per token, the n-grams of it and
    /// its predecessors (an EOS, or a missing predecessor, cuts the window and reads as
    /// EOS) hashed to `n_heads` rows, laid side by side (`[head_dim * n_heads, T]`). The
    /// predecessor `s` is the token of the sequence's KV cell at the nearest position at or
    /// before `pos - s` (an input embedding's: `s` places back in the micro-batch's order),
    /// as upstream's `get_prev_tokens`.
    GetRowsNgram {
        table: WeightId,
        hash: std::sync::Arc<params::PleHash>,
    },
    /// REPEAT of each head `n` times in place (`[head_dim, n_head, T]` →
    /// `[head_dim, n, n_head, T]` as ggml_repeat_4d of the reshaped heads: qwen3next's
    /// repeat-interleave of Q and K heads over the V heads).
    RepeatHeads {
        src: NodeId,
        head_dim: usize,
        n: usize,
    },
    /// GATED_DELTA_NET with its state (`ggml_gated_delta_net`, K = 1): per V head, the
    /// state `[S_v, S_v]` (the recurrent memory's SSM row of `layer`, updated in place as
    /// upstream's copy of the op's final state back to the cache) decays by `exp(g)` (one
    /// value per head, or per row for KDA), takes the delta rule's update from `k`, `v` and
    /// `beta`, and is read by `q`; the output is scaled by `1/sqrt(S_v)`. `q`, `k`
    /// `[S_v*h_k, T]` (V head h reads Q/K head `h % h_k`, ggml's broadcast), `v`
    /// `[S_v*h_v, T]`, `g` `[h_v, T]` or `[S_v*h_v, T]`, `beta` `[h_v, T]`. Output like `v`.
    GatedDeltaNet {
        q: NodeId,
        k: NodeId,
        v: NodeId,
        g: NodeId,
        beta: NodeId,
        layer: usize,
        shape: GdnShape,
    },
    /// MiniMax-01's lightning attention (no ggml op: upstream composes it from EXP, MUL and
    /// MUL_MAT over the micro-batch; this is the same linear recurrence token by token, see
    /// `ops::lightning_attn_step`). `qkv` `[3*head*n_head, T]` holds each head's Q, K and V
    /// side by side; per head the state `[head, head]` (the recurrent memory's SSM row of
    /// `layer`) decays by `exp(-slope_h * slope_scale)` a token. Output `[head*n_head, T]`.
    LightningAttn {
        qkv: NodeId,
        layer: usize,
        head: usize,
        slope_scale: f32,
    },
}

#[derive(Clone, Debug)]
pub struct Node {
    pub op: Op,
    pub ne0: usize,
    pub ne1: usize,
    /// Offset of the node's values in the arena (f32 elements).
    pub offset: usize,
    pub name: &'static str,
    /// What a graph callback is told about it (upstream's name and shape).
    pub shown: shown::Shown,
}

impl Node {
    pub fn len(&self) -> usize {
        self.ne0 * self.ne1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a graph was built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphShape {
    pub n_tokens: usize,
    pub n_outputs: usize,
    pub generation: u64,
    /// The micro-batch carries input embeddings instead of token ids.
    pub embd_input: bool,
}

/// A built graph with its arena plan.
#[derive(Debug)]
pub struct Graph {
    pub shape: GraphShape,
    pub nodes: Vec<Node>,
    pub weights: Vec<WeightRef>,
    /// LoRA factors and control-vector directions the graph reads
    /// ([`Op::MulMatAdapter`], [`Op::MulMatIdAdapter`], [`Op::GetRowsAdapter`],
    /// [`Op::AddAdapter`]).
    pub adapter_tensors: Vec<std::sync::Arc<crate::model::adapter::AdapterTensor>>,
    /// [n_vocab, n_outputs].
    pub logits: Option<NodeId>,
    /// [n_embd, n_outputs]: the final normed hidden state.
    pub embd: Option<NodeId>,
    /// Arena size in f32 elements.
    pub arena_len: usize,
}

impl Op {
    /// The weights this op reads.
    pub fn weights(&self) -> Vec<WeightId> {
        let w = |o: &Operand| match o {
            Operand::Weight(w) => Some(*w),
            Operand::Node(_) => None,
        };
        match self {
            Op::GetRowsTokens { table }
            | Op::GetRowsPos { table }
            | Op::GetRowsNgram { table, .. } => vec![*table],
            Op::MulMat { w, .. } | Op::MulMatHeads { w, .. } => vec![*w],
            Op::AddId { b, .. } => vec![*b],
            Op::FlashAttnExt { sinks, .. } | Op::FlashAttnComp { sinks, .. } => {
                sinks.iter().copied().collect()
            }
            Op::Dsv4StateSet { ape, .. } | Op::KpoolIndexSet { ape, .. } => vec![*ape],
            Op::Dsv4Compress { norm, .. } => vec![*norm],
            Op::MulMatId { w, scale, .. } => [Some(*w), *scale].into_iter().flatten().collect(),
            Op::Mul { b, .. } | Op::Add { b, .. } | Op::Div { b, .. } => w(b).into_iter().collect(),
            Op::Rope { freq_factors, .. } => freq_factors.iter().copied().collect(),
            Op::MulRep { b, .. } => vec![*b],
            Op::HcMix { scale, base, .. } => vec![*scale, *base],
            Op::SsmConv { w, .. } => vec![*w],
            Op::SsmScan { a, .. } => vec![*a],
            _ => Vec::new(),
        }
    }

    /// The nodes this op reads.
    pub fn sources(&self) -> Vec<NodeId> {
        let node = |o: &Operand| match o {
            Operand::Node(n) => Some(*n),
            Operand::Weight(_) => None,
        };
        match self {
            Op::GetRowsTokens { .. }
            | Op::GetRowsPos { .. }
            | Op::InputEmbd
            | Op::GetRowsNgram { .. }
            | Op::GetRowsAdapter { .. } => vec![],
            Op::MulMatAdapter { x, .. } => vec![*x],
            Op::MulMatIdAdapter { x, ids, .. } => vec![*x, *ids],
            Op::AddAdapter { a, .. } => vec![*a],
            Op::GetRowsOut { src }
            | Op::RmsNorm { src, .. }
            | Op::Norm { src, .. }
            | Op::Scale { src, .. }
            | Op::Tanh { src }
            | Op::Gelu { src }
            | Op::Relu { src }
            | Op::Sqr { src }
            | Op::Clamp { src, .. }
            | Op::Repeat { src, .. }
            | Op::RepeatEach { src, .. }
            | Op::Rope { src, .. }
            | Op::SetRows { src, .. }
            | Op::Silu { src }
            | Op::Sigmoid { src }
            | Op::ViewHeads { src, .. }
            | Op::GroupMask { src, .. }
            | Op::Hadamard { src, .. }
            | Op::AttnTempScale { src, .. }
            | Op::SoftMax { src }
            | Op::TopK { src, .. }
            | Op::DivSumRows { src }
            | Op::SumSlots { src, .. }
            | Op::View { src, .. }
            | Op::Softplus { src }
            | Op::Sqrt { src }
            | Op::SumRows { src }
            | Op::Abs { src }
            | Op::Sgn { src }
            | Op::RepeatHeads { src, .. } => vec![*src],
            Op::HcPre { x, w, .. } => vec![*x, *w],
            Op::HcMix { mixes, .. } => vec![*mixes],
            Op::HcPost {
                x, res, post, comb, ..
            } => [Some(*x), Some(*res), Some(*post), *comb]
                .into_iter()
                .flatten()
                .collect(),
            Op::GatedDeltaNet {
                q, k, v, g, beta, ..
            } => vec![*q, *k, *v, *g, *beta],
            Op::LightningAttn { qkv, .. } => vec![*qkv],
            Op::MulSlots { src, weights, .. } => vec![*src, *weights],
            Op::MulRep { a, .. } => vec![*a],
            Op::SsmConv { x, .. } => vec![*x],
            Op::SsmScan { x, dt, b, c, .. } => vec![*x, *dt, *b, *c],
            Op::Mul { a, b } | Op::Add { a, b } | Op::Div { a, b } => {
                [Some(*a), node(b)].into_iter().flatten().collect()
            }
            Op::MulMat { x, .. } | Op::MulMatHeads { x, .. } => vec![*x],
            Op::ConcatHeads { a, b, .. } => vec![*a, *b],
            Op::AddId { src, ids, .. } => vec![*src, *ids],
            Op::MulMatId { x, ids, .. } => vec![*x, *ids],
            Op::FlashAttnExt { q, deps, sel, .. } => [Some(*q), Some(deps[0]), Some(deps[1]), *sel]
                .into_iter()
                .flatten()
                .collect(),
            Op::LightningIndexer { q, w, dep, .. } => vec![*q, *w, *dep],
            Op::MsaSelect { q, dep, .. } => vec![*q, *dep],
            Op::RopeBack { src, .. } => vec![*src],
            Op::Dsv4StateSet { kv, score, .. } => vec![*kv, *score],
            Op::KpoolIndexSet { k, g, .. } => vec![*k, *g],
            Op::Dsv4Compress { dep, .. } => vec![*dep],
            Op::FlashAttnComp { q, deps, sel, .. } => {
                [Some(*q), Some(deps[0]), Some(deps[1]), *sel]
                    .into_iter()
                    .flatten()
                    .collect()
            }
            Op::Dsv4LidTopK { q, w, dep, .. } => vec![*q, *w, *dep],
            Op::Glu { gate, up, .. } => vec![*gate, *up],
            Op::GetRowsIds { src, ids } => vec![*src, *ids],
            Op::WeightedSum { src, weights, .. } => vec![*src, *weights],
        }
    }
}

impl Op {
    /// The ggml op of the tensor this node stands for (`GGML_OP_*` without the prefix; the
    /// last op where one node fuses several, e.g. VIEW + CONT is CONT) and, for UNARY and GLU,
    /// the sub-op (`GGML_UNARY_OP_*` / `GGML_GLU_OP_*` without the prefix): what a graph
    /// callback (`cb_eval`) is told.
    pub fn ggml_op(&self) -> (&'static str, Option<&'static str>) {
        match self {
            Op::InputEmbd => ("NONE", None),
            Op::GetRowsTokens { .. }
            | Op::GetRowsOut { .. }
            | Op::GetRowsIds { .. }
            | Op::GetRowsNgram { .. }
            | Op::GetRowsPos { .. } => ("GET_ROWS", None),
            Op::View { .. } | Op::ViewHeads { .. } => ("CONT", None),
            Op::RmsNorm { .. } => ("RMS_NORM", None),
            Op::Norm { .. } => ("NORM", None),
            Op::Mul { .. } | Op::AttnTempScale { .. } | Op::MulSlots { .. } | Op::MulRep { .. } => {
                ("MUL", None)
            }
            Op::SsmConv { .. } => ("SSM_CONV", None),
            Op::SsmScan { .. } => ("SSM_SCAN", None),
            Op::Softplus { .. } => ("UNARY", Some("SOFTPLUS")),
            Op::Sqrt { .. } => ("SQRT", None),
            Op::Abs { .. } => ("UNARY", Some("ABS")),
            Op::Sgn { .. } => ("UNARY", Some("SGN")),
            Op::RepeatHeads { .. } => ("REPEAT", None),
            Op::GatedDeltaNet { .. } => ("GATED_DELTA_NET", None),
            Op::LightningAttn { .. } => ("MUL_MAT", None),
            Op::Add { .. } | Op::WeightedSum { .. } | Op::SumSlots { .. } => ("ADD", None),
            Op::Scale { .. } => ("SCALE", None),
            Op::Tanh { .. } => ("UNARY", Some("TANH")),
            Op::Gelu { .. } => ("UNARY", Some("GELU")),
            Op::Relu { .. } => ("UNARY", Some("RELU")),
            Op::Sqr { .. } => ("SQR", None),
            Op::Clamp { .. } => ("CLAMP", None),
            Op::Silu { .. } => ("UNARY", Some("SILU")),
            Op::Sigmoid { .. } => ("UNARY", Some("SIGMOID")),
            Op::MulMat { .. } | Op::MulMatHeads { .. } | Op::Hadamard { .. } => ("MUL_MAT", None),
            Op::MulMatId { .. } => ("MUL_MAT_ID", None),
            // a LoRA factor's product, a token-embedding adapter's rows, a control vector
            Op::MulMatAdapter { .. } => ("MUL_MAT", None),
            Op::MulMatIdAdapter { .. } => ("MUL_MAT_ID", None),
            Op::GetRowsAdapter { .. } => ("GET_ROWS", None),
            Op::AddAdapter { .. } => ("ADD", None),
            Op::Rope { .. } => ("ROPE", None),
            Op::SetRows { .. } | Op::GroupMask { .. } => ("SET_ROWS", None),
            Op::FlashAttnExt { .. } | Op::FlashAttnComp { .. } => ("FLASH_ATTN_EXT", None),
            Op::RopeBack { .. } => ("ROPE_BACK", None),
            Op::Dsv4StateSet { .. } | Op::Dsv4Compress { .. } | Op::KpoolIndexSet { .. } => {
                ("SET_ROWS", None)
            }
            Op::AddId { .. } => ("ADD_ID", None),
            Op::Glu { kind, .. } => (
                "GLU",
                Some(match kind {
                    GluKind::Swiglu => "SWIGLU",
                    GluKind::Geglu => "GEGLU",
                    GluKind::SwigluOai => "SWIGLU_OAI",
                    GluKind::Reglu => "REGLU",
                    GluKind::SwigluLimit(_) => "SWIGLU_LIMIT",
                    GluKind::SwigluClamp(_) => "SWIGLU_CLAMP",
                    GluKind::Situ(..) => "SITU",
                }),
            ),
            Op::ConcatHeads { .. } => ("CONCAT", None),
            Op::Repeat { .. } | Op::RepeatEach { .. } => ("REPEAT", None),
            Op::SoftMax { .. } => ("SOFT_MAX", None),
            Op::TopK { .. }
            | Op::LightningIndexer { .. }
            | Op::Dsv4LidTopK { .. }
            | Op::MsaSelect { .. } => ("TOP_K", None),
            Op::DivSumRows { .. } | Op::Div { .. } => ("DIV", None),
            Op::SumRows { .. } => ("SUM_ROWS", None),
            Op::HcPre { .. } => ("DSV4_HC_PRE", None),
            Op::HcMix { .. } => ("DSV4_HC_COMB", None),
            Op::HcPost { .. } => ("DSV4_HC_POST", None),
        }
    }
}

/// Plans the arena: each node gets a range that no live node overlaps (a node lives from
/// its computation to its last reader; `keep` nodes live to the end). First fit over a
/// free list, as ggml's graph allocator does in spirit.
pub fn plan_arena(nodes: &mut [Node], keep: &[NodeId]) -> usize {
    let n = nodes.len();
    let mut last_use: Vec<usize> = (0..n).collect();
    for (i, node) in nodes.iter().enumerate() {
        for s in node.op.sources() {
            last_use[s] = last_use[s].max(i);
        }
    }
    for &k in keep {
        last_use[k] = usize::MAX;
    }
    // free blocks: (offset, len), kept sorted by offset
    let mut free: Vec<(usize, usize)> = Vec::new();
    let mut end = 0usize;
    let mut dying: Vec<Vec<NodeId>> = vec![Vec::new(); n];
    for (i, &lu) in last_use.iter().enumerate() {
        if lu != usize::MAX {
            dying[lu].push(i);
        }
    }
    for i in 0..n {
        let len = nodes[i].len();
        let offset = if len == 0 {
            0
        } else if let Some(pos) = free.iter().position(|&(_, l)| l >= len) {
            let (o, l) = free[pos];
            if l == len {
                free.remove(pos);
            } else {
                free[pos] = (o + len, l - len);
            }
            o
        } else {
            // grow: merge with a free block at the end if any
            if let Some(&(o, l)) = free.last() {
                if o + l == end {
                    free.pop();
                    end = o + len;
                    nodes[i].offset = o;
                    release(&mut free, &dying[i], nodes, i);
                    continue;
                }
            }
            let o = end;
            end += len;
            o
        };
        nodes[i].offset = offset;
        release(&mut free, &dying[i], nodes, i);
    }
    end
}

/// Returns the ranges of the nodes whose last reader is `at` (not `at` itself unless it is
/// never read) to the free list, merging neighbours.
fn release(free: &mut Vec<(usize, usize)>, dying: &[NodeId], nodes: &[Node], at: NodeId) {
    for &d in dying {
        if d == at && !nodes[d].is_empty() {
            // a node nobody reads: free right away
        }
        let (o, l) = (nodes[d].offset, nodes[d].len());
        if l == 0 {
            continue;
        }
        let pos = free.partition_point(|&(fo, _)| fo < o);
        free.insert(pos, (o, l));
        // merge with next, then previous
        if pos + 1 < free.len() && free[pos].0 + free[pos].1 == free[pos + 1].0 {
            free[pos].1 += free[pos + 1].1;
            free.remove(pos + 1);
        }
        if pos > 0 && free[pos - 1].0 + free[pos - 1].1 == free[pos].0 {
            free[pos - 1].1 += free[pos].1;
            free.remove(pos);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(op: Op, len: usize) -> Node {
        Node {
            op,
            ne0: len,
            ne1: 1,
            offset: 0,
            name: "t",
            shown: Default::default(),
        }
    }

    #[test]
    fn arena_reuses_dead_ranges_and_never_overlaps_live_ones() {
        let mut nodes = vec![
            node(Op::GetRowsTokens { table: WeightId(0) }, 10),
            node(Op::Silu { src: 0 }, 10),
            node(Op::Silu { src: 1 }, 10),
            node(
                Op::Add {
                    a: 2,
                    b: Operand::Node(0),
                },
                10,
            ),
            node(Op::Silu { src: 3 }, 10),
        ];
        let len = plan_arena(&mut nodes, &[4]);
        // check: for every node i, no node alive at i overlaps it
        for i in 0..nodes.len() {
            for j in 0..i {
                let alive = nodes[i..].iter().any(|n| n.op.sources().contains(&j)) || j == i;
                let (a, b) = (&nodes[i], &nodes[j]);
                let overlap = a.offset < b.offset + b.len() && b.offset < a.offset + a.len();
                assert!(!(alive && overlap), "node {i} overlaps live node {j}");
            }
        }
        assert!(len <= 30, "arena of {len} floats for 3 live nodes at most");
    }
}
