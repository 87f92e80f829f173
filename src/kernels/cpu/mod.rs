//! CPU kernels: dequantization, activation quantization, per-type dot products and `mul_mat`,
//! following upstream's CPU backend (`ggml/src/ggml-cpu`) so results match it closely.
//!
//! A weight is a byte slice in ggml's layout (rows of `row_bytes(t, k)` bytes, any alignment:
//! mmap'd or owned storage is read in place, never copied). `mul_mat` converts the f32
//! activations once into the weight type's vec_dot type ([`vec_dot_type`]), bit-exact with the
//! conversion upstream's CPU backend runs, then splits the output into chunks of rows x columns
//! that the pool's threads claim from an atomic counter (ggml's chunking).
//!
//! Entry points: [`mul_mat`] (one 2-D weight), [`mul_mat_rows`] (a row piece of a split weight
//! into a strided destination), [`prepare_activations`] + [`mul_mat_prepared`] (convert once,
//! multiply several weights or pieces), [`mul_mat_batched`] (ggml's batch dims with GQA
//! broadcast and strides: attention over the KV cache in place), [`dequantize_row`],
//! [`quantize_row`]. All panic on inconsistent sizes (the engine checks shapes when it builds
//! its graph).
//!
//! Kernels: each type has a scalar reference dot product ([`vec_dot_scalar`]); on x86-64 with
//! AVX2+FMA+F16C (detected once at run time) [`dot_fn`] hands out the SIMD version, and
//! [`tile_fn`] a kernel for several activation rows at once (batched products).
//! `LLAMA_HOTSWAP_KERNELS=scalar` forces the scalar path (as on a CPU without AVX2).

mod attn_nofa;
mod attn_tiled;
mod blocks;
mod dequant;
mod dot_scalar;
pub mod ops;
mod pool;
mod quantize;
pub mod repack;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use pool::{ThreadPool, MAX_THREADS};
pub use repack::{repack_kind, RepackKind, Repacked};

use crate::gguf::GgmlType;

/// The weight types the CPU kernels compute with.
pub const SUPPORTED: [GgmlType; 15] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

/// Whether `t` can be a `mul_mat` weight or a `dequantize_row` source.
pub fn supports(t: GgmlType) -> bool {
    SUPPORTED.contains(&t)
}

/// The type activations are converted to before a dot product with a weight of type `t`
/// (ggml's `vec_dot_type`): Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL, Q8_1 for Q4_1/Q5_1, Q8_K for the
/// K-quants and IQ4_XS, and the type itself for F32/F16/BF16.
///
/// Panics if `t` is not [`supports`]ed.
pub fn vec_dot_type(t: GgmlType) -> GgmlType {
    match t {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => t,
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL => GgmlType::Q8_0,
        GgmlType::Q4_1 | GgmlType::Q5_1 => GgmlType::Q8_1,
        GgmlType::Q2_K
        | GgmlType::Q3_K
        | GgmlType::Q4_K
        | GgmlType::Q5_K
        | GgmlType::Q6_K
        | GgmlType::IQ4_XS => GgmlType::Q8_K,
        _ => panic!("no CPU kernel for ggml type {t}"),
    }
}

/// Bytes of one row of `k` elements of type `t`. Panics if `k` is not a multiple of the block
/// size.
pub fn row_bytes(t: GgmlType, k: usize) -> usize {
    let block = t.block_size() as usize;
    assert!(
        k % block == 0,
        "{k} elements is not a multiple of the {t} block size {block}"
    );
    k / block * t.type_size() as usize
}

/// ggml's `to_float` for `t`: decodes `dst.len()` values from the whole blocks at the start of
/// `src`. Bit-identical to ggml's `dequantize_row_*` (and gguf-py's `dequantize`); Q8_1 and
/// Q8_K (activation types) are accepted too.
///
/// Panics if `t` is not supported, `dst.len()` is not a multiple of the block size, or `src`
/// is shorter than `row_bytes(t, dst.len())`.
pub fn dequantize_row(t: GgmlType, src: &[u8], dst: &mut [f32]) {
    let n = row_bytes(t, dst.len());
    assert!(
        src.len() >= n,
        "{t} row of {} values needs {n} bytes, got {}",
        dst.len(),
        src.len()
    );
    let src = &src[..n];
    let f: fn(&[u8], &mut [f32]) = match t {
        GgmlType::F32 => dequant::f32_row,
        GgmlType::F16 => dequant::f16_row,
        GgmlType::BF16 => dequant::bf16_row,
        GgmlType::Q4_0 => dequant::q4_0,
        GgmlType::Q4_1 => dequant::q4_1,
        GgmlType::Q5_0 => dequant::q5_0,
        GgmlType::Q5_1 => dequant::q5_1,
        GgmlType::Q8_0 => dequant::q8_0,
        GgmlType::Q8_1 => dequant::q8_1,
        GgmlType::Q2_K => dequant::q2_k,
        GgmlType::Q3_K => dequant::q3_k,
        GgmlType::Q4_K => dequant::q4_k,
        GgmlType::Q5_K => dequant::q5_k,
        GgmlType::Q6_K => dequant::q6_k,
        GgmlType::Q8_K => dequant::q8_k,
        GgmlType::IQ4_NL => dequant::iq4_nl,
        GgmlType::IQ4_XS => dequant::iq4_xs,
        _ => panic!("no CPU dequantization for ggml type {t}"),
    };
    f(src, dst);
}

