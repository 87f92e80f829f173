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

// Bytes of one quantized activation block for weight type ty (Q4_1 takes Q8_1, the others Q8_0).
QFN int q8_block_bytes(int ty) { return ty == 3 ? 36 : 34; }

// Weight block ib (Q4_0 2, Q4_1 3, Q8_0 8) times the quantized activations' block ib, as the
// CPU engine's vec_dot: an exact integer sum of the block's 32 products, then the scales.
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
    case 8: {
        const u8 *wb = w + ib * 34;
        const u8 *xb = xq + ib * 34;
        for (int j = 0; j < QK; j++) sumi += (int)(i8)wb[2 + j] * (int)(i8)xb[2 + j];
        return (float)sumi * (h2f(ld16(wb)) * h2f(ld16(xb)));
    }
    }
    return 0.0f;
}
