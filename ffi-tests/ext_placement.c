/*
 * Device placement through the C API, read back with the extensions: llama_model_params
 * (n_gpu_layers, split_mode, main_gpu, tensor_split, devices, tensor_buft_overrides) decide
 * where each tensor goes; llama_ext_tensor_info, llama_ext_model_placement_json and
 * llama_ext_tensor_read show where it went and that its bytes are the file's.
 *
 * main() sets LLAMA_VIRTUAL_GPUS=64MiB,32MiB before the first library call, so the devices
 * are VGPU0 (64 MiB), VGPU1 (32 MiB), CPU (index 2), and the default split points are
 * 2/3 and 1.
 *
 * Models (written here):
 *   tiny     tiny_gguf.h: 4 blocks of attn_norm [64], attn_q [64,64], ffn_up [64,128] (F32),
 *            token_embd and output [64,16]; values from tiny_gguf.h's formula.
 *   quant    2 blocks, n_embd 256: attn_q Q4_0 [256,96], ffn_up Q4_K [256,768] (arbitrary
 *            bytes), F32 norms and embeddings, output Q4_0 — for ROW rounding to 32 and 256.
 *   big      1 block whose ffn_up (F32 [512,16896], 33 MiB) does not fit on VGPU1 (32 MiB).
 */
#define _POSIX_C_SOURCE 200809L
#include "llama.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"
#include "logcap.h"
#include "tiny_gguf.h"

#define MIB ((size_t)1 << 20)
enum { VGPU0 = 0, VGPU1 = 1, CPU = 2 };
enum { T_F32 = 0, T_Q4_0 = 2, T_Q4_K = 12 };

static char tiny_path[64];
static char quant_path[64];
static char big_path[64];

/* ---- the tiny model's expected bytes (tiny_gguf.h's formula) ---------------------------- */

/* Tensor i of tiny_gguf.h: 0 token_embd, 1 + 3l attn_norm, 2 + 3l attn_q, 3 + 3l ffn_up,
 * 13 output. */
static void tiny_name(int i, char *name, size_t size) {
    if (i == 0) {
        snprintf(name, size, "token_embd.weight");
    } else if (i == TINY_GGUF_N_TENSORS - 1) {
        snprintf(name, size, "output.weight");
    } else {
        const char *kind[3] = { "attn_norm", "attn_q", "ffn_up" };
        snprintf(name, size, "blk.%d.%s.weight", (i - 1) / 3, kind[(i - 1) % 3]);
    }
}

static uint64_t tiny_count(int i) {
    if (i == 0 || i == TINY_GGUF_N_TENSORS - 1) return (uint64_t)N_EMBD * N_VOCAB;
    switch ((i - 1) % 3) {
    case 0: return N_EMBD;
    case 1: return (uint64_t)N_EMBD * N_EMBD;
    default: return (uint64_t)N_EMBD * N_FF;
    }
}

/* Every tensor of the tiny model reads back as tiny_gguf.h wrote it. */
static void check_tiny_bytes(const struct llama_model *m, const char *what) {
    for (int i = 0; i < TINY_GGUF_N_TENSORS; i++) {
        char name[64];
        uint64_t count = tiny_count(i);
        float *got = malloc(count * sizeof(float));
        float *want = malloc(count * sizeof(float));
        tiny_name(i, name, sizeof name);
        for (uint64_t e = 0; e < count; e++) want[e] = (float)((e * 7 + (uint64_t)i) % 13) / 13.0f - 0.5f;
        int64_t n = llama_ext_tensor_read(m, name, got, count * sizeof(float));
        if (!CHECK_INT(n, (int64_t)(count * sizeof(float))) ||
            !CHECK(memcmp(got, want, count * sizeof(float)) == 0)) {
            printf("  (%s: %s)\n", what, name);
        }
        free(got);
        free(want);
    }
}

/* ---- a GGUF writer for the other models (arbitrary bytes, offsets recorded) ------------- */

struct spec {
    char name[64];
    int n_dims;
    int64_t ne[2];
    int type;
    uint64_t abs_offset; /* filled by write_model */
    uint64_t nbytes;
};

static uint64_t nbytes_of(const struct spec *s) {
    uint64_t n = (uint64_t)s->ne[0] * (uint64_t)(s->n_dims > 1 ? s->ne[1] : 1);
    switch (s->type) {
    case T_Q4_0: return n / 32 * 18;
    case T_Q4_K: return n / 256 * 144;
    default: return n * 4;
    }
}

