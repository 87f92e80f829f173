// llama_model_init_from_user on either library, as upstream's test-llama-archs calls it: the
// metadata of a fixture in a gguf_context of the process's libggml (key/value pairs only,
// plus one F16 type override), every tensor filled by a callback that seeds a generator with
// the tensor's name and writes with libggml's ggml_backend_tensor_set. Built by
// scripts/test-programs.sh against upstream's headers and libggml-base.
//   init_from_user logits FIXTURE    build the model, decode 8 tokens, print how many tensors
//                                    were filled, n_params and the last token's logits (%.6g)
//   init_from_user stream FIXTURE    the same, every tensor filled from one sequential stream (so
//                                    values depend on the callbacks' order and count): print
//                                    each callback's tensor name, then the last token's logits
//   init_from_user hostile FIXTURE   the failure cases both libraries survive: unknown
//                                    architecture, a missing hyperparameter (NULL each)
//   init_from_user refuse FIXTURE    ours only (upstream aborts or builds it): NULL metadata,
//                                    NULL callback, an override type that does not fit the
//                                    tensor, and FIXTURE itself (an architecture ours refuses)
#include "ggml-backend.h"
#include "ggml.h"
#include "gguf.h"
#include "llama.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Distinct tensor names filled: upstream fills a tensor a layer shares (llama's rope_freqs)
// once per buffer it is in, ours once, so the probes compare names, not calls.
static int n_calls;
static char names[4096][GGML_MAX_NAME];
static int n_names;

static void note(const char * name) {
    for (int i = 0; i < n_names; i++) {
        if (strcmp(names[i], name) == 0) return;
    }
    if (n_names < 4096) snprintf(names[n_names++], GGML_MAX_NAME, "%s", name);
}

static void quiet(enum ggml_log_level level, const char * text, void * ud) {
    (void) ud;
    if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR || getenv("INIT_USER_VERBOSE")) {
        fputs(text, stderr);
    }
}

// FNV-1a of the name, then a 64-bit LCG: values in [-0.1, 0.1), SSM A negative.
static void fill(struct ggml_tensor * t, void * ud) {
    (void) ud;
    n_calls++;
    note(t->name);
    if (getenv("INIT_USER_NAMES")) fprintf(stderr, "fill %s\n", t->name);
    uint64_t s = 1469598103934665603ull;
    for (const char * p = t->name; *p; p++) s = (s ^ (uint8_t) *p) * 1099511628211ull;
    const int64_t n = ggml_nelements(t);
    const int neg = strstr(t->name, "ssm_a") != NULL;
    float * v = malloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float x = ((float) (s >> 40) / (float) (1ull << 24) - 0.5f) * 0.2f;
        v[i] = neg ? -fabsf(x) : x;
    }
    if (t->type == GGML_TYPE_F32) {
        ggml_backend_tensor_set(t, v, 0, ggml_nbytes(t));
    } else if (t->type == GGML_TYPE_F16) {
        ggml_fp16_t * h = malloc(n * sizeof(ggml_fp16_t));
        for (int64_t i = 0; i < n; i++) h[i] = ggml_fp32_to_fp16(v[i]);
        ggml_backend_tensor_set(t, h, 0, ggml_nbytes(t));
        free(h);
    } else {
        memset(t->data, 0, ggml_nbytes(t));  // not asked for by this probe
    }
    free(v);
}

// One generator for every callback, in call order: a tensor's values depend on how many were
// drawn before it, so both libraries give the same model only with the same callback sequence.
static uint64_t stream_state = 88172645463325252ull;
static char * sequence;
static size_t sequence_len, sequence_cap;

static void fill_stream(struct ggml_tensor * t, void * ud) {
    (void) ud;
    n_calls++;
    note(t->name);
    const size_t len = strlen(t->name);
    if (sequence_len + len + 2 > sequence_cap) {
        sequence_cap = 2 * (sequence_cap + len + 2);
        sequence = realloc(sequence, sequence_cap);
    }
    memcpy(sequence + sequence_len, t->name, len);
    sequence_len += len;
    sequence[sequence_len++] = '\n';
    sequence[sequence_len] = 0;
    const int64_t n = ggml_nelements(t);
    const int neg = strstr(t->name, "ssm_a") != NULL;
    float * v = malloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        stream_state = stream_state * 6364136223846793005ull + 1442695040888963407ull;
        float x = ((float) (stream_state >> 40) / (float) (1ull << 24) - 0.5f) * 0.2f;
        v[i] = neg ? -fabsf(x) : x;
    }
    if (t->type == GGML_TYPE_F16) {
        ggml_fp16_t * h = malloc(n * sizeof(ggml_fp16_t));
        for (int64_t i = 0; i < n; i++) h[i] = ggml_fp32_to_fp16(v[i]);
        ggml_backend_tensor_set(t, h, 0, ggml_nbytes(t));
        free(h);
    } else if (t->type == GGML_TYPE_F32) {
        ggml_backend_tensor_set(t, v, 0, ggml_nbytes(t));
    } else {
        memset(t->data, 0, ggml_nbytes(t));  // not asked for by this probe
    }
    free(v);
}

