//! `llama_context_params.cb_eval`: the graph callback upstream's `llama-imatrix` and
//! `llama-eval-callback` use. Upstream's scheduler asks the callback about every node
//! (`ask == true`) and, for the nodes it wants, calls it again once the node is computed
//! (`ask == false`), handing it a `struct ggml_tensor` whose `src[]` are the node's operands.
//! Here each node of our graph is shown as such a tensor, laid out as in upstream's `ggml.h`:
//! its ggml op, F32 values in host memory (`ne0 × ne1`; MUL_MAT_ID's as ggml's 3-D
//! `[n, n_used, T]`), the activations it read as `src[1]` (and `src[0]` for ops of two
//! activations), the weight it read as `src[0]` (its name, current type and shape; bytes in
//! ggml's row layout, un-repacked), MUL_MAT_ID's expert ids as an I32 `src[2]`.
//!
//! Nodes carry upstream's names and shapes (`graph::shown`); what upstream's graph has and
//! ours computes in place (RESHAPEs, the VIEW / PERMUTE of Q and of the cache, SET_ROWS as
//! the layer's cache rows) is shown as upstream's scheduler shows it, over the same bytes.
//!
//! The tensors' `buffer` is a host buffer laid out as libggml's (`ggml-backend-impl.h`), so
//! `ggml_backend_buffer_is_host` answers true and `ggml_backend_tensor_get` copies the
//! bytes, whether libggml's functions or a program's own code reads it. Writes through
//! `ggml_backend_tensor_set` change an activation as upstream's would; a weight cannot be
//! written this way (logged, ignored).

use std::borrow::Cow;
use std::ffi::c_void;

use super::types::ggml_tensor;
use crate::graph::backend::NodeObserver;
use crate::graph::{Graph, NodeId, Op};
use crate::kv_cache::{KvBuffer, KvCache};
use crate::model::Model;

/// `GGML_MAX_DIMS`, `GGML_MAX_OP_PARAMS`, `GGML_MAX_SRC`, `GGML_MAX_NAME` of `ggml.h`.
const MAX_DIMS: usize = 4;
const MAX_OP_PARAMS: usize = 64;
const MAX_SRC: usize = 10;
const MAX_NAME: usize = 64;

/// `GGML_TYPE_F32`, `GGML_TYPE_F16` and `GGML_TYPE_I32`.
const TYPE_F32: i32 = 0;
const TYPE_F16: i32 = 1;
const TYPE_I32: i32 = 26;

/// `enum ggml_op` at the pinned commit, in order (the index is the value).
const GGML_OPS: &[&str] = &[
    "NONE",
    "DUP",
    "ADD",
    "ADD_ID",
    "ADD1",
    "ACC",
    "SUB",
    "MUL",
    "DIV",
    "SQR",
    "SQRT",
    "LOG",
    "SIN",
    "COS",
    "SUM",
    "SUM_ROWS",
    "CUMSUM",
    "MEAN",
    "ARGMAX",
    "COUNT_EQUAL",
    "REPEAT",
    "REPEAT_BACK",
    "CONCAT",
    "SILU_BACK",
    "NORM",
    "RMS_NORM",
    "RMS_NORM_BACK",
    "GROUP_NORM",
    "L2_NORM",
    "MUL_MAT",
    "MUL_MAT_ID",
    "OUT_PROD",
    "SCALE",
    "SET",
    "CPY",
    "CONT",
    "RESHAPE",
    "VIEW",
    "PERMUTE",
    "TRANSPOSE",
    "GET_ROWS",
    "GET_ROWS_BACK",
    "SET_ROWS",
    "DIAG",
    "DIAG_MASK_INF",
    "DIAG_MASK_ZERO",
    "SOFT_MAX",
    "SOFT_MAX_BACK",
    "ROPE",
    "ROPE_BACK",
    "CLAMP",
    "CONV_TRANSPOSE_1D",
    "IM2COL",
    "IM2COL_BACK",
    "IM2COL_3D",
    "COL2IM_1D",
    "CONV_2D",
    "CONV_3D",
    "CONV_2D_DW",
    "CONV_TRANSPOSE_2D",
    "POOL_1D",
    "POOL_2D",
    "POOL_2D_BACK",
    "UPSCALE",
    "PAD",
    "PAD_REFLECT_1D",
    "ROLL",
    "ARANGE",
    "TIMESTEP_EMBEDDING",
    "ARGSORT",
    "TOP_K",
    "LEAKY_RELU",
    "TRI",
    "FILL",
    "FLASH_ATTN_EXT",
    "FLASH_ATTN_BACK",
    "SSM_CONV",
    "SSM_SCAN",
    "WIN_PART",
    "WIN_UNPART",
    "GET_REL_POS",
    "ADD_REL_POS",
    "RWKV_WKV6",
    "GATED_LINEAR_ATTN",
    "RWKV_WKV7",
    "SOLVE_TRI",
    "GATED_DELTA_NET",
    "LIGHTNING_INDEXER",
    "DSV4_HC_COMB",
    "DSV4_HC_PRE",
    "DSV4_HC_POST",
    "UNARY",
    "MAP_CUSTOM1",
    "MAP_CUSTOM2",
    "MAP_CUSTOM3",
    "CUSTOM",
    "CROSS_ENTROPY_LOSS",
    "CROSS_ENTROPY_LOSS_BACK",
    "OPT_STEP_ADAMW",
    "OPT_STEP_SGD",
    "GLU",
];