static void add_spec(struct spec *t, int *n, const char *name, int n_dims, int64_t ne0, int64_t ne1, int type) {
    snprintf(t[*n].name, sizeof t[*n].name, "%s", name);
    t[*n].n_dims = n_dims;
    t[*n].ne[0] = ne0;
    t[*n].ne[1] = ne1;
    t[*n].type = type;
    t[*n].nbytes = nbytes_of(&t[*n]);
    (*n)++;
}

static int write_model(const char *path, uint32_t n_embd, uint32_t n_ff, uint32_t n_layer, struct spec *t, int n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    struct tiny_gguf_info info[64] = { { 0 } };
    uint64_t rel[64] = { 0 };
    if (n > 64) { fclose(f); return -1; }
    for (int i = 0; i < n; i++) {
        info[i].name = t[i].name;
        info[i].n_dims = t[i].n_dims;
        info[i].ne[0] = t[i].ne[0];
        info[i].ne[1] = t[i].ne[1];
        info[i].type = t[i].type;
        info[i].nbytes = t[i].nbytes;
    }
    const struct tiny_gguf_meta meta = { "placement", 256, n_embd, n_layer, n_ff, 16, 0, 0 };
    long pos = tiny_gguf_begin(f, &meta, n, info, rel);
    for (int i = 0; i < n; i++) t[i].abs_offset = rel[i]; /* relative for now */
    uint64_t x = 0x9E3779B97F4A7C15ull;
    unsigned char *chunk = malloc(1 << 16);
    for (int i = 0; i < n; i++) {
        t[i].abs_offset += (uint64_t)pos;
        uint64_t left = t[i].nbytes;
        while (left > 0) {
            size_t k = left < (1u << 16) ? (size_t)left : (size_t)1 << 16;
            for (size_t b = 0; b < k; b++) {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                chunk[b] = (unsigned char)(x >> 24);
            }
            fwrite(chunk, 1, k, f);
            left -= k;
        }
        for (uint64_t p = t[i].nbytes; p % ALIGN; p++) fputc(0, f);
    }
    free(chunk);
    return fclose(f);
}

/* Every tensor of a written model reads back equal to the file's bytes at its offset. */
static void check_file_bytes(const struct llama_model *m, const char *path, const struct spec *t, int n,
                             const char *what) {
    FILE *f = fopen(path, "rb");
    if (!CHECK_NOT_NULL(f)) return;
    for (int i = 0; i < n; i++) {
        unsigned char *want = malloc(t[i].nbytes);
        unsigned char *got = malloc(t[i].nbytes);
        fseek(f, (long)t[i].abs_offset, SEEK_SET);
        CHECK_INT(fread(want, 1, t[i].nbytes, f), t[i].nbytes);
        int64_t r = llama_ext_tensor_read(m, t[i].name, got, t[i].nbytes);
        if (!CHECK_INT(r, (int64_t)t[i].nbytes) || !CHECK(memcmp(got, want, t[i].nbytes) == 0)) {
            printf("  (%s: %s)\n", what, t[i].name);
        }
        free(want);
        free(got);
    }
    fclose(f);
}

static struct spec quant[16];
static int n_quant;
static struct spec big[8];
static int n_big;

/* ---- helpers -------------------------------------------------------------------------- */

static struct llama_ext_tensor_info info_of(const struct llama_model *m, const char *name) {
    struct llama_ext_tensor_info info;
    memset(&info, 0xAB, sizeof info);
    if (llama_ext_tensor_info(m, name, &info) != 0) {
        CHECK(!"llama_ext_tensor_info found the tensor");
        printf("  (%s)\n", name);
    }
    return info;
}

/* Checks a tensor's device and buffer kind. */
#define CHECK_AT(m, name, dev, buf)                                        \
    do {                                                                   \
        struct llama_ext_tensor_info i_ = info_of((m), (name));            \
        if (!CHECK_INT(i_.device, (dev)) | !CHECK_INT(i_.buffer, (buf))) { \
            printf("  (tensor %s)\n", (name));                             \
        }                                                                  \
    } while (0)

/* The placement JSON, NUL-terminated (caller frees). */
static char *placement_json(const struct llama_model *m) {
    int32_t n = llama_ext_model_placement_json(m, NULL, 0);
    CHECK(n > 0);
    if (n <= 0) return NULL;
    char *buf = malloc((size_t)n + 1);
    CHECK_INT(llama_ext_model_placement_json(m, buf, (size_t)n + 1), n);
    CHECK_INT(strlen(buf), n);
    return buf;
}