/// Converts one f32 row into `vt`, one of the vec_dot types (F32, F16, BF16, Q8_0, Q8_1,
/// Q8_K), bit-exact with the `from_float` upstream's CPU backend runs on x86-64 (see
/// `quantize.rs`). `dst` must hold at least `row_bytes(vt, x.len())` bytes.
pub fn quantize_row(vt: GgmlType, x: &[f32], dst: &mut [u8]) {
    let n = row_bytes(vt, x.len());
    assert!(
        dst.len() >= n,
        "{vt} row of {} values needs {n} bytes",
        x.len()
    );
    let dst = &mut dst[..n];
    match vt {
        #[cfg(target_arch = "x86_64")]
        GgmlType::Q8_0 | GgmlType::Q8_1 if x86::quantize_q8(x, dst, vt == GgmlType::Q8_1) => {}
        #[cfg(target_arch = "x86_64")]
        GgmlType::F16 if x86::convert_f16(x, dst) => {}
        _ => quantize_row_scalar(vt, x, dst),
    }
}

/// The types a KV cache can store here: F32, F16, BF16, Q8_0, Q4_0, Q4_1.
pub fn is_kv_cache_type(t: GgmlType) -> bool {
    matches!(
        t,
        GgmlType::F32
            | GgmlType::F16
            | GgmlType::BF16
            | GgmlType::Q8_0
            | GgmlType::Q4_0
            | GgmlType::Q4_1
    )
}

/// Stores one f32 row as type `t` the way the CPU backend's SET_ROWS does (its `from_float`):
/// [`quantize_row`] for F32/F16/BF16/Q8_0, the reference quantizers for Q4_0/Q4_1. Panics for
/// another type (see [`is_kv_cache_type`]).
pub fn store_row(t: GgmlType, x: &[f32], dst: &mut [u8]) {
    match t {
        GgmlType::Q4_0 | GgmlType::Q4_1 => {
            let n = row_bytes(t, x.len());
            let dst = &mut dst[..n];
            if t == GgmlType::Q4_0 {
                quantize::q4_0(x, dst)
            } else {
                quantize::q4_1(x, dst)
            }
        }
        _ => quantize_row(t, x, dst),
    }
}

/// [`quantize_row`] with the scalar reference only (the SIMD quantizers are tested against it,
/// bit for bit).
pub fn quantize_row_scalar(vt: GgmlType, x: &[f32], dst: &mut [u8]) {
    let n = row_bytes(vt, x.len());
    assert!(
        dst.len() >= n,
        "{vt} row of {} values needs {n} bytes",
        x.len()
    );
    let dst = &mut dst[..n];
    match vt {
        GgmlType::F32 => quantize::f32_row(x, dst),
        GgmlType::F16 => quantize::f16_row(x, dst),
        GgmlType::BF16 => quantize::bf16_row(x, dst),
        GgmlType::Q8_0 => quantize::q8_0(x, dst),
        GgmlType::Q8_1 => quantize::q8_1(x, dst),
        GgmlType::Q8_K => quantize::q8_k(x, dst),
        _ => panic!("{vt} is not a vec_dot type"),
    }
}

/// A dot product of `k` elements: a weight row of type `t` with an activation row already in
/// `vec_dot_type(t)`, both as bytes.
pub type DotFn = fn(k: usize, w: &[u8], x: &[u8]) -> f32;

/// The scalar reference dot product for weight type `t` (ggml's generic code).
pub fn scalar_dot_fn(t: GgmlType) -> DotFn {
    match t {
        GgmlType::F32 => dot_scalar::f32,
        GgmlType::F16 => dot_scalar::f16,
        GgmlType::BF16 => dot_scalar::bf16,
        GgmlType::Q4_0 => dot_scalar::q4_0,
        GgmlType::Q4_1 => dot_scalar::q4_1,
        GgmlType::Q5_0 => dot_scalar::q5_0,
        GgmlType::Q5_1 => dot_scalar::q5_1,
        GgmlType::Q8_0 => dot_scalar::q8_0,
        GgmlType::Q2_K => dot_scalar::q2_k,
        GgmlType::Q3_K => dot_scalar::q3_k,
        GgmlType::Q4_K => dot_scalar::q4_k,
        GgmlType::Q5_K => dot_scalar::q5_k,
        GgmlType::Q6_K => dot_scalar::q6_k,
        GgmlType::IQ4_NL => dot_scalar::iq4_nl,
        GgmlType::IQ4_XS => dot_scalar::iq4_xs,
        _ => panic!("no CPU kernel for ggml type {t}"),
    }
}