/// `enum ggml_unary_op`, in order.
const GGML_UNARY_OPS: &[&str] = &[
    "ABS",
    "SGN",
    "NEG",
    "STEP",
    "TANH",
    "ELU",
    "RELU",
    "SIGMOID",
    "GELU",
    "GELU_QUICK",
    "SILU",
    "HARDSWISH",
    "HARDSIGMOID",
    "EXP",
    "EXPM1",
    "SOFTPLUS",
    "GELU_ERF",
    "XIELU",
    "FLOOR",
    "CEIL",
    "ROUND",
    "TRUNC",
];

/// `enum ggml_glu_op`, in order.
const GGML_GLU_OPS: &[&str] = &[
    "REGLU",
    "GEGLU",
    "SWIGLU",
    "SWIGLU_OAI",
    "GEGLU_ERF",
    "GEGLU_QUICK",
    "SWIGLU_CLAMP",
];

fn index_of(table: &[&str], name: &str) -> i32 {
    table.iter().position(|n| *n == name).unwrap_or(0) as i32
}

/// `struct ggml_tensor` of `ggml.h`.
#[repr(C)]
pub(super) struct TensorView {
    r#type: i32,
    buffer: *mut Buffer,
    ne: [i64; MAX_DIMS],
    nb: [usize; MAX_DIMS],
    op: i32,
    op_params: [i32; MAX_OP_PARAMS / 4],
    flags: i32,
    src: [*mut TensorView; MAX_SRC],
    view_src: *mut TensorView,
    view_offs: usize,
    data: *mut c_void,
    name: [u8; MAX_NAME],
    extra: *mut c_void,
    padding: [u8; 8],
}

impl TensorView {
    fn empty() -> TensorView {
        TensorView {
            r#type: TYPE_F32,
            buffer: std::ptr::null_mut(),
            ne: [1; MAX_DIMS],
            nb: [0; MAX_DIMS],
            op: 0,
            op_params: [0; MAX_OP_PARAMS / 4],
            flags: 0,
            src: [std::ptr::null_mut(); MAX_SRC],
            view_src: std::ptr::null_mut(),
            view_offs: 0,
            data: std::ptr::null_mut(),
            name: [0; MAX_NAME],
            extra: std::ptr::null_mut(),
            padding: [0; 8],
        }
    }

    /// Shape, strides (contiguous rows of `row_bytes`), type, name and data.
    fn set(&mut self, ty: i32, elem: usize, row_bytes: usize, ne: [i64; 4], name: &str) {
        *self = TensorView::empty();
        self.r#type = ty;
        self.ne = ne;
        self.nb = [
            elem,
            row_bytes,
            row_bytes * ne[1] as usize,
            row_bytes * (ne[1] * ne[2]) as usize,
        ];
        let n = name.len().min(MAX_NAME - 1);
        self.name[..n].copy_from_slice(&name.as_bytes()[..n]);
    }

