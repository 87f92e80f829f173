// The CUDA executor's kernels (src/graph/exec_cuda.rs), compiled at run time by NVRTC (no
// headers: fixed-width types and half conversions are defined in quant.cuh). Activations are f32 rows;
// weights keep their GGUF bytes (type ids are ggml's: 0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 6 Q5_0,
// 7 Q5_1, 8 Q8_0, 12 Q4_K, 13 Q5_K, 14 Q6_K).
// Reproducible: every reduction has one fixed order (no atomics), so a launch gives the same
// bits on every run. Semantics follow the CPU executor (src/kernels/cpu): MUL_MAT with quantized
// weights quantizes the activations to Q8_0/Q8_1/Q8_K first (quant.cuh, the same bytes as the
// CPU) and sums integer products per block; sums of squares and softmax sums in double.
// quant.cuh (types, half conversions, the quantizer) comes before this file.
// The mock driver also builds this text as host C++ and runs launches on an emulated grid
// (ffi-tests/cuda_host.h): a kernel may use the builtins mapped there (thread/block indices,
// __shared__, __syncthreads, full-mask __shfl_*_sync, __syncwarp); others fail that build.

#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float warp_sum(float v) {
    // fixed tree (lane 0 holds the sum), then lane 0's value for every lane
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return __shfl_sync(0xffffffffu, v, 0);
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ int warp_isum(int v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// GET_ROWS: dst[t] = row ids[t] of table (ne0 values), one block per row.
extern "C" __global__ void k_get_rows(const u8 *table, int ty, long long row_bytes, const int *ids,
                                      float *dst, int ne0) {
    int t = blockIdx.x;
    const u8 *row = table + (long long)ids[t] * row_bytes;
    for (int i = threadIdx.x; i < ne0; i += blockDim.x) dst[(long long)t * ne0 + i] = deq(row, ty, i);
}

// dst[r] = src[rows[r]] (f32 rows of ne0), or, with rows null, values offset.. of each row of
// src (VIEW + CONT); one block per row.
extern "C" __global__ void k_copy_rows(const float *src, int src_ne0, int offset, const int *rows,
                                       float *dst, int ne0) {
    int r = blockIdx.x;
    int s = rows ? rows[r] : r;
    for (int i = threadIdx.x; i < ne0; i += blockDim.x)
        dst[(long long)r * ne0 + i] = src[(long long)s * src_ne0 + offset + i];
}

// RMS_NORM (rms = 1) or NORM (rms = 0) of each row: one block of 256 threads per row, sums in
// double over a fixed tree.
extern "C" __global__ void k_norm(const float *x, float *y, int ne0, float eps, int rms) {
    __shared__ double part[256];
    const float *xr = x + (long long)blockIdx.x * ne0;
    float *yr = y + (long long)blockIdx.x * ne0;
    int tid = threadIdx.x;
    double s = 0.0;
    for (int i = tid; i < ne0; i += 256) s += rms ? (double)(xr[i] * xr[i]) : (double)xr[i];
    part[tid] = s;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if (tid < o) part[tid] += part[tid + o];
        __syncthreads();
    }
    float mean = (float)(part[0] / ne0);
    __syncthreads();
    if (rms) {
        float scale = 1.0f / sqrtf(mean + eps);
        for (int i = tid; i < ne0; i += 256) yr[i] = xr[i] * scale;
        return;
    }
    s = 0.0;
    for (int i = tid; i < ne0; i += 256) {
        float v = xr[i] - mean;
        s += (double)(v * v);
    }
    part[tid] = s;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if (tid < o) part[tid] += part[tid + o];
        __syncthreads();
    }
    float scale = 1.0f / sqrtf((float)(part[0] / ne0) + eps);
    for (int i = tid; i < ne0; i += 256) yr[i] = (xr[i] - mean) * scale;
}

