//! Tiles for batched products: several weight rows × several activation rows per call
//! (llamafile's tinyBLAS register tiles), each output with exactly the arithmetic of the
//! one-dot kernels.

use std::arch::x86_64::*;

use super::float::{load_bf16, load_f16, load_f32, scalar_bf16, scalar_f16, scalar_f32};
use super::iq::iq4_lookup;
use super::k_quants::{q4_k_cols, q6_k_cols};
use super::k_tiled::*;
use super::simd::{available, bits_32, dot_i8_i8, dot_u8_i8, hsum_f32x8, load256, nibbles_32};
use crate::gguf::GgmlType;
use crate::kernels::cpu::blocks::*;
use crate::kernels::cpu::type_traits::{Tile, TileFn, TileOut, TILE_COLS, TILE_RUN_ROWS};

/// The main tile shape for `t` (weight rows × activation rows per call), when this CPU has
/// AVX2 and tiles are written for `t`. Register tiles as llamafile's tinyBLAS on a 16-register
/// AVX2 machine: 4 × 2 for the Q8_0-activation types (its `tinyBLAS_Q0_AVX` `gemm4xN<2>`;
/// Q8_0's in hand-allocated registers), 4 × 3 for F16 (tinyBLAS's `gemm<4, 3>`, in
/// hand-allocated registers: compiled from the generic tile it spilled its 12 accumulators),
/// 4 × 2 for F32/BF16; Q4_1/Q5_1 (which upstream multiplies one dot at a time) 2 × 4; the
/// K-quants 1 × 4. Smaller shapes for the
/// edges come from [`tile_shape`].
pub fn tile_fn(t: GgmlType) -> Option<Tile> {
    let (rows, cols) = match t {
        GgmlType::F16 => (4, 3),
        GgmlType::F32 | GgmlType::BF16 => (4, 2),
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL => (4, 2),
        GgmlType::Q4_1 | GgmlType::Q5_1 => (2, 4),
        GgmlType::Q4_K | GgmlType::Q6_K => (1, 4),
        _ => return None,
    };
    tile_shape(t, rows, cols)
}

/// The tile kernel of exactly `rows` × `cols` outputs for `t` (each at most the main shape's,
/// see [`tile_fn`]), when this CPU has AVX2 and one exists.
pub fn tile_shape(t: GgmlType, rows: usize, cols: usize) -> Option<Tile> {
    if !available() {
        return None;
    }
    /// `$entry::<R, C>` for the requested shape (R, C in 1..=4).
    macro_rules! shapes {
        ($entry:ident) => {
            match (rows, cols) {
                (1, 1) => $entry::<1, 1> as TileFn,
                (1, 2) => $entry::<1, 2>,
                (1, 3) => $entry::<1, 3>,
                (1, 4) => $entry::<1, 4>,
                (2, 1) => $entry::<2, 1>,
                (2, 2) => $entry::<2, 2>,
                (2, 3) => $entry::<2, 3>,
                (2, 4) => $entry::<2, 4>,
                (3, 1) => $entry::<3, 1>,
                (3, 2) => $entry::<3, 2>,
                (3, 3) => $entry::<3, 3>,
                (3, 4) => $entry::<3, 4>,
                (4, 1) => $entry::<4, 1>,
                (4, 2) => $entry::<4, 2>,
                (4, 3) => $entry::<4, 3>,
                (4, 4) => $entry::<4, 4>,
                _ => return None,
            }
        };
    }
    let f = match t {
        GgmlType::F32 => shapes!(f32_tile),
        GgmlType::F16 => shapes!(f16_tile),
        GgmlType::BF16 => shapes!(bf16_tile),
        GgmlType::Q4_0 => shapes!(q4_0_tile),
        GgmlType::Q4_1 => shapes!(q4_1_tile),
        GgmlType::Q5_0 => shapes!(q5_0_tile),
        GgmlType::Q5_1 => shapes!(q5_1_tile),
        GgmlType::Q8_0 => shapes!(q8_0_tile),
        GgmlType::IQ4_NL => shapes!(iq4_nl_tile),
        GgmlType::Q4_K if rows == 1 => shapes!(q4_k_tile),
        GgmlType::Q6_K if rows == 1 => shapes!(q6_k_tile),
        _ => return None,
    };
    Some(Tile { rows, cols, f })
}