    /// A tensor of type `ty` (`ggml_type`) with strides `nb` over `data` in `buffer` (a
    /// libggml `ggml_backend_buffer_t`), as a host callback receives one.
    pub(super) fn host(
        ty: i32,
        ne: [i64; 4],
        nb: [usize; 4],
        name: &str,
        data: *mut c_void,
        buffer: *mut c_void,
    ) -> TensorView {
        let mut t = TensorView::empty();
        t.r#type = ty;
        t.ne = ne;
        t.nb = nb;
        let n = name.len().min(MAX_NAME - 1);
        t.name[..n].copy_from_slice(&name.as_bytes()[..n]);
        t.data = data;
        t.buffer = buffer.cast();
        t
    }

    fn f32(&mut self, ne: [i64; 4], name: &str, values: Option<&[f32]>, buffer: *mut Buffer) {
        self.set(TYPE_F32, 4, 4 * ne[0] as usize, ne, name);
        self.buffer = buffer;
        if let Some(v) = values {
            self.data = v.as_ptr() as *mut c_void;
        }
    }
}

/// `struct ggml_backend_buffer_type_i` + `struct ggml_backend_buffer_type`.
#[repr(C)]
struct BufferType {
    get_name: unsafe extern "C" fn(*mut BufferType) -> *const u8,
    alloc_buffer: *const c_void,
    get_alignment: unsafe extern "C" fn(*mut BufferType) -> usize,
    get_max_size: *const c_void,
    get_alloc_size: *const c_void,
    is_host: unsafe extern "C" fn(*mut BufferType) -> bool,
    device: *mut c_void,
    context: *mut c_void,
}

/// `struct ggml_backend_buffer_i` + `struct ggml_backend_buffer`.
#[repr(C)]
struct Buffer {
    free_buffer: *const c_void,
    get_base: unsafe extern "C" fn(*mut Buffer) -> *mut c_void,
    init_tensor: *const c_void,
    memset_tensor: unsafe extern "C" fn(*mut Buffer, *mut TensorView, u8, usize, usize),
    set_tensor: unsafe extern "C" fn(*mut Buffer, *mut TensorView, *const c_void, usize, usize),
    get_tensor: unsafe extern "C" fn(*mut Buffer, *const TensorView, *mut c_void, usize, usize),
    set_tensor_2d: *const c_void,
    get_tensor_2d: *const c_void,
    cpy_tensor: *const c_void,
    clear: unsafe extern "C" fn(*mut Buffer, u8),
    reset: *const c_void,
    buft: *mut BufferType,
    /// Non-NULL for the weights' buffer (read-only).
    context: *mut c_void,
    size: usize,
    usage: i32,
}

unsafe extern "C" fn buft_name(_: *mut BufferType) -> *const u8 {
    c"CPU".as_ptr().cast()
}
unsafe extern "C" fn buft_alignment(_: *mut BufferType) -> usize {
    32
}
unsafe extern "C" fn buft_is_host(_: *mut BufferType) -> bool {
    true
}
unsafe extern "C" fn buffer_base(_: *mut Buffer) -> *mut c_void {
    std::ptr::null_mut()
}
unsafe extern "C" fn buffer_clear(_: *mut Buffer, _: u8) {}

/// Whether `t` may be written: an activation of the node being shown.
///
/// # Safety
/// `buf` is one of the two buffers below.
unsafe fn writable(buf: *mut Buffer) -> bool {
    // SAFETY: `buf` points to a live buffer per the contract.
    let weights = !unsafe { (*buf).context }.is_null();
    if weights {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            crate::log_warn!(
                "cb_eval: a callback wrote to a weight; ignored (weights are read-only here)"
            )
        });
    }
    !weights
}

unsafe extern "C" fn buffer_memset(
    buf: *mut Buffer,
    t: *mut TensorView,
    value: u8,
    offset: usize,
    size: usize,
) {
    // SAFETY: libggml (or the caller) checked `offset + size <= ggml_nbytes(t)`; `t` is one
    // of our views, whose data spans its bytes.
    unsafe {
        if writable(buf) {
            std::ptr::write_bytes((*t).data.cast::<u8>().add(offset), value, size);
        }
    }
}

unsafe extern "C" fn buffer_set(
    buf: *mut Buffer,
    t: *mut TensorView,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    // SAFETY: as in `buffer_memset`; `data` holds `size` bytes per ggml's contract.
    unsafe {
        if writable(buf) {
            std::ptr::copy_nonoverlapping(
                data.cast::<u8>(),
                (*t).data.cast::<u8>().add(offset),
                size,
            );
        }
    }
}