/// The fastest dot product for `t` on this machine: the SIMD one when the CPU has it (checked
/// once), else the scalar reference.
pub fn dot_fn(t: GgmlType) -> DotFn {
    #[cfg(target_arch = "x86_64")]
    if let Some(f) = x86::dot_fn(t) {
        return f;
    }
    scalar_dot_fn(t)
}

/// The dot product upstream runs for a product with one activation row (ggml's vec_dot,
/// where llamafile's sgemm declines): F16 and BF16 in `ggml_vec_dot_f16` / `_bf16`'s order,
/// IQ4_NL in `ggml_vec_dot_iq4_nl_q8_0`'s (two accumulators), where batched products run
/// tinyBLAS's order ([`dot_fn`]); for the other types the same as [`dot_fn`]. Without AVX2:
/// the scalar references (F16 in `ggml_vec_dot_f16`'s order, [`ops::dot_f16_ggml_by`]).
pub fn matvec_dot_fn(t: GgmlType) -> DotFn {
    #[cfg(target_arch = "x86_64")]
    if let Some(f) = x86::matvec_dot_fn(t) {
        return f;
    }
    if t == GgmlType::F16 {
        return f16_ggml_scalar;
    }
    scalar_dot_fn(t)
}

fn f16_ggml_scalar(k: usize, w: &[u8], x: &[u8]) -> f32 {
    let at = |b: &[u8], i: usize| half::f16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32();
    ops::dot_f16_ggml_by(k, |i| at(w, i), |i| at(x, i))
}

/// Most weight rows one tile call covers (several tiles of one shape stacked along the weight
/// rows: one call, one set of checks for a run of tiles).
pub const TILE_RUN_ROWS: usize = 16;

/// Most activation rows of a tile.
pub const TILE_COLS: usize = 4;

/// The outputs of one tile call: `out[c][r] = dot(w row r, x row c)`.
pub type TileOut = [[f32; TILE_RUN_ROWS]; TILE_COLS];

/// A batched-product kernel of `tiles` tiles of `rows` × `cols` outputs (see [`Tile`]) stacked
/// along the weight rows: `out[c][r] = dot(w row r, x row c)` for the weight rows
/// `0..tiles * rows` (`w_stride` bytes apart; at most [`TILE_RUN_ROWS`]) and the activation
/// rows `0..cols` (`x_stride` bytes apart). Reusing each loaded weight block for several
/// activation rows and each activation block for several weight rows is what makes batched
/// products (prompt processing, attention) faster than one dot at a time.
pub type TileFn = fn(
    k: usize,
    tiles: usize,
    w: &[u8],
    w_stride: usize,
    x: &[u8],
    x_stride: usize,
    out: &mut TileOut,
);

/// A tile kernel and its shape.
#[derive(Clone, Copy)]
pub struct Tile {
    pub rows: usize,
    pub cols: usize,
    pub f: TileFn,
}

/// The main tile kernel for `t` on this machine, if one exists (AVX2: 4 weight rows × 3
/// activation rows for F16, 4 × 2 for F32/BF16 and Q4_0/Q5_0/Q8_0/IQ4_NL, 2 × 4 for
/// Q4_1/Q5_1, 1 × 4 for Q4_K/Q6_K). Every tile computes each output with exactly the arithmetic of
/// [`dot_fn`], so results never depend on the batch size nor on the thread count.
pub fn tile_fn(t: GgmlType) -> Option<Tile> {
    #[cfg(target_arch = "x86_64")]
    return x86::tile_fn(t);
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = t;
        None
    }
}

/// The tile kernel of exactly `rows` × `cols` outputs for `t`, for the edges of a product
/// (shapes up to [`tile_fn`]'s main one in each direction), if one exists.
pub fn tile_shape(t: GgmlType, rows: usize, cols: usize) -> Option<Tile> {
    #[cfg(target_arch = "x86_64")]
    return x86::tile_shape(t, rows, cols);
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (t, rows, cols);
        None
    }
}

/// `a * b + c` rounded once (`f32::mul_add`), as one FMA instruction where the CPU has it.
/// Outside the `#[target_feature]` kernels `mul_add` compiles to a call of libm's `fmaf`
/// (through a GOT entry and a run-time dispatch of its own, per operation), which took a few
/// percent of decode in attention and RoPE; the fused result is the same either way.
#[inline(always)]
pub fn fmadd(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        let mut r = c;
        // SAFETY: the CPU has FMA (checked above, cached by std); the instruction reads and
        // writes only the three named registers.
        unsafe {
            std::arch::asm!(
                "vfmadd231ss {r}, {a}, {b}",
                r = inout(xmm_reg) r,
                a = in(xmm_reg) a,
                b = in(xmm_reg) b,
                options(pure, nomem, nostack, preserves_flags),
            )
        };
        return r;
    }
    a.mul_add(b, c)
}

/// Which SIMD level [`dot_fn`] uses: "avx2" or "scalar".
pub fn simd_level() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        return "avx2";
    }
    "scalar"
}

