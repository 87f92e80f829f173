/* A tiny GGUF writer for the C harness and the demo: a llama-family model with F32 weights
 * and a small SPM-style vocabulary, written byte by byte as the GGUF v3 format lays it out.
 * tiny_gguf_write() returns 0 on success; TINY_GGUF_N_TENSORS tensors are written. */
#ifndef FFI_TESTS_TINY_GGUF_H
#define FFI_TESTS_TINY_GGUF_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { N_EMBD = 64, N_VOCAB = 16, N_LAYER = 4, N_FF = 128, ALIGN = 32, TINY_GGUF_N_TENSORS = 2 + 3 * N_LAYER };

static void put_u32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); }
static void put_i32(FILE *f, int32_t v) { fwrite(&v, 4, 1, f); }
static void put_u64(FILE *f, uint64_t v) { fwrite(&v, 8, 1, f); }
static void put_f32(FILE *f, float v) { fwrite(&v, 4, 1, f); }
static void put_str(FILE *f, const char *s) { put_u64(f, strlen(s)); fwrite(s, 1, strlen(s), f); }
static void kv_str(FILE *f, const char *k, const char *v) { put_str(f, k); put_i32(f, 8); put_str(f, v); }
static void kv_u32(FILE *f, const char *k, uint32_t v) { put_str(f, k); put_i32(f, 4); put_u32(f, v); }
static void kv_f32(FILE *f, const char *k, float v) { put_str(f, k); put_i32(f, 6); put_f32(f, v); }

struct tensor { char name[64]; int n_dims; int64_t ne[2]; };

/* Writes a GGUF v3 file: llama metadata, a tiny SPM-style vocabulary, F32 weights. */
static int tiny_gguf_write(const char *path) {
    struct tensor t[2 + 3 * N_LAYER + 1];
    int n = 0;
    snprintf(t[n].name, 64, "token_embd.weight"); t[n].n_dims = 2; t[n].ne[0] = N_EMBD; t[n].ne[1] = N_VOCAB; n++;
    for (int l = 0; l < N_LAYER; l++) {
        snprintf(t[n].name, 64, "blk.%d.attn_norm.weight", l); t[n].n_dims = 1; t[n].ne[0] = N_EMBD; t[n].ne[1] = 1; n++;
        snprintf(t[n].name, 64, "blk.%d.attn_q.weight", l); t[n].n_dims = 2; t[n].ne[0] = N_EMBD; t[n].ne[1] = N_EMBD; n++;
        snprintf(t[n].name, 64, "blk.%d.ffn_up.weight", l); t[n].n_dims = 2; t[n].ne[0] = N_EMBD; t[n].ne[1] = N_FF; n++;
    }
    snprintf(t[n].name, 64, "output.weight"); t[n].n_dims = 2; t[n].ne[0] = N_EMBD; t[n].ne[1] = N_VOCAB; n++;

    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fwrite("GGUF", 1, 4, f);
    put_u32(f, 3);
    put_u64(f, (uint64_t) n);
    put_u64(f, 13);
    kv_str(f, "general.architecture", "llama");
    kv_str(f, "general.name", "demo");
    kv_u32(f, "llama.context_length", 2048);
    kv_u32(f, "llama.embedding_length", N_EMBD);
    kv_u32(f, "llama.block_count", N_LAYER);
    kv_u32(f, "llama.feed_forward_length", N_FF);
    kv_u32(f, "llama.attention.head_count", 8);
    kv_u32(f, "llama.attention.head_count_kv", 4);
    kv_f32(f, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    kv_str(f, "tokenizer.ggml.model", "llama");
    kv_str(f, "tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}");
    put_str(f, "tokenizer.ggml.tokens"); put_i32(f, 9); put_i32(f, 8); put_u64(f, N_VOCAB);
    for (int i = 0; i < N_VOCAB; i++) {
        char tok[16];
        if (i == 0) strcpy(tok, "<unk>"); else if (i == 1) strcpy(tok, "<s>"); else if (i == 2) strcpy(tok, "</s>");
        else snprintf(tok, sizeof tok, "tok%d", i);
        put_str(f, tok);
    }
    put_str(f, "tokenizer.ggml.scores"); put_i32(f, 9); put_i32(f, 6); put_u64(f, N_VOCAB);
    for (int i = 0; i < N_VOCAB; i++) put_f32(f, -(float) i);

    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        put_str(f, t[i].name);
        put_u32(f, (uint32_t) t[i].n_dims);
        for (int d = 0; d < t[i].n_dims; d++) put_u64(f, (uint64_t) t[i].ne[d]);
        put_i32(f, 0); /* GGML_TYPE_F32 */
        put_u64(f, offset);
        uint64_t bytes = (uint64_t) t[i].ne[0] * t[i].ne[1] * 4;
        offset += (bytes + ALIGN - 1) / ALIGN * ALIGN;
    }
    long pos = ftell(f);
    while (pos % ALIGN) { fputc(0, f); pos++; }
    for (int i = 0; i < n; i++) {
        uint64_t count = (uint64_t) t[i].ne[0] * t[i].ne[1];
        for (uint64_t e = 0; e < count; e++) put_f32(f, (float) ((e * 7 + i) % 13) / 13.0f - 0.5f);
        uint64_t bytes = count * 4;
        for (uint64_t p = bytes; p % ALIGN; p++) fputc(0, f);
    }
    return fclose(f);
}

#endif