unsafe extern "C" fn buffer_get(
    _: *mut Buffer,
    t: *const TensorView,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    // SAFETY: as in `buffer_set`, reading.
    unsafe {
        std::ptr::copy_nonoverlapping((*t).data.cast::<u8>().add(offset), data.cast::<u8>(), size)
    };
}

/// The two host buffers of one context's callback (activations, weights) and their type.
struct Buffers {
    /// Kept alive for the buffers, which point to it.
    _buft: Box<BufferType>,
    activations: Box<Buffer>,
    weights: Box<Buffer>,
}

impl Buffers {
    fn new() -> Buffers {
        let mut buft = Box::new(BufferType {
            get_name: buft_name,
            alloc_buffer: std::ptr::null(),
            get_alignment: buft_alignment,
            get_max_size: std::ptr::null(),
            get_alloc_size: std::ptr::null(),
            is_host: buft_is_host,
            device: std::ptr::null_mut(),
            context: std::ptr::null_mut(),
        });
        let buft_ptr: *mut BufferType = &mut *buft;
        let buffer = |read_only: bool| {
            Box::new(Buffer {
                free_buffer: std::ptr::null(),
                get_base: buffer_base,
                init_tensor: std::ptr::null(),
                memset_tensor: buffer_memset,
                set_tensor: buffer_set,
                get_tensor: buffer_get,
                set_tensor_2d: std::ptr::null(),
                get_tensor_2d: std::ptr::null(),
                cpy_tensor: std::ptr::null(),
                clear: buffer_clear,
                reset: std::ptr::null(),
                buft: buft_ptr,
                context: if read_only {
                    buft_ptr.cast()
                } else {
                    std::ptr::null_mut()
                },
                size: usize::MAX,
                // GGML_BACKEND_BUFFER_USAGE_WEIGHTS = 1, _COMPUTE = 2
                usage: if read_only { 1 } else { 2 },
            })
        };
        Buffers {
            activations: buffer(false),
            weights: buffer(true),
            _buft: buft,
        }
    }
}

/// How node `id` is shown: upstream's name for it (`graph::shown`; our own node name when
/// the builder gave none, `node_<id>` for a tensor upstream leaves unnamed) and its shape.
fn shown(g: &Graph, id: NodeId) -> (String, [i64; 4]) {
    let node = &g.nodes[id];
    let name = match node.shown.name {
        Some(n) if n.name.is_empty() => format!("node_{id}"),
        Some(n) => n.render(),
        None => node.name.to_string(),
    };
    let ne = match node.shown.ne {
        Some([a, b, c]) => [a as i64, b as i64, c as i64, 1],
        None => [node.ne0 as i64, node.ne1 as i64, 1, 1],
    };
    (name, ne)
}

/// How node `id` is shown as another node's source: as the RESHAPE upstream has after it,
/// when it has one (that is what upstream's next op reads).
fn shown_as_source(g: &Graph, id: NodeId) -> (String, [i64; 4]) {
    match g.nodes[id].shown.then_reshape {
        Some((name, [a, b, c])) => (name.render(), [a as i64, b as i64, c as i64, 1]),
        None => shown(g, id),
    }
}

/// A tensor shown that is no node of ours: upstream's VIEW / PERMUTE of an activation or of
/// the cache, and the cache rows SET_ROWS wrote (same bytes, upstream's type, shape, strides).
struct Extra {
    name: String,
    op: &'static str,
    ty: i32,
    ne: [i64; 4],
    nb: [usize; 4],
    data: *const c_void,
}

impl Extra {
    /// Contiguous F32 values of `ne`.
    fn f32(name: String, op: &'static str, ne: [i64; 4], data: &[f32]) -> Extra {
        let nb0 = 4usize;
        let nb1 = nb0 * ne[0] as usize;
        let nb2 = nb1 * ne[1] as usize;
        Extra {
            name,
            op,
            ty: TYPE_F32,
            ne,
            nb: [nb0, nb1, nb2, nb2 * ne[2] as usize],
            data: data.as_ptr().cast(),
        }
    }

