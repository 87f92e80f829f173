/*
 * Captures what the library logs through llama_log_set, for tests that expect (or forbid)
 * a log line. Include after llama.h.
 */
#ifndef FFI_TESTS_LOGCAP_H
#define FFI_TESTS_LOGCAP_H

#include <stdio.h>
#include <string.h>

static char logcap_text[16384];
static size_t logcap_len;
static int logcap_lines;
static enum ggml_log_level logcap_last_level;
static int logcap_user_data_ok = 1;
static int logcap_tag; /* its address is the user data the callback expects */

static inline void logcap_callback(enum ggml_log_level level, const char *text, void *user_data) {
    size_t n;
    if (user_data != &logcap_tag) {
        logcap_user_data_ok = 0;
    }
    if (text == NULL) {
        return;
    }
    n = strlen(text);
    if (n > sizeof logcap_text - 1 - logcap_len) {
        n = sizeof logcap_text - 1 - logcap_len;
    }
    memcpy(logcap_text + logcap_len, text, n);
    logcap_len += n;
    logcap_text[logcap_len] = '\0';
    logcap_lines++;
    logcap_last_level = level;
}

static inline void logcap_clear(void) {
    logcap_len = 0;
    logcap_text[0] = '\0';
    logcap_lines = 0;
}

static inline void logcap_install(void) {
    logcap_clear();
    llama_log_set(logcap_callback, &logcap_tag);
}

static inline int logcap_contains(const char *needle) {
    return strstr(logcap_text, needle) != NULL;
}

#endif /* FFI_TESTS_LOGCAP_H */
