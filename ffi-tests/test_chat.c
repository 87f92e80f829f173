/*
 * Chat templates with hostile and edge-case arguments: NULL messages, roles and contents,
 * message counts no array can hold (upstream crashes or aborts on all of these; we return
 * -1 with a log line), buffers of length 0 / negative / exact fit, NULL templates, invalid
 * UTF-8. Outputs for valid input are compared with upstream's in scripts/test-chat.sh.
 */
#include <stdint.h>
#include <stdlib.h>

#include "llama.h"

#include "harness.h"
#include "logcap.h"

typedef struct llama_chat_message msg;

static const msg CHAT[] = {{"system", "S"}, {"user", "U"}, {"assistant", "A"}};
/* chatml of CHAT, add_ass on */
static const char CHATML[] = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
                             "<|im_start|>assistant\nA<|im_end|>\n<|im_start|>assistant\n";
#define CHATML_LEN ((int)sizeof CHATML - 1)

static int untouched(const char *buf, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        if (buf[i] != '#') {
            return 0;
        }
    }
    return 1;
}

TEST(null_messages_with_a_count) {
    char buf[64];
    logcap_install();
    memset(buf, '#', sizeof buf);
    CHECK_INT(llama_chat_apply_template("chatml", NULL, 3, true, buf, sizeof buf), -1);
    CHECK(untouched(buf, sizeof buf));
    CHECK_INT(logcap_lines, 1);
    CHECK(logcap_contains("llama_chat_apply_template"));
    CHECK(logcap_contains("chat is NULL"));
    /* no messages: NULL is fine, as upstream */
    logcap_clear();
    CHECK_INT(llama_chat_apply_template("chatml", NULL, 0, false, buf, sizeof buf), 0);
    CHECK_INT(buf[0], '\0');
    CHECK_INT(llama_chat_apply_template("chatml", NULL, 0, true, NULL, 0), 22);
    CHECK_INT(logcap_lines, 0);
    llama_log_set(NULL, NULL);
}

TEST(null_role_or_content) {
    static const char *const templates[] = {"chatml", "llama2", "gemma", "bailing", "openchat",
                                            "gigachat", "deepseek3", "pangu-embedded"};
    msg chat[3];
    char buf[256];
    size_t t;
    logcap_install();
    for (t = 0; t < sizeof templates / sizeof templates[0]; t++) {
        memcpy(chat, CHAT, sizeof chat);
        chat[1].role = NULL;
        memset(buf, '#', sizeof buf);
        logcap_clear();
        CHECK_INT(llama_chat_apply_template(templates[t], chat, 3, true, buf, sizeof buf), -1);
        CHECK(untouched(buf, sizeof buf));
        CHECK_INT(logcap_lines, 1);
        CHECK(logcap_contains("message 1: role is NULL"));

        memcpy(chat, CHAT, sizeof chat);
        chat[2].content = NULL;
        logcap_clear();
        CHECK_INT(llama_chat_apply_template(templates[t], chat, 3, false, NULL, 0), -1);
        CHECK(logcap_contains("message 2: content is NULL"));
    }
    llama_log_set(NULL, NULL);
}

TEST(counts_no_array_can_hold) {
    const size_t counts[] = {SIZE_MAX, SIZE_MAX / 2, SIZE_MAX / sizeof(msg) + 1,
                             (SIZE_MAX / 2) / sizeof(msg) + 1};
    char buf[16];
    size_t i;
    logcap_install();
    for (i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        logcap_clear();
        memset(buf, '#', sizeof buf);
        CHECK_INT(llama_chat_apply_template("llama3", CHAT, counts[i], true, buf, sizeof buf), -1);
        CHECK(untouched(buf, sizeof buf));
        CHECK_INT(logcap_lines, 1);
        CHECK(logcap_contains("n_msg"));
    }
    llama_log_set(NULL, NULL);
}

TEST(unknown_template) {
    char buf[16];
    logcap_install();
    memset(buf, '#', sizeof buf);
    CHECK_INT(llama_chat_apply_template("INVALID TEMPLATE", CHAT, 3, true, buf, sizeof buf), -1);
    CHECK(untouched(buf, sizeof buf));
    CHECK_INT(logcap_lines, 1);
    CHECK(logcap_contains("no built-in chat template matches"));
    /* detection comes first, as upstream: an unknown template never reads the messages */
    CHECK_INT(llama_chat_apply_template("", NULL, 5, true, NULL, 0), -1);
    llama_log_set(NULL, NULL);
}