/* The JSON object of one tensor: from {"name":"<name>" to its closing brace. */
static int json_tensor_has(const char *json, const char *name, const char *needle) {
    char key[96];
    snprintf(key, sizeof key, "{\"name\":\"%s\"", name);
    const char *start = strstr(json, key);
    if (!start) return 0;
    const char *end = strstr(start + 1, "{\"name\":");
    const char *hit = strstr(start, needle);
    return hit != NULL && (end == NULL || hit < end);
}

static size_t dev_free(int dev) {
    size_t free = 0, total = 0;
    ggml_backend_dev_memory(ggml_backend_dev_get((size_t)dev), &free, &total);
    return free;
}

static struct llama_model *load(const char *path, struct llama_model_params p) {
    struct llama_model *m = llama_model_load_from_file(path, p);
    CHECK_NOT_NULL(m);
    return m;
}

static struct llama_model_params with(int32_t ngl, enum llama_split_mode mode, int32_t main_gpu) {
    struct llama_model_params p = llama_model_default_params();
    p.n_gpu_layers = ngl;
    p.split_mode = mode;
    p.main_gpu = main_gpu;
    return p;
}

/* Tiny model: the device of blk.0-3 and the output (index 4), -1 for CPU. */
static void check_tiny_layers(const struct llama_model *m, const int *layer_dev, enum llama_load_mode mode) {
    const int cpu_buf = mode == LLAMA_LOAD_MODE_AUTO || mode == LLAMA_LOAD_MODE_MMAP ? LLAMA_EXT_BUFFER_MAPPED
                                                                                      : LLAMA_EXT_BUFFER_HOST;
    CHECK_AT(m, "token_embd.weight", CPU, cpu_buf);
    for (int l = 0; l <= N_LAYER; l++) {
        const char *kinds[3] = { "attn_norm", "attn_q", "ffn_up" };
        for (int k = 0; k < 3; k++) {
            char name[64];
            if (l == N_LAYER) {
                if (k > 0) break;
                snprintf(name, sizeof name, "output.weight");
            } else {
                snprintf(name, sizeof name, "blk.%d.%s.weight", l, kinds[k]);
            }
            if (layer_dev[l] < 0) {
                CHECK_AT(m, name, CPU, cpu_buf);
            } else {
                CHECK_AT(m, name, layer_dev[l], LLAMA_EXT_BUFFER_DEVICE);
            }
        }
    }
}

static const enum llama_load_mode MODES[3] = { LLAMA_LOAD_MODE_AUTO, LLAMA_LOAD_MODE_NONE, LLAMA_LOAD_MODE_DIRECT_IO };

/* ---- tests ---------------------------------------------------------------------------- */

TEST(devices_come_from_the_environment) {
    CHECK_INT(ggml_backend_dev_count(), 3);
    CHECK_STR(ggml_backend_dev_name(ggml_backend_dev_get(VGPU0)), "VGPU0");
    CHECK_STR(ggml_backend_dev_name(ggml_backend_dev_get(VGPU1)), "VGPU1");
    CHECK_STR(ggml_backend_dev_name(ggml_backend_dev_get(CPU)), "CPU");
    CHECK(dev_free(VGPU0) == 64 * MIB);
    CHECK(dev_free(VGPU1) == 32 * MIB);
}

TEST(default_params_split_layers_by_free_memory) {
    /* 5 layers (4 blocks + output), split points 2/3 and 1: fractions 0, .2, .4, .6 go to
     * VGPU0, .8 (the output) to VGPU1. */
    const int want[5] = { VGPU0, VGPU0, VGPU0, VGPU0, VGPU1 };
    for (int k = 0; k < 3; k++) {
        struct llama_model_params p = llama_model_default_params();
        p.load_mode = MODES[k];
        struct llama_model *m = load(tiny_path, p);
        if (!m) continue;
        check_tiny_layers(m, want, MODES[k]);
        check_tiny_bytes(m, "default params");
        /* Capacity accounting: VGPU0 holds 4 blocks, VGPU1 the output. */
        const size_t block = (N_EMBD + N_EMBD * N_EMBD + N_EMBD * N_FF) * 4;
        const size_t out = N_EMBD * N_VOCAB * 4;
        CHECK(dev_free(VGPU0) == 64 * MIB - 4 * block);
        CHECK(dev_free(VGPU1) == 32 * MIB - out);
        char *json = placement_json(m);
        if (json) {
            char want_dev[160];
            snprintf(want_dev, sizeof want_dev,
                     "{\"index\":0,\"name\":\"VGPU0\",\"type\":\"GPU\",\"total\":%zu,\"free\":%zu,\"used\":%zu}",
                     64 * MIB, 64 * MIB - 4 * block, 4 * block);
            CHECK(strstr(json, want_dev) != NULL);
            snprintf(want_dev, sizeof want_dev,
                     "{\"index\":1,\"name\":\"VGPU1\",\"type\":\"GPU\",\"total\":%zu,\"free\":%zu,\"used\":%zu}",
                     32 * MIB, 32 * MIB - out, out);
            CHECK(strstr(json, want_dev) != NULL);
            snprintf(want_dev, sizeof want_dev, "\"name\":\"CPU\",\"type\":\"CPU\"");
            CHECK(strstr(json, want_dev) != NULL);
            CHECK(json_tensor_has(json, "output.weight", "\"device\":\"VGPU1\",\"buffer\":\"device\""));
            CHECK(json_tensor_has(json, "token_embd.weight", "\"device\":\"CPU\""));
            CHECK(json_tensor_has(json, "blk.3.ffn_up.weight", "\"device\":\"VGPU0\""));
            CHECK(strstr(json, "fallback_from") == NULL);
            CHECK(strstr(json, "\"rows\"") == NULL);
            free(json);
        }
        llama_model_free(m);
        CHECK(dev_free(VGPU0) == 64 * MIB);
        CHECK(dev_free(VGPU1) == 32 * MIB);
    }
}