/// The tile of 1 × `cols` outputs (`cols` in 1..=4) in the float order of upstream's tiled
/// K-quant matmul (see `dot_tiled.rs`) for `t`, when this CPU has AVX2 and `t` is one of its
/// types. One weight row at a time: its block is unpacked once for the `cols` activation rows.
pub fn tiled_tile_shape(t: GgmlType, rows: usize, cols: usize) -> Option<Tile> {
    if !available() || rows != 1 {
        return None;
    }
    macro_rules! shapes {
        ($entry:ident) => {
            match cols {
                1 => $entry::<1, 1> as TileFn,
                2 => $entry::<1, 2>,
                3 => $entry::<1, 3>,
                4 => $entry::<1, 4>,
                _ => return None,
            }
        };
    }
    let f = match t {
        GgmlType::Q2_K => shapes!(q2_k_tiled_tile),
        GgmlType::Q3_K => shapes!(q3_k_tiled_tile),
        GgmlType::Q4_K => shapes!(q4_k_tiled_tile),
        GgmlType::Q5_K => shapes!(q5_k_tiled_tile),
        GgmlType::Q6_K => shapes!(q6_k_tiled_tile),
        GgmlType::IQ4_XS => shapes!(iq4_xs_tiled_tile),
        _ => return None,
    };
    Some(Tile { rows, cols, f })
}

/// Where a tile kernel puts its `R` × `C` outputs: the run's output columns, from weight row
/// `row0` of the run (written straight there: a copy through a small buffer stalled on
/// store forwarding).
struct TileDst<'a> {
    out: &'a mut TileOut,
    row0: usize,
}

impl TileDst<'_> {
    /// The output of weight row `r` and activation row `c` of this tile.
    #[inline(always)]
    fn set(&mut self, r: usize, c: usize, v: f32) {
        self.out[c][self.row0 + r] = v;
    }
}

/// Safe entry points of the tile kernels (`R` weight rows × `C` activation rows), for a run of
/// `tiles` tiles along the weight rows: check that every row the kernels read is inside the
/// slices, then call the kernel once per tile (a direct call; the checks and the dispatch
/// are paid once per run).
macro_rules! tile_entry {
    ($name:ident, $kernel:ident, $elems_per_block:expr, $w_bytes:expr, $x_bytes:expr) => {
        fn $name<const R: usize, const C: usize>(
            k: usize,
            tiles: usize,
            w: &[u8],
            w_stride: usize,
            x: &[u8],
            x_stride: usize,
            out: &mut TileOut,
        ) {
            let nb = k / $elems_per_block;
            let rows = tiles * R;
            assert!(
                tiles > 0
                    && rows <= TILE_RUN_ROWS
                    && C <= TILE_COLS
                    && w.len() >= (rows - 1) * w_stride + nb * $w_bytes
                    && x.len() >= (C - 1) * x_stride + nb * $x_bytes,
                "{tiles} tiles of {k}: {} / {} bytes",
                w.len(),
                x.len()
            );
            /// The run's tiles, one kernel call each, compiled with the kernel's features so
            /// the kernel inlines here (no call per tile).
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn run<const R: usize, const C: usize>(
                nb: usize,
                tiles: usize,
                w: *const u8,
                w_stride: usize,
                x: *const u8,
                x_stride: usize,
                out: &mut TileOut,
            ) {
                for t in 0..tiles {
                    let mut dst = TileDst {
                        out: &mut *out,
                        row0: t * R,
                    };
                    // SAFETY: as `run`'s caller guarantees for the whole run
                    unsafe {
                        $kernel::<R, C>(
                            nb,
                            w.add(t * R * w_stride),
                            w_stride,
                            x,
                            x_stride,
                            &mut dst,
                        )
                    };
                }
            }
            // SAFETY: reachable only through `tile_shape`, which hands it out when
            // `available()` saw AVX2, FMA and F16C; each kernel reads `nb` blocks of `R` weight
            // rows from row `t * R` (below `rows`) and of the `C` activation rows at the given
            // strides, all inside the slices as checked above, and writes its `R` × `C`
            // outputs at rows `t * R..` of `out` (bounds-checked).
            unsafe { run::<R, C>(nb, tiles, w.as_ptr(), w_stride, x.as_ptr(), x_stride, out) }
        }
    };
}