TEST(buffers) {
    char buf[256];
    logcap_install();
    /* NULL template means chatml */
    CHECK_INT(llama_chat_apply_template(NULL, CHAT, 3, true, NULL, 0), CHATML_LEN);
    /* length 0 or negative: nothing written, full length returned */
    memset(buf, '#', sizeof buf);
    CHECK_INT(llama_chat_apply_template(NULL, CHAT, 3, true, buf, 0), CHATML_LEN);
    CHECK_INT(llama_chat_apply_template(NULL, CHAT, 3, true, buf, -1), CHATML_LEN);
    CHECK_INT(llama_chat_apply_template(NULL, CHAT, 3, true, buf, INT32_MIN), CHATML_LEN);
    CHECK(untouched(buf, sizeof buf));
    /* NULL buffer with a length: nothing written (upstream checks buf first) */
    CHECK_INT(llama_chat_apply_template(NULL, CHAT, 3, true, NULL, 100), CHATML_LEN);
    /* too small: a prefix, no NUL, the rest untouched */
    CHECK_INT(llama_chat_apply_template("chatml", CHAT, 3, true, buf, 10), CHATML_LEN);
    CHECK(memcmp(buf, CHATML, 10) == 0);
    CHECK(untouched(buf + 10, sizeof buf - 10));
    /* exact fit: no NUL */
    memset(buf, '#', sizeof buf);
    CHECK_INT(llama_chat_apply_template("chatml", CHAT, 3, true, buf, CHATML_LEN), CHATML_LEN);
    CHECK(memcmp(buf, CHATML, CHATML_LEN) == 0);
    CHECK_INT(buf[CHATML_LEN], '#');
    /* larger: NUL-terminated and zero-padded to length, as strncpy */
    memset(buf, '#', sizeof buf);
    CHECK_INT(llama_chat_apply_template("chatml", CHAT, 3, true, buf, CHATML_LEN + 5), CHATML_LEN);
    CHECK_STR(buf, CHATML);
    CHECK(memcmp(buf + CHATML_LEN, "\0\0\0\0\0##", 7) == 0);
    CHECK_INT(logcap_lines, 0);
    llama_log_set(NULL, NULL);
}

TEST(invalid_utf8_passes_through) {
    const msg chat[] = {{"us\xff", "\xc3\x28 \xed\xa0\x80 \xf8\x88\x80\x80\x80"}};
    const char want[] = "<|im_start|>us\xff\n\xc3\x28 \xed\xa0\x80 \xf8\x88\x80\x80\x80<|im_end|>\n";
    char buf[128];
    CHECK_INT(llama_chat_apply_template("chatml", chat, 1, false, buf, sizeof buf),
              (int)sizeof want - 1);
    CHECK_STR(buf, want);
}

TEST(large_content) {
    size_t n = (size_t)1 << 20;
    char *content = malloc(n + 1);
    char *buf = malloc(n + 128);
    msg chat[1];
    int r;
    memset(content, 'x', n);
    content[n] = '\0';
    chat[0].role = "user";
    chat[0].content = content;
    r = llama_chat_apply_template("llama3", chat, 1, true, buf, (int32_t)(n + 128));
    /* 19 + 4 + 19 bytes of header, the content, 10 of <|eot_id|>, 47 of the assistant prefix */
    CHECK_INT(r, (int)n + 99);
    CHECK(r > 58 && memcmp(buf + r - 58, "x<|eot_id|><|start_header_id|>assistant", 39) == 0);
    CHECK_INT(buf[r], '\0');
    free(content);
    free(buf);
}

TEST(builtin_templates) {
    const char *names[64];
    int i, n;
    logcap_install();
    CHECK_INT(llama_chat_builtin_templates(NULL, 0), 54);
    CHECK_INT(logcap_lines, 0);
    CHECK_INT(llama_chat_builtin_templates(NULL, 5), -1);
    CHECK_INT(logcap_lines, 1);
    CHECK(logcap_contains("llama_chat_builtin_templates"));
    for (i = 0; i < 64; i++) {
        names[i] = "sentinel";
    }
    CHECK_INT(llama_chat_builtin_templates(names, 2), 54);
    CHECK_STR(names[0], "bailing");
    CHECK_STR(names[1], "bailing-think");
    CHECK_STR(names[2], "sentinel");
    n = llama_chat_builtin_templates(names, 64);
    CHECK_INT(n, 54);
    CHECK_STR(names[53], "zephyr");
    CHECK_STR(names[54], "sentinel");
    /* every name is accepted as a template */
    for (i = 0; i < n; i++) {
        CHECK(llama_chat_apply_template(names[i], CHAT, 3, true, NULL, 0) >= 0);
    }
    llama_log_set(NULL, NULL);
}

int main(void) {
    RUN(null_messages_with_a_count);
    RUN(null_role_or_content);
    RUN(counts_no_array_can_hold);
    RUN(unknown_template);
    RUN(buffers);
    RUN(invalid_utf8_passes_through);
    RUN(large_content);
    RUN(builtin_templates);
    return harness_finish();
}
