//! Matrix products (ggml's MUL_MAT on the CPU): activations converted once into the weight
//! type's vec_dot type, the output cut into chunks of rows × columns that the pool's threads
//! claim from an atomic counter, tiles for batched products, one dot at a time otherwise.

use super::dispatch::*;
use super::pool::{for_row_runs, SharedOut, ThreadPool};
use super::type_traits::*;
use crate::gguf::GgmlType;

/// Reusable buffers for `mul_mat`: after the first calls at the largest shapes, no allocation.
#[derive(Debug, Default)]
pub struct Scratch {
    pub(super) activations: Vec<u8>,
    /// Per-block activation scales and sums for the repacked kernels.
    pub(super) repack_meta: Vec<u32>,
    /// MUL_MAT_ID: the fast experts' activation rows gathered, their block scales and sums.
    pub(super) id_gather: Vec<u8>,
    pub(super) id_dx: Vec<f32>,
    pub(super) id_sx: Vec<i32>,
    /// MUL_MAT_ID, min types (Q4_1, Q5_1): the gathered rows' block sums `s_x`.
    pub(super) id_sm: Vec<f32>,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch::default()
    }

    /// Bytes currently reserved (for tests of "no growth once warm").
    pub fn capacity(&self) -> usize {
        self.activations.capacity()
            + 4 * self.repack_meta.capacity()
            + self.id_gather.capacity()
            + 4 * (self.id_dx.capacity() + self.id_sx.capacity() + self.id_sm.capacity())
    }
}

/// Activations converted to a weight type's vec_dot type: `m` rows of `k` elements (times
/// `n_batch` for [`mul_mat_batched`]), ready for any number of [`mul_mat_prepared`] calls with
/// weights of that type (for example the row pieces of one split weight).
#[derive(Debug)]
pub struct Activations<'a> {
    pub(super) vec_dot_type: GgmlType,
    pub(super) k: usize,
    pub(super) m: usize,
    pub(super) row_bytes: usize,
    pub(super) bytes: &'a [u8],
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
    /// All rows' bytes, `row_bytes_len()` apart.
    pub(super) fn bytes_all(&self) -> &[u8] {
        self.bytes
    }
    /// Bytes of one converted row.
    pub(super) fn row_bytes_len(&self) -> usize {
        self.row_bytes
    }
    #[inline(always)]
    pub(super) fn row(&self, j: usize) -> &[u8] {
        &self.bytes[j * self.row_bytes..(j + 1) * self.row_bytes]
    }
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
pub(super) fn prepare_activations_done<'a>(
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
    if super::fast_float::takes(t, n_rows, m) {
        // the fast mode's float panel product (prompt processing): f32 activations as they
        // are, not upstream's order
        assert!(
            x.len() >= k * m,
            "activations: {} values for {m} rows of {k}",
            x.len()
        );
        let w_row = row_bytes(t, k);
        super::fast_float::mul_mat_float_fast(
            t,
            w,
            w_row,
            n_rows,
            k,
            x,
            m,
            dst,
            dst_stride,
            dst_row_offset,
            pool,
        );
        return;
    }
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
    if super::fast_gemm::takes(t, n_rows, act.m) {
        // the fast mode's batched kernels (prompt processing), not upstream's order
        let w = super::fast_gemm::FastWeight::Plain {
            t,
            bytes: w,
            row_stride: w_row,
        };
        super::fast_gemm::mul_mat_fast(
            w,
            n_rows,
            act.k,
            act.bytes,
            act.row_bytes,
            act.m,
            dst,
            dst_stride,
            dst_row_offset,
            pool,
        );
        return;
    }
    if let Some(layout) =
        super::fast_gemm::k_layout(t).filter(|_| super::fast_gemm::takes_k(t, n_rows, act.k, act.m))
    {
        // the fast mode's K-quant group kernels (prompt processing), not upstream's order
        let w = super::fast_gemm::FastWeight::KRows {
            layout,
            bytes: w,
            row_stride: w_row,
        };
        super::fast_gemm::mul_mat_fast(
            w,
            n_rows,
            act.k,
            act.bytes,
            act.row_bytes,
            act.m,
            dst,
            dst_stride,
            dst_row_offset,
            pool,
        );
        return;
    }
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
    // with one to the type's vec_dot, whose order differs for F16, BF16 and IQ4_NL; K-quant
    // products with 8 rows or more per batch to its tiled matmul (`dot_tiled.rs`)
    let tiled = super::dot_tiled::takes_tiled(t, m);
    let dot = match tiled_dot_fn(t) {
        Some(f) if tiled => f,
        _ if m == 1 => matvec_dot_fn(t),
        _ => dot_fn(t),
    };
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
    let tile = if tiled {
        tiled_tile_shape(t, 1, TILE_COLS)
    } else {
        tile_fn(t).filter(|_| cols >= 2 && m >= 2)
    };
    let (ra, ca) = tile.map_or((1, 1), |t| (t.rows, t.cols));
    // kernels[r][c]: the r x c tile for the edges (r <= ra, c <= ca); 1 x 1 is a plain dot
    let mut kernels: [[Option<TileFn>; 5]; 5] = [[None; 5]; 5];
    if tile.is_some() {
        for (r, row) in kernels.iter_mut().enumerate().take(ra + 1).skip(1) {
            for (c, k) in row.iter_mut().enumerate().take(ca + 1).skip(1) {
                if (r, c) != (1, 1) {
                    *k = if tiled {
                        tiled_tile_shape(t, r, c)
                    } else {
                        tile_shape(t, r, c)
                    }
                    .map(|k| k.f);
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
pub(super) fn prefetch_ahead(w: &[u8], at: usize, row: usize, stride: usize) {
    let ahead = at + PREFETCH_AHEAD.max(stride);
    if let Some(bytes) = w.get(ahead..ahead + row) {
        #[cfg(target_arch = "x86_64")]
        crate::kernels::cpu::x86::prefetch(bytes);
        #[cfg(not(target_arch = "x86_64"))]
        let _ = bytes;
    }
}
