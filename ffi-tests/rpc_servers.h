/* Registering rpc-servers from a probe built against upstream's llama.h, with whichever
 * library is loaded: our llama_ext_rpc_add_server when the library has it, else upstream's way
 * (as its --rpc option): ggml_backend_rpc_add_server through the RPC registry's proc address,
 * then ggml_backend_register. Shared by ffi-tests/engine/probe_decode.c and
 * ffi-tests/bench_decode.c; the includer defines _GNU_SOURCE (RTLD_DEFAULT). */
#ifndef RPC_SERVERS_H
#define RPC_SERVERS_H
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* Registers the rpc-servers of a comma-separated HOST:PORT list with whichever library is loaded (0: done). */
static int add_rpc_servers(const char *list) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", list);
    int (*ours)(const char *) = (int (*)(const char *)) dlsym(RTLD_DEFAULT, "llama_ext_rpc_add_server");
    void (*load_all)(void) = (void (*)(void)) dlsym(RTLD_DEFAULT, "ggml_backend_load_all");
    void *(*reg_by_name)(const char *) = (void *(*)(const char *)) dlsym(RTLD_DEFAULT, "ggml_backend_reg_by_name");
    void *(*proc)(void *, const char *) = (void *(*)(void *, const char *)) dlsym(RTLD_DEFAULT, "ggml_backend_reg_get_proc_address");
    void (*reg_add)(void *) = (void (*)(void *)) dlsym(RTLD_DEFAULT, "ggml_backend_register");
    void *(*add)(const char *) = NULL;
    if (!ours) {
        if (!load_all || !reg_by_name || !proc || !reg_add) { fprintf(stderr, "no ggml registry functions\n"); return 1; }
        load_all();
        void *rpc = reg_by_name("RPC");
        if (!rpc) { fprintf(stderr, "no RPC backend\n"); return 1; }
        add = (void *(*)(const char *)) proc(rpc, "ggml_backend_rpc_add_server");
        if (!add) { fprintf(stderr, "no ggml_backend_rpc_add_server\n"); return 1; }
    }
    for (char *ep = strtok(buf, ","); ep; ep = strtok(NULL, ",")) {
        if (ours) {
            if (ours(ep) < 1) { fprintf(stderr, "llama_ext_rpc_add_server(%s) failed\n", ep); return 1; }
        } else {
            void *reg = add(ep);
            if (!reg) { fprintf(stderr, "ggml_backend_rpc_add_server(%s) failed\n", ep); return 1; }
            reg_add(reg);
        }
    }
    return 0;
}

#endif