    /// ggml_permute(0, 2, 1, 3) of a 3-D tensor: its second and third axes swapped.
    fn permuted(&self) -> Extra {
        Extra {
            name: format!("{} (permuted)", self.name),
            op: "PERMUTE",
            ty: self.ty,
            ne: [self.ne[0], self.ne[2], self.ne[1], self.ne[3]],
            nb: [self.nb[0], self.nb[2], self.nb[1], self.nb[3]],
            data: self.data,
        }
    }

    fn fill(&self, view: &mut TensorView, buffer: *mut Buffer) {
        *view = TensorView::empty();
        view.r#type = self.ty;
        view.ne = self.ne;
        view.nb = self.nb;
        view.op = index_of(GGML_OPS, self.op);
        view.buffer = buffer;
        view.data = self.data as *mut c_void;
        let n = self.name.len().min(MAX_NAME - 1);
        view.name[..n].copy_from_slice(&self.name.as_bytes()[..n]);
    }
}

/// A layer's K or V cache rows as `(ggml type, element size, [width, cells], bytes)`;
/// `None` for a packed (quantized) cache.
fn cache_rows(
    kv: &KvCache,
    layer: usize,
    v: bool,
) -> Option<(i32, usize, [i64; 2], *const c_void)> {
    let l = kv.layers.get(layer)?;
    let (buf, width) = if v {
        (&l.v, l.n_embd_v)
    } else {
        (&l.k, l.n_embd_k)
    };
    let (ty, elem, len, data): (i32, usize, usize, *const c_void) = match buf {
        KvBuffer::F32(x) => (TYPE_F32, 4, x.len(), x.as_ptr().cast()),
        KvBuffer::F16(x) => (TYPE_F16, 2, x.len(), x.as_ptr().cast()),
        KvBuffer::Packed { .. } => return None,
    };
    (width > 0).then(|| (ty, elem, [width as i64, (len / width) as i64], data))
}

/// The caller's `cb_eval` and its data, shown our graph's nodes (see the module doc).
pub(super) struct EvalCallback {
    f: unsafe extern "C" fn(*mut ggml_tensor, bool, *mut c_void) -> bool,
    data: *mut c_void,
    buffers: Buffers,
    /// The node, then up to three sources; `src[]` point into this array.
    views: Box<[TensorView; 4]>,
    /// MUL_MAT_ID's expert ids as I32.
    ids: Vec<i32>,
    /// A RESHAPE shown after the node (`Shown::then_reshape`) and its source.
    reshape_views: Box<[TensorView; 2]>,
    /// Whether the callback asked for the node, and for the RESHAPE shown after it.
    wanted: (bool, bool),
}

// SAFETY: upstream calls `cb_eval` with its data from the thread that decodes; the caller's
// contract is the same with us. The buffers and views are only touched under the context's
// engine lock, by that thread.
unsafe impl Send for EvalCallback {}

impl EvalCallback {
    pub(super) fn new(
        f: unsafe extern "C" fn(*mut ggml_tensor, bool, *mut c_void) -> bool,
        data: *mut c_void,
    ) -> EvalCallback {
        EvalCallback {
            f,
            data,
            buffers: Buffers::new(),
            views: Box::new([
                TensorView::empty(),
                TensorView::empty(),
                TensorView::empty(),
                TensorView::empty(),
            ]),
            ids: Vec::new(),
            reshape_views: Box::new([TensorView::empty(), TensorView::empty()]),
            wanted: (false, false),
        }
    }

    /// Asks the callback about `t` (read from `src`) and, when it wants it, shows it.
    /// Returns `false` when the callback stops the graph.
    fn show_extra(&mut self, t: &Extra, src: &Extra) -> bool {
        let acts: *mut Buffer = &mut *self.buffers.activations;
        for ask in [true, false] {
            let [tv, s0] = &mut *self.reshape_views;
            t.fill(tv, acts);
            src.fill(s0, acts);
            tv.src[0] = &mut *s0;
            let tp: *mut TensorView = tv;
            // SAFETY: views laid out as `struct ggml_tensor` over arena values or cache rows
            // that outlive the call (the engine lock is held).
            let r = unsafe { (self.f)(tp.cast::<ggml_tensor>(), ask, self.data) };
            if ask && !r {
                return true;
            }
            if !ask {
                return r;
            }
        }
        true
    }