fn check_dot_args(t: GgmlType, k: usize, w: &[u8], x: &[u8]) {
    let (nw, nx) = (row_bytes(t, k), row_bytes(vec_dot_type(t), k));
    assert!(
        w.len() >= nw && x.len() >= nx,
        "{t} dot of {k}: {} / {} bytes",
        w.len(),
        x.len()
    );
}

/// One dot product with [`dot_fn`]: weight row `w` (type `t`) · activation row `x` (bytes in
/// `vec_dot_type(t)`), `k` elements.
pub fn vec_dot(t: GgmlType, k: usize, w: &[u8], x: &[u8]) -> f32 {
    check_dot_args(t, k, w, x);
    dot_fn(t)(k, w, x)
}

/// One dot product with [`matvec_dot_fn`] (upstream's `vec_dot`, as a matrix-vector product
/// runs it).
pub fn vec_dot_matvec(t: GgmlType, k: usize, w: &[u8], x: &[u8]) -> f32 {
    check_dot_args(t, k, w, x);
    matvec_dot_fn(t)(k, w, x)
}

/// As [`vec_dot`], with the scalar reference.
pub fn vec_dot_scalar(t: GgmlType, k: usize, w: &[u8], x: &[u8]) -> f32 {
    check_dot_args(t, k, w, x);
    scalar_dot_fn(t)(k, w, x)
}

/// Reusable buffers for `mul_mat`: after the first calls at the largest shapes, no allocation.
#[derive(Debug, Default)]
pub struct Scratch {
    activations: Vec<u8>,
    /// Per-block activation scales and sums for the repacked kernels.
    repack_meta: Vec<u32>,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch::default()
    }

    /// Bytes currently reserved (for tests of "no growth once warm").
    pub fn capacity(&self) -> usize {
        self.activations.capacity() + 4 * self.repack_meta.capacity()
    }
}

/// Activations converted to a weight type's vec_dot type: `m` rows of `k` elements (times
/// `n_batch` for [`mul_mat_batched`]), ready for any number of [`mul_mat_prepared`] calls with
/// weights of that type (for example the row pieces of one split weight).
#[derive(Debug)]
pub struct Activations<'a> {
    vec_dot_type: GgmlType,
    k: usize,
    m: usize,
    row_bytes: usize,
    bytes: &'a [u8],
}

impl Activations<'_> {
    pub fn vec_dot_type(&self) -> GgmlType {
        self.vec_dot_type
    }
    pub fn k(&self) -> usize {
        self.k
    }
    pub fn m(&self) -> usize {
        self.m
    }
    #[inline(always)]
    fn row(&self, j: usize) -> &[u8] {
        &self.bytes[j * self.row_bytes..(j + 1) * self.row_bytes]
    }
}

/// Wraps a pointer for disjoint writes from pool threads (matrix products, attention).
struct SharedOut<T>(*mut T);
// by hand: derived Copy would require `T: Copy`, and the pointer is Copy for any T
impl<T> Clone for SharedOut<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SharedOut<T> {}
// SAFETY: used only for writes to disjoint elements by different tasks, while the owning `&mut`
// borrow is held by the function that spawned the tasks and waits for them.
unsafe impl<T: Send> Sync for SharedOut<T> {}
// SAFETY: as above: the pointer is only used for those disjoint writes.
unsafe impl<T: Send> Send for SharedOut<T> {}

impl<T> SharedOut<T> {
    fn new(out: &mut [T]) -> SharedOut<T> {
        SharedOut(out.as_mut_ptr())
    }
    /// The pointer (a method, so closures capture the whole `Sync` wrapper, not the field).
    fn ptr(&self) -> *mut T {
        self.0
    }
    /// `len` elements from `start`.
    ///
    /// # Safety
    /// The range lies within the wrapped buffer, which outlives the use, and no other
    /// thread reads or writes it meanwhile.
    unsafe fn slice<'a>(self, start: usize, len: usize) -> &'a mut [T] {
        // SAFETY: the caller's contract above
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}

/// Below this many values (of the output) a row-wise op runs on the calling thread: waking
/// the pool would cost more than the work (a decode step's rows).
const PAR_ROWS_MIN: usize = 8192;

/// Runs `f(first_row, rows, thread)` over `dst` cut into runs of whole rows of `row_len`
/// values, spread over `pool` when there is enough work (ggml splits its row-wise ops among
/// its threads likewise). Each row must be computed from its index and inputs alone, so the
/// result does not depend on the split. `thread` indexes per-thread scratch space as in
/// [`ThreadPool::parallel_for`].
pub fn for_row_runs<T: Send>(
    pool: &ThreadPool,
    dst: &mut [T],
    row_len: usize,
    f: &(dyn Fn(usize, &mut [T], usize) + Sync),
) {
    let n_rows = dst.len().checked_div(row_len).unwrap_or(0);
    let nth = pool.n_threads();
    if nth == 1 || n_rows < 2 || dst.len() < PAR_ROWS_MIN || dst.len() % row_len != 0 {
        f(0, dst, 0);
        return;
    }
    // a few runs per thread, so a thread the OS delays does not hold the others up
    let per = n_rows.div_ceil(nth * 4);
    let n_runs = n_rows.div_ceil(per);
    let out = SharedOut::new(dst);
    pool.parallel_for(n_runs, &|run, thread| {
        let first = run * per;
        let rows = per.min(n_rows - first);
        // SAFETY: run `run` covers rows first..first + rows of `dst`, disjoint from every
        // other run's and inside it (first + rows <= n_rows); `dst` stays mutably borrowed
        // until parallel_for returns.
        let chunk = unsafe { out.slice(first * row_len, rows * row_len) };
        f(first, chunk, thread);
    });
}

/// Converts `n` activation rows of `k` f32 (row `r` starts at `x[row_start(r)]`) into `vt`
/// in `scratch`, in parallel when there is enough work.
fn convert_rows<'a>(
    vt: GgmlType,
    x: &[f32],
    k: usize,
    n: usize,
    row_start: impl Fn(usize) -> usize + Sync,
    pool: &ThreadPool,
    scratch: &'a mut Scratch,
) -> &'a [u8] {
    let row = row_bytes(vt, k);
    let total = row * n;
    if scratch.activations.len() < total {
        scratch.activations.resize(total, 0);
    }
    let buf = &mut scratch.activations[..total];
    for_row_runs(pool, buf, row, &|first, out, _| {
        for (i, out) in out.chunks_exact_mut(row.max(1)).enumerate() {
            let r = first + i;
            quantize_row(vt, &x[row_start(r)..row_start(r) + k], out);
        }
    });
    &scratch.activations[..total]
}

