/*
 * Logging (llama_log_set / llama_log_get) and the helpers whose errors are reported through
 * it: load-mode and flash-attention names. Where upstream aborts or throws (invalid enum
 * value, unknown name), llama-hotswap returns a failure value and logs one line instead.
 */
#define _POSIX_C_SOURCE 200809L

#include "llama.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "harness.h"
#include "logcap.h"

static void other_callback(enum ggml_log_level level, const char *text, void *user_data) {
    (void)level;
    (void)text;
    (void)user_data;
}

TEST(log_get_without_callback_gives_default) {
    ggml_log_callback cb = other_callback;
    void *ud = &cb;
    llama_log_set(NULL, NULL);
    llama_log_get(&cb, &ud);
    /* Upstream returns its default (stderr) callback and NULL user data. */
    CHECK(cb != NULL);
    CHECK(cb != other_callback);
    CHECK(cb != logcap_callback);
    CHECK_NULL(ud);
}

TEST(log_set_get_round_trip) {
    ggml_log_callback cb = NULL;
    void *ud = NULL;
    ggml_log_callback default_cb = NULL;
    llama_log_get(&default_cb, NULL);

    llama_log_set(logcap_callback, &logcap_tag);
    llama_log_get(&cb, &ud);
    CHECK(cb == logcap_callback);
    CHECK(ud == (void *)&logcap_tag);

    llama_log_set(other_callback, &cb);
    llama_log_get(&cb, &ud);
    CHECK(cb == other_callback);

    /* Only one out-pointer: the other is ignored. */
    cb = NULL;
    llama_log_get(&cb, NULL);
    CHECK(cb == other_callback);
    ud = NULL;
    llama_log_get(NULL, &ud);
    CHECK_NOT_NULL(ud);

    /* NULL restores the default. */
    llama_log_set(NULL, NULL);
    llama_log_get(&cb, &ud);
    CHECK(cb == default_cb);
    CHECK_NULL(ud);
}

TEST(callback_receives_messages_with_user_data) {
    logcap_install();
    CHECK_NULL(llama_load_mode_name((enum llama_load_mode)99));
    CHECK(logcap_lines >= 1);
    CHECK(logcap_user_data_ok);
    CHECK(logcap_contains("llama_load_mode_name"));
    CHECK_INT(logcap_last_level, GGML_LOG_LEVEL_ERROR);
    CHECK(logcap_len > 0 && logcap_text[logcap_len - 1] == '\n');

    /* After llama_log_set(NULL, ...) the callback is no longer called (stderr instead). */
    llama_log_set(NULL, NULL);
    logcap_clear();
    CHECK_NULL(llama_load_mode_name((enum llama_load_mode)-7));
    CHECK_INT(logcap_lines, 0);
}

TEST(load_mode_names) {
    static const struct {
        enum llama_load_mode mode;
        const char *name;
    } modes[] = {
        {LLAMA_LOAD_MODE_AUTO, "auto"},   {LLAMA_LOAD_MODE_NONE, "none"},
        {LLAMA_LOAD_MODE_MMAP, "mmap"},   {LLAMA_LOAD_MODE_MLOCK, "mlock"},
        {LLAMA_LOAD_MODE_MMAP_MLOCK, "mmap+mlock"}, {LLAMA_LOAD_MODE_DIRECT_IO, "dio"},
    };
    size_t i;
    logcap_install();
    for (i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        CHECK_STR(llama_load_mode_name(modes[i].mode), modes[i].name);
        CHECK_INT(llama_load_mode_from_str(modes[i].name), modes[i].mode);
    }
    CHECK_INT(logcap_lines, 0);
    llama_log_set(NULL, NULL);
}

TEST(load_mode_unknown_string_is_auto_and_logged) {
    logcap_install();
    CHECK_INT(llama_load_mode_from_str("turbo"), LLAMA_LOAD_MODE_AUTO);
    CHECK_INT(logcap_lines, 1);
    CHECK(logcap_contains("turbo"));
    logcap_clear();
    CHECK_INT(llama_load_mode_from_str("MMAP"), LLAMA_LOAD_MODE_AUTO); /* case-sensitive */
    CHECK_INT(logcap_lines, 1);
    logcap_clear();
    CHECK_INT(llama_load_mode_from_str(""), LLAMA_LOAD_MODE_AUTO);
    CHECK_INT(logcap_lines, 1);
    llama_log_set(NULL, NULL);
}