TEST(placement_json_follows_snprintf) {
    struct llama_model *m = load(tiny_path, llama_model_default_params());
    if (!m) return;
    int32_t n = llama_ext_model_placement_json(m, NULL, 0);
    CHECK(n > 100);
    char small[16];
    memset(small, 'x', sizeof small);
    CHECK_INT(llama_ext_model_placement_json(m, small, sizeof small), n);
    CHECK_INT(strlen(small), sizeof small - 1);
    CHECK(strncmp(small, "{\"devices\":[", 12) == 0);
    char one = 'x';
    CHECK_INT(llama_ext_model_placement_json(m, &one, 1), n);
    CHECK_INT(one, '\0');
    char *json = placement_json(m);
    if (json) {
        CHECK(json[0] == '{' && json[n - 1] == '}');
        free(json);
    }
    CHECK_INT(llama_ext_model_placement_json(NULL, NULL, 0), -1);
    llama_model_free(m);
}

TEST(n_gpu_layers_edges) {
    const int32_t ngls[] = { 0, 1, 2, N_LAYER, N_LAYER + 1, N_LAYER + 2, 1000, -1 };
    /* The device of blk.0-3 and output for each n_gpu_layers (-1 = CPU): the last ngl layers
     * are offloaded, split 2/3 : 1/3 among themselves. */
    const int want[8][5] = {
        { -1, -1, -1, -1, -1 },
        { -1, -1, -1, -1, VGPU0 },             /* 1: only the output */
        { -1, -1, -1, VGPU0, VGPU0 },          /* fractions 0, .5 */
        { -1, VGPU0, VGPU0, VGPU0, VGPU1 },    /* 0, .25, .5, .75 */
        { VGPU0, VGPU0, VGPU0, VGPU0, VGPU1 }, /* all */
        { VGPU0, VGPU0, VGPU0, VGPU0, VGPU1 },
        { VGPU0, VGPU0, VGPU0, VGPU0, VGPU1 },
        { VGPU0, VGPU0, VGPU0, VGPU0, VGPU1 },
    };
    for (int i = 0; i < 8; i++) {
        for (int k = 0; k < 3; k++) {
            struct llama_model_params p = with(ngls[i], LLAMA_SPLIT_MODE_LAYER, 0);
            p.load_mode = MODES[k];
            struct llama_model *m = load(tiny_path, p);
            if (!m) continue;
            check_tiny_layers(m, want[i], MODES[k]);
            check_tiny_bytes(m, "ngl edges");
            llama_model_free(m);
        }
    }
}

