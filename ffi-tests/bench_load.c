/* One timed model load, for `make bench-load`: prints "<ms> <peak_rss_kib> <minor_faults> <cpu_ms>"
 * (cpu_ms: user + system time of the whole process, the honest figure on a busy machine). Built once
 * against upstream's header and run against either library via LD_LIBRARY_PATH.
 * usage: bench_load FILE MODE   (MODE: none | mmap | dio) */
#define _POSIX_C_SOURCE 200809L
#include "llama.h"

#include <stdio.h>
#include <string.h>
#include "bench_report.h"
#include <time.h>

static void quiet(enum ggml_log_level l, const char *t, void *u) { (void) l; (void) t; (void) u; }
static bool no_dots(float p, void *u) { (void) p; (void) u; return true; }

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params params = llama_model_default_params();
    params.n_gpu_layers = 0;
    params.progress_callback = no_dots;
    params.load_mode = strcmp(argv[2], "mmap") == 0 ? LLAMA_LOAD_MODE_MMAP
                     : strcmp(argv[2], "dio") == 0  ? LLAMA_LOAD_MODE_DIRECT_IO
                                                    : LLAMA_LOAD_MODE_NONE;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct llama_model *m = llama_model_load_from_file(argv[1], params);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!m) { fprintf(stderr, "load failed\n"); return 1; }
    print_run_report(t0, t1);
    llama_model_free(m);
    return 0;
}