/// Converts `m` rows of `k` f32 (`x`, row-major) into `vec_dot_type(t)` for weights of type
/// `t`, in `scratch` (F32 weights borrow `x` as is). Rows are converted in parallel on `pool`.
pub fn prepare_activations<'a>(
    t: GgmlType,
    x: &'a [f32],
    k: usize,
    m: usize,
    pool: &ThreadPool,
    scratch: &'a mut Scratch,
) -> Activations<'a> {
    let vt = vec_dot_type(t);
    let row = row_bytes(vt, k);
    assert!(
        x.len() >= k * m,
        "activations: {} values for {m} rows of {k}",
        x.len()
    );
    #[cfg(target_endian = "little")]
    if vt == GgmlType::F32 {
        // SAFETY: f32 has no padding or invalid bit patterns as bytes, u8 has alignment 1, and
        // the byte slice covers exactly the first k*m floats of `x`, borrowed for 'a. On a
        // little-endian target the bytes are the little-endian encoding the kernels read.
        let bytes = unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<u8>(), k * m * 4) };
        return Activations {
            vec_dot_type: vt,
            k,
            m,
            row_bytes: row,
            bytes,
        };
    }
    let bytes = convert_rows(vt, x, k, m, |r| r * k, pool, scratch);
    Activations {
        vec_dot_type: vt,
        k,
        m,
        row_bytes: row,
        bytes,
    }
}

/// The [`Activations`] [`prepare_activations`] left in `scratch` for the same arguments
/// (after a repacked product adjusted some rows in place).
fn prepare_activations_done<'a>(
    t: GgmlType,
    x: &'a [f32],
    k: usize,
    m: usize,
    scratch: &'a Scratch,
) -> Activations<'a> {
    let vt = vec_dot_type(t);
    let row = row_bytes(vt, k);
    let _ = x;
    Activations {
        vec_dot_type: vt,
        k,
        m,
        row_bytes: row,
        bytes: &scratch.activations[..row * m],
    }
}

/// ggml's MUL_MAT for one 2-D weight: `w` holds `n_rows` rows of `k` elements of type `t`
/// (ggml layout, row stride `row_bytes(t, k)`), `x` holds `m` f32 rows of `k`, and
/// `dst[j * n_rows + i] = dot(w row i, x row j)`.
///
/// Activations are first converted to `vec_dot_type(t)` as ggml does, so results match ggml's
/// CPU backend closely. Panics on inconsistent sizes or an unsupported type.
#[allow(clippy::too_many_arguments)]
pub fn mul_mat(
    t: GgmlType,
    w: &[u8],
    n_rows: usize,
    k: usize,
    x: &[f32],
    m: usize,
    dst: &mut [f32],
    pool: &ThreadPool,
    scratch: &mut Scratch,
) {
    mul_mat_rows(t, w, n_rows, k, x, m, dst, n_rows, 0, pool, scratch);
}

/// [`mul_mat`] for a piece of a weight split by rows: writes
/// `dst[j * dst_stride + dst_row_offset + i]` for `i` in `0..n_rows`, `j` in `0..m`.
/// To convert the activations once for several pieces, use [`prepare_activations`] and
/// [`mul_mat_prepared`].
#[allow(clippy::too_many_arguments)]
pub fn mul_mat_rows(
    t: GgmlType,
    w: &[u8],
    n_rows: usize,
    k: usize,
    x: &[f32],
    m: usize,
    dst: &mut [f32],
    dst_stride: usize,
    dst_row_offset: usize,
    pool: &ThreadPool,
    scratch: &mut Scratch,
) {
    let act = prepare_activations(t, x, k, m, pool, scratch);
    mul_mat_prepared(t, w, n_rows, &act, dst, dst_stride, dst_row_offset, pool);
}