    /// Upstream's tensors around a cache write or an attention that ours does not have as
    /// nodes: the VIEW of K or V that SET_ROWS reads and the cache rows it writes (shown as
    /// the SET_ROWS, instead of our empty node), or the views and permutes of Q and of the
    /// cache that FLASH_ATTN_EXT reads. `Some(go_on)` when node `id` was shown here.
    fn show_cache<'v>(
        &mut self,
        g: &Graph,
        id: NodeId,
        model: &Model,
        values: &dyn Fn(NodeId) -> &'v [f32],
        kv: &KvCache,
    ) -> Option<bool> {
        match g.nodes[id].op {
            Op::SetRows { src, layer, v } => {
                let (ty, elem, [w, cells], data) = cache_rows(kv, layer, v)?;
                let (s_name, s_ne) = shown_as_source(g, src);
                let n = &g.nodes[src];
                let from = Extra::f32(s_name, "NONE", s_ne, values(src));
                let view = Extra::f32(
                    format!("{} (view)", from.name),
                    "VIEW",
                    [n.ne0 as i64, n.ne1 as i64, 1, 1],
                    values(src),
                );
                let rows = w as usize * elem;
                let set = Extra {
                    name: shown(g, id).0,
                    op: "SET_ROWS",
                    ty,
                    ne: [w, cells, 1, 1],
                    nb: [elem, rows, rows * cells as usize, rows * cells as usize],
                    data,
                };
                Some(self.show_extra(&view, &from) && self.show_extra(&set, &view))
            }
            Op::FlashAttnExt {
                q,
                layer,
                n_head,
                n_head_kv,
                dk,
                dv,
                ..
            } => {
                let caches = [cache_rows(kv, layer, false)?, cache_rows(kv, layer, true)?];
                let (q_name, q_ne) = shown_as_source(g, q);
                let from = Extra::f32(q_name, "NONE", q_ne, values(q));
                let t = g.nodes[q].ne1 as i64;
                let qv = Extra::f32(
                    format!("{} (view)", from.name),
                    "VIEW",
                    [dk as i64, n_head as i64, t, 1],
                    values(q),
                );
                let mut go = self.show_extra(&qv, &from) && self.show_extra(&qv.permuted(), &qv);
                for ((v, d), (ty, elem, [w, cells], data)) in
                    [(false, dk), (true, dv)].into_iter().zip(caches)
                {
                    let rows = w as usize * elem;
                    let whole = Extra {
                        name: format!("cache_{}_l{layer}", if v { "v" } else { "k" }),
                        op: "NONE",
                        ty,
                        ne: [w, cells, 1, 1],
                        nb: [elem, rows, rows * cells as usize, rows * cells as usize],
                        data,
                    };
                    let view = Extra {
                        name: format!("{} (view)", whole.name),
                        op: "VIEW",
                        ty,
                        ne: [d as i64, n_head_kv as i64, cells, 1],
                        nb: [elem, elem * d, rows, rows * cells as usize],
                        data,
                    };
                    go = go
                        && self.show_extra(&view, &whole)
                        && self.show_extra(&view.permuted(), &view);
                }
                Some(go && (!self.wanted.0 || self.show(g, id, model, Some(values), false)))
            }
            _ => None,
        }
    }

    /// Shows the RESHAPE upstream's graph has after node `id` (the same values under
    /// another name and shape; computed by nothing, as upstream's).
    fn show_reshape<'v>(
        &mut self,
        g: &Graph,
        id: NodeId,
        values: Option<&dyn Fn(NodeId) -> &'v [f32]>,
        ask: bool,
    ) -> bool {
        let Some((name, ne)) = g.nodes[id].shown.then_reshape else {
            return true;
        };
        let acts: *mut Buffer = &mut *self.buffers.activations;
        let (src_name, src_ne) = shown(g, id);
        let data = values.map(|f| f(id));
        let [t, s0] = &mut *self.reshape_views;
        let ne = [ne[0] as i64, ne[1] as i64, ne[2] as i64, 1];
        t.f32(ne, &name.render(), data, acts);
        s0.f32(src_ne, &src_name, data, acts);
        t.op = index_of(GGML_OPS, "RESHAPE");
        t.src[0] = &mut *s0;
        let tp: *mut TensorView = t;
        // SAFETY: as in `show`: views laid out as `struct ggml_tensor` over arena values
        // that outlive the call.
        unsafe { (self.f)(tp.cast::<ggml_tensor>(), ask, self.data) }
    }

    /// Fills the views of node `id` (data pointers only when `values` is given; the weight's
    /// bytes in `weight`) and calls the callback.
    fn show<'v>(
        &mut self,
        g: &Graph,
        id: NodeId,
        model: &Model,
        values: Option<&dyn Fn(NodeId) -> &'v [f32]>,
        ask: bool,
    ) -> bool {
        let node = &g.nodes[id];
        let acts: *mut Buffer = &mut *self.buffers.activations;
        let wbuf: *mut Buffer = &mut *self.buffers.weights;
        let (op_name, sub) = node.op.ggml_op();
        let [t, s0, s1, s2] = &mut *self.views;
        let (name, ne) = shown(g, id);
        let v = |n: NodeId| values.map(|f| f(n));
        let mut n_src = 0usize;
        // the weight's bytes live as long as its read guard, held over the call
        let mut guard = None;
        let mut weight_src = |w: crate::graph::WeightId, view: &mut TensorView| {
            let wr = &g.weights[w.0];
            let st = model.tensors.at(wr.tensor).read();
            let ty = st.layout.ggml_type;
            let row = ty.row_size(wr.ne[0]).unwrap_or(0) as usize;
            view.set(
                ty.id() as i32,
                ty.type_size() as usize,
                row,
                wr.ne,
                &wr.name,
            );
            view.buffer = wbuf;
            guard = Some(st);
        };
        match &node.op {
            Op::MulMatId {
                w, x, ids, n_used, ..
            } => {
                let t_count = g.nodes[*ids].ne1 as i64;
                let n_used = *n_used as i64;
                t.f32([ne[0], n_used, t_count, 1], &name, v(id), acts);
                weight_src(*w, s0);
                let xn = &g.nodes[*x];
                let slots = if xn.ne1 as i64 == t_count { 1 } else { n_used };
                let (x_name, _) = shown(g, *x);
                s1.f32([xn.ne0 as i64, slots, t_count, 1], &x_name, v(*x), acts);
                s2.set(
                    TYPE_I32,
                    4,
                    4 * n_used as usize,
                    [n_used, t_count, 1, 1],
                    &shown(g, *ids).0,
                );
                s2.buffer = acts;
                if let Some(vals) = v(*ids) {
                    self.ids.clear();
                    self.ids.extend(vals.iter().map(|&e| e as i32));
                    s2.data = self.ids.as_mut_ptr().cast();
                }
                n_src = 3;
            }
            op => {
                t.f32(ne, &name, v(id), acts);
                // ggml's operand order: MUL_MAT and GET_ROWS read their weight as src0;
                // the other ops read activations first (MUL by a norm weight: src1)
                let weight_first = matches!(
                    op,
                    Op::MulMat { .. }
                        | Op::MulMatHeads { .. }
                        | Op::GetRowsTokens { .. }
                        | Op::GetRowsPos { .. }
                );
                let weights = op.weights();
                let mut slots = [s0, s1, s2].into_iter();
                if weight_first {
                    if let (Some(&w), Some(view)) = (weights.first(), slots.next()) {
                        weight_src(w, view);
                        n_src += 1;
                    }
                }
                for s in op.sources() {
                    let Some(view) = slots.next() else { break };
                    let (s_name, mut s_ne) = shown_as_source(g, s);
                    if weight_first && g.nodes[s].shown.then_reshape.is_none() {
                        // a product reads its activations as rows (callbacks such as
                        // llama-imatrix count rows of ne[0] values)
                        let n = &g.nodes[s];
                        s_ne = [n.ne0 as i64, n.ne1 as i64, 1, 1];
                    }
                    view.f32(s_ne, &s_name, v(s), acts);
                    n_src += 1;
                }
                if !weight_first {
                    if let (Some(&w), Some(view)) = (weights.first(), slots.next()) {
                        weight_src(w, view);
                        n_src += 1;
                    }
                }
            }
        }
        // the weight's bytes in ggml's layout (un-repacked), only when values are shown
        let plain: Option<Cow<'_, [u8]>> = match (&guard, values) {
            (Some(st), Some(_)) => st.plain_bytes(),
            _ => None,
        };
        let [t, s0, s1, s2] = &mut *self.views;
        t.op = index_of(GGML_OPS, op_name);
        match (op_name, sub) {
            ("UNARY", Some(u)) => t.op_params[0] = index_of(GGML_UNARY_OPS, u),
            ("GLU", Some(u)) => t.op_params[0] = index_of(GGML_GLU_OPS, u),
            _ => {}
        }
        for view in [&mut *s0, &mut *s1, &mut *s2] {
            if view.buffer == wbuf {
                view.data = plain
                    .as_ref()
                    .map_or(std::ptr::null_mut(), |b| b.as_ptr() as *mut c_void);
            }
        }
        let srcs: [*mut TensorView; 3] = [s0, s1, s2];
        t.src[..n_src].copy_from_slice(&srcs[..n_src]);
        let tp: *mut TensorView = t;
        // SAFETY: `tp` and its sources are laid out as `struct ggml_tensor`; the data they
        // point to (arena values, expert ids, weight bytes under `guard`) outlives the call.
        unsafe { (self.f)(tp.cast::<ggml_tensor>(), ask, self.data) }
    }
}