// ADD (op 0) or MUL (op 1) with b broadcast over rows: b is b_len values of type bty (an
// activation: f32; a weight: its bytes).
extern "C" __global__ void k_binary(const float *a, const u8 *b, int bty, int b_len, float *dst,
                                    long long n, int op) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float y = deq(b, bty, (int)(i % b_len));
    dst[i] = op ? a[i] * y : a[i] + y;
}

// SCALE (op 0, by s), SILU (op 1), TANH (op 2).
extern "C" __global__ void k_unary(const float *x, float *dst, long long n, int op, float s) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    dst[i] = op == 0 ? v * s : op == 1 ? v / (1.0f + expf(0.0f - v)) : tanhf(v);
}

__device__ __forceinline__ float gelu_f16(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    float v = h2f(f2h(x));
    float r = 0.5f * v * (1.0f + tanhf(0.79788456080286535587989211986876f * v * (1.0f + 0.044715f * v * v)));
    return h2f(f2h(r));
}

// GLU: act(gate) * up; kind 0 SWIGLU, 1 GEGLU.
extern "C" __global__ void k_glu(const float *gate, const float *up, float *dst, long long n, int kind) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = gate[i];
    float a = kind == 0 ? g / (1.0f + expf(0.0f - g)) : gelu_f16(g);
    dst[i] = a * up[i];
}

#define MM_ROWS 4
#define MM_PAIRS 8

// The dot product of weight block ib (F32 or F16) with the f32 activations' block ib, products
// summed in f32 in order (quantized weights go through block_dot_q8).
__device__ __forceinline__ float block_dot(const u8 *w, int ty, int ib, const float *xf) {
    float acc = 0.0f;
    const float *x = xf + ib * QK;
    switch (ty) {
    case 0: {
        const float *wf = (const float *)w + ib * QK;
        for (int i = 0; i < QK; i++) acc += wf[i] * x[i];
        return acc;
    }
    case 1: {
        const u8 *wb = w + ib * QK * 2;
        for (int i = 0; i < QK; i++) acc += h2f(ld16(wb + 2 * i)) * x[i];
        return acc;
    }
    }
    return 0.0f;
}

// MUL_MAT / MUL_MAT_ID: dst[p * n_rows + r] = w_e[r] . x[xrow(p)] for pairs p < n_pairs. With
// ids null: e = 0, xrow = p. Else e = ids[p] and xrow = p / n_used when x is broadcast over the
// slots, else p; times scale[e] when scale is given; x: f32 rows of k. One warp per weight row
// and up to MM_PAIRS pairs; lane l takes
// blocks l, l + 32, ...; a fixed warp tree sums the lanes.
// With xq given (quantized weights), x is read as its quantized rows (k_quantize_q8, one
// activation block per weight block) and each block's dot is an integer sum (block_dot_q8), as
// the CPU engine computes it.
extern "C" __global__ void k_mul_mat(const u8 *w, int ty, long long row_bytes, long long expert_bytes,
                                     int n_rows, int k, const float *x, const u8 *xq,
                                     float *dst, int n_pairs, const float *ids, int n_used,
                                     int x_broadcast, const float *scale) {
    int r = blockIdx.x * MM_ROWS + threadIdx.y;
    int p0 = blockIdx.y * MM_PAIRS;
    int lane = threadIdx.x;
    if (r >= n_rows) return;
    int nb = k / block_values(ty);
    float acc[MM_PAIRS];
    int es[MM_PAIRS];
#pragma unroll
    for (int j = 0; j < MM_PAIRS; j++) {
        acc[j] = 0.0f;
        int p = p0 + j;
        es[j] = 0;
        if (p >= n_pairs) continue;
        int e = ids ? (int)ids[p] : 0;
        long long xrow = ids && x_broadcast ? p / n_used : p;
        es[j] = e;
        const u8 *wr = w + (long long)e * expert_bytes + (long long)r * row_bytes;
        float a = 0.0f;
        if (xq) {
            const u8 *xqr = xq + xrow * (long long)(nb * q8_block_bytes(ty));
            for (int ib = lane; ib < nb; ib += 32) a += block_dot_q8(wr, ty, ib, xqr);
        } else {
            const float *xr = x + xrow * k;
            for (int ib = lane; ib < nb; ib += 32) a += block_dot(wr, ty, ib, xr);
        }
        acc[j] = a;
    }
#pragma unroll
    for (int j = 0; j < MM_PAIRS; j++) {
        float s = warp_sum(acc[j]);
        int p = p0 + j;
        if (lane == 0 && p < n_pairs) {
            if (scale) s *= scale[es[j]];
            dst[(long long)p * n_rows + r] = s;
        }
    }
}