/// The weight rows (`n_rows`) times activation rows (`act.m()`) product of [`mul_mat_rows`],
/// with activations already converted. `act` must come from [`prepare_activations`] for the
/// same `t`.
#[allow(clippy::too_many_arguments)]
pub fn mul_mat_prepared(
    t: GgmlType,
    w: &[u8],
    n_rows: usize,
    act: &Activations<'_>,
    dst: &mut [f32],
    dst_stride: usize,
    dst_row_offset: usize,
    pool: &ThreadPool,
) {
    assert_eq!(
        act.vec_dot_type,
        vec_dot_type(t),
        "activations prepared for another type"
    );
    let w_row = row_bytes(t, act.k);
    let layout = BatchedLayout {
        n_rows,
        k: act.k,
        m: act.m,
        n_batch: 1,
        n_w_batch: 1,
        w_row_stride: w_row,
        w_batch_stride: 0,
        x_row_stride: act.k,
        x_batch_stride: 0,
        dst_row_stride: dst_stride,
        dst_batch_stride: 0,
    };
    assert!(
        dst_row_offset + n_rows <= dst_stride || act.m <= 1,
        "dst rows out of the stride"
    );
    let end = dst.len();
    let dst = &mut dst[dst_row_offset.min(end)..];
    run_mul_mat(t, w, act, &layout, dst, pool);
}

/// Shapes and strides of ggml's MUL_MAT over a batch of 2-D products (its dims 2 and 3
/// flattened): for `b` in `0..n_batch`, `j` in `0..m`, `i` in `0..n_rows`,
/// `dst[b * dst_batch_stride + j * dst_row_stride + i] = dot(W[b / (n_batch / n_w_batch)] row i,
/// X[b] row j)`, where weight batch `wb` row `i` starts at byte `wb * w_batch_stride +
/// i * w_row_stride` of `w`, and activation row `j` of batch `b` at element
/// `b * x_batch_stride + j * x_row_stride` of `x`. The weight batches are broadcast as ggml
/// does (grouped-query attention: several query heads share one KV head). Strides let
/// attention read the KV cache and permuted Q in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchedLayout {
    pub n_rows: usize,
    pub k: usize,
    pub m: usize,
    pub n_batch: usize,
    pub n_w_batch: usize,
    /// Bytes.
    pub w_row_stride: usize,
    /// Bytes.
    pub w_batch_stride: usize,
    /// f32 elements.
    pub x_row_stride: usize,
    /// f32 elements.
    pub x_batch_stride: usize,
    /// f32 elements; at least `n_rows` when `m > 1`.
    pub dst_row_stride: usize,
    /// f32 elements; past the last row of the previous batch when `n_batch > 1`.
    pub dst_batch_stride: usize,
}

/// ggml's MUL_MAT over a batch of strided 2-D products (see [`BatchedLayout`]), in one
/// parallel job: used for attention (K·Q and V·softmax over all heads at once), with `t` F32
/// or F16 (the KV cache) or any supported weight type.
pub fn mul_mat_batched(
    t: GgmlType,
    w: &[u8],
    x: &[f32],
    layout: &BatchedLayout,
    dst: &mut [f32],
    pool: &ThreadPool,
    scratch: &mut Scratch,
) {
    let l = *layout;
    if l.n_rows == 0 || l.m == 0 || l.n_batch == 0 {
        return;
    }
    let row_start = |r: usize| (r / l.m) * l.x_batch_stride + (r % l.m) * l.x_row_stride;
    let last = row_start(l.n_batch * l.m - 1);
    assert!(
        last + l.k <= x.len(),
        "activations: {} values, layout needs {}",
        x.len(),
        last + l.k
    );
    let vt = vec_dot_type(t);
    let bytes = convert_rows(vt, x, l.k, l.n_batch * l.m, row_start, pool, scratch);
    let act = Activations {
        vec_dot_type: vt,
        k: l.k,
        m: l.m,
        row_bytes: row_bytes(vt, l.k),
        bytes,
    };
    run_mul_mat(t, w, &act, &l, dst, pool);
}

/// Rows per chunk as ggml: 16, or 64 for a matrix-vector product.
fn chunk_rows(cols: usize) -> usize {
    if cols == 1 {
        64
    } else {
        16
    }
}