tile_entry!(f32_tile, f32_tile_avx2, 1, 4, 4);
tile_entry!(f16_tile, f16_tile_avx2, 1, 2, 2);
tile_entry!(bf16_tile, bf16_tile_avx2, 1, 2, 2);
tile_entry!(q4_0_tile, q4_0_tile_avx2, QK, Q4_0_BYTES, Q8_0_BYTES);
tile_entry!(q4_1_tile, q4_1_tile_avx2, QK, Q4_1_BYTES, Q8_1_BYTES);
tile_entry!(q8_0_tile, q8_0_tile_avx2, QK, Q8_0_BYTES, Q8_0_BYTES);
tile_entry!(q5_0_tile, q5_0_tile_avx2, QK, Q5_0_BYTES, Q8_0_BYTES);
tile_entry!(q5_1_tile, q5_1_tile_avx2, QK, Q5_1_BYTES, Q8_1_BYTES);
tile_entry!(iq4_nl_tile, iq4_nl_tile_avx2, QK, IQ4_NL_BYTES, Q8_0_BYTES);
tile_entry!(q4_k_tile, q4_k_tile_avx2, QK_K, Q4_K_BYTES, Q8_K_BYTES);
tile_entry!(q6_k_tile, q6_k_tile_avx2, QK_K, Q6_K_BYTES, Q8_K_BYTES);

tile_entry!(
    q2_k_tiled_tile,
    q2_k_tiled_tile_avx2,
    QK_K,
    Q2_K_BYTES,
    Q8_K_BYTES
);
tile_entry!(
    q3_k_tiled_tile,
    q3_k_tiled_tile_avx2,
    QK_K,
    Q3_K_BYTES,
    Q8_K_BYTES
);
tile_entry!(
    q4_k_tiled_tile,
    q4_k_tiled_tile_avx2,
    QK_K,
    Q4_K_BYTES,
    Q8_K_BYTES
);
tile_entry!(
    q5_k_tiled_tile,
    q5_k_tiled_tile_avx2,
    QK_K,
    Q5_K_BYTES,
    Q8_K_BYTES
);
tile_entry!(
    q6_k_tiled_tile,
    q6_k_tiled_tile_avx2,
    QK_K,
    Q6_K_BYTES,
    Q8_K_BYTES
);
tile_entry!(
    iq4_xs_tiled_tile,
    iq4_xs_tiled_tile_avx2,
    QK_K,
    IQ4_XS_BYTES,
    Q8_K_BYTES
);

/// A 1 × `C` tile from a `*_tiled_cols` kernel.
macro_rules! tiled_tile_kernel {
    ($name:ident, $cols:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $name<const R: usize, const C: usize>(
            nb: usize,
            w: *const u8,
            _ws: usize,
            x: *const u8,
            xs: usize,
            out: &mut TileDst<'_>,
        ) {
            let mut cols = [0f32; C];
            $cols::<C>(nb, w, x, xs, &mut cols);
            for (c, &v) in cols.iter().enumerate() {
                out.set(0, c, v);
            }
        }
    };
}

tiled_tile_kernel!(q2_k_tiled_tile_avx2, q2_k_tiled_cols);
tiled_tile_kernel!(q3_k_tiled_tile_avx2, q3_k_tiled_cols);
tiled_tile_kernel!(q4_k_tiled_tile_avx2, q4_k_tiled_cols);
tiled_tile_kernel!(q5_k_tiled_tile_avx2, q5_k_tiled_cols);
tiled_tile_kernel!(q6_k_tiled_tile_avx2, q6_k_tiled_cols);
tiled_tile_kernel!(iq4_xs_tiled_tile_avx2, iq4_xs_tiled_cols);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_tile_avx2<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    _ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    let mut cols = [0f32; C];
    q4_k_cols::<C>(nb, w, x, xs, &mut cols);
    for (c, &v) in cols.iter().enumerate() {
        out.set(0, c, v);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_tile_avx2<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    _ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    let mut cols = [0f32; C];
    q6_k_cols::<C>(nb, w, x, xs, &mut cols);
    for (c, &v) in cols.iter().enumerate() {
        out.set(0, c, v);
    }
}

/// `R` × `C` outputs of a float product (weight rows `ws` bytes apart, activation rows `xs`
/// apart): every 8-element step loads each operand row once and feeds `R · C` accumulators,
/// as tinyBLAS's `gemm_bloc`. Per output the arithmetic is [`float_cols`]'s (one 8-lane FMA
/// accumulator, ggml's horizontal sum, the scalar tail in order), so a tile equals the dot
/// products of its outputs bit for bit.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn float_tile<const R: usize, const C: usize>(
    n: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
    load: impl Fn(*const u8, usize) -> __m256,
    scalar: impl Fn(*const u8, usize) -> f32,
) {
    let mut acc = [[_mm256_setzero_ps(); R]; C];
    let mut i = 0;
    while i + 8 <= n {
        // keep the smaller side's vectors in registers (tinyBLAS's "help compiler" split)
        if R <= C {
            let a: [__m256; R] = std::array::from_fn(|r| load(w.add(r * ws), i));
            for (c, acc) in acc.iter_mut().enumerate() {
                let b = load(x.add(c * xs), i);
                for (acc, a) in acc.iter_mut().zip(&a) {
                    *acc = _mm256_fmadd_ps(*a, b, *acc);
                }
            }
        } else {
            let b: [__m256; C] = std::array::from_fn(|c| load(x.add(c * xs), i));
            for r in 0..R {
                let a = load(w.add(r * ws), i);
                for (acc, b) in acc.iter_mut().zip(&b) {
                    acc[r] = _mm256_fmadd_ps(a, *b, acc[r]);
                }
            }
        }
        i += 8;
    }
    float_tile_finish::<R, C>(&acc, i, n, w, ws, x, xs, out, scalar);
}

