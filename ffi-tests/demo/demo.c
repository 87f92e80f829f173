/* The demo host: writes a small GGUF model, loads it through llama.h like any llama.cpp
 * host would, and prints what the library knows about it. It grows with each feature.
 *
 * Hot-swap part: two virtual GPUs (48 MiB, 16 MiB) and LLAMA_HOTSWAP_ENABLED=1 are set first
 * thing in main; the model is loaded across both GPUs (split mode LAYER, all layers
 * offloaded), one tensor is quantized to Q8_0 in a new version of the file (renamed into
 * place), and llama_reload_changed_tensors picks it up.
 *
 * Real-model part (SmolLM2-135M Q4_1, path in argv[2]): tokenize a prompt, greedy-generate a
 * few tokens through llama_decode, then replace blk.0.ffn_down.weight (Q4_1) by a Q8_0 copy
 * with llama_ext_tensor_set, decode the prompt again (logits change), put the Q4_1 bytes back
 * and decode once more (logits bit-identical to the first run). Exits 1 if anything is off. */
#define _POSIX_C_SOURCE 200809L
#include "llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tiny_gguf.h"

#define SWAPPED "output.weight" /* on VGPU1 */

static bool on_progress(float progress, void *user_data) {
    float *last = user_data;
    last[0] += 1.0f; /* callbacks */
    last[1] = progress;
    return true;
}

/* ---- placement table ---- */

static const char *type_name(int32_t type) {
    switch (type) {
    case GGML_TYPE_F32: return "f32";
    case GGML_TYPE_F16: return "f16";
    case GGML_TYPE_Q4_0: return "q4_0";
    case GGML_TYPE_Q8_0: return "q8_0";
    default: return "?";
    }
}

static const char *buffer_name(int32_t buffer) {
    static const char *names[] = { "none", "mapped", "host", "device", "row_split" };
    return buffer >= 0 && buffer <= 4 ? names[buffer] : "?";
}

static const char *device_name(int32_t device) {
    return device < 0 ? "-" : ggml_backend_dev_name(ggml_backend_dev_get((size_t) device));
}

/* One line for a group of tensors (a layer, the input or the output): where they are and what
 * types they have (each type once, with its count). */
static void print_group(const struct llama_model *model, const char *label, const char *prefix,
                        const char *const *names, int n) {
    int type_count[64] = { 0 };
    uint64_t bytes = 0;
    int found = 0;
    struct llama_ext_tensor_info info = { 0 };
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s%s", prefix, names[i]);
        if (llama_ext_tensor_info(model, name, &info) != 0) continue;
        bytes += info.nbytes;
        found++;
        if (info.type >= 0 && info.type < 64) type_count[info.type]++;
    }
    char types[160] = "";
    for (int t = 0; t < 64; t++) {
        if (!type_count[t]) continue;
        size_t len = strlen(types);
        snprintf(types + len, sizeof types - len, "%s%d x %s", len ? ", " : "", type_count[t], type_name(t));
    }
    printf("  %-7s %-6s %-7s %7llu B  %d tensors (%s)\n", label, device_name(info.device), buffer_name(info.buffer),
           (unsigned long long) bytes, found, types);
}

static void print_layer(const struct llama_model *model, int layer) {
    static const char *const blk[] = { "attn_norm.weight", "attn_q.weight", "attn_k.weight",
                                       "attn_v.weight", "attn_output.weight", "ffn_norm.weight",
                                       "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight" };
    char label[16], prefix[16];
    snprintf(label, sizeof label, "blk.%d", layer);
    snprintf(prefix, sizeof prefix, "blk.%d.", layer);
    print_group(model, label, prefix, blk, (int) (sizeof blk / sizeof blk[0]));
}

static const char *const in_names[] = { "token_embd.weight" }, *const out_names[] = { "output_norm.weight", "output.weight" };

static void print_placement(const struct llama_model *model) {
    printf("  %-7s %-6s %-7s %9s  %s\n", "layer", "device", "buffer", "bytes", "tensors (type)");
    print_group(model, "input", "", in_names, 1);
    for (int l = 0; l < N_LAYER; l++) print_layer(model, l);
    print_group(model, "output", "", out_names, 2);
}

