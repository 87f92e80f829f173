/*
 * Names: llama_ftype_name for every file type (plain and with the GUESSED bit) and
 * llama_model_meta_key_str for every key. Expected strings are upstream's
 * (src/llama-model-loader.cpp and src/llama-model.cpp of the pinned llama.cpp).
 */
#include "llama.h"

#include "harness.h"

static const struct {
    enum llama_ftype ftype;
    const char *name;
} FTYPES[] = {
    {LLAMA_FTYPE_ALL_F32, "all F32"},
    {LLAMA_FTYPE_MOSTLY_F16, "F16"},
    {LLAMA_FTYPE_MOSTLY_Q4_0, "Q4_0"},
    {LLAMA_FTYPE_MOSTLY_Q4_1, "Q4_1"},
    {LLAMA_FTYPE_MOSTLY_Q8_0, "Q8_0"},
    {LLAMA_FTYPE_MOSTLY_Q5_0, "Q5_0"},
    {LLAMA_FTYPE_MOSTLY_Q5_1, "Q5_1"},
    {LLAMA_FTYPE_MOSTLY_Q2_K, "Q2_K - Medium"},
    {LLAMA_FTYPE_MOSTLY_Q3_K_S, "Q3_K - Small"},
    {LLAMA_FTYPE_MOSTLY_Q3_K_M, "Q3_K - Medium"},
    {LLAMA_FTYPE_MOSTLY_Q3_K_L, "Q3_K - Large"},
    {LLAMA_FTYPE_MOSTLY_Q4_K_S, "Q4_K - Small"},
    {LLAMA_FTYPE_MOSTLY_Q4_K_M, "Q4_K - Medium"},
    {LLAMA_FTYPE_MOSTLY_Q5_K_S, "Q5_K - Small"},
    {LLAMA_FTYPE_MOSTLY_Q5_K_M, "Q5_K - Medium"},
    {LLAMA_FTYPE_MOSTLY_Q6_K, "Q6_K"},
    {LLAMA_FTYPE_MOSTLY_IQ2_XXS, "IQ2_XXS - 2.0625 bpw"},
    {LLAMA_FTYPE_MOSTLY_IQ2_XS, "IQ2_XS - 2.3125 bpw"},
    {LLAMA_FTYPE_MOSTLY_Q2_K_S, "Q2_K - Small"},
    {LLAMA_FTYPE_MOSTLY_IQ3_XS, "IQ3_XS - 3.3 bpw"},
    {LLAMA_FTYPE_MOSTLY_IQ3_XXS, "IQ3_XXS - 3.0625 bpw"},
    {LLAMA_FTYPE_MOSTLY_IQ1_S, "IQ1_S - 1.5625 bpw"},
    {LLAMA_FTYPE_MOSTLY_IQ4_NL, "IQ4_NL - 4.5 bpw"},
    {LLAMA_FTYPE_MOSTLY_IQ3_S, "IQ3_S - 3.4375 bpw"},
    {LLAMA_FTYPE_MOSTLY_IQ3_M, "IQ3_S mix - 3.66 bpw"},
    {LLAMA_FTYPE_MOSTLY_IQ2_S, "IQ2_S - 2.5 bpw"},
    {LLAMA_FTYPE_MOSTLY_IQ2_M, "IQ2_M - 2.7 bpw"},
    {LLAMA_FTYPE_MOSTLY_IQ4_XS, "IQ4_XS - 4.25 bpw"},
    {LLAMA_FTYPE_MOSTLY_IQ1_M, "IQ1_M - 1.75 bpw"},
    {LLAMA_FTYPE_MOSTLY_BF16, "BF16"},
    {LLAMA_FTYPE_MOSTLY_TQ1_0, "TQ1_0 - 1.69 bpw ternary"},
    {LLAMA_FTYPE_MOSTLY_TQ2_0, "TQ2_0 - 2.06 bpw ternary"},
    {LLAMA_FTYPE_MOSTLY_MXFP4_MOE, "MXFP4 MoE"},
    {LLAMA_FTYPE_MOSTLY_NVFP4, "NVFP4"},
    {LLAMA_FTYPE_MOSTLY_Q1_0, "Q1_0"},
    {LLAMA_FTYPE_MOSTLY_Q2_0, "Q2_0"},
};