/// The end of a float tile: each accumulator's horizontal sum, then the scalar tail from
/// element `i` on, in order.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn float_tile_finish<const R: usize, const C: usize>(
    acc: &[[__m256; R]; C],
    i: usize,
    n: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
    scalar: impl Fn(*const u8, usize) -> f32,
) {
    for (c, acc) in acc.iter().enumerate() {
        for (r, acc) in acc.iter().enumerate() {
            let mut s = hsum_f32x8(*acc);
            for e in i..n {
                s += scalar(w.add(r * ws), e) * scalar(x.add(c * xs), e);
            }
            out.set(r, c, s);
        }
    }
}

/// The 4 × 3 F16 tile (the main shape, tinyBLAS's `gemm<4, 3>` on AVX2) with its registers
/// assigned by hand: [`float_tile`]'s operations in its order (so the same bits), which LLVM
/// could only compile with spilled accumulators (it measured slower than 4 × 2 that way).
/// Registers: ymm0–11 the accumulators (`acc[c][r]` in ymm`4c + r`), ymm12–14 the three
/// activation vectors of a step, ymm15 one weight vector.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_tile_4x3_asm(
    n: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    let mut acc = [[_mm256_setzero_ps(); 4]; 3];
    let steps = n / 8;
    if steps > 0 {
        let [[a0, a1, a2, a3], [a4, a5, a6, a7], [a8, a9, a10, a11]] = &mut acc;
        // SAFETY: the caller guarantees `n` f16 values in each of the 4 weight rows `ws` bytes
        // apart and the 3 activation rows `xs` bytes apart, and AVX2/FMA/F16C; the loop reads
        // the first `8 * steps` values of each row and writes only the registers named as
        // outputs or clobbers.
        std::arch::asm!(
            ".p2align 6",
            "2:",
            "vcvtph2ps ymm12, xmmword ptr [{x}]",
            "vcvtph2ps ymm13, xmmword ptr [{x} + {xs}]",
            "vcvtph2ps ymm14, xmmword ptr [{x} + {xs}*2]",
            "vcvtph2ps ymm15, xmmword ptr [{w}]",
            "vfmadd231ps ymm0, ymm15, ymm12",
            "vfmadd231ps ymm4, ymm15, ymm13",
            "vfmadd231ps ymm8, ymm15, ymm14",
            "vcvtph2ps ymm15, xmmword ptr [{w} + {ws}]",
            "vfmadd231ps ymm1, ymm15, ymm12",
            "vfmadd231ps ymm5, ymm15, ymm13",
            "vfmadd231ps ymm9, ymm15, ymm14",
            "vcvtph2ps ymm15, xmmword ptr [{w} + {ws}*2]",
            "vfmadd231ps ymm2, ymm15, ymm12",
            "vfmadd231ps ymm6, ymm15, ymm13",
            "vfmadd231ps ymm10, ymm15, ymm14",
            "vcvtph2ps ymm15, xmmword ptr [{w3}]",
            "vfmadd231ps ymm3, ymm15, ymm12",
            "vfmadd231ps ymm7, ymm15, ymm13",
            "vfmadd231ps ymm11, ymm15, ymm14",
            "add {w}, 16",
            "add {w3}, 16",
            "add {x}, 16",
            "dec {n}",
            "jnz 2b",
            w = inout(reg) w => _,
            w3 = inout(reg) w.add(3 * ws) => _,
            ws = in(reg) ws,
            x = inout(reg) x => _,
            xs = in(reg) xs,
            n = inout(reg) steps => _,
            inout("ymm0") *a0,
            inout("ymm1") *a1,
            inout("ymm2") *a2,
            inout("ymm3") *a3,
            inout("ymm4") *a4,
            inout("ymm5") *a5,
            inout("ymm6") *a6,
            inout("ymm7") *a7,
            inout("ymm8") *a8,
            inout("ymm9") *a9,
            inout("ymm10") *a10,
            inout("ymm11") *a11,
            out("ymm12") _,
            out("ymm13") _,
            out("ymm14") _,
            out("ymm15") _,
            options(nostack, readonly),
        );
    }
    let scalar = |p, i| scalar_f16(p, i);
    float_tile_finish::<4, 3>(&acc, 8 * steps, n, w, ws, x, xs, out, scalar);
}

