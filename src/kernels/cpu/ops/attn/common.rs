//! The inputs of FLASH_ATTN_EXT shared by its CPU paths (shape, Q, the KV rows, the mask)
//! and the per-thread buffers of every path.

/// Per-thread buffers of [`flash_attn`].
#[derive(Debug, Default)]
pub struct AttnScratch {
    /// Q of the task's heads in K's vec_dot type (F16, F32, Q8_0, ...), as bytes.
    pub(super) q_bytes: Vec<u8>,
    /// The same Q in half precision when K is F16.
    pub(super) q16: Vec<half::f16>,
    pub(super) k: Vec<f32>,
    pub(super) v: Vec<f32>,
    pub(super) acc: Vec<f32>,
    pub(super) acc16: Vec<half::f16>,
    pub(super) m: Vec<f32>,
    pub(super) s: Vec<f32>,
    pub(super) cells: Vec<u32>,
    /// Whether the task's token sees each cell of its run (`Attn::visible_row`).
    pub(super) seen: Vec<bool>,
    /// ALiBi's mask values of the task's token over its run (`Attn::alibi`).
    pub(super) dist: Vec<f32>,
    /// K and V rows of an F32 cache rounded to half precision (see [`KvRows::cast_f16`]).
    pub(super) k16: Vec<half::f16>,
    pub(super) v16: Vec<half::f16>,
    /// The tiled kernel's buffers.
    pub(super) tiled: TiledScratch,
    /// The buffers of attention without flash attention.
    pub(super) nofa: NoFaScratch,
    /// The split-KV path's partial results (in the extra set past the pool threads' ones).
    pub(super) partials: Vec<f32>,
}

impl AttnScratch {
    /// Gives every buffer the capacity a task of `shape` uses, so the task itself never
    /// allocates. `flash_attn` calls it for every pool thread's set before the job: a thread
    /// that takes its first attention task late (a worker the OS kept descheduled during the
    /// first decodes) must not allocate in the middle of a later decode.
    pub(super) fn reserve_for(&mut self, shape: AttnShape) {
        fn at_least<T>(v: &mut Vec<T>, n: usize) {
            v.reserve(n.saturating_sub(v.len()));
        }
        let group = shape.n_head / shape.n_head_kv;
        // F32 is the widest vec_dot type (4 bytes an element; F16, BF16 and the Q8 types
        // are narrower), so Q in K's vec_dot type fits in this many bytes
        at_least(
            &mut self.q_bytes,
            group
                * crate::kernels::cpu::type_traits::row_bytes(crate::gguf::GgmlType::F32, shape.dk),
        );
        at_least(&mut self.q16, group * shape.dk);
        at_least(&mut self.k, shape.dk);
        at_least(&mut self.v, shape.dv);
        at_least(&mut self.acc, group * shape.dv);
        at_least(&mut self.acc16, group * shape.dv);
        at_least(&mut self.m, group);
        at_least(&mut self.s, group);
        at_least(&mut self.cells, shape.n_cells_max as usize);
        at_least(&mut self.seen, shape.n_cells_max as usize);
        if shape.max_bias > 0.0 {
            at_least(&mut self.dist, shape.n_cells_max as usize);
        }
        at_least(&mut self.k16, shape.dk);
        at_least(&mut self.v16, shape.dv);
        self.tiled.reserve_for(shape);
        self.nofa.reserve_for(shape);
    }
}

/// The inputs of one FLASH_ATTN_EXT, shared by its four CPU paths (one-row, split-KV, tiled,
/// and MUL_MAT / SOFT_MAX / MUL_MAT when flash attention is off).
#[derive(Clone, Copy)]
pub struct Attn<'a> {
    pub shape: AttnShape,
    /// `n_tokens` rows of `n_head` heads of `dk` values.
    pub q: &'a [f32],
    pub n_tokens: usize,
    /// The cells token `t` may attend to (its KV stream's used cells).
    pub rows: &'a (dyn Fn(usize) -> std::ops::Range<u32> + Sync),
    /// The causal and sliding-window mask of token `t` over a run of cells: `out[i]` is
    /// whether it sees cell `first + i`. Kernels ask for a whole row (a task's cells, a tile's
    /// row) at once, not one dyn call per cell.
    pub visible_row: &'a (dyn Fn(usize, u32, &mut [bool]) + Sync),
    pub k: &'a dyn KvRows,
    pub v: &'a dyn KvRows,
    /// Per head, a logit joined to the softmax without a value (`ggml_flash_attn_ext_add_sinks`:
    /// gpt-oss's attention sinks).
    pub sinks: Option<&'a [f32]>,
    /// ALiBi (`shape.max_bias > 0`): upstream's KQ mask values of token `t` over a run of
    /// cells from `first` (`-|pos(t) - pos(cell)|`, as the mask's type holds them), which each
    /// head multiplies by its slope ([`alibi_slope`]) and adds to the scaled score.
    pub alibi: Option<&'a (dyn Fn(usize, u32, &mut [f32]) + Sync)>,
}

/// ggml's ALiBi slope of head `h` of `n_head` for `max_bias` (1 when `max_bias` is 0, the
/// mask then adding 0): `m0^(h+1)` for the first `2^floor(log2(n_head))` heads, then
/// `m1^(2(h - n_head_log2) + 1)`, in f32 with libm's `powf` as ggml-cpu computes it.
pub fn alibi_slope(max_bias: f32, n_head: usize, h: usize) -> f32 {
    if max_bias <= 0.0 {
        return 1.0;
    }
    let n_head_log2 = 1u32 << (n_head as f64).log2().floor() as u32;
    let m0 = 2.0f32.powf(-max_bias / n_head_log2 as f32);
    let m1 = 2.0f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
    let h = h as u32;
    if h < n_head_log2 {
        m0.powf((h + 1) as f32)
    } else {
        m1.powf((2 * (h - n_head_log2) + 1) as f32)
    }
}