TEST(split_mode_none_uses_main_gpu) {
    const int all1[5] = { VGPU1, VGPU1, VGPU1, VGPU1, VGPU1 };
    const int all0[5] = { VGPU0, VGPU0, VGPU0, VGPU0, VGPU0 };
    const int none[5] = { -1, -1, -1, -1, -1 };
    struct llama_model *m = load(tiny_path, with(-1, LLAMA_SPLIT_MODE_NONE, 1));
    if (m) { check_tiny_layers(m, all1, LLAMA_LOAD_MODE_AUTO); check_tiny_bytes(m, "NONE 1"); llama_model_free(m); }
    m = load(tiny_path, with(-1, LLAMA_SPLIT_MODE_NONE, 0));
    if (m) { check_tiny_layers(m, all0, LLAMA_LOAD_MODE_AUTO); llama_model_free(m); }
    m = load(tiny_path, with(-1, LLAMA_SPLIT_MODE_NONE, -1));
    if (m) { check_tiny_layers(m, none, LLAMA_LOAD_MODE_AUTO); check_tiny_bytes(m, "NONE -1"); llama_model_free(m); }
    /* Out of range: the load fails with upstream's message. */
    logcap_clear();
    CHECK_NULL(llama_model_load_from_file(tiny_path, with(-1, LLAMA_SPLIT_MODE_NONE, 2)));
    CHECK(logcap_contains("invalid value for main_gpu: 2 (available devices: 2)"));
    CHECK_NULL(llama_model_load_from_file(tiny_path, with(0, LLAMA_SPLIT_MODE_NONE, 9)));
    /* LAYER ignores main_gpu. */
    const int layer[5] = { VGPU0, VGPU0, VGPU0, VGPU0, VGPU1 };
    m = load(tiny_path, with(-1, LLAMA_SPLIT_MODE_LAYER, 9));
    if (m) { check_tiny_layers(m, layer, LLAMA_LOAD_MODE_AUTO); llama_model_free(m); }
    CHECK(dev_free(VGPU0) == 64 * MIB && dev_free(VGPU1) == 32 * MIB);
}

TEST(devices_list_and_tensor_split) {
    ggml_backend_dev_t only1[2] = { ggml_backend_dev_get(VGPU1), NULL };
    ggml_backend_dev_t reversed[3] = { ggml_backend_dev_get(VGPU1), ggml_backend_dev_get(VGPU0), NULL };
    float halves[128] = { 1.0f, 1.0f };
    float one_three[128] = { 1.0f, 3.0f };
    float zeros[128] = { 0 };

    struct llama_model_params p = with(-1, LLAMA_SPLIT_MODE_LAYER, 0);
    p.devices = only1;
    const int all1[5] = { VGPU1, VGPU1, VGPU1, VGPU1, VGPU1 };
    struct llama_model *m = load(tiny_path, p);
    if (m) { check_tiny_layers(m, all1, LLAMA_LOAD_MODE_AUTO); llama_model_free(m); }

    /* Listed order wins: VGPU1 first, weights 1:1 → fractions 0, .2, .4 on VGPU1. */
    p.devices = reversed;
    p.tensor_split = halves;
    const int rev[5] = { VGPU1, VGPU1, VGPU1, VGPU0, VGPU0 };
    m = load(tiny_path, p);
    if (m) { check_tiny_layers(m, rev, LLAMA_LOAD_MODE_AUTO); check_tiny_bytes(m, "reversed"); llama_model_free(m); }

    /* tensor_split entries are proportions: 1:3 → split point .25. */
    p = with(-1, LLAMA_SPLIT_MODE_LAYER, 0);
    p.tensor_split = one_three;
    const int q[5] = { VGPU0, VGPU0, VGPU1, VGPU1, VGPU1 };
    m = load(tiny_path, p);
    if (m) { check_tiny_layers(m, q, LLAMA_LOAD_MODE_AUTO); llama_model_free(m); }

    /* All zero: free memory decides (2/3). */
    p.tensor_split = zeros;
    const int dflt[5] = { VGPU0, VGPU0, VGPU0, VGPU0, VGPU1 };
    m = load(tiny_path, p);
    if (m) { check_tiny_layers(m, dflt, LLAMA_LOAD_MODE_AUTO); llama_model_free(m); }

    /* A device that is not one of ours fails the load. */
    int not_a_device = 0;
    ggml_backend_dev_t bogus[2] = { (ggml_backend_dev_t)(void *)&not_a_device, NULL };
    p = llama_model_default_params();
    p.devices = bogus;
    CHECK_NULL(llama_model_load_from_file(tiny_path, p));
}