/// `$name::<R, C>`: the float tile of [`float_tile`] for the element type that `$load` and
/// `$scalar` read; with `fast: $asm`, the 4 × 3 shape goes to that hand-allocated kernel.
macro_rules! float_tile_entry {
    ($name:ident, $load:ident, $scalar:ident $(, fast: $asm:ident)?) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $name<const R: usize, const C: usize>(
            n: usize,
            w: *const u8,
            ws: usize,
            x: *const u8,
            xs: usize,
            out: &mut TileDst<'_>,
        ) {
            $(
                if R == 4 && C == 3 {
                    return $asm(n, w, ws, x, xs, out);
                }
            )?
            float_tile::<R, C>(
                n,
                w,
                ws,
                x,
                xs,
                out,
                |p, i| $load(p, i),
                |p, i| $scalar(p, i),
            );
        }
    };
}

float_tile_entry!(f32_tile_avx2, load_f32, scalar_f32);
float_tile_entry!(f16_tile_avx2, load_f16, scalar_f16, fast: f16_tile_4x3_asm);
float_tile_entry!(bf16_tile_avx2, load_bf16, scalar_bf16);

/// Up to 4 f16 values `stride` bytes apart (the first `N`; the other lanes 0) as f32 lanes,
/// converted in one instruction.
#[inline(always)]
unsafe fn f16_lanes<const N: usize>(p: *const u8, stride: usize) -> __m128 {
    let h = |i: usize| {
        if i < N {
            i32::from(p.add(i * stride).cast::<u16>().read_unaligned())
        } else {
            0
        }
    };
    _mm_cvtph_ps(_mm_setr_epi32(
        h(0) | (h(1) << 16),
        h(2) | (h(3) << 16),
        0,
        0,
    ))
}

/// Lane `i` (0..4) of each 128-bit half of `v` in every lane of that half.
#[inline(always)]
unsafe fn lane256(v: __m256, i: usize) -> __m256 {
    match i {
        0 => _mm256_permute_ps::<0x00>(v),
        1 => _mm256_permute_ps::<0x55>(v),
        2 => _mm256_permute_ps::<0xAA>(v),
        _ => _mm256_permute_ps::<0xFF>(v),
    }
}

/// `R` × `C` outputs of a Q8_0-activation product (weight rows `ws` bytes apart, activation
/// rows `xs` apart): each weight block is unpacked once (`prepare`) and used for `C`
/// activation blocks (`dot`), as tinyBLAS_Q0_AVX's `gemm4xN`. Per output the arithmetic is
/// exactly the mat-vec kernel's ([`blocks_q8_0`]: `d_w · d_x` rounded to f32, one FMA into one
/// accumulator per block, blocks in order, ggml's horizontal sum), so results do not depend on
/// the tiling.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_q8_0<const R: usize, const C: usize, P: Copy>(
    nb: usize,
    w: *const u8,
    wbytes: usize,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
    prepare: impl Fn(*const u8) -> P,
    dot: impl Fn(P, *const u8) -> __m256i,
) {
    let mut acc = [[_mm256_setzero_ps(); R]; C];
    // the products d_w · d_x of one block, read back with broadcast loads: kept in memory
    // (`black_box`) so that they hold no vector register in the loop below, where the
    // R × C accumulators, one weight block, its |q| and the C activation blocks must fit
    // in the 16 registers of AVX2 (spilled accumulators cost 1.5× on a 4 × 2 tile)
    let mut dd = [[0f32; 4]; C];
    for ib in 0..nb {
        let wb = w.add(ib * wbytes);
        let xb = x.add(ib * Q8_0_BYTES);
        // the R weight scales and the C activation scales, one conversion each; one multiply
        // per column gives its R products (each rounds as `scale_q8_0`'s)
        let wd = f16_lanes::<R>(wb, ws);
        let xd = f16_lanes::<C>(xb, xs);
        for (c, dd) in dd.iter_mut().enumerate() {
            let xc = _mm256_castps256_ps128(lane256(_mm256_set_m128(xd, xd), c));
            _mm_storeu_ps(dd.as_mut_ptr(), _mm_mul_ps(wd, xc));
        }
        let dd = std::hint::black_box(&dd);
        for r in 0..R {
            let q = prepare(wb.add(r * ws));
            for (c, acc) in acc.iter_mut().enumerate() {
                let p = _mm256_cvtepi32_ps(dot(q, xb.add(c * xs)));
                acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&dd[c][r]), p, acc[r]);
            }
        }
    }
    for (c, acc) in acc.iter().enumerate() {
        for (r, acc) in acc.iter().enumerate() {
            out.set(r, c, hsum_f32x8(*acc));
        }
    }
}

