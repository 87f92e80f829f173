/* Timings for `make bench-hotswap` (scripts/bench-hotswap.sh). One source, built twice:
 *   -DBENCH_OURS, against include/llama.h, linked to our libllama.so: every mode;
 *   without it, against upstream's llama.h, run against upstream's libllama.so: `load` only.
 * Prints "key value" lines; the script takes the medians.
 *
 * usage:
 *   bench_hotswap load FIRST_SHARD
 *       load (NONE mode, untimed), then time llama_model_free + llama_model_load_from_file
 *       of the same model: "load_ms X".
 *   bench_hotswap poll FIRST_SHARD CALLS                                     (ours)
 *       CALLS timed llama_ext_model_reload_changed_tensors calls with nothing changed:
 *       "poll_ms X" each, each followed by "stat_ms X": one plain stat(2) of every shard file,
 *       the floor under any poll that looks at each file.
 *   bench_hotswap reload FIRST_SHARD SHARD VARDIR TENSOR OFFSET NBYTES ROUNDS  (ours)
 *       per round: pread of NBYTES at OFFSET of SHARD into a warm buffer ("pread_ms"), then
 *       new versions of SHARD written to a temp file, fdatasync'ed and renamed into place
 *       (untimed), each followed by one timed reload: F16 -> other F16 bytes and back
 *       ("inplace_ms", outcome reloaded_in_place), F16 -> Q8_0 ("relocate_ms", relocated),
 *       Q8_0 -> F16 ("return_ms", returned_to_original). One untimed round first.
 *   bench_hotswap oscillate FIRST_SHARD SHARD VARDIR TENSOR A B CYCLES          (ours)
 *       one cycle: install B, reload, install A, reload (A, B: NAME.gguf in VARDIR, each
 *       hard-linked to a temp name and renamed into place, so no data is written). "rss_kib CYCLE X" before cycle 1 (CYCLE 0) and after cycles 1, 10, 100,
 *       1000, CYCLES; "flip_ms X" per reload.
 * The model is loaded in LLAMA_LOAD_MODE_NONE, CPU only (with BENCH_RPC=HOST:PORT, ours
 * only: that rpc-server registered by llama_ext_rpc_add_server and every layer placed on it,
 * for make bench-rpc); hot-swap needs
 * LLAMA_HOTSWAP_ENABLED=1 in the environment (the script sets it). */
#define _GNU_SOURCE
#include "llama.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void quiet(enum ggml_log_level l, const char *t, void *u) { (void) l; (void) t; (void) u; }
static bool no_dots(float p, void *u) { (void) p; (void) u; return true; }

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void die(const char *what) {
    fprintf(stderr, "bench_hotswap: %s\n", what);
    exit(1);
}

static struct llama_model *load(const char *path) {
    struct llama_model_params params = llama_model_default_params();
    params.n_gpu_layers = 0;
#ifdef BENCH_OURS
    static int rpc_added;
    const char *rpc = getenv("BENCH_RPC");
    if (rpc && *rpc) {
        if (!rpc_added && llama_ext_rpc_add_server(rpc) < 1) die("llama_ext_rpc_add_server failed");
        rpc_added = 1;
        params.n_gpu_layers = 999;
    }
#endif
    params.progress_callback = no_dots;
    params.load_mode = LLAMA_LOAD_MODE_NONE;
    struct llama_model *m = llama_model_load_from_file(path, params);
    if (!m) die("model load failed");
    return m;
}

static int mode_load(const char *first) {
    struct llama_model *m = load(first);
    double t0 = now_ms();
    llama_model_free(m);
    m = load(first);
    printf("load_ms %.3f\n", now_ms() - t0);
    llama_model_free(m);
    return 0;
}

#ifdef BENCH_OURS

static char report[1 << 16];