TEST(tensor_buft_overrides) {
    const struct llama_model_tensor_buft_override ot[] = {
        { "ffn_up", ggml_backend_cpu_buffer_type() },
        { "blk\\.0\\.", ggml_backend_dev_buffer_type(ggml_backend_dev_get(VGPU1)) },
        { "attn_q", ggml_backend_dev_buffer_type(ggml_backend_dev_get(VGPU1)) },
        { "^token_embd", ggml_backend_dev_buffer_type(ggml_backend_dev_get(VGPU0)) },
        { NULL, NULL },
    };
    for (int k = 0; k < 3; k++) {
        struct llama_model_params p = llama_model_default_params();
        p.tensor_buft_overrides = ot;
        p.load_mode = MODES[k];
        struct llama_model *m = load(tiny_path, p);
        if (!m) continue;
        const int cpu_buf = MODES[k] == LLAMA_LOAD_MODE_AUTO ? LLAMA_EXT_BUFFER_MAPPED : LLAMA_EXT_BUFFER_HOST;
        /* First match wins: blk.0.ffn_up matches "ffn_up" before "blk\.0\.". */
        CHECK_AT(m, "blk.0.ffn_up.weight", CPU, cpu_buf);
        CHECK_AT(m, "blk.3.ffn_up.weight", CPU, cpu_buf);
        CHECK_AT(m, "blk.0.attn_norm.weight", VGPU1, LLAMA_EXT_BUFFER_DEVICE);
        CHECK_AT(m, "blk.2.attn_q.weight", VGPU1, LLAMA_EXT_BUFFER_DEVICE);
        CHECK_AT(m, "blk.2.attn_norm.weight", VGPU0, LLAMA_EXT_BUFFER_DEVICE);
        CHECK_AT(m, "token_embd.weight", VGPU0, LLAMA_EXT_BUFFER_DEVICE);
        CHECK_AT(m, "output.weight", VGPU1, LLAMA_EXT_BUFFER_DEVICE);
        check_tiny_bytes(m, "overrides");
        llama_model_free(m);
    }
    /* An override moves a tensor of a CPU layer to a GPU. */
    const struct llama_model_tensor_buft_override to_gpu[] = {
        { "blk\\.1\\.attn_q", ggml_backend_dev_buffer_type(ggml_backend_dev_get(VGPU1)) },
        { NULL, NULL },
    };
    struct llama_model_params p = with(0, LLAMA_SPLIT_MODE_LAYER, 0);
    p.tensor_buft_overrides = to_gpu;
    struct llama_model *m = load(tiny_path, p);
    if (m) {
        CHECK_AT(m, "blk.1.attn_q.weight", VGPU1, LLAMA_EXT_BUFFER_DEVICE);
        CHECK_AT(m, "blk.1.ffn_up.weight", CPU, LLAMA_EXT_BUFFER_MAPPED);
        CHECK_AT(m, "output.weight", CPU, LLAMA_EXT_BUFFER_MAPPED);
        check_tiny_bytes(m, "override to GPU");
        llama_model_free(m);
    }
    /* An invalid pattern fails the load. */
    const struct llama_model_tensor_buft_override bad[] = {
        { "ffn_(up", ggml_backend_cpu_buffer_type() },
        { NULL, NULL },
    };
    p = llama_model_default_params();
    p.tensor_buft_overrides = bad;
    logcap_clear();
    CHECK_NULL(llama_model_load_from_file(tiny_path, p));
    CHECK(logcap_contains("ffn_(up"));
}

TEST(row_split_f32) {
    for (int k = 0; k < 3; k++) {
        struct llama_model_params p = with(-1, LLAMA_SPLIT_MODE_ROW, 0);
        p.load_mode = MODES[k];
        struct llama_model *m = load(tiny_path, p);
        if (!m) continue;
        for (int l = 0; l < N_LAYER; l++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.attn_q.weight", l);
            struct llama_ext_tensor_info i = info_of(m, name);
            CHECK_INT(i.buffer, LLAMA_EXT_BUFFER_ROW_SPLIT);
            CHECK_INT(i.n_row_slices, 2);
            CHECK_INT(i.device, VGPU0);
            CHECK_INT(i.load_fallback, 0);
            snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
            CHECK_AT(m, name, VGPU0, LLAMA_EXT_BUFFER_DEVICE);
        }
        /* The output layer is not split. */
        CHECK_AT(m, "output.weight", VGPU1, LLAMA_EXT_BUFFER_DEVICE);
        char *json = placement_json(m);
        if (json) {
            /* 64 rows at 2/3: 42 | 22; 128 rows: 85 | 43 (F32: no rounding). */
            CHECK(json_tensor_has(json, "blk.0.attn_q.weight",
                                  "\"rows\":[{\"device\":\"VGPU0\",\"first\":0,\"count\":42},"
                                  "{\"device\":\"VGPU1\",\"first\":42,\"count\":22}]"));
            CHECK(json_tensor_has(json, "blk.3.ffn_up.weight",
                                  "\"rows\":[{\"device\":\"VGPU0\",\"first\":0,\"count\":85},"
                                  "{\"device\":\"VGPU1\",\"first\":85,\"count\":43}]"));
            CHECK(json_tensor_has(json, "blk.0.attn_q.weight", "\"buffer\":\"row_split\""));
            free(json);
        }
        /* Slices are accounted per device: VGPU0 holds 42 + 85 rows and a norm per block. */
        const size_t v0 = (size_t)N_LAYER * (42 + 85 + 1) * N_EMBD * 4;
        const size_t v1 = (size_t)N_LAYER * (22 + 43) * N_EMBD * 4 + N_EMBD * N_VOCAB * 4;
        CHECK(dev_free(VGPU0) == 64 * MIB - v0);
        CHECK(dev_free(VGPU1) == 32 * MIB - v1);
        check_tiny_bytes(m, "ROW f32");
        llama_model_free(m);
    }
}