/// Signed weight quants `q` against the Q8_0 activation block at `xb` (the sign trick of
/// [`dot_i8_i8`]; `|q|` is recomputed per use rather than kept: fewer live registers).
#[inline(always)]
unsafe fn signed_dot(q: __m256i, xb: *const u8) -> __m256i {
    dot_i8_i8(q, load256(xb.add(2)))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_tile_avx2<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    tile_q8_0::<R, C, _>(
        nb,
        w,
        Q4_0_BYTES,
        ws,
        x,
        xs,
        out,
        |wb| _mm256_sub_epi8(nibbles_32(wb.add(2)), _mm256_set1_epi8(8)),
        |p, xb| signed_dot(p, xb),
    )
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_tile_avx2<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    if R == 4 && C == 2 {
        return q8_0_tile_4x2_asm(nb, w, ws, x, xs, out);
    }
    tile_q8_0::<R, C, _>(
        nb,
        w,
        Q8_0_BYTES,
        ws,
        x,
        xs,
        out,
        |wb| load256(wb.add(2)),
        |p, xb| signed_dot(p, xb),
    )
}

/// Every f16 value as f32, indexed by its bits (upstream's `ggml_table_f32_f16`): the Q8_0 tile
/// converts activation scales by one load each instead of vector work, as tinyBLAS does.
/// Exact conversions, so the scale products keep their bits.
static F16_TO_F32: [f32; 1 << 16] = {
    let mut table = [0f32; 1 << 16];
    let mut i = 0;
    while i < table.len() {
        table[i] = half::f16::from_bits(i as u16).to_f32_const();
        i += 1;
    }
    table
};