static void print_devices(void) {
    printf("  devices:");
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        size_t free_b = 0, total = 0;
        ggml_backend_dev_memory(dev, &free_b, &total);
        if (ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU) continue;
        printf("%s %s %zu B used of %zu MiB", i ? "," : "", ggml_backend_dev_name(dev), total - free_b, total >> 20);
    }
    printf("\n");
}

static int hotswap_demo(const char *path) {
    /* Across both virtual GPUs: split mode LAYER, every layer offloaded (the defaults, spelled
     * out). */
    struct llama_model_params params = llama_model_default_params();
    params.split_mode = LLAMA_SPLIT_MODE_LAYER;
    params.n_gpu_layers = -1;
    struct llama_model *model = llama_model_load_from_file(path, params);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    struct llama_context *ctx = llama_init_from_model(model, llama_context_default_params());
    if (!ctx || llama_get_model(ctx) != model) { fprintf(stderr, "context failed\n"); return 1; }
    printf("\nhot-swap: LLAMA_HOTSWAP_ENABLED=%s, LLAMA_VIRTUAL_GPUS=%s, split LAYER, all layers offloaded\n",
           getenv("LLAMA_HOTSWAP_ENABLED"), getenv("LLAMA_VIRTUAL_GPUS"));
    print_placement(model);
    print_devices();

    /* A new version of the file with one tensor quantized, written beside it and renamed over
     * it (the mapping of the old file stays valid). */
    char tmp[512];
    long q8_offset = 0;
    size_t q8_size = 0;
    snprintf(tmp, sizeof tmp, "%s.new", path);
    if (tiny_gguf_write_whole_q8(tmp, SWAPPED, &q8_offset, &q8_size) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "cannot write the new version\n");
        return 1;
    }
    printf("\nwrote a new %s with %s as q8_0 (renamed into place)\n", path, SWAPPED);
    uint64_t gen = llama_ext_model_generation(model);
    bool reloaded = llama_reload_changed_tensors(ctx);
    printf("llama_reload_changed_tensors(ctx) = %s; generation %llu -> %llu; graph stale: %s\n",
           reloaded ? "true" : "false", (unsigned long long) gen,
           (unsigned long long) llama_ext_model_generation(model),
           llama_ext_context_graph_is_stale(ctx) ? "yes" : "no");
    char json[1024];
    llama_ext_reload_report_json(model, json, sizeof json);
    printf("  report: %s\n", json);
    int32_t entries = llama_ext_reload_report_count(model);
    for (int32_t i = 0; i < entries; i++) {
        struct llama_ext_reload_entry e;
        if (llama_ext_reload_report_entry(model, i, &e) != 0) continue;
        static const char *const outcomes[] = { "IN_PLACE", "RELOCATED", "RETURNED_TO_ORIGINAL",
                                                "CPU_FALLBACK", "REFUSED", "FAILED" };
        printf("  entry %d: %s LLAMA_EXT_RELOAD_%s, %s -> %s, now on %s%s%s\n", (int) i, e.name,
               e.outcome >= 0 && e.outcome < 6 ? outcomes[e.outcome] : "?", type_name(e.old_type),
               type_name(e.new_type), e.device, e.reason[0] ? ": " : "", e.reason);
    }
    printf("  placement now (the f32 original stays allocated on its GPU for a return to it):\n");
    print_group(model, "output", "", out_names, 2);
    print_devices();

    /* The bytes the model holds now are the new file's bytes. */
    struct llama_ext_tensor_info info;
    uint8_t *from_file = malloc(q8_size), *from_model = malloc(q8_size);
    FILE *f = fopen(path, "rb");
    int ok = f && fseek(f, q8_offset, SEEK_SET) == 0 && fread(from_file, 1, q8_size, f) == q8_size;
    if (f) fclose(f);
    ok = ok && llama_ext_tensor_read(model, SWAPPED, from_model, q8_size) == (int64_t) q8_size &&
         memcmp(from_file, from_model, q8_size) == 0;
    ok = ok && llama_ext_tensor_info(model, SWAPPED, &info) == 0 && info.type == GGML_TYPE_Q8_0;
    ok = ok && reloaded && entries == 1;
    printf("%s: %zu bytes of %s read back from the model equal the new file's bytes at offset %ld\n",
           ok ? "verified" : "MISMATCH", q8_size, SWAPPED, q8_offset);
    free(from_file);
    free(from_model);
    llama_free(ctx);
    llama_model_free(model);
    return ok ? 0 : 1;
}


