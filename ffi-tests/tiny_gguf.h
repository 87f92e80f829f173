/* A tiny GGUF writer for the C harness and the demo: a llama-family model with F32 weights
 * and a small SPM-style vocabulary, written byte by byte as the GGUF v3 format lays it out.
 * tiny_gguf_write() returns 0 on success; TINY_GGUF_N_TENSORS tensors are written (a partial
 * model: it loads, but a context refuses it, as its graph cannot be built);
 * tiny_gguf_write_q8() writes the same file with one tensor stored as Q8_0. The _whole variants
 * write all TINY_GGUF_N_WHOLE tensors of a llama model, so a context can be made on it. */
#ifndef FFI_TESTS_TINY_GGUF_H
#define FFI_TESTS_TINY_GGUF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_EMBD = 64, N_VOCAB = 16, N_LAYER = 4, N_FF = 128, ALIGN = 32, TINY_GGUF_N_TENSORS = 2 + 3 * N_LAYER,
       TINY_GGUF_N_WHOLE = 3 + 9 * N_LAYER };

static void put_u32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); }
static void put_i32(FILE *f, int32_t v) { fwrite(&v, 4, 1, f); }
static void put_u64(FILE *f, uint64_t v) { fwrite(&v, 8, 1, f); }
static void put_f32(FILE *f, float v) { fwrite(&v, 4, 1, f); }
static void put_str(FILE *f, const char *s) { put_u64(f, strlen(s)); fwrite(s, 1, strlen(s), f); }
static void kv_str(FILE *f, const char *k, const char *v) { put_str(f, k); put_i32(f, 8); put_str(f, v); }
static void kv_u32(FILE *f, const char *k, uint32_t v) { put_str(f, k); put_i32(f, 4); put_u32(f, v); }
static void kv_f32(FILE *f, const char *k, float v) { put_str(f, k); put_i32(f, 6); put_f32(f, v); }

struct tensor { char name[64]; int n_dims; int64_t ne[2]; };

static uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = x & 0x7fffffu;
    if (exp <= 0) return (uint16_t)sign; /* tiny scales flush to zero (not reached here) */
    if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
    uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13);
    if (mant & 0x1000u) h++; /* round half up */
    return (uint16_t)h;
}

static float f16_to_f32(uint16_t h) {
    int exp = (h >> 10) & 0x1f;
    float m = (float)(h & 0x3ff);
    float v = exp == 0 ? ldexpf(m, -24) : ldexpf(1024.0f + m, exp - 25);
    return (h & 0x8000u) ? -v : v;
}

/* Q8_0: blocks of 32 values, an f16 scale (max |x| / 127) and 32 int8 quants. */
static void quantize_q8_0(const float *x, size_t n, uint8_t *out) {
    for (size_t b = 0; b < n / 32; b++) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
        uint16_t d16 = f32_to_f16(amax / 127.0f);
        float d = f16_to_f32(d16);
        memcpy(out + b * 34, &d16, 2);
        for (int i = 0; i < 32; i++) {
            float q = d > 0.0f ? roundf(x[b * 32 + i] / d) : 0.0f;
            out[b * 34 + 2 + i] = (uint8_t)(int8_t)fmaxf(-127.0f, fminf(127.0f, q));
        }
    }
}


/* The shared GGUF writer: one header layout (llama metadata and a tiny SPM-style vocabulary)
 * for every C test model. Callers describe their tensors, write the header and tensor infos
 * with tiny_gguf_begin, then each tensor's bytes in order with tiny_gguf_put_data. */
struct tiny_gguf_meta {
    const char *name;          /* general.name */
    uint32_t context_length, n_embd, n_layer, n_ff;
    uint64_t n_vocab;
    int with_chat_template;    /* tokenizer.chat_template */
    int with_scores;           /* tokenizer.ggml.scores */
};

struct tiny_gguf_info {
    const char *name;
    int n_dims;
    int64_t ne[2];
    int type;                  /* enum ggml_type */
    uint64_t nbytes;
};

