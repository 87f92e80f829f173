/*
 * llama_split_path / llama_split_prefix: return values and truncation exactly as upstream's
 * (src/llama.cpp): split_path is snprintf("%s-%05d-of-%05d.gguf", prefix, no + 1, count)
 * returning the length, or 0 when truncated; split_prefix copies at most maxlen - 1 bytes of
 * the prefix and returns the prefix's full length, or 0 when the postfix does not match.
 * The differential runner repeats these calls against upstream's library.
 */
#include "llama.h"

#include "harness.h"

TEST(split_path_formats_one_based_numbers) {
    char buf[128];
    int32_t n = llama_split_path(buf, sizeof buf, "/models/ggml-model-q4_0", 2, 4);
    CHECK_STR(buf, "/models/ggml-model-q4_0-00003-of-00004.gguf");
    CHECK_INT(n, (int32_t)strlen("/models/ggml-model-q4_0-00003-of-00004.gguf"));
    n = llama_split_path(buf, sizeof buf, "x", 0, 1);
    CHECK_STR(buf, "x-00001-of-00001.gguf");
    CHECK_INT(n, 21);
    n = llama_split_path(buf, sizeof buf, "", 99998, 99999);
    CHECK_STR(buf, "-99999-of-99999.gguf");
    CHECK_INT(n, 20);
    /* Wider than 5 digits and negative counts print as %05d does. */
    n = llama_split_path(buf, sizeof buf, "m", 123455, -3);
    CHECK_STR(buf, "m-123456-of--0003.gguf");
    CHECK_INT(n, 22);
}

TEST(split_path_truncation) {
    char buf[32];
    const char *full = "abc-00001-of-00002.gguf"; /* 23 bytes */
    int32_t n;
    memset(buf, 'Z', sizeof buf);
    n = llama_split_path(buf, 24, "abc", 0, 2); /* fits exactly with the NUL */
    CHECK_INT(n, 23);
    CHECK_STR(buf, full);

    memset(buf, 'Z', sizeof buf);
    n = llama_split_path(buf, 23, "abc", 0, 2); /* one byte short: truncated, returns 0 */
    CHECK_INT(n, 0);
    CHECK_STR(buf, "abc-00001-of-00002.ggu");
    CHECK_INT(buf[23], 'Z');

    memset(buf, 'Z', sizeof buf);
    n = llama_split_path(buf, 1, "abc", 0, 2);
    CHECK_INT(n, 0);
    CHECK_INT(buf[0], '\0');
    CHECK_INT(buf[1], 'Z');

    memset(buf, 'Z', sizeof buf);
    n = llama_split_path(buf, 0, "abc", 0, 2); /* nothing written */
    CHECK_INT(n, 0);
    CHECK_INT(buf[0], 'Z');
}

TEST(split_prefix_matches) {
    char buf[128];
    int32_t n;
    n = llama_split_prefix(buf, sizeof buf, "/models/ggml-model-q4_0-00002-of-00004.gguf", 1, 4);
    CHECK_INT(n, 23);
    CHECK_STR(buf, "/models/ggml-model-q4_0");
}

TEST(split_prefix_mismatch_returns_zero) {
    char buf[64];
    memset(buf, 'Z', sizeof buf);
    CHECK_INT(llama_split_prefix(buf, sizeof buf, "/m/x-00002-of-00004.gguf", 2, 4), 0);
    CHECK_INT(llama_split_prefix(buf, sizeof buf, "/m/x-00002-of-00004.gguf", 1, 5), 0);
    CHECK_INT(llama_split_prefix(buf, sizeof buf, "/m/x-00002-of-00004.bin", 1, 4), 0);
    /* The path must be strictly longer than the postfix: an empty prefix is no match. */
    CHECK_INT(llama_split_prefix(buf, sizeof buf, "-00001-of-00001.gguf", 0, 1), 0);
    CHECK_INT(llama_split_prefix(buf, sizeof buf, "", 0, 1), 0);
    CHECK_INT(buf[0], 'Z'); /* untouched on mismatch */
}

TEST(split_prefix_truncation) {
    char buf[16];
    int32_t n;
    memset(buf, 'Z', sizeof buf);
    n = llama_split_prefix(buf, 4, "abcdefgh-00001-of-00001.gguf", 0, 1);
    CHECK_INT(n, 8); /* full prefix length, even though only 3 bytes fit */
    CHECK_STR(buf, "abc");
    CHECK_INT(buf[4], 'Z');

    memset(buf, 'Z', sizeof buf);
    n = llama_split_prefix(buf, 9, "abcdefgh-00001-of-00001.gguf", 0, 1);
    CHECK_INT(n, 8);
    CHECK_STR(buf, "abcdefgh");

    memset(buf, 'Z', sizeof buf);
    n = llama_split_prefix(buf, 0, "abcdefgh-00001-of-00001.gguf", 0, 1);
    CHECK_INT(n, 8);
    CHECK_INT(buf[0], 'Z');
}

TEST(split_round_trip) {
    char path[256];
    char prefix[256];
    int i;
    for (i = 0; i < 5; i++) {
        CHECK(llama_split_path(path, sizeof path, "/tmp/some model", i, 5) > 0);
        CHECK_INT(llama_split_prefix(prefix, sizeof prefix, path, i, 5), 15);
        CHECK_STR(prefix, "/tmp/some model");
    }
}

int main(void) {
    RUN(split_path_formats_one_based_numbers);
    RUN(split_path_truncation);
    RUN(split_prefix_matches);
    RUN(split_prefix_mismatch_returns_zero);
    RUN(split_prefix_truncation);
    RUN(split_round_trip);
    return harness_finish();
}
