/*
 * The run-time loading path (what ctypes and plugin hosts do): dlopen the library, resolve
 * every function upstream's llama.h declares with dlsym, call a few through the pointers,
 * dlclose and load again.
 *
 *   test_dlopen PATH/TO/libllama.so
 *
 * upstream_fns.h is generated from upstream's header (scripts/upstream_api.py names-c).
 * Unresolved names are listed as a NOTE; completeness itself is test-symbols' job, so
 * this test stays about the loading path.
 */
#include <dlfcn.h>

#include "llama.h"

#include "harness.h"
#include "upstream_fns.h"

static const char *lib_path = "libllama.so";

typedef size_t (*size_fn)(void);
typedef const char *(*str_fn)(void);
typedef int32_t (*split_path_fn)(char *, size_t, const char *, int32_t, int32_t);
typedef struct llama_model_params (*model_params_fn)(void);
typedef void (*log_set_fn)(ggml_log_callback, void *);

static int callback_calls;
static void count_callback(enum ggml_log_level level, const char *text, void *user_data) {
    (void)level;
    (void)text;
    (void)user_data;
    callback_calls++;
}

/* dlsym returns void *; converting it to a function pointer is what POSIX specifies. */
#define RESOLVE(type, handle, name) ((type)(size_t)dlsym((handle), (name)))

static void *open_library(void) {
    void *h = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        printf("dlopen(%s) failed: %s\n", lib_path, dlerror());
    }
    return h;
}

TEST(resolve_all_upstream_functions) {
    void *h = open_library();
    int i, missing = 0;
    CHECK_NOT_NULL(h);
    if (h == NULL) {
        return;
    }
    for (i = 0; i < UPSTREAM_FN_COUNT; i++) {
        if (dlsym(h, UPSTREAM_FNS[i]) == NULL) {
            if (missing == 0) {
                printf("NOTE: not resolvable with dlsym:");
            }
            printf(" %s", UPSTREAM_FNS[i]);
            missing++;
        }
    }
    if (missing) {
        printf("\n");
    }
    printf("resolved %d of %d upstream functions\n", UPSTREAM_FN_COUNT - missing,
           UPSTREAM_FN_COUNT);
    dlclose(h);
}

static void call_through_pointers(void *h) {
    size_fn max_devices = RESOLVE(size_fn, h, "llama_max_devices");
    str_fn version = RESOLVE(str_fn, h, "llama_version");
    split_path_fn split_path = RESOLVE(split_path_fn, h, "llama_split_path");
    model_params_fn model_params = RESOLVE(model_params_fn, h, "llama_model_default_params");
    log_set_fn log_set = RESOLVE(log_set_fn, h, "llama_log_set");
    char buf[64];
    struct llama_model_params p;

    CHECK(max_devices != NULL && version != NULL && split_path != NULL &&
          model_params != NULL && log_set != NULL);
    if (!max_devices || !version || !split_path || !model_params || !log_set) {
        return;
    }
    CHECK_INT(max_devices(), 16);
    CHECK_NOT_NULL(version());
    CHECK_INT(split_path(buf, sizeof buf, "m", 1, 3), 21);
    CHECK_STR(buf, "m-00002-of-00003.gguf");
    p = model_params();
    CHECK_INT(p.n_gpu_layers, -1);
    CHECK_INT(p.use_extra_bufts, 1);

    /* The callback set through a dlsym'd pointer receives the library's messages. */
    callback_calls = 0;
    log_set(count_callback, NULL);
    CHECK_INT(split_path(buf, sizeof buf, NULL, 0, 1), 0);
    CHECK_INT(callback_calls, 1);
    log_set(NULL, NULL);
}

TEST(call_open_close_reopen) {
    void *h = open_library();
    CHECK_NOT_NULL(h);
    if (h == NULL) {
        return;
    }
    call_through_pointers(h);
    CHECK_INT(dlclose(h), 0);

    h = open_library();
    CHECK_NOT_NULL(h);
    if (h == NULL) {
        return;
    }
    call_through_pointers(h);
    CHECK_INT(dlclose(h), 0);
}

int main(int argc, char **argv) {
    if (argc > 1) {
        lib_path = argv[1];
    }
    RUN(resolve_all_upstream_functions);
    RUN(call_open_close_reopen);
    return harness_finish();
}
