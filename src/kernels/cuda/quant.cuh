// Activation quantization and integer block dot products of the CUDA MUL_MAT, written so the
// same text also compiles as plain C++ on the host (tests/cuda_kernels.rs runs it there and
// compares its bytes with the CPU engine's quantizer). NVRTC sees this file first, then
// kernels.cu (src/kernels/cuda/mod.rs joins them).

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;

#define QK 32

#ifdef __CUDACC_RTC__
#define QFN __device__ __forceinline__
__device__ __forceinline__ float h2f(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 f2h(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#else
#include <math.h>
#include <string.h>
#define QFN static inline
static inline float h2f(u16 h) {
    _Float16 v;
    memcpy(&v, &h, 2);
    return (float)v;
}
static inline u16 f2h(float f) {
    _Float16 v = (_Float16)f; // round to nearest even
    u16 h;
    memcpy(&h, &v, 2);
    return h;
}
#endif

QFN u16 ld16(const u8 *p) { return (u16)p[0] | ((u16)p[1] << 8); }

QFN u32 ld32(const u8 *p) { return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24); }

#ifdef __CUDACC_RTC__
QFN float ldf32(const u8 *p) { return __int_as_float((int)ld32(p)); }
QFN u32 f32_bits(float f) { return (u32)__float_as_int(f); }
#else
QFN float ldf32(const u8 *p) {
    u32 b = ld32(p);
    float f;
    memcpy(&f, &b, 4);
    return f;
}
QFN u32 f32_bits(float f) {
    u32 b;
    memcpy(&b, &f, 4);
    return b;
}
#endif

QFN void st16(u8 *p, u16 v) {
    p[0] = (u8)(v & 0xff);
    p[1] = (u8)(v >> 8);
}

// One block of 32 activations into Q8_0 (sum 0: f16 d, 32 i8) or Q8_1 (sum 1: f16 d, f16
// d * sum(q), 32 i8), byte for byte as the CPU engine's quantizer (src/kernels/cpu/quantize.rs,
// ggml's AVX2 one): d = amax / 127, q = round-half-even(x * (127 / amax)) saturated to i8,
// a NaN to -128.
QFN void quantize_q8_block(const float *x, u8 *y, int sum) {
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.0f;
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    u8 *qs = y + (sum ? 4 : 2);
    int isum = 0;
    for (int j = 0; j < QK; j++) {
        float v = x[j] * id;
        int q;
        if (v != v) {
            q = -128;
        } else {
            float r = fminf(fmaxf(rintf(v), -128.0f), 127.0f);
            q = (int)r;
        }
        qs[j] = (u8)(i8)q;
        isum += q;
    }
    st16(y, f2h(d));
    if (sum) st16(y + 2, f2h(d * (float)isum));
}

#define QK_K 256

// The K-quants (Q2_K 10, Q3_K 11, Q4_K 12, Q5_K 13, Q6_K 14) and IQ4_XS (23) work on
// super-blocks of 256 values and take Q8_K activations; the others blocks of 32 and Q8_0 (Q4_0 2,
// Q5_0 6, Q8_0 8, IQ4_NL 20) or Q8_1 (Q4_1 3, Q5_1 7).
QFN int is_k_quant(int ty) { return (ty >= 10 && ty <= 14) || ty == 23; }

// IQ4_NL's and IQ4_XS's 16 levels (ggml's kvalues_iq4nl).
#ifdef __CUDACC_RTC__
__constant__ const i8 KV_IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
#else
static const i8 KV_IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
#endif

// What the activations of weight type ty are quantized to: 0 Q8_0, 1 Q8_1, 2 Q8_K.
QFN int act_kind(int ty) { return is_k_quant(ty) ? 2 : (ty == 3 || ty == 7) ? 1 : 0; }

// Values per weight block (one activation block each).
QFN int block_values(int ty) { return is_k_quant(ty) ? QK_K : QK; }

// Bytes of one weight block.
QFN int weight_block_bytes(int ty) {
    switch (ty) {
    case 2: return 18;
    case 3: return 20;
    case 6: return 22;
    case 7: return 24;
    case 8: return 34;
    case 10: return 84;
    case 11: return 110;
    case 12: return 144;
    case 13: return 176;
    case 14: return 210;
    case 20: return 18;
    case 23: return 136;
    }
    return 0;
}

// Bytes of one quantized activation block of kind (0 Q8_0, 1 Q8_1, 2 Q8_K: f32 d, 256 i8, 16
// i16 sums of 16).
QFN int act_block_bytes(int kind) { return kind == 2 ? 292 : kind == 1 ? 36 : 34; }

// Bytes of one quantized activation block for weight type ty.
QFN int q8_block_bytes(int ty) { return act_block_bytes(act_kind(ty)); }

// One super-block of 256 activations into Q8_K, byte for byte as quantize_row_q8_K_ref (the
// CPU engine's, x86 has no SIMD one): the first value of largest magnitude (sign kept) maps to
// -127, q = round-half-even(x * iscale) capped at 127, d = 1 / iscale, 16 sums of 16 quants.
QFN void quantize_q8k_block(const float *x, u8 *y) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK_K; j++) {
        float a = fabsf(x[j]);
        if (a > amax) {
            amax = a;
            max = x[j];
        }
    }
    if (amax == 0.0f) {
        for (int j = 0; j < 292; j++) y[j] = 0;
        return;
    }
    float iscale = -127.0f / max;
    for (int j = 0; j < QK_K; j++) {
        int q = (int)rintf(iscale * x[j]);
        y[4 + j] = (u8)(i8)(q < 127 ? q : 127);
    }
    for (int g = 0; g < QK_K / 16; g++) {
        int s = 0;
        for (int j = 0; j < 16; j++) s += (int)(i8)y[4 + 16 * g + j];
        st16(y + 4 + QK_K + 2 * g, (u16)(short)s);
    }
    u32 d = f32_bits(1.0f / iscale);
    for (int b = 0; b < 4; b++) y[b] = (u8)(d >> (8 * b));
}