/* ---- the real model: generate, swap one tensor's type, swap back ---- */

#define PROMPT "The capital of France is"
#define SWAP_REAL "blk.0.ffn_down.weight"
#define N_GENERATE 8

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t) (h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    float value;
    if (exp == 0) value = ldexpf((float) mant, -24); /* subnormal */
    else if (exp == 31) value = mant ? NAN : INFINITY;
    else value = ldexpf((float) (mant | 0x400), (int) exp - 25);
    return sign ? -value : value;
}

/* Round to nearest even; the scales here are small normal numbers. */
static uint16_t float_to_half(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    uint16_t sign = (uint16_t) ((bits >> 16) & 0x8000);
    float a = fabsf(f);
    if (a == 0.0f) return sign;
    if (a >= 65520.0f) return sign | 0x7c00;
    int e;
    frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    int exp = e - 1 + 15;
    if (exp <= 0) return sign | (uint16_t) lrintf(ldexpf(a, 24)); /* subnormal */
    uint32_t mant = (uint32_t) lrintf(ldexpf(a, 11 - e)); /* 11 significant bits */
    if (mant == 0x800) { mant = 0x400; exp++; }
    return sign | (uint16_t) (exp << 10) | (uint16_t) (mant & 0x3ff);
}

/* Q4_1 (per 32 values: f16 d, f16 m, 16 bytes of nibbles; x = q*d + m) to Q8_0 (per 32: f16
 * d, 32 int8; x = q*d), as ggml's reference quantizer does it. */
static void q4_1_to_q8_0(const uint8_t *src, uint8_t *dst, size_t blocks) {
    for (size_t b = 0; b < blocks; b++, src += 20, dst += 34) {
        float x[32], amax = 0.0f;
        float d = half_to_float((uint16_t) (src[0] | src[1] << 8));
        float m = half_to_float((uint16_t) (src[2] | src[3] << 8));
        for (int j = 0; j < 16; j++) {
            x[j] = (float) (src[4 + j] & 0x0f) * d + m;
            x[j + 16] = (float) (src[4 + j] >> 4) * d + m;
        }
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        float scale = amax / 127.0f, inv = scale ? 1.0f / scale : 0.0f;
        uint16_t h = float_to_half(scale);
        dst[0] = (uint8_t) h;
        dst[1] = (uint8_t) (h >> 8);
        for (int j = 0; j < 32; j++) dst[2 + j] = (uint8_t) (int8_t) lrintf(x[j] * inv);
    }
}

/* Clears the memory, decodes the prompt and copies the last position's logits into `out`. */
static int decode_prompt(struct llama_context *ctx, llama_token *tokens, int n, float *out, int n_vocab) {
    llama_memory_clear(llama_get_memory(ctx), true);
    if (llama_decode(ctx, llama_batch_get_one(tokens, n)) != 0) return 1;
    const float *logits = llama_get_logits_ith(ctx, -1);
    if (!logits) return 1;
    memcpy(out, logits, (size_t) n_vocab * sizeof *out);
    return 0;
}