TEST(row_split_rounds_to_the_block_size) {
    float halves[128] = { 1.0f, 1.0f };
    for (int k = 0; k < 3; k++) {
        struct llama_model_params p = with(-1, LLAMA_SPLIT_MODE_ROW, 0);
        p.tensor_split = halves;
        p.load_mode = MODES[k];
        struct llama_model *m = load(quant_path, p);
        if (!m) continue;
        char *json = placement_json(m);
        if (json) {
            /* Q4_0, 96 rows at 1/2: 48 → 32. Q4_K, 768 rows: 384 → 256. */
            CHECK(json_tensor_has(json, "blk.1.attn_q.weight",
                                  "\"rows\":[{\"device\":\"VGPU0\",\"first\":0,\"count\":32},"
                                  "{\"device\":\"VGPU1\",\"first\":32,\"count\":64}]"));
            CHECK(json_tensor_has(json, "blk.0.ffn_up.weight",
                                  "\"rows\":[{\"device\":\"VGPU0\",\"first\":0,\"count\":256},"
                                  "{\"device\":\"VGPU1\",\"first\":256,\"count\":512}]"));
            CHECK(json_tensor_has(json, "blk.0.ffn_up.weight", "\"type\":\"q4_K\""));
            CHECK(!json_tensor_has(json, "blk.0.attn_norm.weight", "\"rows\""));
            free(json);
        }
        struct llama_ext_tensor_info i = info_of(m, "blk.0.ffn_up.weight");
        CHECK_INT(i.type, T_Q4_K);
        CHECK_INT(i.n_row_slices, 2);
        CHECK_INT(i.ne[0], 256);
        CHECK_INT(i.ne[1], 768);
        CHECK_AT(m, "output.weight", VGPU1, LLAMA_EXT_BUFFER_DEVICE);
        check_file_bytes(m, quant_path, quant, n_quant, "ROW quant");
        llama_model_free(m);
    }
}

TEST(full_gpu_falls_back_to_cpu) {
    for (int k = 0; k < 3; k++) {
        /* Everything on VGPU1 (32 MiB): the 33 MiB ffn_up does not fit. */
        struct llama_model_params p = with(-1, LLAMA_SPLIT_MODE_NONE, 1);
        p.load_mode = MODES[k];
        logcap_clear();
        struct llama_model *m = load(big_path, p);
        if (!m) continue;
        const int cpu_buf = MODES[k] == LLAMA_LOAD_MODE_AUTO ? LLAMA_EXT_BUFFER_MAPPED : LLAMA_EXT_BUFFER_HOST;
        struct llama_ext_tensor_info i = info_of(m, "blk.0.ffn_up.weight");
        CHECK_INT(i.load_fallback, 1);
        CHECK_INT(i.device, CPU);
        CHECK_INT(i.buffer, cpu_buf);
        CHECK(logcap_contains("blk.0.ffn_up.weight"));
        CHECK(logcap_contains("falling back to CPU"));
        i = info_of(m, "blk.0.attn_q.weight");
        CHECK_INT(i.load_fallback, 0);
        CHECK_AT(m, "blk.0.attn_q.weight", VGPU1, LLAMA_EXT_BUFFER_DEVICE);
        CHECK_AT(m, "output.weight", VGPU1, LLAMA_EXT_BUFFER_DEVICE);
        char *json = placement_json(m);
        if (json) {
            CHECK(json_tensor_has(json, "blk.0.ffn_up.weight", "\"device\":\"CPU\""));
            CHECK(json_tensor_has(json, "blk.0.ffn_up.weight", "\"fallback_from\":\"VGPU1\""));
            CHECK(!json_tensor_has(json, "blk.0.attn_q.weight", "fallback_from"));
            free(json);
        }
        /* VGPU1 holds what fit: the norm, attn_q and the output; nothing of ffn_up. */
        size_t on_gpu = 0;
        for (int t = 0; t < n_big; t++) {
            if (strcmp(big[t].name, "blk.0.ffn_up.weight") != 0 && strcmp(big[t].name, "token_embd.weight") != 0) {
                on_gpu += big[t].nbytes;
            }
        }
        CHECK(dev_free(VGPU1) == 32 * MIB - on_gpu);
        check_file_bytes(m, big_path, big, n_big, "fallback");
        llama_model_free(m);
        CHECK(dev_free(VGPU1) == 32 * MIB);
    }
    /* VGPU0 (64 MiB) has room: no fallback. */
    struct llama_model *m = load(big_path, with(-1, LLAMA_SPLIT_MODE_NONE, 0));
    if (m) {
        struct llama_ext_tensor_info i = info_of(m, "blk.0.ffn_up.weight");
        CHECK_INT(i.load_fallback, 0);
        CHECK_INT(i.device, VGPU0);
        CHECK_INT(i.buffer, LLAMA_EXT_BUFFER_DEVICE);
        check_file_bytes(m, big_path, big, n_big, "no fallback");
        llama_model_free(m);
    }
}