// The fixture's key/value pairs in a fresh context, with `override_name` typed `type`.
static struct gguf_context * metadata(const char * path, const char * override_name, enum ggml_type type) {
    struct gguf_init_params gp = { /*no_alloc*/ true, /*ctx*/ NULL };
    struct gguf_context * file = gguf_init_from_file(path, gp);
    if (!file) { fprintf(stderr, "cannot read %s\n", path); exit(2); }
    struct gguf_context * meta = gguf_init_empty();
    gguf_set_kv(meta, file);
    gguf_free(file);
    if (override_name) {
        struct ggml_tensor t;
        memset(&t, 0, sizeof(t));
        t.type = type;
        ggml_set_name(&t, override_name);
        gguf_add_tensor(meta, &t);
    }
    return meta;
}

static struct llama_model * build(struct gguf_context * meta, llama_model_set_tensor_data_t cb) {
    struct llama_model_params mp = llama_model_default_params();
    return llama_model_init_from_user(meta, cb, NULL, mp);
}

static int logits(const char * path, llama_model_set_tensor_data_t cb) {
    struct gguf_context * meta = metadata(path, "blk.0.ffn_up.weight", GGML_TYPE_F16);
    struct llama_model * model = build(meta, cb);
    gguf_free(meta);  // the model keeps nothing of it
    if (!model) { fprintf(stderr, "init_from_user failed for %s\n", path); return 1; }
    const struct llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 64; cp.n_batch = 64; cp.n_ubatch = 64; cp.n_threads = 2; cp.n_threads_batch = 2;
    struct llama_context * ctx = llama_init_from_model(model, cp);
    llama_token toks[8];
    for (int i = 0; i < 8; i++) toks[i] = (i * 37 + 5) % n_vocab;
    // INIT_USER_ALL_OUTPUTS=1: every token an output (the last row printed all the same), for
    // cogvlm, whose upstream graph returns the first rows when fewer are asked for
    struct llama_batch batch = llama_batch_get_one(toks, 8);
    struct llama_batch all = llama_batch_init(8, 0, 1);
    if (getenv("INIT_USER_ALL_OUTPUTS")) {
        for (int i = 0; i < 8; i++) {
            all.token[i] = toks[i]; all.pos[i] = i; all.n_seq_id[i] = 1; all.seq_id[i][0] = 0; all.logits[i] = 1;
        }
        all.n_tokens = 8;
        batch = all;
    }
    if (!ctx || llama_decode(ctx, batch) != 0) {
        fprintf(stderr, "decode failed for %s\n", path);
        return 1;
    }
    if (cb == fill_stream) {
        printf("callbacks %d\n%s", n_calls, sequence ? sequence : "");
    } else {
        printf("tensors filled %d\nn_params %llu\n", n_names, (unsigned long long) llama_model_n_params(model));
    }
    const float * l = llama_get_logits_ith(ctx, -1);
    for (int i = 0; i < n_vocab; i++) printf("%.6g\n", l[i]);
    llama_batch_free(all);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

static int expect_null(const char * what, struct llama_model * m) {
    printf("%s: %s\n", what, m ? "model" : "NULL");
    if (m) llama_model_free(m);
    return m != NULL;
}

int main(int argc, char ** argv) {
    if (argc != 3) return 2;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    const char * mode = argv[1];
    const char * path = argv[2];
    if (strcmp(mode, "logits") == 0) return logits(path, fill);
    if (strcmp(mode, "stream") == 0) return logits(path, fill_stream);
    int bad = 0;
    if (strcmp(mode, "hostile") == 0) {
        struct gguf_context * meta = metadata(path, NULL, GGML_TYPE_F32);
        gguf_set_val_str(meta, "general.architecture", "made-up-arch");
        bad |= expect_null("unknown architecture", build(meta, fill));
        gguf_free(meta);
        meta = metadata(path, NULL, GGML_TYPE_F32);
        char key[128];
        const char * arch = gguf_get_val_str(meta, gguf_find_key(meta, "general.architecture"));
        snprintf(key, sizeof key, "%s.embedding_length", arch);
        gguf_remove_key(meta, key);
        bad |= expect_null("missing embedding_length", build(meta, fill));
        gguf_free(meta);
    } else if (strcmp(mode, "refuse") == 0) {
        bad |= expect_null("NULL metadata", build(NULL, fill));
        struct gguf_context * meta = metadata(path, NULL, GGML_TYPE_F32);
        bad |= expect_null("NULL callback", build(meta, NULL));
        gguf_free(meta);
        // Q4_K rows hold 256 values: ffn_down's 384-wide rows do not fit
        meta = metadata(path, "blk.0.ffn_down.weight", GGML_TYPE_Q4_K);
        bad |= expect_null("Q4_K override of a 384-wide tensor", build(meta, fill));
        gguf_free(meta);
    } else if (strcmp(mode, "refuse-arch") == 0) {
        struct gguf_context * meta = metadata(path, NULL, GGML_TYPE_F32);
        bad |= expect_null("undeclared architecture", build(meta, fill));
        gguf_free(meta);
    } else {
        return 2;
    }
    printf("callbacks %d\n", n_calls);
    return bad;
}