/* Writes the header and tensor infos and pads to the data section. rel[i] (may be NULL)
 * receives tensor i's offset inside the data section. Returns the data section's offset. */
static long tiny_gguf_begin(FILE *f, const struct tiny_gguf_meta *m, int n, const struct tiny_gguf_info *t, uint64_t *rel) {
    fwrite("GGUF", 1, 4, f);
    put_u32(f, 3);
    put_u64(f, (uint64_t) n);
    put_u64(f, 11 + (uint64_t) (m->with_chat_template != 0) + (uint64_t) (m->with_scores != 0));
    kv_str(f, "general.architecture", "llama");
    kv_str(f, "general.name", m->name);
    kv_u32(f, "llama.context_length", m->context_length);
    kv_u32(f, "llama.embedding_length", m->n_embd);
    kv_u32(f, "llama.block_count", m->n_layer);
    kv_u32(f, "llama.feed_forward_length", m->n_ff);
    kv_u32(f, "llama.attention.head_count", 8);
    kv_u32(f, "llama.attention.head_count_kv", 4);
    kv_f32(f, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    kv_str(f, "tokenizer.ggml.model", "llama");
    if (m->with_chat_template) {
        kv_str(f, "tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}");
    }
    put_str(f, "tokenizer.ggml.tokens"); put_i32(f, 9); put_i32(f, 8); put_u64(f, m->n_vocab);
    for (uint64_t i = 0; i < m->n_vocab; i++) {
        char tok[24];
        if (i == 0) strcpy(tok, "<unk>"); else if (i == 1) strcpy(tok, "<s>"); else if (i == 2) strcpy(tok, "</s>");
        else snprintf(tok, sizeof tok, "tok%d", (int) i);
        put_str(f, tok);
    }
    if (m->with_scores) {
        put_str(f, "tokenizer.ggml.scores"); put_i32(f, 9); put_i32(f, 6); put_u64(f, m->n_vocab);
        for (uint64_t i = 0; i < m->n_vocab; i++) put_f32(f, -(float) i);
    }
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        put_str(f, t[i].name);
        put_u32(f, (uint32_t) t[i].n_dims);
        for (int d = 0; d < t[i].n_dims; d++) put_u64(f, (uint64_t) t[i].ne[d]);
        put_i32(f, t[i].type);
        put_u64(f, offset);
        if (rel) rel[i] = offset;
        offset += (t[i].nbytes + ALIGN - 1) / ALIGN * ALIGN;
    }
    long pos = ftell(f);
    while (pos % ALIGN) { fputc(0, f); pos++; }
    return pos;
}

/* Writes one tensor's bytes and its padding. */
static void tiny_gguf_put_data(FILE *f, const void *data, uint64_t nbytes) {
    fwrite(data, 1, nbytes, f);
    for (uint64_t p = nbytes; p % ALIGN; p++) fputc(0, f);
}

/* Writes a GGUF v3 file: llama metadata, a tiny SPM-style vocabulary, F32 weights — except
 * tensor `q8_name` (NULL: none), stored as Q8_0; then *q8_offset (absolute) and *q8_size say
 * where its bytes are. Returns 0 on success. */