// The activations of a quantized MUL_MAT: n_blocks blocks of f32 values (rows of k, back to
// back; 32 values a block for Q8_0 (kind 0) and Q8_1 (kind 1), 256 for Q8_K (kind 2)) into
// blocks of that kind; one thread a block.
extern "C" __global__ void k_quantize_q8(const float *x, u8 *y, long long n_blocks, int kind) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_blocks) return;
    quantize_act_block(x + i * (kind == 2 ? QK_K : QK), y + i * act_block_bytes(kind), kind);
}

// ROPE of each head of each token from a table of (cos, sin) pairs per token (n_rot values,
// computed on the host exactly as the CPU executor does); mode 0 NORM (adjacent pairs), 2 NEOX
// (halves). One block per token.
extern "C" __global__ void k_rope(const float *x, float *dst, const float *table, int n_rot,
                                  int head_dim, int ne0, int mode) {
    int t = blockIdx.x;
    const float *xr = x + (long long)t * ne0;
    float *yr = dst + (long long)t * ne0;
    const float *cs = table + (long long)t * n_rot;
    int half = n_rot / 2;
    for (int i = threadIdx.x; i < ne0; i += blockDim.x) {
        int h = i / head_dim, d = i % head_dim;
        const float *hx = xr + h * head_dim;
        float out;
        if (d >= n_rot) {
            out = hx[d];
        } else if (mode == 0) {
            int i0 = d & ~1;
            float c = cs[i0], s = cs[i0 + 1];
            float x0 = hx[i0], x1 = hx[i0 + 1];
            out = (d & 1) ? fmaf(x0, s, x1 * c) : fmaf(x0, c, -(x1 * s));
        } else {
            int ip = d < half ? d : d - half;
            float c = cs[2 * ip], s = cs[2 * ip + 1];
            float x0 = hx[ip], x1 = hx[ip + half];
            out = d < half ? fmaf(x0, c, -(x1 * s)) : fmaf(x0, s, x1 * c);
        }
        yr[i] = out;
    }
}

// SET_ROWS: row t of src (ne0 values) into cache row slots[t] (F32: kv_f16 = 0, else F16).
extern "C" __global__ void k_set_rows(const float *src, int ne0, const int *slots, u8 *kv, int kv_f16) {
    int t = blockIdx.x;
    long long row = slots[t];
    for (int i = threadIdx.x; i < ne0; i += blockDim.x) {
        float v = src[(long long)t * ne0 + i];
        if (kv_f16) ((u16 *)kv)[row * ne0 + i] = f2h(v);
        else ((float *)kv)[row * ne0 + i] = v;
    }
}

__device__ __forceinline__ float kv_at(const u8 *kv, int f16, long long i, int round_f16) {
    if (f16) return h2f(((const u16 *)kv)[i]);
    float v = ((const float *)kv)[i];
    return round_f16 ? h2f(f2h(v)) : v;
}