/// The 4 × 2 Q8_0 tile (the main shape) with its registers assigned by hand: the same
/// operations in the same order as [`tile_q8_0`] (so the same bits), but LLVM's allocation of
/// the generic kernel spilled accumulators and block values every block and ran 1.35–1.45×
/// slower than upstream's tinyBLAS `gemm4xN<2>`. Registers: ymm0–7 the accumulators
/// (`acc[c][r]` in ymm`4c + r`), ymm8/9 the two activation blocks, ymm10/11 one weight block
/// and its `|q|`, ymm12/13 a product and its scale, ymm14/15 the 4 scale products
/// `d_w · d_x` of each column, in both halves (`madd`'s i16 ones are read from memory). The
/// vector pipes are the limit, so the scales take as few vector operations as tinyBLAS's:
/// the weights' gathered in a general register, the activations' read from [`F16_TO_F32`]
/// (broadcasting each product from a stored copy by loads instead of shuffles measured
/// slower).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_tile_4x2_asm(
    nb: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    let mut acc = [_mm256_setzero_ps(); 8];
    if nb > 0 {
        let ones = _mm256_set1_epi16(1);
        let [a0, a1, a2, a3, a4, a5, a6, a7] = &mut acc;
        // SAFETY: the caller guarantees `nb` Q8_0 blocks (34 bytes) in each of the 4 weight
        // rows `ws` bytes apart and the 2 activation rows `xs` bytes apart, and AVX2/FMA/F16C;
        // the loop reads only those blocks, `ones` and entries of the 65536-entry table indexed
        // by 16-bit values, and writes only the registers named as outputs or clobbers.
        std::arch::asm!(
            ".p2align 6",
            "2:",
            // the 4 weight scales gathered in a general register (integer work), converted
            // at once and copied to both halves; the 2 activation scales from the f16 table
            // (loads, no vector work); their 8 products, 4 per column
            "movzx {t:e}, word ptr [{w}]",
            "movzx {u:e}, word ptr [{w} + {ws}]",
            "shl {u}, 16",
            "or {t}, {u}",
            "movzx {u:e}, word ptr [{w} + {ws}*2]",
            "shl {u}, 32",
            "or {t}, {u}",
            "movzx {u:e}, word ptr [{w3}]",
            "shl {u}, 48",
            "or {t}, {u}",
            "vmovq xmm12, {t}",
            "vcvtph2ps xmm12, xmm12",
            "vinsertf128 ymm12, ymm12, xmm12, 1",
            "movzx {t:e}, word ptr [{x}]",
            "vbroadcastss ymm14, dword ptr [{tab} + {t}*4]",
            "vmulps ymm14, ymm14, ymm12",
            "movzx {t:e}, word ptr [{x} + {xs}]",
            "vbroadcastss ymm15, dword ptr [{tab} + {t}*4]",
            "vmulps ymm15, ymm15, ymm12",
            "vmovdqu ymm8, ymmword ptr [{x} + 2]",
            "vmovdqu ymm9, ymmword ptr [{x} + {xs} + 2]",
            // weight row 0: |q| and its products with both activation blocks
            "vmovdqu ymm10, ymmword ptr [{w} + 2]",
            "vpsignb ymm11, ymm10, ymm10",
            "vpsignb ymm12, ymm8, ymm10",
            "vpmaddubsw ymm12, ymm11, ymm12",
            "vpmaddwd ymm12, ymm12, ymmword ptr [{ones}]",
            "vcvtdq2ps ymm12, ymm12",
            "vpermilps ymm13, ymm14, 0x00",
            "vfmadd231ps ymm0, ymm12, ymm13",
            "vpsignb ymm12, ymm9, ymm10",
            "vpmaddubsw ymm12, ymm11, ymm12",
            "vpmaddwd ymm12, ymm12, ymmword ptr [{ones}]",
            "vcvtdq2ps ymm12, ymm12",
            "vpermilps ymm13, ymm15, 0x00",
            "vfmadd231ps ymm4, ymm12, ymm13",
            // weight row 1: |q| and its products with both activation blocks
            "vmovdqu ymm10, ymmword ptr [{w} + {ws} + 2]",
            "vpsignb ymm11, ymm10, ymm10",
            "vpsignb ymm12, ymm8, ymm10",
            "vpmaddubsw ymm12, ymm11, ymm12",
            "vpmaddwd ymm12, ymm12, ymmword ptr [{ones}]",
            "vcvtdq2ps ymm12, ymm12",
            "vpermilps ymm13, ymm14, 0x55",
            "vfmadd231ps ymm1, ymm12, ymm13",
            "vpsignb ymm12, ymm9, ymm10",
            "vpmaddubsw ymm12, ymm11, ymm12",
            "vpmaddwd ymm12, ymm12, ymmword ptr [{ones}]",
            "vcvtdq2ps ymm12, ymm12",
            "vpermilps ymm13, ymm15, 0x55",
            "vfmadd231ps ymm5, ymm12, ymm13",
            // weight row 2: |q| and its products with both activation blocks
            "vmovdqu ymm10, ymmword ptr [{w} + {ws}*2 + 2]",
            "vpsignb ymm11, ymm10, ymm10",
            "vpsignb ymm12, ymm8, ymm10",
            "vpmaddubsw ymm12, ymm11, ymm12",
            "vpmaddwd ymm12, ymm12, ymmword ptr [{ones}]",
            "vcvtdq2ps ymm12, ymm12",
            "vpermilps ymm13, ymm14, 0xAA",
            "vfmadd231ps ymm2, ymm12, ymm13",
            "vpsignb ymm12, ymm9, ymm10",
            "vpmaddubsw ymm12, ymm11, ymm12",
            "vpmaddwd ymm12, ymm12, ymmword ptr [{ones}]",
            "vcvtdq2ps ymm12, ymm12",
            "vpermilps ymm13, ymm15, 0xAA",
            "vfmadd231ps ymm6, ymm12, ymm13",
            // weight row 3: |q| and its products with both activation blocks
            "vmovdqu ymm10, ymmword ptr [{w3} + 2]",
            "vpsignb ymm11, ymm10, ymm10",
            "vpsignb ymm12, ymm8, ymm10",
            "vpmaddubsw ymm12, ymm11, ymm12",
            "vpmaddwd ymm12, ymm12, ymmword ptr [{ones}]",
            "vcvtdq2ps ymm12, ymm12",
            "vpermilps ymm13, ymm14, 0xFF",
            "vfmadd231ps ymm3, ymm12, ymm13",
            "vpsignb ymm12, ymm9, ymm10",
            "vpmaddubsw ymm12, ymm11, ymm12",
            "vpmaddwd ymm12, ymm12, ymmword ptr [{ones}]",
            "vcvtdq2ps ymm12, ymm12",
            "vpermilps ymm13, ymm15, 0xFF",
            "vfmadd231ps ymm7, ymm12, ymm13",
            "add {w}, 34",
            "add {w3}, 34",
            "add {x}, 34",
            "dec {n}",
            "jnz 2b",
            w = inout(reg) w => _,
            w3 = inout(reg) w.add(3 * ws) => _,
            ws = in(reg) ws,
            x = inout(reg) x => _,
            xs = in(reg) xs,
            n = inout(reg) nb => _,
            ones = in(reg) &ones,
            tab = in(reg) F16_TO_F32.as_ptr(),
            t = out(reg) _,
            u = out(reg) _,
            inout("ymm0") *a0,
            inout("ymm1") *a1,
            inout("ymm2") *a2,
            inout("ymm3") *a3,
            inout("ymm4") *a4,
            inout("ymm5") *a5,
            inout("ymm6") *a6,
            inout("ymm7") *a7,
            out("ymm8") _,
            out("ymm9") _,
            out("ymm10") _,
            out("ymm11") _,
            out("ymm12") _,
            out("ymm13") _,
            out("ymm14") _,
            out("ymm15") _,
            options(nostack, readonly),
        );
    }
    for (i, a) in acc.iter().enumerate() {
        out.set(i % 4, i / 4, hsum_f32x8(*a));
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0_tile_avx2<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    tile_q8_0::<R, C, _>(
        nb,
        w,
        Q5_0_BYTES,
        ws,
        x,
        xs,
        out,
        |wb| {
            let hi = _mm256_andnot_si256(bits_32(wb.add(2)), _mm256_set1_epi8(0xF0u8 as i8));
            _mm256_or_si256(nibbles_32(wb.add(6)), hi)
        },
        |p, xb| signed_dot(p, xb),
    )
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_nl_tile_avx2<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    tile_q8_0::<R, C, _>(
        nb,
        w,
        IQ4_NL_BYTES,
        ws,
        x,
        xs,
        out,
        |wb| iq4_lookup(wb.add(2)),
        |p, xb| signed_dot(p, xb),
    )
}

