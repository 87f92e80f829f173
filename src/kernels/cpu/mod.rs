//! CPU kernels: dequantization, activation quantization, per-type dot products and `mul_mat`,
//! following upstream's CPU backend (`ggml/src/ggml-cpu`) so results match it closely.
//!
//! A weight is a byte slice in ggml's layout (rows of `row_size(t, k)` bytes, any alignment:
//! mmap'd or owned storage is read in place). `mul_mat` quantizes the f32 activations once into
//! the weight type's vec_dot type ([`vec_dot_type`]), as ggml does, then splits the rows into
//! chunks that the pool's threads claim from an atomic counter. Each dot product has a scalar
//! reference ([`vec_dot_scalar`]) and, on x86-64 with AVX2+FMA+F16C detected at run time, a SIMD
//! version ([`vec_dot`] picks it).

mod blocks;
mod dequant;
mod dot_scalar;
mod pool;
mod quantize;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use pool::ThreadPool;

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

/// As [`vec_dot`], with the scalar reference.
pub fn vec_dot_scalar(t: GgmlType, k: usize, w: &[u8], x: &[u8]) -> f32 {
    check_dot_args(t, k, w, x);
    scalar_dot_fn(t)(k, w, x)
}

/// Reusable buffers for `mul_mat`: after the first calls at the largest shapes, no allocation.
#[derive(Debug, Default)]
pub struct Scratch {
    activations: Vec<u8>,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch::default()
    }

    /// Bytes currently reserved (for tests of "no growth once warm").
    pub fn capacity(&self) -> usize {
        self.activations.capacity()
    }
}

/// Activations converted to a weight type's vec_dot type: `m` rows of `k` elements, ready for
/// any number of [`mul_mat_prepared`] calls with weights of that type (for example the row
/// pieces of one split weight).
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
    fn row(&self, j: usize) -> &[u8] {
        &self.bytes[j * self.row_bytes..(j + 1) * self.row_bytes]
    }
}

/// Wraps a pointer for disjoint writes from pool threads.
#[derive(Clone, Copy)]
struct SharedOut<T>(*mut T);
// SAFETY: used only for writes to disjoint elements by different tasks, while the owning `&mut`
// borrow is held by the function that spawned the tasks and waits for them.
unsafe impl<T: Send> Sync for SharedOut<T> {}
unsafe impl<T: Send> Send for SharedOut<T> {}

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
    let total = row * m;
    if scratch.activations.len() < total {
        scratch.activations.resize(total, 0);
    }
    let buf = &mut scratch.activations[..total];
    if m <= 1 || k * m < 4096 {
        for (j, out) in buf.chunks_exact_mut(row.max(1)).enumerate().take(m) {
            quantize_row(vt, &x[j * k..(j + 1) * k], out);
        }
    } else {
        let out = SharedOut(buf.as_mut_ptr());
        pool.parallel_for(m, &|j, _| {
            let out = out;
            // SAFETY: task j writes only bytes j*row..(j+1)*row of `buf`, which is borrowed
            // mutably for this whole call; tasks have distinct j.
            let dst = unsafe { std::slice::from_raw_parts_mut(out.0.add(j * row), row) };
            quantize_row(vt, &x[j * k..(j + 1) * k], dst);
        });
    }
    Activations {
        vec_dot_type: vt,
        k,
        m,
        row_bytes: row,
        bytes: &scratch.activations[..total],
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

/// Rows per chunk as ggml: 16, or 64 for a matrix-vector product.
fn chunk_rows(m: usize) -> usize {
    if m == 1 {
        64
    } else {
        16
    }
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
    let (k, m) = (act.k, act.m);
    assert_eq!(
        act.vec_dot_type,
        vec_dot_type(t),
        "activations prepared for another type"
    );
    let w_row = row_bytes(t, k);
    assert!(
        w.len() >= n_rows * w_row,
        "{t} weight: {} bytes for {n_rows} rows of {k}",
        w.len()
    );
    if n_rows == 0 || m == 0 {
        return;
    }
    assert!(
        dst_row_offset + n_rows <= dst_stride,
        "dst rows out of the stride"
    );
    assert!(
        dst.len() >= (m - 1) * dst_stride + dst_row_offset + n_rows,
        "dst too small"
    );
    let dot = dot_fn(t);

    // ggml's split: chunks of rows x columns claimed from a counter; with fewer than four
    // chunks per thread, one chunk per thread along the longer side.
    let nth = pool.n_threads();
    let chunk = chunk_rows(m);
    let (mut nchunk0, mut nchunk1) = (n_rows.div_ceil(chunk), m.div_ceil(chunk));
    if nchunk0 * nchunk1 < nth * 4 {
        if n_rows > m {
            (nchunk0, nchunk1) = (nth.min(n_rows), 1);
        } else {
            (nchunk0, nchunk1) = (1, nth.min(m));
        }
    }
    let (dr0, dr1) = (n_rows.div_ceil(nchunk0), m.div_ceil(nchunk1));
    let out = SharedOut(dst.as_mut_ptr());
    let run = |task: usize, _thread: usize| {
        let out = out;
        let (c0, c1) = (task % nchunk0, task / nchunk0);
        let (r0, r1) = (c0 * dr0, c1 * dr1);
        let (r0_end, r1_end) = ((r0 + dr0).min(n_rows), (r1 + dr1).min(m));
        // 16x16 tiles: a few weight rows stay in L1 while the activation rows stream.
        for tile1 in (r1..r1_end).step_by(16) {
            for tile0 in (r0..r0_end).step_by(16) {
                for j in tile1..(tile1 + 16).min(r1_end) {
                    let xr = act.row(j);
                    for i in tile0..(tile0 + 16).min(r0_end) {
                        let v = dot(k, &w[i * w_row..(i + 1) * w_row], xr);
                        // SAFETY: (i, j) lies in exactly one task's chunk, so each element is
                        // written once; the index is in bounds by the asserts above, and `dst`
                        // stays mutably borrowed until parallel_for returns.
                        unsafe { *out.0.add(j * dst_stride + dst_row_offset + i) = v };
                    }
                }
            }
        }
    };
    pool.parallel_for(nchunk0 * nchunk1, &run);
}
