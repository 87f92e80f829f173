/*
 * Engine differential probe: compiled against UPSTREAM's llama.h, run on upstream's library
 * and on ours. Loads a model, decodes a prompt of token ids in one batch with logits for every
 * position, then N greedy single-token steps (llama_batch_get_one: automatic positions), and
 * writes every logits row to OUT (int32 n_vocab, int32 n_rows, then n_rows x n_vocab float32)
 * and the greedy tokens to stdout.
 *
 * usage: probe_decode MODEL OUT N_STEPS TOKEN... [env PROBE_THREADS, PROBE_TYPE_K=f32|f16|bf16|
 *        q8_0|q4_0|q4_1|... (both caches), PROBE_TYPE_V (V only), PROBE_FLASH_ATTN=-1|0|1,
 *        PROBE_UBATCH, PROBE_GPU_LAYERS, PROBE_NO_MMAP=1 (load_mode NONE),
 *        PROBE_RPC=HOST:PORT,... (rpc-servers: our library's llama_ext_rpc_add_server when it
 *        has it, else upstream's way, as its --rpc: ggml_backend_rpc_add_server through the
 *        RPC registry's proc address, then ggml_backend_register), PROBE_TENSOR_SPLIT=A,B,...,
 *        PROBE_KV_UNIFIED=0|1 (default 0, upstream's),
 *        PROBE_SEQ2=1 (decode the prompt as two sequences in one batch and write sequence
 *        1's rows), PROBE_MEMOPS=1 (after the prompt: seq_rm of
 *        the last 3 positions and their decode again, seq_cp to sequence 1 and a token there,
 *        seq_rm of positions 2..3 with seq_add shifting the rest back, and a token; 5 more
 *        rows before the greedy steps),
 *        PROBE_LORA=FILE (a LoRA adapter, llama_adapter_lora_init + llama_set_adapters_lora)
 *        with PROBE_LORA_SCALE (default 1), PROBE_LORA_CLEAR=1 (set it, decode the prompt,
 *        then clear the adapters and the memory before the run proper),
 *        PROBE_CVEC=IL_START:IL_END:AMPLITUDE (a control vector of pseudo-random directions
 *        for layers 1..n_layer-1, llama_set_adapter_cvec), PROBE_CVEC_CLEAR=1 (set it, decode
 *        the prompt, then turn it off and clear the memory)]
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>

#include "llama.h"
#include "../rpc_servers.h"

static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (v[i] > v[best]) best = i;
    return best;
}

static enum ggml_type cache_type(const char *name) {
    static const struct { const char *name; enum ggml_type type; } types[] = {
        {"f32", GGML_TYPE_F32}, {"f16", GGML_TYPE_F16}, {"bf16", GGML_TYPE_BF16},
        {"q8_0", GGML_TYPE_Q8_0}, {"q4_0", GGML_TYPE_Q4_0}, {"q4_1", GGML_TYPE_Q4_1},
        {"q5_0", GGML_TYPE_Q5_0}, {"q5_1", GGML_TYPE_Q5_1}, {"iq4_nl", GGML_TYPE_IQ4_NL},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(types[i].name, name) == 0) return types[i].type;
    fprintf(stderr, "unknown cache type %s\n", name);
    exit(2);
}

static void quiet(enum ggml_log_level level, const char *text, void *data) {
    (void) data;
    if (level >= GGML_LOG_LEVEL_WARN || getenv("PROBE_VERBOSE")) fputs(text, stderr);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL OUT N_STEPS TOKEN...\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, NULL);
    const char *model_path = argv[1], *out_path = argv[2];
    int n_steps = atoi(argv[3]);
    int n_prompt = argc - 4;
    llama_token *prompt = malloc(sizeof(llama_token) * n_prompt);
    for (int i = 0; i < n_prompt; i++) prompt[i] = atoi(argv[4 + i]);
    const char *env;

    if ((env = getenv("PROBE_RPC")) && add_rpc_servers(env) != 0) return 1;
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = (env = getenv("PROBE_GPU_LAYERS")) ? atoi(env) : 0;
    static float split[16];
    if ((env = getenv("PROBE_TENSOR_SPLIT"))) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", env);
        int k = 0;
        for (char *v = strtok(buf, ","); v && k < 16; v = strtok(NULL, ",")) split[k++] = (float) atof(v);
        mp.tensor_split = split;
    }
    if ((env = getenv("PROBE_NO_MMAP")) && atoi(env)) mp.load_mode = LLAMA_LOAD_MODE_NONE;
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(vocab);

    int seq2 = (env = getenv("PROBE_SEQ2")) && atoi(env);
    int memops_cfg = (env = getenv("PROBE_MEMOPS")) && atoi(env);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_ubatch = (env = getenv("PROBE_UBATCH")) ? atoi(env) : 512;
    cp.n_seq_max = (seq2 || memops_cfg) ? 2 : 1;
    cp.n_threads = cp.n_threads_batch = (env = getenv("PROBE_THREADS")) ? atoi(env) : 2;
    if ((env = getenv("PROBE_TYPE_K"))) {
        /* one name sets both caches; PROBE_TYPE_V overrides V */
        cp.type_k = cp.type_v = cache_type(env);
        if ((env = getenv("PROBE_TYPE_V"))) cp.type_v = cache_type(env);
    }
    if ((env = getenv("PROBE_FLASH_ATTN"))) cp.flash_attn_type = atoi(env);
    if ((env = getenv("PROBE_KV_UNIFIED"))) cp.kv_unified = atoi(env) != 0;
    if ((env = getenv("PROBE_SWA_FULL"))) cp.swa_full = atoi(env) != 0;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 1; }

    if ((env = getenv("PROBE_LORA"))) {
        struct llama_adapter_lora *lora = llama_adapter_lora_init(model, env);
        if (!lora) { fprintf(stderr, "adapter failed\n"); return 1; }
        float scale = (env = getenv("PROBE_LORA_SCALE")) ? (float) atof(env) : 1.0f;
        if (llama_set_adapters_lora(ctx, &lora, 1, &scale) != 0) { fprintf(stderr, "set adapters failed\n"); return 1; }
    }
    if ((env = getenv("PROBE_CVEC"))) {
        int il_start = 0, il_end = 0;
        float amp = 0;
        if (sscanf(env, "%d:%d:%f", &il_start, &il_end, &amp) != 3) { fprintf(stderr, "bad PROBE_CVEC\n"); return 2; }
        int n_embd = llama_model_n_embd(model), n_layer = llama_model_n_layer(model);
        size_t len = (size_t) n_embd * (n_layer - 1);
        float *dirs = malloc(sizeof(float) * len);
        unsigned x = 12345;
        for (size_t i = 0; i < len; i++) {
            x = x * 1103515245u + 12345u;
            dirs[i] = amp * ((float) ((x >> 8) & 0xffff) / 32768.0f - 1.0f);
        }
        if (llama_set_adapter_cvec(ctx, dirs, len, n_embd, il_start, il_end) != 0) { fprintf(stderr, "cvec failed\n"); return 1; }
        free(dirs);
    }
    int clear_lora = (env = getenv("PROBE_LORA_CLEAR")) && atoi(env);
    int clear_cvec = (env = getenv("PROBE_CVEC_CLEAR")) && atoi(env);
    if (clear_lora || clear_cvec) {
        /* a graph with the adapters first, then without them */
        struct llama_batch w = llama_batch_init(n_prompt, 0, 1);
        for (int i = 0; i < n_prompt; i++) {
            w.token[i] = prompt[i]; w.pos[i] = i; w.n_seq_id[i] = 1; w.seq_id[i][0] = 0; w.logits[i] = 1;
        }
        w.n_tokens = n_prompt;
        if (llama_decode(ctx, w) != 0) { fprintf(stderr, "adapter warm-up decode failed\n"); return 1; }
        llama_batch_free(w);
        if (clear_lora) llama_set_adapters_lora(ctx, NULL, 0, NULL);
        if (clear_cvec && llama_set_adapter_cvec(ctx, NULL, 0, 0, 0, 0) != 0) { fprintf(stderr, "cvec clear failed\n"); return 1; }
        llama_memory_clear(llama_get_memory(ctx), true);
    }

    int memops = (env = getenv("PROBE_MEMOPS")) && atoi(env);
    if (memops) seq2 = 0;
    FILE *out = fopen(out_path, "wb");
    int n_rows = n_prompt + n_steps + (memops ? 5 : 0);
    fwrite(&n_vocab, 4, 1, out);
    fwrite(&n_rows, 4, 1, out);

    /* the prompt, every position an output (twice, as sequences 0 and 1, with PROBE_SEQ2:
     * sequence 1 gets a different first token so the two differ) */
    int n_batch = seq2 ? 2 * n_prompt : n_prompt;
    struct llama_batch b = llama_batch_init(n_batch, 0, 1);
    for (int s = 0; s < (seq2 ? 2 : 1); s++) {
        for (int i = 0; i < n_prompt; i++) {
            int k = s * n_prompt + i;
            b.token[k] = prompt[i];
            b.pos[k] = i;
            b.n_seq_id[k] = 1;
            b.seq_id[k][0] = s;
            b.logits[k] = 1;
        }
    }
    if (seq2) b.token[0] = prompt[n_prompt - 1];
    b.n_tokens = n_batch;
    int ret = llama_decode(ctx, b);
    if (ret != 0) { fprintf(stderr, "prompt decode: %d\n", ret); return 1; }
    int first = seq2 ? n_prompt : 0;
    for (int i = 0; i < n_prompt; i++) {
        float *row = llama_get_logits_ith(ctx, first + i);
        if (!row) { fprintf(stderr, "no logits %d\n", i); return 1; }
        fwrite(row, sizeof(float), n_vocab, out);
    }
    llama_batch_free(b);
    if (seq2) {
        /* continue sequence 1 only: drop sequence 0, then greedy steps on sequence 1 */
        llama_memory_seq_rm(llama_get_memory(ctx), 0, -1, -1);
    }
    int next_pos = n_prompt;
    if (memops) {
        llama_memory_t mem = llama_get_memory(ctx);
        /* 1: drop the last 3 positions, decode them again (3 rows) */
        llama_memory_seq_rm(mem, 0, n_prompt - 3, -1);
        struct llama_batch r = llama_batch_init(3, 0, 1);
        for (int i = 0; i < 3; i++) {
            r.token[i] = prompt[n_prompt - 3 + i];
            r.pos[i] = n_prompt - 3 + i;
            r.n_seq_id[i] = 1;
            r.seq_id[i][0] = 0;
            r.logits[i] = 1;
        }
        r.n_tokens = 3;
        if (llama_decode(ctx, r) != 0) { fprintf(stderr, "memops re-decode failed\n"); return 1; }
        for (int i = 0; i < 3; i++) fwrite(llama_get_logits_ith(ctx, i), sizeof(float), n_vocab, out);
        llama_batch_free(r);
        /* 2: copy sequence 0 to 1 and continue sequence 1 (1 row) */
        llama_memory_seq_cp(mem, 0, 1, -1, -1);
        struct llama_batch one = llama_batch_init(1, 0, 1);
        one.token[0] = prompt[1];
        one.pos[0] = n_prompt;
        one.n_seq_id[0] = 1;
        one.seq_id[0][0] = 1;
        one.logits[0] = 1;
        one.n_tokens = 1;
        if (llama_decode(ctx, one) != 0) { fprintf(stderr, "memops seq 1 failed\n"); return 1; }
        fwrite(llama_get_logits_ith(ctx, 0), sizeof(float), n_vocab, out);
        /* 3: context shift on sequence 0: drop positions 2..3, shift the rest back by 2 (1 row) */
        llama_memory_seq_rm(mem, 0, 2, 4);
        llama_memory_seq_add(mem, 0, 4, -1, -2);
        one.token[0] = prompt[2];
        one.pos[0] = n_prompt - 2;
        one.seq_id[0][0] = 0;
        if (llama_decode(ctx, one) != 0) { fprintf(stderr, "memops shift failed\n"); return 1; }
        fwrite(llama_get_logits_ith(ctx, 0), sizeof(float), n_vocab, out);
        llama_batch_free(one);
        llama_memory_seq_rm(mem, 1, -1, -1);
        next_pos = n_prompt - 1;
    }
    llama_token tok = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
    for (int step = 0; step < n_steps; step++) {
        printf("%d ", tok);
        struct llama_batch one = llama_batch_init(1, 0, 1);
        one.token[0] = tok;
        one.pos[0] = next_pos + step;
        one.n_seq_id[0] = 1;
        one.seq_id[0][0] = seq2 ? 1 : 0;
        one.logits[0] = 1;
        one.n_tokens = 1;
        ret = seq2 ? llama_decode(ctx, one) : llama_decode(ctx, llama_batch_get_one(&tok, 1));
        llama_batch_free(one);
        if (ret != 0) { fprintf(stderr, "step %d decode: %d\n", step, ret); return 1; }
        float *row = llama_get_logits_ith(ctx, -1);
        fwrite(row, sizeof(float), n_vocab, out);
        tok = argmax(row, n_vocab);
    }
    printf("\n");
    fclose(out);
    llama_free(ctx);
    llama_model_free(model);
    free(prompt);
    return 0;
}