static int tiny_gguf_write_model(const char *path, int whole, const char *q8_name, long *q8_offset, size_t *q8_size) {
    struct tensor t[TINY_GGUF_N_WHOLE];
    struct tiny_gguf_info info[TINY_GGUF_N_WHOLE];
    uint64_t rel[TINY_GGUF_N_WHOLE];
    int n = 0;
#define TINY_T(dims, e0, e1, ...) \
    do { snprintf(t[n].name, 64, __VA_ARGS__); t[n].n_dims = dims; t[n].ne[0] = e0; t[n].ne[1] = e1; n++; } while (0)
    TINY_T(2, N_EMBD, N_VOCAB, "token_embd.weight");
    for (int l = 0; l < N_LAYER; l++) {
        TINY_T(1, N_EMBD, 1, "blk.%d.attn_norm.weight", l);
        TINY_T(2, N_EMBD, N_EMBD, "blk.%d.attn_q.weight", l);
        if (whole) { /* 8 heads, 4 KV heads: K and V are half as wide as Q */
            TINY_T(2, N_EMBD, N_EMBD / 2, "blk.%d.attn_k.weight", l);
            TINY_T(2, N_EMBD, N_EMBD / 2, "blk.%d.attn_v.weight", l);
            TINY_T(2, N_EMBD, N_EMBD, "blk.%d.attn_output.weight", l);
            TINY_T(1, N_EMBD, 1, "blk.%d.ffn_norm.weight", l);
            TINY_T(2, N_EMBD, N_FF, "blk.%d.ffn_gate.weight", l);
        }
        TINY_T(2, N_EMBD, N_FF, "blk.%d.ffn_up.weight", l);
        if (whole) TINY_T(2, N_FF, N_EMBD, "blk.%d.ffn_down.weight", l);
    }
    if (whole) TINY_T(1, N_EMBD, 1, "output_norm.weight");
    TINY_T(2, N_EMBD, N_VOCAB, "output.weight");
#undef TINY_T
    int q8_index = -1;
    for (int i = 0; i < n; i++) {
        int q8 = q8_name != NULL && strcmp(t[i].name, q8_name) == 0;
        uint64_t count = (uint64_t) t[i].ne[0] * t[i].ne[1];
        if (q8) q8_index = i;
        info[i].name = t[i].name;
        info[i].n_dims = t[i].n_dims;
        info[i].ne[0] = t[i].ne[0];
        info[i].ne[1] = t[i].ne[1];
        info[i].type = q8 ? 8 : 0; /* GGML_TYPE_Q8_0 : GGML_TYPE_F32 */
        info[i].nbytes = q8 ? count / 32 * 34 : count * 4;
    }
    const struct tiny_gguf_meta meta = { "demo", 2048, N_EMBD, N_LAYER, N_FF, N_VOCAB, 1, 1 };

    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    long pos = tiny_gguf_begin(f, &meta, n, info, rel);
    if (q8_index >= 0) {
        if (q8_offset) *q8_offset = pos + (long) rel[q8_index];
        if (q8_size) *q8_size = (size_t) info[q8_index].nbytes;
    }
    for (int i = 0; i < n; i++) {
        uint64_t count = (uint64_t) t[i].ne[0] * t[i].ne[1];
        float *values = malloc(count * sizeof *values);
        for (uint64_t e = 0; e < count; e++) values[e] = (float) ((e * 7 + i) % 13) / 13.0f - 0.5f;
        if (i == q8_index) {
            uint8_t *q = malloc(info[i].nbytes);
            quantize_q8_0(values, count, q);
            tiny_gguf_put_data(f, q, info[i].nbytes);
            free(q);
        } else {
            tiny_gguf_put_data(f, values, info[i].nbytes);
        }
        free(values);
    }
    return fclose(f);
}

static inline int tiny_gguf_write_q8(const char *path, const char *q8_name, long *q8_offset, size_t *q8_size) {
    return tiny_gguf_write_model(path, 0, q8_name, q8_offset, q8_size);
}
static inline int tiny_gguf_write_whole_q8(const char *path, const char *q8_name, long *q8_offset, size_t *q8_size) {
    return tiny_gguf_write_model(path, 1, q8_name, q8_offset, q8_size);
}

/* Writes a GGUF v3 file: llama metadata, a tiny SPM-style vocabulary, F32 weights. */
static inline int tiny_gguf_write(const char *path) { return tiny_gguf_write_q8(path, NULL, NULL, NULL); }
static inline int tiny_gguf_write_whole(const char *path) { return tiny_gguf_write_whole_q8(path, NULL, NULL, NULL); }

#endif