/// `R` × `C` outputs of a Q8_1-activation product (Q4_1, Q5_1): each weight block unpacked
/// once (`unpack` gives its 32 unsigned quants) and used for `C` activation blocks. Per output
/// exactly the mat-vec kernel's arithmetic ([`blocks_q8_1`]: `d_w · d_x` and `m_w · s_x`
/// rounded to f32, one FMA per block into one accumulator, the min terms summed block by
/// block, both in block order), so results do not depend on the tiling.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_q8_1<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    wbytes: usize,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
    unpack: impl Fn(*const u8) -> __m256i,
) {
    let mut acc = [[_mm256_setzero_ps(); R]; C];
    // per column, lane 2r + 1 sums row r's min terms (the even lanes are unused)
    let mut summs = [_mm256_setzero_ps(); C];
    let pair = |p: *const u8| p.cast::<i32>().read_unaligned();
    for ib in 0..nb {
        let wb = w.add(ib * wbytes);
        let xb = x.add(ib * Q8_1_BYTES);
        // [d_0, m_0, d_1, m_1, ...] of the R weight blocks, one conversion
        let row = |r: usize| if r < R { pair(wb.add(r * ws)) } else { 0 };
        let wdm = _mm256_cvtph_ps(_mm_setr_epi32(row(0), row(1), row(2), row(3)));
        let q: [__m256i; R] = std::array::from_fn(|r| unpack(wb.add(r * ws)));
        for c in 0..C {
            let xc = xb.add(c * xs);
            // [d_r · d_x, m_r · s_x] for every row r, one conversion and one multiply
            let prod = _mm256_mul_ps(wdm, _mm256_cvtph_ps(_mm_set1_epi32(pair(xc))));
            summs[c] = _mm256_add_ps(summs[c], prod);
            let mut d = [0f32; 8];
            _mm256_storeu_ps(d.as_mut_ptr(), prod);
            let y = load256(xc.add(4));
            for (r, q) in q.iter().enumerate() {
                let p = _mm256_cvtepi32_ps(dot_u8_i8(*q, y));
                acc[c][r] = _mm256_fmadd_ps(_mm256_set1_ps(d[2 * r]), p, acc[c][r]);
            }
        }
    }
    for (c, acc) in acc.iter().enumerate() {
        let mut s = [0f32; 8];
        _mm256_storeu_ps(s.as_mut_ptr(), summs[c]);
        for (r, acc) in acc.iter().enumerate() {
            out.set(r, c, hsum_f32x8(*acc) + s[2 * r + 1]);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_1_tile_avx2<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    tile_q8_1::<R, C>(nb, w, Q4_1_BYTES, ws, x, xs, out, |wb| {
        nibbles_32(wb.add(4))
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_1_tile_avx2<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    tile_q8_1::<R, C>(nb, w, Q5_1_BYTES, ws, x, xs, out, |wb| {
        let hi = _mm256_and_si256(bits_32(wb.add(4)), _mm256_set1_epi8(0x10));
        _mm256_or_si256(nibbles_32(wb.add(8)), hi)
    })
}