TEST(load_mode_invalid_value_is_null_and_logged) {
    logcap_install();
    CHECK_NULL(llama_load_mode_name((enum llama_load_mode)5));
    CHECK_INT(logcap_lines, 1);
    logcap_clear();
    CHECK_NULL(llama_load_mode_name((enum llama_load_mode)-2));
    CHECK_INT(logcap_lines, 1);
    llama_log_set(NULL, NULL);
}

TEST(flash_attn_type_names) {
    logcap_install();
    CHECK_STR(llama_flash_attn_type_name(LLAMA_FLASH_ATTN_TYPE_AUTO), "auto");
    CHECK_STR(llama_flash_attn_type_name(LLAMA_FLASH_ATTN_TYPE_DISABLED), "disabled");
    CHECK_STR(llama_flash_attn_type_name(LLAMA_FLASH_ATTN_TYPE_ENABLED), "enabled");
    CHECK_INT(logcap_lines, 0);
    CHECK_NULL(llama_flash_attn_type_name((enum llama_flash_attn_type)2));
    CHECK_INT(logcap_lines, 1);
    CHECK(logcap_contains("llama_flash_attn_type_name"));
    llama_log_set(NULL, NULL);
}

/* A callback that calls llama_log_set itself (upstream returns normally; a sink called under
 * the logger's lock would deadlock here). SIGALRM turns a hang into a failed test. */
static int reentrant_calls;
static void reentrant_callback(enum ggml_log_level level, const char *text, void *user_data) {
    (void)level;
    (void)text;
    reentrant_calls++;
    llama_log_set(other_callback, user_data);
}

TEST(callback_may_call_log_set) {
    reentrant_calls = 0;
    alarm(20);
    llama_log_set(reentrant_callback, NULL);
    CHECK_NULL(llama_load_mode_name((enum llama_load_mode)99)); /* logs one error line */
    CHECK_INT(reentrant_calls, 1);
    {
        ggml_log_callback cb = NULL;
        llama_log_get(&cb, NULL);
        CHECK(cb == other_callback); /* the callback's own llama_log_set took effect */
    }
    alarm(0);
    llama_log_set(NULL, NULL);
}

/* A callback that logs again (a nested message) while another thread keeps replacing the
 * logger: every call returns, nothing deadlocks. */
static volatile int nested_depth;
static void nesting_callback(enum ggml_log_level level, const char *text, void *user_data) {
    (void)level;
    (void)text;
    (void)user_data;
    if (nested_depth == 0) {
        nested_depth = 1;
        (void)llama_load_mode_name((enum llama_load_mode)98); /* nested log line */
        nested_depth = 0;
    }
}

static volatile int setter_stop;
static void *setter_thread(void *arg) {
    (void)arg;
    while (!setter_stop) {
        llama_log_set(nesting_callback, NULL);
        llama_log_set(other_callback, NULL);
    }
    return NULL;
}

TEST(nested_log_while_another_thread_sets_logger) {
    pthread_t thread;
    int i;
    alarm(30);
    setter_stop = 0;
    llama_log_set(nesting_callback, NULL);
    CHECK_INT(pthread_create(&thread, NULL, setter_thread, NULL), 0);
    for (i = 0; i < 20000; i++) {
        nested_depth = 0;
        CHECK_NULL(llama_load_mode_name((enum llama_load_mode)97));
    }
    setter_stop = 1;
    CHECK_INT(pthread_join(thread, NULL), 0);
    alarm(0);
    llama_log_set(NULL, NULL);
}

int main(void) {
    RUN(log_get_without_callback_gives_default);
    RUN(log_set_get_round_trip);
    RUN(callback_receives_messages_with_user_data);
    RUN(load_mode_names);
    RUN(load_mode_unknown_string_is_auto_and_logged);
    RUN(load_mode_invalid_value_is_null_and_logged);
    RUN(flash_attn_type_names);
    RUN(callback_may_call_log_set);
    RUN(nested_log_while_another_thread_sets_logger);
    return harness_finish();
}