/// The threaded product over converted activations (`act` holds `n_batch * m` rows, batch-major).
fn run_mul_mat(
    t: GgmlType,
    w: &[u8],
    act: &Activations<'_>,
    l: &BatchedLayout,
    dst: &mut [f32],
    pool: &ThreadPool,
) {
    let BatchedLayout {
        n_rows,
        k,
        m,
        n_batch,
        n_w_batch,
        ..
    } = *l;
    if n_rows == 0 || m == 0 || n_batch == 0 {
        return;
    }
    assert!(
        n_w_batch > 0 && n_batch % n_w_batch == 0,
        "{n_batch} batches over {n_w_batch} weights"
    );
    let w_row = row_bytes(t, k);
    let w_end = (n_w_batch - 1) * l.w_batch_stride + (n_rows - 1) * l.w_row_stride + w_row;
    assert!(
        w.len() >= w_end,
        "{t} weight: {} bytes, layout needs {w_end}",
        w.len()
    );
    assert!(m == 1 || l.dst_row_stride >= n_rows, "dst rows overlap");
    let batch_extent = (m - 1) * l.dst_row_stride + n_rows;
    assert!(
        n_batch == 1 || l.dst_batch_stride >= batch_extent,
        "dst batches overlap"
    );
    let d_end = (n_batch - 1) * l.dst_batch_stride + batch_extent;
    assert!(
        dst.len() >= d_end,
        "dst: {} values, layout needs {d_end}",
        dst.len()
    );
    assert!(
        act.bytes.len() >= n_batch * m * act.row_bytes,
        "activations too short"
    );
    // upstream hands products with several activation rows to llamafile's sgemm and those
    // with one to the type's vec_dot, whose order differs for F16, BF16 and IQ4_NL
    let dot = if m == 1 { matvec_dot_fn(t) } else { dot_fn(t) };
    // one activation column in all: the weights stream through once (see `prefetch_ahead`)
    let stream = n_batch * m == 1 && WEIGHT_PREFETCH.load(std::sync::atomic::Ordering::Relaxed);
    let broadcast = n_batch / n_w_batch;

    // ggml's split: chunks of weight rows x activation columns (all batches' columns in a row)
    // claimed from a counter; with fewer than four chunks per thread, one chunk per thread
    // along the longer side. Chunk edges are multiples of the tile shape, so which outputs a
    // tile computes depends on their position only, never on the thread count.
    let cols = n_batch * m;
    // tiles compute with dot_fn's arithmetic: not for one activation row per batch, where the
    // mat-vec order of `matvec_dot_fn` applies
    let tile = tile_fn(t).filter(|_| cols >= 2 && m >= 2);
    let (ra, ca) = tile.map_or((1, 1), |t| (t.rows, t.cols));
    // kernels[r][c]: the r x c tile for the edges (r <= ra, c <= ca); 1 x 1 is a plain dot
    let mut kernels: [[Option<TileFn>; 5]; 5] = [[None; 5]; 5];
    if tile.is_some() {
        for (r, row) in kernels.iter_mut().enumerate().take(ra + 1).skip(1) {
            for (c, k) in row.iter_mut().enumerate().take(ca + 1).skip(1) {
                if (r, c) != (1, 1) {
                    *k = tile_shape(t, r, c).map(|k| k.f);
                }
            }
        }
    }
    let nth = pool.n_threads();
    let chunk = chunk_rows(cols);
    let (mut nchunk0, mut nchunk1) = (n_rows.div_ceil(chunk), cols.div_ceil(chunk));
    if nchunk0 * nchunk1 < nth * 4 {
        if n_rows > cols {
            (nchunk0, nchunk1) = (nth.min(n_rows), 1);
        } else {
            (nchunk0, nchunk1) = (1, nth.min(cols));
        }
    }
    let dr0 = n_rows.div_ceil(nchunk0).next_multiple_of(ra);
    let dr1 = cols.div_ceil(nchunk1).next_multiple_of(ca);
    let (nchunk0, nchunk1) = (n_rows.div_ceil(dr0), cols.div_ceil(dr1));
    let out = SharedOut::new(dst);
    // Per activation column: where its outputs start in dst, where its weight batch starts in
    // w, and its index in its batch.
    let place = |col: usize| {
        let (b, j) = (col / m, col % m);
        (
            b * l.dst_batch_stride + j * l.dst_row_stride,
            (b / broadcast) * l.w_batch_stride,
            j,
        )
    };
    // The outputs of column `col` for weight rows `rows`, one dot product each.
    let singles = |col: usize, rows: std::ops::Range<usize>| {
        let (d_base, w_base, _) = place(col);
        let xr = act.row(col);
        for i in rows {
            let at = w_base + i * l.w_row_stride;
            if stream {
                prefetch_ahead(w, at, w_row, l.w_row_stride);
            }
            let v = dot(k, &w[at..at + w_row], xr);
            // SAFETY: (col, i) lies in exactly one task's chunk, and the layout asserts above
            // make (col, i) -> index injective and in bounds, so each element is written once by
            // one thread; `dst` stays mutably borrowed until parallel_for returns.
            unsafe { *out.ptr().add(d_base + i) = v };
        }
    };
    // Blocks of about 16 x 16 outputs (multiples of the tile shape): their weight and
    // activation rows stay in L1 while the tiles sweep them. A block's rows are one run of
    // tiles (one kernel call per column group).
    let (block_rows, block_cols) = ((TILE_RUN_ROWS / ra) * ra, 16usize.next_multiple_of(ca));
    const BLOCK_COLS_MAX: usize = 16 + TILE_COLS;
    debug_assert!(block_cols <= BLOCK_COLS_MAX);
    // Consecutive tasks share the larger operand's chunk and sweep the smaller one, which stays
    // in cache: a weight larger than the cache is then read from memory once, not once per
    // column chunk (tinyBLAS walks the activations inside a row group likewise). The order
    // decides which thread computes an output, never how, so the results are unchanged.
    let weight_bytes = n_w_batch * n_rows * w_row;
    let columns_fastest = weight_bytes > cols * act.row_bytes;
    let run = |task: usize, _thread: usize| {
        let (c0, c1) = if columns_fastest {
            (task / nchunk1, task % nchunk1)
        } else {
            (task % nchunk0, task / nchunk0)
        };
        let (r0, r1) = (c0 * dr0, c1 * dr1);
        let (r0_end, r1_end) = ((r0 + dr0).min(n_rows), (r1 + dr1).min(cols));
        for block1 in (r1..r1_end).step_by(block_cols) {
            let cols_end = (block1 + block_cols).min(r1_end);
            if tile.is_none() {
                for block0 in (r0..r0_end).step_by(block_rows) {
                    let rows_end = (block0 + block_rows).min(r0_end);
                    for col in block1..cols_end {
                        singles(col, block0..rows_end);
                    }
                }
                continue;
            }
            // the block's columns placed once (divisions), not once per row block
            let mut places = [(0usize, 0usize, 0usize); BLOCK_COLS_MAX];
            for (c, p) in places.iter_mut().enumerate().take(cols_end - block1) {
                *p = place(block1 + c);
            }
            let mut vals: TileOut = [[0f32; TILE_RUN_ROWS]; TILE_COLS];
            for block0 in (r0..r0_end).step_by(block_rows) {
                let rows_end = (block0 + block_rows).min(r0_end);
                let mut col = block1;
                while col < cols_end {
                    // up to ca columns of one batch (one weight matrix)
                    let (_, w_base, j) = places[col - block1];
                    let cw = ca.min(cols_end - col).min(m - j);
                    let x = &act.bytes[col * act.row_bytes..];
                    let mut i = block0;
                    while i < rows_end {
                        // the whole tiles of the row block in one call, then the edge tile
                        let (rw, tiles) = match (rows_end - i) / ra {
                            0 => (rows_end - i, 1),
                            n => (ra, n),
                        };
                        let Some(f) = kernels[rw][cw] else {
                            for c in 0..cw {
                                singles(col + c, i..i + rw);
                            }
                            i += rw;
                            continue;
                        };
                        let wr = &w[w_base + i * l.w_row_stride..];
                        f(k, tiles, wr, l.w_row_stride, x, act.row_bytes, &mut vals);
                        let n = rw * tiles;
                        for (c, v) in vals.iter().enumerate().take(cw) {
                            let d_base = places[col - block1 + c].0;
                            // SAFETY: as in `singles`: (col + c, i..i + n) is in this chunk,
                            // so these n outputs are this task's alone and in bounds.
                            let dst = unsafe { out.slice(d_base + i, n) };
                            if n == TILE_RUN_ROWS {
                                // a fixed-size copy: vector moves, not a memmove call
                                dst.copy_from_slice(&v[..TILE_RUN_ROWS]);
                            } else {
                                dst.copy_from_slice(&v[..n]);
                            }
                        }
                        i += n;
                    }
                    col += cw;
                }
            }
        }
    };
    pool.parallel_for(nchunk0 * nchunk1, &run);
}