static int real_model_demo(const char *path) {
    struct llama_model_params mparams = llama_model_default_params();
    mparams.n_gpu_layers = 0; /* the CPU engine computes */
    struct llama_model *model = llama_model_load_from_file(path, mparams);
    if (!model) { fprintf(stderr, "cannot load %s\n", path); return 1; }
    struct llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = 256;
    cparams.n_batch = 256;
    struct llama_context *ctx = llama_init_from_model(model, cparams);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 1; }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(vocab);
    char desc[128];
    llama_model_desc(model, desc, sizeof desc);
    printf("\nreal model: %s (%s)\n", desc, path);

    llama_token tokens[64];
    int n = llama_tokenize(vocab, PROMPT, (int32_t) strlen(PROMPT), tokens, 64, true, false);
    if (n <= 0) { fprintf(stderr, "tokenize failed\n"); return 1; }
    printf("  prompt \"%s\" -> %d tokens:", PROMPT, n);
    for (int i = 0; i < n; i++) printf(" %d", tokens[i]);
    printf("\n");

    float *first = malloc((size_t) n_vocab * sizeof(float));
    float *swapped = malloc((size_t) n_vocab * sizeof(float));
    float *back = malloc((size_t) n_vocab * sizeof(float));
    int rc = decode_prompt(ctx, tokens, n, first, n_vocab);
    if (rc) { fprintf(stderr, "decode failed\n"); return 1; }

    /* Greedy generation, one token per llama_decode. */
    struct llama_sampler *greedy = llama_sampler_init_greedy();
    printf("  greedy: \"%s", PROMPT);
    for (int i = 0; i < N_GENERATE && rc == 0; i++) {
        llama_token next = llama_sampler_sample(greedy, ctx, -1);
        if (llama_vocab_is_eog(vocab, next)) break;
        char piece[64];
        int len = llama_token_to_piece(vocab, next, piece, sizeof piece, 0, false);
        printf("%.*s", len > 0 ? len : 0, piece);
        fflush(stdout);
        rc = llama_decode(ctx, llama_batch_get_one(&next, 1)) != 0;
    }
    printf("\"\n");
    llama_sampler_free(greedy);
    if (rc) { fprintf(stderr, "decode failed while generating\n"); return 1; }

    /* Swap in a Q8_0 copy of one Q4_1 tensor. */
    struct llama_ext_tensor_info info;
    if (llama_ext_tensor_info(model, SWAP_REAL, &info) != 0 || info.type != GGML_TYPE_Q4_1) {
        fprintf(stderr, "%s is not Q4_1 in this model\n", SWAP_REAL);
        return 1;
    }
    size_t q4_size = (size_t) info.nbytes, blocks = q4_size / 20, q8_size = blocks * 34;
    uint8_t *q4 = malloc(q4_size), *q8 = malloc(q8_size);
    if (llama_ext_tensor_read(model, SWAP_REAL, q4, q4_size) != (int64_t) q4_size) return 1;
    q4_1_to_q8_0(q4, q8, blocks);
    int set = llama_ext_tensor_set(model, SWAP_REAL, GGML_TYPE_Q8_0, q8, q8_size);
    llama_ext_tensor_info(model, SWAP_REAL, &info);
    printf("  llama_ext_tensor_set(%s, q8_0, %zu bytes) = %d; type now %s\n", SWAP_REAL, q8_size,
           set, type_name(info.type));
    if (set != 1 || info.type != GGML_TYPE_Q8_0) { fprintf(stderr, "swap to q8_0 failed\n"); return 1; }
    rc = decode_prompt(ctx, tokens, n, swapped, n_vocab);
    float max_diff = 0.0f;
    for (int i = 0; i < n_vocab; i++) max_diff = fmaxf(max_diff, fabsf(first[i] - swapped[i]));
    printf("  prompt decoded again: max |logit diff| vs the Q4_1 run = %g (%s)\n", max_diff,
           max_diff > 0.0f ? "changed" : "UNCHANGED");
    rc = rc || !(max_diff > 0.0f);

    /* Swap the original bytes back: the logits must be bit-identical to the first run. */
    set = llama_ext_tensor_set(model, SWAP_REAL, GGML_TYPE_Q4_1, q4, q4_size);
    rc = rc || set != 1 || decode_prompt(ctx, tokens, n, back, n_vocab);
    bool same = rc == 0 && memcmp(first, back, (size_t) n_vocab * sizeof(float)) == 0;
    printf("  swapped back to q4_1 (= %d): logits %s to the first run\n", set,
           same ? "bit-identical (memcmp)" : "DIFFERENT");
    free(q4);
    free(q8);
    free(first);
    free(swapped);
    free(back);
    llama_free(ctx);
    llama_model_free(model);
    return same ? 0 : 1;
}