/// Shapes and constants of one FLASH_ATTN_EXT.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub dk: usize,
    pub dv: usize,
    pub scale: f32,
    pub softcap: f32,
    /// ALiBi's maximum bias (`f_max_alibi_bias`; 0: none), see [`Attn::alibi`].
    pub max_bias: f32,
    /// Cells in the cache: per-thread buffers are sized for all of them once, so that a
    /// growing context never reallocates them.
    pub n_cells_max: u32,
    /// Upstream's flash attention is on. Off (llama-cpp-python's default), upstream computes
    /// attention as MUL_MAT, SOFT_MAX_EXT, MUL_MAT, whose float order is followed instead.
    pub flash_attn: bool,
    /// One query row over 512 cells or more may take the split-KV path (upstream's
    /// `use_split_kv_path` wants a single channel, `ne[3]` of Q 1: false where the graph
    /// folds several onto it, MiniMax-M3's gathered attention).
    pub split_kv: bool,
}

/// The cached keys or values of one layer, as the attention kernel reads them.
pub trait KvRows: Sync {
    /// Values `off .. off + dst.len()` of row `cell` as f32.
    fn read(&self, cell: usize, off: usize, dst: &mut [f32]);
    /// The same values in half precision when the cache is F16.
    fn half(&self, cell: usize, off: usize, len: usize) -> Option<&[half::f16]>;
    /// Whether values are stored in half precision (Q is rounded to it for the dot, as ggml
    /// converts Q to K's type).
    fn is_f16(&self) -> bool;
    /// Whether attention reads these (F32) values rounded to half precision: upstream's graph
    /// casts an F32 cache to F16 before FLASH_ATTN_EXT, so an F32 cache gives exactly the
    /// results of an F16 one.
    fn cast_f16(&self) -> bool {
        false
    }
    /// The same values as ggml blocks of another type (BF16, Q8_0, ...) when the cache
    /// stores them so: the type and the bytes of `len` values from `off`.
    fn packed(
        &self,
        _cell: usize,
        _off: usize,
        _len: usize,
    ) -> Option<(crate::gguf::GgmlType, &[u8])> {
        None
    }
}

/// Query rows per tile (ggml's `GGML_FA_TILE_Q`): the tiled kernel runs from this many.
pub const TILE_Q: usize = 64;

/// KV cells per tile (ggml's `GGML_FA_TILE_KV`).
pub const TILE_KV: usize = 64;

/// Per-thread buffers of the tiled kernel.
#[derive(Debug, Default)]
pub struct TiledScratch {
    pub(super) q: Vec<f32>,
    pub(super) kt: Vec<f32>,
    pub(super) v: Vec<f32>,
    pub(super) kq: Vec<f32>,
    pub(super) acc: Vec<f32>,
    pub(super) m: Vec<f32>,
    pub(super) s: Vec<f32>,
    pub(super) vis: Vec<bool>,
    /// ALiBi's mask values of the tile (`Attn::alibi`), row `tq`, cell `tk`.
    pub(super) dist: Vec<f32>,
    pub(super) row: Vec<f32>,
    pub(super) half: Vec<half::f16>,
}

fn at_least<T>(v: &mut Vec<T>, n: usize) {
    v.reserve(n.saturating_sub(v.len()));
}

impl TiledScratch {
    /// Gives every buffer the capacity a task of `shape` uses (see `AttnScratch::reserve_for`).
    pub fn reserve_for(&mut self, shape: AttnShape) {
        let rows = shape.n_head / shape.n_head_kv * TILE_Q;
        let (dk, dv) = (shape.dk, shape.dv);
        at_least(&mut self.q, rows * dk);
        at_least(&mut self.kt, dk * TILE_KV);
        at_least(&mut self.v, TILE_KV * dv);
        at_least(&mut self.kq, rows * TILE_KV);
        at_least(&mut self.acc, rows * dv);
        at_least(&mut self.m, rows);
        at_least(&mut self.s, rows);
        at_least(&mut self.vis, TILE_Q * TILE_KV);
        if shape.max_bias > 0.0 {
            at_least(&mut self.dist, TILE_Q * TILE_KV);
        }
        at_least(&mut self.row, dk.max(dv));
        at_least(&mut self.half, dk.max(dv));
    }
}

/// Per-thread buffers.
#[derive(Debug, Default)]
pub struct NoFaScratch {
    pub(super) q: Vec<f32>,
    pub(super) row: Vec<f32>,
    pub(super) w: Vec<f32>,
    pub(super) acc: Vec<f32>,
    /// Whether the task's token sees each cell of its view (`Attn::visible_row`).
    pub(super) seen: Vec<bool>,
    /// ALiBi's mask values of the task's token over its view (`Attn::alibi`).
    pub(super) dist: Vec<f32>,
}

impl NoFaScratch {
    /// Gives every buffer the capacity a task of `shape` uses (see `AttnScratch::reserve_for`).
    pub fn reserve_for(&mut self, shape: AttnShape) {
        fn at_least<T>(v: &mut Vec<T>, n: usize) {
            v.reserve(n.saturating_sub(v.len()));
        }
        at_least(&mut self.q, shape.dk);
        at_least(&mut self.row, shape.dk.max(shape.dv));
        at_least(&mut self.w, shape.n_cells_max as usize);
        at_least(&mut self.acc, shape.dv * 32);
        at_least(&mut self.seen, shape.n_cells_max as usize);
        if shape.max_bias > 0.0 {
            at_least(&mut self.dist, shape.n_cells_max as usize);
        }
    }
}