/// How far ahead of the weight row being read a matrix-vector product asks the CPU to fetch
/// (at least one row). The weights stream through once per token, and the hardware
/// prefetchers stop at every 4 KiB page, where a row often starts. `bench_kernels hint`
/// measures it (README, "Weight prefetch": F16, Q8_0 and Q6_K mat-vecs 8–33% faster on the
/// build machine); 8 or 16 KiB ahead gained less, hinting only a row's first lines lost.
/// Repacked weights (8 interleaved rows, read in one run) are not hinted: −3% there.
const PREFETCH_AHEAD: usize = 4096;

static WEIGHT_PREFETCH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Turns the matrix-vector products' prefetch hint (see `PREFETCH_AHEAD`) on or off for the
/// whole process; on by default. For measuring what it gains (`examples/bench_kernels.rs`
/// `hint`); results are the same either way.
pub fn set_weight_prefetch(on: bool) {
    WEIGHT_PREFETCH.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Hints the bytes of the weight row `PREFETCH_AHEAD` (or one row) past the row at `at`
/// (`row` bytes, rows `stride` apart) into the cache: the product streams its weights once,
/// so the next ones can be on their way while this one is multiplied. Nothing past `w`.
#[inline(always)]
fn prefetch_ahead(w: &[u8], at: usize, row: usize, stride: usize) {
    let ahead = at + PREFETCH_AHEAD.max(stride);
    if let Some(bytes) = w.get(ahead..ahead + row) {
        #[cfg(target_arch = "x86_64")]
        x86::prefetch(bytes);
        #[cfg(not(target_arch = "x86_64"))]
        let _ = bytes;
    }
}