// One activation block of kind (see act_kind): 32 values for Q8_0/Q8_1, 256 for Q8_K.
QFN void quantize_act_block(const float *x, u8 *y, int kind) {
    if (kind == 2) {
        quantize_q8k_block(x, y);
    } else {
        quantize_q8_block(x, y, kind);
    }
}

// Scale and min of sub-block j of a Q4_K/Q5_K super-block (6 bits each, packed in 12 bytes).
QFN void scale_min_k4(int j, const u8 *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// The 5-bit quant j of a Q5_0/Q5_1 block (qh: the 32 high bits, qs: 16 bytes of nibbles).
QFN int q5_quant(const u8 *b, int qh_at, int j) {
    u32 qh = ld32(b + qh_at);
    const u8 *qs = b + qh_at + 4;
    int lo = j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
    return lo | (int)(((qh >> j) & 1u) << 4);
}

// Quant i (0..255) of a Q4_K (ty 12) or Q5_K (13) super-block, and its sub-block.
QFN int k45_quant(const u8 *b, int ty, int i, int *sub) {
    int j = i / 64, l = i % 64;
    const u8 *qs = b + (ty == 13 ? 48 : 16) + 32 * j;
    *sub = 2 * j + (l >= 32);
    int q = l < 32 ? (qs[l] & 15) : (qs[l - 32] >> 4);
    if (ty == 13) q |= ((b[16 + l % 32] >> *sub) & 1) << 4;
    return q;
}

// Quant i (0..255) of a Q6_K super-block (minus 32) and its scale's index.
QFN int q6k_quant(const u8 *b, int i, int *is) {
    int n = i / 128, r = i % 128, part = r / 32, l = r % 32;
    const u8 *ql = b + 64 * n;
    const u8 *qh = b + 128 + 32 * n;
    int lo = part & 1 ? ql[l + 32] : ql[l];
    lo = part < 2 ? (lo & 15) : (lo >> 4);
    *is = 8 * n + l / 16 + 2 * part;
    return (lo | (((qh[l] >> (2 * part)) & 3) << 4)) - 32;
}

// Quant i (0..255) of a Q2_K (ty 10: 0..3) or Q3_K (11: -4..3) super-block; its scale is
// number i / 16.
QFN int k23_quant(const u8 *b, int ty, int i) {
    int n = i / 128, j = (i % 128) / 32, l = i % 32;
    const u8 *qs = b + (ty == 11 ? 32 : 16) + 32 * n;
    int q = (qs[l] >> (2 * j)) & 3;
    if (ty == 11) q -= (b[l] >> (4 * n + j)) & 1 ? 0 : 4;
    return q;
}

// Scale g (0..15) of a Q3_K super-block: 6 bits (4 low, 2 high) minus 32.
QFN int q3k_scale(const u8 *b, int g) {
    const u8 *sc = b + 96;
    int lo = g < 8 ? (sc[g] & 15) : (sc[g - 8] >> 4);
    int hi = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

// Scale of sub-block ib (0..7, 32 values) of an IQ4_XS super-block: 6 bits minus 32.
QFN int iq4xs_scale(const u8 *b, int ib) {
    int lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 15;
    int hi = (ld16(b + 2) >> (2 * ib)) & 3;
    return (lo | (hi << 4)) - 32;
}

// Level of value j (0..31) of 16 bytes of IQ4 nibbles (low nibbles first, then high).
QFN int iq4_level(const u8 *qs, int j) { return KV_IQ4NL[j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4)]; }

// Value i of a row of type ty (GET_ROWS, weight operands), as ggml's dequantize_row_*.
QFN float deq(const u8 *row, int ty, int i) {
    int j = i % QK;
    switch (ty) {
    case 0: return ldf32(row + 4 * i);
    case 1: return h2f(ld16(row + 2 * i));
    case 2: {
        const u8 *b = row + (i / QK) * 18;
        int q = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
        return h2f(ld16(b)) * (float)(q - 8);
    }
    case 3: {
        const u8 *b = row + (i / QK) * 20;
        int q = j < 16 ? (b[4 + j] & 15) : (b[4 + j - 16] >> 4);
        return h2f(ld16(b)) * (float)q + h2f(ld16(b + 2));
    }
    case 6: {
        const u8 *b = row + (i / QK) * 22;
        return h2f(ld16(b)) * (float)(q5_quant(b, 2, j) - 16);
    }
    case 7: {
        const u8 *b = row + (i / QK) * 24;
        return h2f(ld16(b)) * (float)q5_quant(b, 4, j) + h2f(ld16(b + 2));
    }
    case 8: {
        const u8 *b = row + (i / QK) * 34;
        return h2f(ld16(b)) * (float)(i8)b[2 + j];
    }
    case 12:
    case 13: {
        const u8 *b = row + (i / QK_K) * weight_block_bytes(ty);
        int sub, sc, m;
        int q = k45_quant(b, ty, i % QK_K, &sub);
        scale_min_k4(sub, b + 4, &sc, &m);
        float d1 = h2f(ld16(b)) * (float)sc, m1 = h2f(ld16(b + 2)) * (float)m;
        return d1 * (float)q - m1;
    }
    case 14: {
        const u8 *b = row + (i / QK_K) * 210;
        int is;
        int q = q6k_quant(b, i % QK_K, &is);
        return h2f(ld16(b + 208)) * (float)(i8)b[192 + is] * (float)q;
    }
    case 10: {
        const u8 *b = row + (i / QK_K) * 84;
        int w = i % QK_K, sc = b[w / 16];
        float dl = h2f(ld16(b + 80)) * (float)(sc & 15), ml = h2f(ld16(b + 82)) * (float)(sc >> 4);
        return dl * (float)k23_quant(b, 10, w) - ml;
    }
    case 11: {
        const u8 *b = row + (i / QK_K) * 110;
        int w = i % QK_K;
        float dl = h2f(ld16(b + 108)) * (float)q3k_scale(b, w / 16);
        return dl * (float)k23_quant(b, 11, w);
    }
    case 20: {
        const u8 *b = row + (i / QK) * 18;
        return h2f(ld16(b)) * (float)iq4_level(b + 2, j);
    }
    case 23: {
        const u8 *b = row + (i / QK_K) * 136;
        int w = i % QK_K;
        float dl = h2f(ld16(b)) * (float)iq4xs_scale(b, w / 32);
        return dl * (float)iq4_level(b + 8 + 16 * (w / 32), w % 32);
    }
    }
    return 0.0f;
}

// Weight block ib times the quantized activations' block ib, as the CPU engine's vec_dot: exact
// integer sums of the block's products (per sub-block for the K-quants), then the scales.
QFN float block_dot_q8(const u8 *w, int ty, int ib, const u8 *xq) {
    int sumi = 0;
    switch (ty) {
    case 2: {
        const u8 *wb = w + ib * 18;
        const u8 *xb = xq + ib * 34;
        for (int j = 0; j < 16; j++) {
            sumi += ((wb[2 + j] & 15) - 8) * (int)(i8)xb[2 + j];
            sumi += ((wb[2 + j] >> 4) - 8) * (int)(i8)xb[18 + j];
        }
        return (float)sumi * (h2f(ld16(wb)) * h2f(ld16(xb)));
    }
    case 3: {
        const u8 *wb = w + ib * 20;
        const u8 *xb = xq + ib * 36;
        for (int j = 0; j < 16; j++) {
            sumi += (wb[4 + j] & 15) * (int)(i8)xb[4 + j];
            sumi += (wb[4 + j] >> 4) * (int)(i8)xb[20 + j];
        }
        return (h2f(ld16(wb)) * h2f(ld16(xb))) * (float)sumi + h2f(ld16(wb + 2)) * h2f(ld16(xb + 2));
    }
    case 6: {
        const u8 *wb = w + ib * 22;
        const u8 *xb = xq + ib * 34;
        for (int j = 0; j < QK; j++) sumi += (q5_quant(wb, 2, j) - 16) * (int)(i8)xb[2 + j];
        return (float)sumi * (h2f(ld16(wb)) * h2f(ld16(xb)));
    }
    case 7: {
        const u8 *wb = w + ib * 24;
        const u8 *xb = xq + ib * 36;
        for (int j = 0; j < QK; j++) sumi += q5_quant(wb, 4, j) * (int)(i8)xb[4 + j];
        return (h2f(ld16(wb)) * h2f(ld16(xb))) * (float)sumi + h2f(ld16(wb + 2)) * h2f(ld16(xb + 2));
    }
    case 8: {
        const u8 *wb = w + ib * 34;
        const u8 *xb = xq + ib * 34;
        for (int j = 0; j < QK; j++) sumi += (int)(i8)wb[2 + j] * (int)(i8)xb[2 + j];
        return (float)sumi * (h2f(ld16(wb)) * h2f(ld16(xb)));
    }
    case 12:
    case 13: {
        // sum over sub-blocks of scale * (q . y), and of min * (sum of y), both exact
        const u8 *wb = w + ib * weight_block_bytes(ty);
        const u8 *xb = xq + ib * 292;
        int summ = 0;
        for (int sub = 0; sub < 8; sub++) {
            int sc, m, s = 0, ignored;
            scale_min_k4(sub, wb + 4, &sc, &m);
            for (int l = 0; l < 32; l++) {
                int i = 32 * sub + l;
                s += k45_quant(wb, ty, i, &ignored) * (int)(i8)xb[4 + i];
            }
            sumi += sc * s;
            int bs = (int)(short)ld16(xb + 4 + QK_K + 4 * sub) + (int)(short)ld16(xb + 6 + QK_K + 4 * sub);
            summ += m * bs;
        }
        float yd = ldf32(xb);
        return yd * h2f(ld16(wb)) * (float)sumi - yd * h2f(ld16(wb + 2)) * (float)summ;
    }
    case 14: {
        const u8 *wb = w + ib * 210;
        const u8 *xb = xq + ib * 292;
        for (int g = 0; g < 16; g++) {
            int s = 0, is = 0;
            for (int l = 0; l < 16; l++) s += q6k_quant(wb, 16 * g + l, &is) * (int)(i8)xb[4 + 16 * g + l];
            sumi += (int)(i8)wb[192 + is] * s;
        }
        return ldf32(xb) * h2f(ld16(wb + 208)) * (float)sumi;
    }
    case 10: {
        const u8 *wb = w + ib * 84;
        const u8 *xb = xq + ib * 292;
        int summ = 0;
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += k23_quant(wb, 10, 16 * g + l) * (int)(i8)xb[4 + 16 * g + l];
            sumi += (wb[g] & 15) * s;
            summ += (wb[g] >> 4) * (int)(short)ld16(xb + 4 + QK_K + 2 * g);
        }
        float yd = ldf32(xb);
        return yd * h2f(ld16(wb + 80)) * (float)sumi - yd * h2f(ld16(wb + 82)) * (float)summ;
    }
    case 11: {
        const u8 *wb = w + ib * 110;
        const u8 *xb = xq + ib * 292;
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += k23_quant(wb, 11, 16 * g + l) * (int)(i8)xb[4 + 16 * g + l];
            sumi += q3k_scale(wb, g) * s;
        }
        return ldf32(xb) * h2f(ld16(wb + 108)) * (float)sumi;
    }
    case 20: {
        const u8 *wb = w + ib * 18;
        const u8 *xb = xq + ib * 34;
        for (int j = 0; j < QK; j++) sumi += iq4_level(wb + 2, j) * (int)(i8)xb[2 + j];
        return (h2f(ld16(wb)) * h2f(ld16(xb))) * (float)sumi;
    }
    case 23: {
        const u8 *wb = w + ib * 136;
        const u8 *xb = xq + ib * 292;
        for (int sub = 0; sub < 8; sub++) {
            int s = 0;
            for (int j = 0; j < 32; j++) s += iq4_level(wb + 8 + 16 * sub, j) * (int)(i8)xb[4 + 32 * sub + j];
            sumi += iq4xs_scale(wb, sub) * s;
        }
        return h2f(ld16(wb)) * ldf32(xb) * (float)sumi;
    }
    }
    return 0.0f;
}