impl NodeObserver for EvalCallback {
    fn wants(&mut self, g: &Graph, node: NodeId, model: &Model) -> bool {
        // a cache write is asked about as upstream's SET_ROWS once its rows are written
        let set_rows = matches!(g.nodes[node].op, Op::SetRows { .. });
        let own = !set_rows && self.show(g, node, model, None, true);
        let reshape =
            g.nodes[node].shown.then_reshape.is_some() && self.show_reshape(g, node, None, true);
        self.wanted = (own, reshape);
        // the views around a cache write or an attention are asked about once computed
        let cache = matches!(
            g.nodes[node].op,
            Op::SetRows { .. } | Op::FlashAttnExt { .. }
        );
        own || reshape || cache
    }

    fn observe<'v>(
        &mut self,
        g: &Graph,
        node: NodeId,
        model: &Model,
        values: &dyn Fn(NodeId) -> &'v [f32],
        kv: &KvCache,
    ) -> bool {
        let (own, reshape) = self.wanted;
        match self.show_cache(g, node, model, values, kv) {
            Some(false) => return false,
            Some(true) => {}
            None => {
                if own && !self.show(g, node, model, Some(values), false) {
                    return false;
                }
            }
        }
        !reshape || self.show_reshape(g, node, Some(values), false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sizeof(struct ggml_tensor)` and the offsets a callback reads, as in upstream's
    /// `ggml.h` on 64-bit Linux (GGML_TENSOR_SIZE = 336).
    #[test]
    fn tensor_view_is_laid_out_as_ggml_tensor() {
        assert_eq!(std::mem::size_of::<TensorView>(), 336);
        assert_eq!(std::mem::offset_of!(TensorView, buffer), 8);
        assert_eq!(std::mem::offset_of!(TensorView, ne), 16);
        assert_eq!(std::mem::offset_of!(TensorView, nb), 48);
        assert_eq!(std::mem::offset_of!(TensorView, op), 80);
        assert_eq!(std::mem::offset_of!(TensorView, src), 152);
        assert_eq!(std::mem::offset_of!(TensorView, data), 248);
        assert_eq!(std::mem::offset_of!(TensorView, name), 256);
        assert_eq!(std::mem::size_of::<Buffer>(), 11 * 8 + 8 + 8 + 8 + 8);
        assert_eq!(std::mem::offset_of!(Buffer, buft), 88);
    }

    #[test]
    fn op_tables_match_ggml_h_values() {
        assert_eq!(index_of(GGML_OPS, "MUL_MAT"), 29);
        assert_eq!(index_of(GGML_OPS, "MUL_MAT_ID"), 30);
        assert_eq!(index_of(GGML_OPS, "FLASH_ATTN_EXT"), 74);
        assert_eq!(index_of(GGML_OPS, "UNARY"), 91);
        assert_eq!(index_of(GGML_OPS, "GLU"), 100);
        assert_eq!(index_of(GGML_UNARY_OPS, "SILU"), 10);
        assert_eq!(index_of(GGML_GLU_OPS, "SWIGLU"), 2);
    }
}