int main(int argc, char **argv) {
    /* First thing: the library reads these on first use (GPUs) and at load (hot-swap). */
    setenv("LLAMA_VIRTUAL_GPUS", "48MiB,16MiB", 1);
    setenv("LLAMA_HOTSWAP_ENABLED", "1", 1);
    const char *path = argc > 1 ? argv[1] : "demo-model.gguf";
    if (tiny_gguf_write_whole(path) != 0) { fprintf(stderr, "cannot write %s\n", path); return 1; }
    printf("llama-hotswap demo (llama.cpp API %s)\n", llama_version());
    printf("wrote %s (%d tensors, all f32)\n", path, TINY_GGUF_N_WHOLE);

    llama_backend_init();
    const enum llama_load_mode modes[] = { LLAMA_LOAD_MODE_MMAP, LLAMA_LOAD_MODE_NONE, LLAMA_LOAD_MODE_DIRECT_IO };
    struct llama_model *first = NULL;
    float last = 0.0f;
    int calls[3] = { 0, 0, 0 };
    printf("loaded in");
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        struct llama_model_params params = llama_model_default_params();
        float progress[2] = { 0.0f, 0.0f };
        params.load_mode = modes[i];
        params.progress_callback = on_progress;
        params.progress_callback_user_data = progress;
        int64_t t0 = llama_time_us();
        struct llama_model *model = llama_model_load_from_file(path, params);
        if (!model) { fprintf(stderr, "load failed (mode %s)\n", llama_load_mode_name(modes[i])); return 1; }
        printf("%s %.2f ms (%s)", i ? "," : "", (llama_time_us() - t0) / 1000.0, llama_load_mode_name(modes[i]));
        calls[i] = (int) progress[0];
        last = progress[1];
        if (i == 0) first = model;
        else llama_model_free(model);
    }
    printf("; progress callbacks %d/%d/%d, last = %.1f\n", calls[0], calls[1], calls[2], last);
    char buf[256];
    llama_model_desc(first, buf, sizeof buf);
    printf("  desc: %s; size=%llu bytes, n_params=%llu, ftype=%s\n", buf,
           (unsigned long long) llama_model_size(first), (unsigned long long) llama_model_n_params(first),
           llama_ftype_name(llama_model_ftype(first)));
    printf("  n_ctx_train=%d n_embd=%d n_layer=%d n_head=%d n_head_kv=%d rope_type=%d\n",
           llama_model_n_ctx_train(first), llama_model_n_embd(first), llama_model_n_layer(first),
           llama_model_n_head(first), llama_model_n_head_kv(first), (int) llama_model_rope_type(first));
    printf("  metadata (%d keys):", llama_model_meta_count(first));
    int col = 22;
    for (int k = 0; k < llama_model_meta_count(first); k++) {
        char key[128], val[128], item[260];
        llama_model_meta_key_by_index(first, k, key, sizeof key);
        llama_model_meta_val_str_by_index(first, k, val, sizeof val);
        int len = snprintf(item, sizeof item, " %s=%s", key, val);
        if (col + len > 100) { printf("\n   "); col = 3; }
        printf("%s", item);
        col += len;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(first);
    printf("\n  vocab: type=%d n_tokens=%d bos=%d '%s' eos=%d '%s'; chat template: %s\n",
           (int) llama_vocab_type(vocab), llama_vocab_n_tokens(vocab), llama_vocab_bos(vocab),
           llama_vocab_get_text(vocab, llama_vocab_bos(vocab)), llama_vocab_eos(vocab),
           llama_vocab_get_text(vocab, llama_vocab_eos(vocab)), llama_model_chat_template(first, NULL));
    llama_model_free(first);
    int rc = hotswap_demo(path);
    if (rc == 0 && argc > 2) rc = real_model_demo(argv[2]);
    llama_backend_free();
    printf("\n%s\n", rc == 0 ? "done" : "FAILED");
    return rc;
}