// FLASH_ATTN_EXT over cache rows lo .. lo + mask_w: mask[t * mask_w + j] says whether token t
// sees row lo + j. One warp per (head, token); cells in order with an online softmax, lane l
// holding dims l, l + 32, ... (dk, dv <= 256). The score of each cell is lane 0's warp sum.
// flags, to follow the CPU engine's kernel (upstream's): 1 Q rounded to f16 (the one-row
// kernel's Q in K's vec_dot type), 2 an F32 cache's K and V rounded to f16 (upstream casts it
// for flash attention), 4 V accumulated in f16, rounded at each step as the one-row kernel's
// VKQ16 (ggml_vec_scale_f16 / ggml_vec_mad_f16); the softmax steps are the CPU's too (scale
// with the soft-cap's divisor folded in; M, S and the scale of the old sum as ggml computes them).
// flags 8: attention without flash attention (Q rounded to F16 when K is F16; see below).
extern "C" __global__ void k_flash_attn(const float *q, const u8 *kc, const u8 *vc, int k_f16, int v_f16,
                                        const u8 *mask, int lo, int mask_w, float *dst, int n_head,
                                        int n_head_kv, int dk, int dv, int width_k, int width_v,
                                        float scale, float softcap, int flags) {
    int h = blockIdx.x, t = blockIdx.y, lane = threadIdx.x;
    int hkv = h / (n_head / n_head_kv);
    int q16 = flags & 8 ? k_f16 : flags & 1, kv16 = (flags & 2) != 0, acc16 = flags & 4;
    float sc = softcap != 0.0f ? scale / softcap : scale;
    const float *qr = q + (long long)t * n_head * dk + (long long)h * dk;
    float qv[8], acc[8];
    for (int c = 0; c < 8; c++) {
        int d = lane + 32 * c;
        float v = d < dk ? qr[d] : 0.0f;
        qv[c] = q16 ? h2f(f2h(v)) : v;
        acc[c] = 0.0f;
    }
    float m = NEG_INF, l = 0.0f;
    const u8 *mr = mask + (long long)t * mask_w;
    float *out = dst + (long long)t * n_head * dv + (long long)h * dv;
    if (flags & 8) {
        // upstream without flash attention: KQ = MUL_MAT(K, Q) (Q in K's type),
        // SOFT_MAX_EXT (max, then exp and a sum in double, times 1 / sum), KQV = MUL_MAT(V^T,
        // KQ) with the probabilities in V's type; three passes over the visible cells
        for (int pass = 0; pass < 3; pass++) {
            double sum = 0.0;
            for (int j = 0; j < mask_w; j++) {
                if (!mr[j]) continue;
                long long row = lo + j;
                float s = 0.0f;
                for (int c = 0; c < 8; c++) {
                    int d = lane + 32 * c;
                    if (d < dk) s += qv[c] * kv_at(kc, k_f16, row * width_k + (long long)hkv * dk + d, 0);
                }
                s = warp_sum(s);
                if (softcap != 0.0f) s = tanhf(s * (1.0f / softcap)) * softcap;
                s *= scale;
                if (pass == 0) {
                    m = fmaxf(m, s);
                } else if (pass == 1) {
                    sum += (double)expf(s - m);
                } else {
                    float p = expf(s - m) * l;
                    if (v_f16) p = h2f(f2h(p));
                    if (p == 0.0f) continue;
                    for (int c = 0; c < 8; c++) {
                        int d = lane + 32 * c;
                        if (d < dv) acc[c] = fmaf(kv_at(vc, v_f16, row * width_v + (long long)hkv * dv + d, 0), p, acc[c]);
                    }
                }
            }
            if (pass == 1) l = (float)(1.0 / sum);
        }
        for (int c = 0; c < 8; c++) {
            int d = lane + 32 * c;
            if (d < dv) out[d] = acc[c];
        }
        return;
    }
    for (int j = 0; j < mask_w; j++) {
        if (!mr[j]) continue;
        long long row = lo + j;
        float s = 0.0f;
        for (int c = 0; c < 8; c++) {
            int d = lane + 32 * c;
            if (d < dk) s += qv[c] * kv_at(kc, k_f16, row * width_k + (long long)hkv * dk + d, kv16);
        }
        s = warp_sum(s) * sc;
        if (softcap != 0.0f) s = softcap * tanhf(s);
        // a new maximum scales the old sum (ms), else the cell's weight is below 1 (vs)
        float ms = 1.0f, vs = 1.0f;
        if (s > m) {
            ms = expf(m - s);
            m = s;
        } else {
            vs = expf(s - m);
        }
        l = fmaf(l, ms, vs);
        for (int c = 0; c < 8; c++) {
            int d = lane + 32 * c;
            if (d >= dv) continue;
            float v = kv_at(vc, v_f16, row * width_v + (long long)hkv * dv + d, kv16);
            float a = acc[c];
            if (acc16) {
                if (ms != 1.0f) a = h2f(f2h(a * ms));
                acc[c] = h2f(f2h(fmaf(v, vs, a)));
            } else {
                if (ms != 1.0f) a *= ms;
                acc[c] = fmaf(v, vs, a);
            }
        }
    }
    float inv = l != 0.0f ? 1.0f / l : 0.0f;
    for (int c = 0; c < 8; c++) {
        int d = lane + 32 * c;
        if (d < dv) out[d] = acc[c] * inv;
    }
}