/* One timed reload; checks it reloaded exactly `want` tensors with outcome `outcome`. */
static double timed_reload(struct llama_model *m, int want, const char *outcome) {
    double t0 = now_ms();
    int32_t n = llama_ext_model_reload_changed_tensors(m);
    double ms = now_ms() - t0;
    if (n != want) {
        llama_ext_reload_report_json(m, report, sizeof report);
        fprintf(stderr, "bench_hotswap: reload returned %d, expected %d; report: %s\n", n, want,
                report);
        exit(1);
    }
    if (outcome) {
        char needle[64];
        snprintf(needle, sizeof needle, "\"outcome\":\"%s\"", outcome);
        llama_ext_reload_report_json(m, report, sizeof report);
        if (!strstr(report, needle)) {
            fprintf(stderr, "bench_hotswap: expected %s; report: %s\n", outcome, report);
            exit(1);
        }
    }
    return ms;
}

static char *read_file(const char *path, size_t *len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) die(path);
    struct stat st;
    if (fstat(fd, &st) != 0) die(path);
    char *buf = malloc(st.st_size);
    if (!buf) die("out of memory");
    size_t got = 0;
    while (got < (size_t) st.st_size) {
        ssize_t r = pread(fd, buf + got, st.st_size - got, got);
        if (r <= 0) die(path);
        got += r;
    }
    close(fd);
    *len = got;
    return buf;
}

/* Writes a new version of the shard to a temp file (fdatasync'ed) and renames it into place. */
static void install_copy(const char *shard, const char *data, size_t len) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", shard);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die(tmp);
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, data + done, len - done);
        if (w <= 0) die("write failed");
        done += w;
    }
    if (fdatasync(fd) != 0) die("fdatasync failed");
    close(fd);
    if (rename(tmp, shard) != 0) die("rename failed");
}

/* Hard-links `src` to a temp name and renames that into place (no data written). */
static void install_link(const char *shard, const char *src) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", shard);
    unlink(tmp);
    if (link(src, tmp) != 0) die("link failed");
    if (rename(tmp, shard) != 0) die("rename failed");
}

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "VmRSS:", 6) == 0) kib = strtol(line + 6, NULL, 10);
    }
    if (f) fclose(f);
    return kib;
}

static void check_type(struct llama_model *m, const char *tensor, int32_t type) {
    struct llama_ext_tensor_info info;
    if (llama_ext_tensor_info(m, tensor, &info) != 0) die("tensor_info failed");
    if (info.type != type) {
        fprintf(stderr, "bench_hotswap: %s has type %d, expected %d\n", tensor, info.type, type);
        exit(1);
    }
}

/* The floor under any poll that looks at every shard: one stat(2) per shard file (the
 * shards' paths from FIRST's "PREFIX-00001-of-NNNNN.gguf"), in milliseconds. */
static double stat_all_ms(const char *first) {
    const char *tag = strstr(first, "-00001-of-");
    if (!tag) die("first shard name has no -00001-of-");
    int count = atoi(tag + strlen("-00001-of-"));
    char prefix[4096], path[4096];
    snprintf(prefix, sizeof prefix, "%.*s", (int) (tag - first), first);
    struct stat st;
    double t0 = now_ms();
    for (int i = 0; i < count; i++) {
        llama_split_path(path, sizeof path, prefix, i, count);
        if (stat(path, &st) != 0) die("stat of a shard failed");
    }
    return now_ms() - t0;
}

static int mode_poll(const char *first, int calls) {
    struct llama_model *m = load(first);
    for (int i = 0; i < 3; i++) timed_reload(m, 0, NULL);
    for (int i = 0; i < calls; i++) {
        printf("poll_ms %.4f\n", timed_reload(m, 0, NULL));
        printf("stat_ms %.4f\n", stat_all_ms(first));
    }
    llama_model_free(m);
    return 0;
}