TEST(ftype_names) {
    size_t i;
    char guessed[128];
    for (i = 0; i < sizeof FTYPES / sizeof FTYPES[0]; i++) {
        CHECK_STR(llama_ftype_name(FTYPES[i].ftype), FTYPES[i].name);
        snprintf(guessed, sizeof guessed, "(guessed) %s", FTYPES[i].name);
        CHECK_STR(llama_ftype_name((enum llama_ftype)(FTYPES[i].ftype | LLAMA_FTYPE_GUESSED)),
                  guessed);
    }
}

TEST(ftype_unknown_values) {
    /* Removed types (4, 5, 6, 33-35) and values past the end. */
    static const int unknown[] = {4, 5, 6, 33, 34, 35, 42, 100, 1023};
    size_t i;
    for (i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        CHECK_STR(llama_ftype_name((enum llama_ftype)unknown[i]), "unknown, may not work");
    }
    CHECK_STR(llama_ftype_name((enum llama_ftype)(5 | LLAMA_FTYPE_GUESSED)),
              "(guessed) unknown, may not work");
    CHECK_STR(llama_ftype_name(LLAMA_FTYPE_GUESSED), "(guessed) all F32");
}

TEST(ftype_names_are_static) {
    CHECK(llama_ftype_name(LLAMA_FTYPE_MOSTLY_Q4_K_M) == llama_ftype_name(LLAMA_FTYPE_MOSTLY_Q4_K_M));
}

TEST(meta_key_names) {
    CHECK_STR(llama_model_meta_key_str(LLAMA_MODEL_META_KEY_SAMPLING_SEQUENCE), "general.sampling.sequence");
    CHECK_STR(llama_model_meta_key_str(LLAMA_MODEL_META_KEY_SAMPLING_TOP_K), "general.sampling.top_k");
    CHECK_STR(llama_model_meta_key_str(LLAMA_MODEL_META_KEY_SAMPLING_TOP_P), "general.sampling.top_p");
    CHECK_STR(llama_model_meta_key_str(LLAMA_MODEL_META_KEY_SAMPLING_MIN_P), "general.sampling.min_p");
    CHECK_STR(llama_model_meta_key_str(LLAMA_MODEL_META_KEY_SAMPLING_XTC_PROBABILITY), "general.sampling.xtc_probability");
    CHECK_STR(llama_model_meta_key_str(LLAMA_MODEL_META_KEY_SAMPLING_XTC_THRESHOLD), "general.sampling.xtc_threshold");
    CHECK_STR(llama_model_meta_key_str(LLAMA_MODEL_META_KEY_SAMPLING_TEMP), "general.sampling.temp");
    CHECK_STR(llama_model_meta_key_str(LLAMA_MODEL_META_KEY_SAMPLING_PENALTY_LAST_N), "general.sampling.penalty_last_n");
    CHECK_STR(llama_model_meta_key_str(LLAMA_MODEL_META_KEY_SAMPLING_PENALTY_REPEAT), "general.sampling.penalty_repeat");
    CHECK_STR(llama_model_meta_key_str(LLAMA_MODEL_META_KEY_SAMPLING_MIROSTAT), "general.sampling.mirostat");
    CHECK_STR(llama_model_meta_key_str(LLAMA_MODEL_META_KEY_SAMPLING_MIROSTAT_TAU), "general.sampling.mirostat_tau");
    CHECK_STR(llama_model_meta_key_str(LLAMA_MODEL_META_KEY_SAMPLING_MIROSTAT_ETA), "general.sampling.mirostat_eta");
    /* Upstream: "Returns nullptr if the key is invalid". */
    CHECK_NULL(llama_model_meta_key_str((enum llama_model_meta_key)12));
    CHECK_NULL(llama_model_meta_key_str((enum llama_model_meta_key)-1));
}

int main(void) {
    RUN(ftype_names);
    RUN(ftype_unknown_values);
    RUN(ftype_names_are_static);
    RUN(meta_key_names);
    return harness_finish();
}
