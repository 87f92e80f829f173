/*
 * NULL for every pointer argument of the functions tested here: no crash, the documented
 * failure value, and one log line naming the function (upstream crashes on most of these).
 * The one exception is snprintf's "measure" idiom: a NULL buffer with size 0 is valid.
 */
#include "llama.h"

#include "harness.h"
#include "logcap.h"

static const char *const PATH = "abc-00001-of-00002.gguf";

TEST(split_path_null_prefix) {
    char buf[64];
    logcap_install();
    memset(buf, 'Z', sizeof buf);
    CHECK_INT(llama_split_path(buf, sizeof buf, NULL, 0, 2), 0);
    CHECK_INT(logcap_lines, 1);
    CHECK(logcap_contains("llama_split_path"));
    logcap_clear();
    CHECK_INT(llama_split_path(NULL, 64, NULL, 0, 2), 0);
    CHECK_INT(logcap_lines, 1);
    llama_log_set(NULL, NULL);
}

TEST(split_path_null_buffer) {
    logcap_install();
    /* size 0: nothing to write, same as upstream (returns 0: "truncated") */
    CHECK_INT(llama_split_path(NULL, 0, "abc", 0, 2), 0);
    /* size > 0 with no buffer: a caller error, reported as failure */
    CHECK_INT(llama_split_path(NULL, 64, "abc", 0, 2), 0);
    CHECK(logcap_lines >= 1);
    CHECK(logcap_contains("llama_split_path"));
    llama_log_set(NULL, NULL);
}

TEST(split_prefix_null_path) {
    char buf[64];
    logcap_install();
    memset(buf, 'Z', sizeof buf);
    CHECK_INT(llama_split_prefix(buf, sizeof buf, NULL, 0, 2), 0);
    CHECK_INT(logcap_lines, 1);
    CHECK(logcap_contains("llama_split_prefix"));
    CHECK_INT(buf[0], 'Z');
    llama_log_set(NULL, NULL);
}

TEST(split_prefix_null_buffer) {
    logcap_install();
    /* size 0: the measure idiom, as upstream (snprintf(NULL, 0, ...)): the prefix length */
    CHECK_INT(llama_split_prefix(NULL, 0, PATH, 0, 2), 3);
    CHECK_INT(logcap_lines, 0);
    /* size > 0 with no buffer: failure value */
    CHECK_INT(llama_split_prefix(NULL, 64, PATH, 0, 2), 0);
    CHECK(logcap_lines >= 1);
    CHECK(logcap_contains("llama_split_prefix"));
    llama_log_set(NULL, NULL);
}

TEST(load_mode_from_null_string) {
    logcap_install();
    CHECK_INT(llama_load_mode_from_str(NULL), LLAMA_LOAD_MODE_AUTO);
    CHECK_INT(logcap_lines, 1);
    CHECK(logcap_contains("llama_load_mode_from_str"));
    llama_log_set(NULL, NULL);
}

TEST(log_get_null_out_pointers) {
    logcap_install();
    llama_log_get(NULL, NULL);
    CHECK_INT(logcap_lines, 0);
    llama_log_set(NULL, NULL);
}

TEST(log_set_null_callback_with_user_data) {
    ggml_log_callback cb = NULL;
    void *ud = &cb;
    ggml_log_callback default_cb = NULL;
    llama_log_set(NULL, NULL);
    llama_log_get(&default_cb, NULL);
    llama_log_set(NULL, &cb); /* user data without a callback: default restored */
    llama_log_get(&cb, &ud);
    CHECK(cb == default_cb);
}

int main(void) {
    RUN(split_path_null_prefix);
    RUN(split_path_null_buffer);
    RUN(split_prefix_null_path);
    RUN(split_prefix_null_buffer);
    RUN(load_mode_from_null_string);
    RUN(log_get_null_out_pointers);
    RUN(log_set_null_callback_with_user_data);
    return harness_finish();
}