static int mode_reload(char **a) {
    const char *first = a[0], *shard = a[1], *vardir = a[2], *tensor = a[3];
    long long offset = atoll(a[4]);
    size_t nbytes = (size_t) atoll(a[5]);
    int rounds = atoi(a[6]);
    char path[4096];
    size_t f16a_len, f16b_len, q8_len;
    snprintf(path, sizeof path, "%s/f16a.gguf", vardir);
    char *f16a = read_file(path, &f16a_len);
    snprintf(path, sizeof path, "%s/f16b.gguf", vardir);
    char *f16b = read_file(path, &f16b_len);
    snprintf(path, sizeof path, "%s/q8_0.gguf", vardir);
    char *q8 = read_file(path, &q8_len);
    char *buf = malloc(nbytes);
    if (!buf) die("out of memory");
    memset(buf, 1, nbytes);

    struct llama_model *m = load(first);
    check_type(m, tensor, GGML_TYPE_F16);
    for (int r = -1; r < rounds; r++) {
        /* the baseline: pread of the tensor's bytes from the page cache into a warm buffer */
        int fd = open(shard, O_RDONLY);
        if (fd < 0) die(shard);
        double t0 = now_ms();
        size_t got = 0;
        while (got < nbytes) {
            ssize_t n = pread(fd, buf + got, nbytes - got, offset + (off_t) got);
            if (n <= 0) die("pread failed");
            got += n;
        }
        double pread_ms = now_ms() - t0;
        close(fd);

        install_copy(shard, f16b, f16b_len);
        double in1 = timed_reload(m, 1, "reloaded_in_place");
        install_copy(shard, f16a, f16a_len);
        double in2 = timed_reload(m, 1, "reloaded_in_place");
        install_copy(shard, q8, q8_len);
        double reloc = timed_reload(m, 1, "relocated");
        check_type(m, tensor, GGML_TYPE_Q8_0);
        install_copy(shard, f16a, f16a_len);
        double ret = timed_reload(m, 1, "returned_to_original");
        check_type(m, tensor, GGML_TYPE_F16);
        if (r < 0) continue; /* warm-up round */
        printf("pread_ms %.3f\ninplace_ms %.3f\ninplace_ms %.3f\nrelocate_ms %.3f\n"
               "return_ms %.3f\n",
               pread_ms, in1, in2, reloc, ret);
    }
    llama_model_free(m);
    free(buf);
    free(f16a);
    free(f16b);
    free(q8);
    return 0;
}

static int mode_oscillate(char **a) {
    const char *first = a[0], *shard = a[1], *vardir = a[2];
    int cycles = atoi(a[6]);
    char pa[4096], pb[4096];
    snprintf(pa, sizeof pa, "%s/%s.gguf", vardir, a[4]);
    snprintf(pb, sizeof pb, "%s/%s.gguf", vardir, a[5]);
    struct llama_model *m = load(first);
    (void) a[3];
    printf("rss_kib 0 %ld\n", rss_kib());
    fflush(stdout);
    for (int c = 1; c <= cycles; c++) {
        install_link(shard, pb);
        double t1 = timed_reload(m, 1, NULL);
        install_link(shard, pa);
        double t2 = timed_reload(m, 1, NULL);
        printf("flip_ms %.3f\nflip_ms %.3f\n", t1, t2);
        if (c == 1 || c == 10 || c == 100 || c == 1000 || c == cycles) {
            printf("rss_kib %d %ld\n", c, rss_kib());
            fflush(stdout);
        }
    }
    llama_model_free(m);
    return 0;
}
#endif

int main(int argc, char **argv) {
    if (argc < 3) die("usage: see ffi-tests/bench_hotswap.c");
    /* 1,002 shard files may stay open: lift the descriptor limit to its maximum. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    if (strcmp(argv[1], "load") == 0) return mode_load(argv[2]);
#ifdef BENCH_OURS
    if (strcmp(argv[1], "poll") == 0 && argc >= 4) return mode_poll(argv[2], atoi(argv[3]));
    if (strcmp(argv[1], "reload") == 0 && argc >= 9) return mode_reload(argv + 2);
    if (strcmp(argv[1], "oscillate") == 0 && argc >= 9) return mode_oscillate(argv + 2);
#endif
    die("unknown mode or missing arguments");
    return 2;
}