// SOFT_MAX of each row (exp in f32, sum in double, times 1 / sum), one thread per row.
extern "C" __global__ void k_soft_max(const float *x, float *dst, int ne0, int n_rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n_rows) return;
    const float *xr = x + (long long)r * ne0;
    float *yr = dst + (long long)r * ne0;
    float mx = NEG_INF;
    for (int i = 0; i < ne0; i++) mx = fmaxf(mx, xr[i]);
    double sum = 0.0;
    for (int i = 0; i < ne0; i++) {
        float e = xr[i] == NEG_INF ? 0.0f : expf(xr[i] - mx);
        yr[i] = e;
        sum += (double)e;
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < ne0; i++) yr[i] *= inv;
}

// ARGSORT (descending, ties by lower index) + the first k, as f32 indices; one thread per row
// (ne0 <= 1024).
extern "C" __global__ void k_top_k(const float *x, float *dst, int ne0, int k, int n_rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n_rows) return;
    const float *xr = x + (long long)r * ne0;
    u32 taken[32];
    for (int i = 0; i < 32; i++) taken[i] = 0;
    for (int c = 0; c < k; c++) {
        int best = -1;
        for (int i = 0; i < ne0; i++) {
            if (taken[i >> 5] & (1u << (i & 31))) continue;
            if (best < 0 || xr[i] > xr[best]) best = i;
        }
        taken[best >> 5] |= 1u << (best & 31);
        dst[(long long)r * k + c] = (float)best;
    }
}

// GET_ROWS per token: dst[t][i] = src[t][ids[t][i]].
extern "C" __global__ void k_get_rows_ids(const float *src, int src_ne0, const float *ids, float *dst,
                                          int ne0, int n_rows) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= ne0 * n_rows) return;
    int t = i / ne0;
    dst[i] = src[(long long)t * src_ne0 + (int)ids[i]];
}

// DIV of each row by its sum (in f32, in order, as the CPU).
extern "C" __global__ void k_div_sum_rows(const float *x, float *dst, int ne0, int n_rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n_rows) return;
    const float *xr = x + (long long)r * ne0;
    float s = 0.0f;
    for (int i = 0; i < ne0; i++) s += xr[i];
    for (int i = 0; i < ne0; i++) dst[(long long)r * ne0 + i] = xr[i] / s;
}

// dst[t][i] = sum over slots j of x[t * n_used + j][i] * w[t * n_used + j], in slot order.
extern "C" __global__ void k_weighted_sum(const float *x, const float *w, float *dst, int ne0, int n_used,
                                          int n_tokens) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)ne0 * n_tokens) return;
    int t = (int)(i / ne0), c = (int)(i % ne0);
    float s = 0.0f;
    for (int j = 0; j < n_used; j++) {
        long long p = (long long)t * n_used + j;
        float v = x[p * ne0 + c] * w[p];
        s = j == 0 ? v : s + v;
    }
    dst[i] = s;
}