TEST(no_alloc_is_a_dry_run) {
    struct llama_model_params p = with(2, LLAMA_SPLIT_MODE_LAYER, 0);
    p.no_alloc = true;
    struct llama_model *m = load(tiny_path, p);
    if (!m) return;
    /* Planned devices are reported; nothing holds bytes or uses GPU memory. */
    struct llama_ext_tensor_info i = info_of(m, "blk.3.attn_q.weight");
    CHECK_INT(i.device, VGPU0);
    CHECK_INT(i.buffer, LLAMA_EXT_BUFFER_NONE);
    i = info_of(m, "blk.0.attn_q.weight");
    CHECK_INT(i.device, CPU);
    CHECK_INT(i.buffer, LLAMA_EXT_BUFFER_NONE);
    float dst[N_EMBD * N_EMBD];
    CHECK_INT(llama_ext_tensor_read(m, "blk.3.attn_q.weight", dst, sizeof dst), -1);
    CHECK(dev_free(VGPU0) == 64 * MIB);
    llama_model_free(m);
}

static int make_path(char *path, const char *tag) {
    snprintf(path, 64, "/tmp/llama-hotswap-%s-XXXXXX", tag);
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    close(fd);
    return 0;
}

int main(void) {
    /* Before any library call: the registry reads the variable once. */
    setenv("LLAMA_VIRTUAL_GPUS", "64MiB,32MiB", 1);

    if (make_path(tiny_path, "pl-tiny") || tiny_gguf_write(tiny_path) != 0) return 2;

    add_spec(quant, &n_quant, "token_embd.weight", 2, 256, 16, T_F32);
    for (int l = 0; l < 2; l++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        add_spec(quant, &n_quant, name, 1, 256, 1, T_F32);
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", l);
        add_spec(quant, &n_quant, name, 2, 256, 96, T_Q4_0);
        snprintf(name, sizeof name, "blk.%d.ffn_up.weight", l);
        add_spec(quant, &n_quant, name, 2, 256, 768, T_Q4_K);
    }
    add_spec(quant, &n_quant, "output_norm.weight", 1, 256, 1, T_F32);
    add_spec(quant, &n_quant, "output.weight", 2, 256, 16, T_Q4_0);
    if (make_path(quant_path, "pl-quant") || write_model(quant_path, 256, 768, 2, quant, n_quant) != 0) return 2;

    add_spec(big, &n_big, "token_embd.weight", 2, 512, 16, T_F32);
    add_spec(big, &n_big, "blk.0.attn_norm.weight", 1, 512, 1, T_F32);
    add_spec(big, &n_big, "blk.0.attn_q.weight", 2, 512, 512, T_F32);
    add_spec(big, &n_big, "blk.0.ffn_up.weight", 2, 512, 16896, T_F32);
    add_spec(big, &n_big, "output.weight", 2, 512, 16, T_F32);
    if (make_path(big_path, "pl-big") || write_model(big_path, 512, 16896, 1, big, n_big) != 0) return 2;

    logcap_install();
    RUN(devices_come_from_the_environment);
    RUN(default_params_split_layers_by_free_memory);
    RUN(placement_json_follows_snprintf);
    RUN(n_gpu_layers_edges);
    RUN(split_mode_none_uses_main_gpu);
    RUN(devices_list_and_tensor_split);
    RUN(tensor_buft_overrides);
    RUN(row_split_f32);
    RUN(row_split_rounds_to_the_block_size);
    RUN(full_gpu_falls_back_to_cpu);
    RUN(no_alloc_is_a_dry_run);
    unlink(tiny_path);
    unlink(quant_path);
    unlink(big_path);
    return harness_finish();
}
